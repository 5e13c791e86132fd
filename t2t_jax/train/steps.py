"""Pure per-device training and evaluation steps, with gradient accumulation.

Both steps see one device's share of the batch and talk to the other devices
only through `lax.psum` over `axis_name`; train/parallel.py maps them over devices.

The update is normalised once, by the number of real target tokens in the whole
global batch: each micro-step adds the gradient of its loss SUM, the sums are
psum'd over devices, then divided by the global token count. An update therefore
does not depend on how the batch was split over devices or micro-steps (up to
float32 summation order), and padding or filler rows weigh nothing.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax import lax

from t2t_jax.configs import TransformerConfig
from t2t_jax.data.packing import SEGMENT_KEYS  # batch fields of packed rows
from t2t_jax.model import transformer
from t2t_jax.train import loss as loss_lib
from t2t_jax.train import optim


@flax.struct.dataclass
class TrainState:
  """Everything an update changes. `step` counts the updates applied so far."""
  step: jnp.ndarray        # int32 scalar
  params: Any              # float32 pytree
  opt_state: Any           # optax state (float32 moments)


def create_train_state(cfg: TransformerConfig, optimizer: optax.GradientTransformation,
                       key: jax.Array) -> TrainState:
  """A fresh state at step 0; cheap to trace under `jax.eval_shape`."""
  params = transformer.init_params(cfg.model, key)
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=optimizer.init(params))


def _sum_trees(a, b):
  return jax.tree.map(jnp.add, a, b)


def batch_metrics(model: transformer.Transformer, params: Any, batch: dict[str, jnp.ndarray],
                  label_smoothing: float, **apply_kwargs) -> dict[str, jnp.ndarray]:
  """Metric sums (loss.METRIC_SUMS) of one [batch, length] batch, packed or not."""
  segments = {k: batch[k] for k in SEGMENT_KEYS if k in batch}
  features, kernel = model.apply({"params": params}, batch["inputs"], batch["targets"],
                                 method=transformer.Transformer.features, **segments,
                                 **apply_kwargs)  # [batch, length, d_model], [vocab, d_model]
  return loss_lib.output_metrics(features, kernel, batch["targets"], label_smoothing)


def train_step(state: TrainState, batch: dict[str, jnp.ndarray], root_key: jax.Array, *,
               cfg: TransformerConfig, optimizer: optax.GradientTransformation,
               axis_name: str = "batch") -> tuple[TrainState, dict[str, jnp.ndarray]]:
  """One update from this device's micro-batches.

  Args:
    state: the (replicated) training state.
    batch: `inputs` and `targets`, int32 [accum_steps, micro_batch, length] each;
      packed rows add `inputs_segments` and `targets_segments` of the same shape.
    root_key: the dropout root key, identical on every device.

  Returns:
    The new state and metrics identical on every device: `loss` (smoothed) and
    `nll` per real target token, `accuracy`, `tokens` (real target tokens in the
    global batch), `learning_rate` (the one this update used) and `grad_norm`
    (global L2 norm of the normalised gradient).
  """
  inputs, targets = batch["inputs"], batch["targets"]
  if inputs.ndim != 3 or targets.ndim != 3:
    raise ValueError(f"train_step wants [accum_steps, micro_batch, length] per device, got "
                     f"inputs {inputs.shape} and targets {targets.shape}")
  model = transformer.Transformer(cfg.model)  # the model sees its own fields only
  device_key = jax.random.fold_in(jax.random.fold_in(root_key, state.step),
                                  lax.axis_index(axis_name))

  def loss_fn(params, micro_batch, key):
    sums = batch_metrics(model, params, micro_batch, cfg.label_smoothing, train=True,
                         rngs={"dropout": key})
    return sums["loss"], sums

  grad_fn = jax.grad(loss_fn, has_aux=True)
  # Differentiate with respect to this device's own view of the parameters: under
  # shard_map the gradient with respect to replicated (invariant) parameters would
  # already be psum'd by autodiff, and the explicit psum below would count it twice.
  local_params = lax.pcast(state.params, axis_name, to="varying")

  def micro_step(carry, micro):
    grads, sums = carry
    index, micro_batch = micro
    micro_grads, micro_sums = grad_fn(local_params, micro_batch,
                                      jax.random.fold_in(device_key, index))
    return (_sum_trees(grads, micro_grads), _sum_trees(sums, micro_sums)), None

  zero_grads = jax.tree.map(jnp.zeros_like, state.params)
  zero_sums = {name: jnp.zeros((), jnp.float32) for name in loss_lib.METRIC_SUMS}
  # The sums differ per device until the psum; shard_map's type check wants the
  # scan carry to say so from the start.
  init = lax.pcast((zero_grads, zero_sums), axis_name, to="varying")
  accum_steps = inputs.shape[0]
  (grads, sums), _ = lax.scan(micro_step, init, (jnp.arange(accum_steps), batch),
                              unroll=min(cfg.unroll_micro_steps, accum_steps))

  grads, sums = lax.psum((grads, sums), axis_name)
  # Guards the division only: data/dataset.py never yields a global batch without real tokens.
  tokens = jnp.maximum(sums["tokens"], 1.0)
  grads = jax.tree.map(lambda g: g / tokens, grads)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)

  metrics = {
      "loss": sums["loss"] / tokens,
      "nll": sums["nll"] / tokens,
      "accuracy": sums["correct"] / tokens,
      "tokens": sums["tokens"],
      "learning_rate": optim.learning_rate_schedule(cfg)(new_state.step),
      "grad_norm": optax.tree.norm(grads),
  }
  return new_state, metrics


def eval_step(params: Any, batch: dict[str, jnp.ndarray], *, cfg: TransformerConfig,
              axis_name: str = "batch") -> dict[str, jnp.ndarray]:
  """Metric sums (`loss`, `nll`, `correct`, `tokens`; see train/loss.py) over the global batch.

  `batch` holds `inputs`/`targets` of [batch, length] or [chunks, batch, length]
  per device; chunks are evaluated one after the other to bound memory.
  """
  if batch["inputs"].ndim == 2:
    batch = jax.tree.map(lambda x: x[None], batch)
  if batch["inputs"].ndim != 3:
    raise ValueError(f"eval_step wants [batch, length] or [chunks, batch, length] per device, "
                     f"got inputs {batch['inputs'].shape}")
  model = transformer.Transformer(cfg.model)  # the model sees its own fields only

  def chunk_sums(total, chunk):
    return _sum_trees(total, batch_metrics(model, params, chunk, cfg.label_smoothing)), None

  zero_sums = {name: jnp.zeros((), jnp.float32) for name in loss_lib.METRIC_SUMS}
  # Varying per device until the psum, as in train_step (shard_map checks the carry).
  zero_sums = lax.pcast(zero_sums, axis_name, to="varying")
  sums, _ = lax.scan(chunk_sums, zero_sums, batch)
  return lax.psum(sums, axis_name)
