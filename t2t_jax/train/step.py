"""The train step, top to bottom: the loss (section 5.4), the optimiser and its schedule
(section 5.3), the update, and its mapping over devices (pmap, or its jit + shard_map twin).

    built = build(cfg)                          # the optimiser, the steps over every device
    state = built.init_state(key)               # TrainState at step 0, one copy
    placed = built.mapped.put_state(state)      # DataParallel: place, run, read
    placed, metrics = built.mapped.train_step(placed, built.mapped.put_batch(batch), key)
    lowered = built.lower(rows, length, accum_steps=2, packed=True)   # shapes only

The loss. Label smoothing with eps = label_smoothing and V = vocabulary size puts
1 - eps on the gold token and eps / (V - 1) on each of the other V - 1 ids (padding
included, as in the reference implementation). The smoothed loss of a token is the
cross-entropy H(q, p) minus the entropy H(q), i.e. KL(q || p): its gradient is the
cross-entropy's, and a prediction equal to q scores 0 (as in Flax's WMT example).
`nll` is the unsmoothed -log p(gold), whose per-token mean gives the per-word-piece
perplexity of Table 3. Everything is float32 whatever the logits' dtype; padding
targets (id 0) weigh 0; functions return sums so that normalisation happens once over
the global batch. `compute_metrics(logits, ...)` is the reference; the step computes
the same sums with the output projection fused in (`output_metrics`, a hand-written
gradient, beside it; tests hold the two equal).

The schedule counts updates from 1, as the paper's formula does:

  lrate(step) = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),  step = 1, 2, ...

optax calls its schedule with `count`, the number of updates already applied (0 for
the first update), so `make_optimizer` feeds it `count + 1`. `TrainState.step` is the
same count before an update and the paper's step of the update just applied after it,
so the learning rate logged with step `s` is `learning_rate_schedule(cfg)(s)`, exactly
the one that update used. Adam: optax's `adam` puts eps outside the square root of the
bias-corrected second moment, `m_hat / (sqrt(v_hat) + eps)`, as in Kingma & Ba's
Algorithm 1; TensorFlow's AdamOptimizer (the reference implementation) adds eps to
the square root of the uncorrected moment instead, and with eps = 1e-9 the two differ
only while sqrt(v) is itself of order 1e-9.

The update. `train_step` and `eval_step` are pure and see one device's share of the
batch; they talk to the other devices only through `lax.psum` over `axis_name`. The
update is normalised once, by the number of real target tokens in the whole global
batch: each micro-step adds the gradient of its loss SUM, the sums are psum'd over
devices, then divided by the global token count. An update therefore does not depend
on how the batch was split over devices or micro-steps (up to float32 summation
order), and padding or filler rows weigh nothing.

Devices. Two equivalent ways to run the same `train_step`, chosen by
`cfg.parallelism` (both tested to give the same training run):
- "pmap" (the default): `jax.pmap` over the local devices. The state is stored
  stacked, `[local_devices, ...]` per leaf (`replicate`/`unreplicate`), batches are
  `[local_devices, accum_steps, micro_batch, length]` (`shard_batch`). Multi-process
  runs pass host-local arrays; pmap joins them across processes.
- "shard_map": `jax.jit(jax.shard_map(...))` over a 1-D mesh of all devices with axis
  "batch". The state is an ordinary pytree replicated over the mesh; the batch is the
  same `[devices, ...]` array, split on its leading axis. This is what JAX now builds
  pmap on, and the form that extends to model sharding.
Everything that runs or compiles an update builds it with `build`: the training loop,
the memory fitting (train/memory.py), the compiles for another accelerator and the
timing on this host (accelerators/), the benchmarks; so they are one program.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from t2t_jax.configs import TransformerConfig
from t2t_jax.ids import PAD_ID, SEGMENT_KEYS
from t2t_jax.kernels import choice
from t2t_jax.model import transformer

Array = jax.Array

# The sums every metric is computed from (over real target tokens); one home for the names.
METRIC_SUMS = ("loss", "nll", "correct", "tokens")
AXIS = "batch"
PARALLELISMS = ("pmap", "shard_map")


# -------------------------------------------------------------------------------- loss


def smoothed_cross_entropy(logits: jnp.ndarray, targets: jnp.ndarray,
                           label_smoothing: float) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Per-token smoothed loss KL(q || p) and unsmoothed NLL, both unweighted.

  Args:
    logits: [batch, length, vocab] (any float dtype).
    targets: [batch, length] int ids.
    label_smoothing: eps_ls in [0, 1).

  Returns:
    (loss, nll), each [batch, length] float32.
  """
  if logits.ndim != targets.ndim + 1 or logits.shape[:-1] != targets.shape:
    raise ValueError(f"logits {logits.shape} do not match targets {targets.shape}: "
                     "expected [batch, length, vocab] and [batch, length]")
  vocab = logits.shape[-1]
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [batch, length, vocab]
  gold = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]  # [batch, length]
  nll = -gold
  if label_smoothing == 0.0:
    return nll, nll
  confidence, low, entropy = smoothing(label_smoothing, vocab)
  # sum_j q_j log p_j without materialising q: the gold id gets `confidence`,
  # every id (the gold one included) gets `low`, so the gold one is corrected.
  cross_entropy = -((confidence - low) * gold + low * jnp.sum(log_probs, axis=-1))
  return cross_entropy - entropy, nll


def smoothing(label_smoothing: float, vocab: int) -> tuple[float, float, float]:
  """(confidence, low, entropy): the smoothed target q's gold and other probabilities, and H(q)."""
  if label_smoothing == 0.0:
    return 1.0, 0.0, 0.0
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab - 1)
  return confidence, low, float(-(confidence * np.log(confidence)
                                  + (vocab - 1) * low * np.log(low)))


def compute_metrics(logits: jnp.ndarray, targets: jnp.ndarray,
                    label_smoothing: float) -> dict[str, jnp.ndarray]:
  """Sums over the real (non-padding) target tokens of one batch.

  Returns a dict of float32 scalars: `loss` (smoothed), `nll`, `correct` (the gold
  token's logit is the largest; ties count) and `tokens` (real target tokens).
  """
  loss, nll = smoothed_cross_entropy(logits, targets, label_smoothing)
  weights = (targets != PAD_ID).astype(jnp.float32)  # [batch, length]
  logits = logits.astype(jnp.float32)
  # A tie with another id counts as correct (argmax would pick the lower id). The row
  # maximum is the one log-sum-exp needs anyway: an argmax is one more pass over [tokens,
  # vocab], a slow variadic reduction on CPUs (docs/benchmarks.md, "Training step").
  gold = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  correct = (gold >= jnp.max(logits, axis=-1)).astype(jnp.float32)
  return {
      "loss": jnp.sum(loss * weights),
      "nll": jnp.sum(nll * weights),
      "correct": jnp.sum(correct * weights),
      "tokens": jnp.sum(weights),
  }


def summarize(sums: dict) -> dict[str, float]:
  """Per-token means from `compute_metrics` sums (added over batches/devices).

  Returns `loss`, `nll`, `accuracy` and `perplexity` (exp of the mean NLL) as floats.
  """
  tokens = max(float(sums["tokens"]), 1.0)
  nll = float(sums["nll"]) / tokens
  return {
      "loss": float(sums["loss"]) / tokens,
      "nll": nll,
      "accuracy": float(sums["correct"]) / tokens,
      "perplexity": float(np.exp(min(nll, 700.0))),  # np.exp overflows (with a warning) past ~709
  }


# ------------------------------------ the swap-in: the output layer fused with the loss
# `compute_metrics(features @ kernel.T, ...)` (the reference) with the projection and the
# label-smoothed loss fused under a hand-written gradient: the logits are computed once and
# their gradient written once, (softmax - q) per token, instead of the several [tokens,
# vocab] temporaries autodiff of log_softmax leaves behind. At a 37000-word vocabulary those
# arrays are a large share of a step. The steps run this one (`batch_metrics`); the tests
# hold it to the reference.


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def output_metrics(features: Array, kernel: Array, targets: Array,
                   smoothing: tuple[float, float, float]) -> dict[str, Array]:
  """`compute_metrics(features @ kernel.T, targets, eps)`, fused with its gradient.

  Args:
    features: [..., d_model] in the compute dtype (the decoder's last layer).
    kernel: [vocab, d_model] float32, the pre-softmax weights (shared embedding).
    targets: [...] int ids; padding (0) weighs 0.
    smoothing: the smoothed target q (static): its gold probability, every other
      id's, and its entropy (`smoothing(eps, vocab)`).

  Returns:
    The same float32 sums as the reference: `loss`, `nll`, `correct`, `tokens`.
  """
  return _output_metrics_fwd(features, kernel, targets, smoothing)[0]


def _fused_logits(features, kernel):
  """[tokens, d] x [vocab, d] -> [tokens, vocab] float32, operands in the features' dtype."""
  return jnp.dot(features, kernel.astype(features.dtype).T, preferred_element_type=jnp.float32)


def _output_metrics_fwd(features, kernel, targets, smoothing):
  if features.shape[:-1] != targets.shape or kernel.shape[1] != features.shape[-1]:
    raise ValueError(f"features {features.shape}, kernel {kernel.shape} and targets "
                     f"{targets.shape} do not match: expected [..., d], [vocab, d] and [...]")
  vocab = kernel.shape[0]
  flat = features.reshape(-1, features.shape[-1])                      # [tokens, d]
  gold_ids = targets.reshape(-1)                                       # [tokens]
  logits = _fused_logits(flat, kernel)                                 # [tokens, vocab]
  top = jnp.max(logits, axis=-1)                                       # [tokens]
  log_z = top + jnp.log(jnp.sum(jnp.exp(logits - top[:, None]), axis=-1))
  gold = jnp.take_along_axis(logits, gold_ids[:, None], axis=-1)[:, 0]
  nll = log_z - gold
  confidence, low, entropy = smoothing
  # -sum_j q_j log p_j, with log p_j = logit_j - log_z and sum_j q_j = 1.
  loss = (confidence - low) * nll + low * (vocab * log_z - jnp.sum(logits, axis=-1)) - entropy
  weights = (gold_ids != PAD_ID).astype(jnp.float32)
  correct = (gold >= top).astype(jnp.float32)   # ties count, as in the reference
  sums = {"loss": jnp.sum(loss * weights), "nll": jnp.sum(nll * weights),
          "correct": jnp.sum(correct * weights), "tokens": jnp.sum(weights)}
  return sums, (features, kernel, gold_ids, logits, log_z)


def _output_metrics_bwd(smoothing, residuals, g):
  features, kernel, gold_ids, logits, log_z = residuals
  vocab = kernel.shape[0]
  confidence, low, _ = smoothing
  weights = (gold_ids != PAD_ID).astype(jnp.float32)                  # [tokens]
  # d loss / d logits = p - q and d nll / d logits = p - onehot(gold), per real token.
  scale = (weights * (g["loss"] + g["nll"]))[:, None]                  # [tokens, 1]
  gold_weight = (weights * (g["loss"] * (confidence - low) + g["nll"]))[:, None]
  one_hot = jnp.arange(vocab)[None, :] == gold_ids[:, None]            # fused, never stored
  d_logits = (scale * jnp.exp(logits - log_z[:, None]) - (weights * g["loss"] * low)[:, None]
              - jnp.where(one_hot, gold_weight, 0.0)).astype(features.dtype)  # [tokens, vocab]
  flat = features.reshape(-1, features.shape[-1])                      # [tokens, d]
  d_features = jnp.dot(d_logits, kernel.astype(features.dtype),
                       preferred_element_type=jnp.float32)
  d_kernel = jnp.dot(d_logits.T, flat, preferred_element_type=jnp.float32)
  return (d_features.astype(features.dtype).reshape(features.shape),
          d_kernel.astype(kernel.dtype), None)


output_metrics.defvjp(_output_metrics_fwd, _output_metrics_bwd)


# ------------------------------------------------------------- optimiser and schedule


def learning_rate_schedule(cfg: TransformerConfig) -> Callable[[jnp.ndarray], jnp.ndarray]:
  """The learning rate for the paper's (1-based) step number, float32.

  Step 0 (no update yet) is clamped to step 1 so that the rate is never 0 or inf.
  """
  scale = cfg.learning_rate_scale * cfg.d_model ** -0.5
  warmup = float(cfg.warmup_steps)

  def schedule(step):
    step = jnp.maximum(jnp.asarray(step, jnp.float32), 1.0)
    return scale * jnp.minimum(step ** -0.5, step * warmup ** -1.5)

  return schedule


def make_optimizer(cfg: TransformerConfig) -> optax.GradientTransformation:
  """Adam(b1, b2, eps) from the config driven by the paper's schedule."""
  schedule = learning_rate_schedule(cfg)
  # optax's count is the number of updates done so far; the paper's step is one more.
  return optax.adam(learning_rate=lambda count: schedule(count + 1),
                    b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps)


# ---------------------------------------------------------------------------- update


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
  """`compute_metrics` of the model's logits for one [batch, length] batch, packed or not,
  with the output projection fused into the loss (`output_metrics`)."""
  segments = {k: batch[k] for k in SEGMENT_KEYS if k in batch}
  features, kernel = model.apply({"params": params}, batch["inputs"], batch["targets"],
                                 method=transformer.Transformer.features, **segments,
                                 **apply_kwargs)  # [batch, length, d_model], [vocab, d_model]
  return output_metrics(features, kernel, batch["targets"],
                                   smoothing(label_smoothing, kernel.shape[0]))


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
  model = _model(cfg)
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
  zero_sums = {name: jnp.zeros((), jnp.float32) for name in METRIC_SUMS}
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
      "learning_rate": learning_rate_schedule(cfg)(new_state.step),
      "grad_norm": optax.tree.norm(grads),
  }
  return new_state, metrics


def _model(cfg: TransformerConfig) -> transformer.Transformer:
  """The model the steps run: its own fields only, with the kernels they choose."""
  return transformer.Transformer(cfg.model, choice.plugins(cfg.model))


def eval_step(params: Any, batch: dict[str, jnp.ndarray], *, cfg: TransformerConfig,
              axis_name: str = "batch") -> dict[str, jnp.ndarray]:
  """Metric sums (`loss`, `nll`, `correct`, `tokens`; see `compute_metrics`) over the global batch.

  `batch` holds `inputs`/`targets` of [batch, length] or [chunks, batch, length]
  per device; chunks are evaluated one after the other to bound memory.
  """
  if batch["inputs"].ndim == 2:
    batch = jax.tree.map(lambda x: x[None], batch)
  if batch["inputs"].ndim != 3:
    raise ValueError(f"eval_step wants [batch, length] or [chunks, batch, length] per device, "
                     f"got inputs {batch['inputs'].shape}")
  model = _model(cfg)

  def chunk_sums(total, chunk):
    return _sum_trees(total, batch_metrics(model, params, chunk, cfg.label_smoothing)), None

  zero_sums = {name: jnp.zeros((), jnp.float32) for name in METRIC_SUMS}
  # Varying per device until the psum, as in train_step (shard_map checks the carry).
  zero_sums = lax.pcast(zero_sums, axis_name, to="varying")
  sums, _ = lax.scan(chunk_sums, zero_sums, batch)
  return lax.psum(sums, axis_name)


# --------------------------------------------------------------------------- devices


def data_mesh(devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """The 1-D mesh of axis "batch" the shard_map steps run on: `devices`, else all of them."""
  return Mesh(np.array(list(devices) if devices is not None else jax.devices()), (AXIS,))


def _stacked_sharding(devices: Optional[Sequence[jax.Device]]) -> NamedSharding:
  devices = list(devices) if devices is not None else jax.local_devices()
  return NamedSharding(Mesh(np.array(devices), (AXIS,)), P(AXIS))


def replicate(tree: Any, devices: Optional[Sequence[jax.Device]] = None) -> Any:
  """One copy of every leaf per device, stacked on a new leading axis (for pmap)."""
  sharding = _stacked_sharding(devices)
  mesh_devices = list(sharding.mesh.devices.flat)

  def put(x):
    # Copy to each device separately so that no device ever holds all copies.
    shards = [jax.device_put(x[None], d) for d in mesh_devices]
    return jax.make_array_from_single_device_arrays((len(mesh_devices),) + x.shape,
                                                    sharding, shards)

  return jax.tree.map(put, tree)


def unreplicate(tree: Any) -> Any:
  """The first local device's copy of a replicated (pmapped) pytree."""
  return jax.tree.map(lambda x: x.addressable_data(0)[0], tree)


def fetch_first(tree: Any, stacked: bool = True) -> Any:
  """This process's first copy of a placed pytree as NumPy arrays, by a transfer alone.

  Indexing the stacked copy on the device (`unreplicate`) would be a computation
  queued behind the step dispatched after it: reading step t's metrics would wait
  for step t+1 and leave the device idle while the host prepares t+2. A transfer
  waits only for the buffer it reads; the [0] happens on the host.
  """
  first = jax.device_get(jax.tree.map(lambda x: x.addressable_data(0), tree))
  return jax.tree.map(lambda x: np.asarray(x)[0], first) if stacked else first


def shard_batch(batch: dict[str, np.ndarray],
                devices: Optional[Sequence[jax.Device]] = None) -> dict[str, jax.Array]:
  """Puts a host batch `[local_devices, ...]` on the devices, one slice each (async)."""
  sharding = _stacked_sharding(devices)
  size = sharding.mesh.size
  for name, x in batch.items():
    if x.shape[0] != size:
      raise ValueError(f"batch[{name!r}] has leading dimension {x.shape[0]}, expected one "
                       f"slice per device ({size}); build batches for {size} devices")
  return jax.device_put(batch, sharding)


def pmap_train_step(cfg: TransformerConfig, optimizer: optax.GradientTransformation,
                    devices: Optional[Sequence[jax.Device]] = None) -> Callable:
  """`(replicated_state, sharded_batch, root_key) -> (state, metrics)`; donates the state.

  Metrics come back stacked per device (all equal: they are psum'd).
  """
  step = functools.partial(train_step, cfg=cfg, optimizer=optimizer, axis_name=AXIS)
  return jax.pmap(step, axis_name=AXIS, in_axes=(0, 0, None), donate_argnums=(0,),
                  devices=devices)


def pmap_eval_step(cfg: TransformerConfig,
                   devices: Optional[Sequence[jax.Device]] = None) -> Callable:
  """`(replicated_params, sharded_batch) -> metric sums` stacked per device."""
  step = functools.partial(eval_step, cfg=cfg, axis_name=AXIS)
  return jax.pmap(step, axis_name=AXIS, devices=devices)


def jit_shard_map_train_step(cfg: TransformerConfig, optimizer: optax.GradientTransformation,
                             mesh: Mesh) -> Callable:
  """The pmap step's twin under `jax.jit(jax.shard_map(...))`; donates the state.

  `(state, batch, root_key) -> (state, metrics)` with an unstacked state and the
  batch `[devices, accum_steps, micro_batch, length]` split over mesh axis "batch".
  """
  if mesh.axis_names != (AXIS,):
    raise ValueError(f"mesh axes {mesh.axis_names}: use a 1-D mesh with the single axis "
                     f"{AXIS!r}, e.g. Mesh(np.array(jax.devices()), ({AXIS!r},))")

  def per_device(state, batch, root_key):
    batch = jax.tree.map(lambda x: x[0], batch)  # drop this device's size-1 slice axis
    return train_step(state, batch, root_key, cfg=cfg, optimizer=optimizer,
                            axis_name=AXIS)

  sharded = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(AXIS), P()),
                          out_specs=(P(), P()))
  return jax.jit(sharded, donate_argnums=(0,))


def jit_shard_map_eval_step(cfg: TransformerConfig, mesh: Mesh) -> Callable:
  """`(params, batch) -> metric sums` under `jax.jit(jax.shard_map(...))`; params unstacked."""
  def per_device(params, batch):
    batch = jax.tree.map(lambda x: x[0], batch)  # drop this device's size-1 slice axis
    return eval_step(params, batch, cfg=cfg, axis_name=AXIS)

  return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P()))


@dataclasses.dataclass(frozen=True)
class DataParallel:
  """The steps of one `cfg.parallelism`, and how their inputs and outputs are placed."""
  train_step: Callable  # (placed state, placed batch, root key) -> (placed state, metrics)
  eval_step: Callable   # (placed params, placed batch) -> metric sums
  put_state: Callable   # host pytree -> placed on every device
  put_batch: Callable   # host batch [local_devices, ...] -> placed, one slice per device
  get: Callable         # placed pytree -> this process's first copy (device arrays)
  fetch: Callable       # placed metrics -> this process's first copy on the host, no device op


def data_parallel(cfg: TransformerConfig, optimizer: optax.GradientTransformation,
                  devices: Optional[Sequence[jax.Device]] = None,
                  parallelism: Optional[str] = None) -> DataParallel:
  """The steps over `devices` (pmap: this process's, shard_map: every process's, by
  default), mapped as `parallelism` (default `cfg.parallelism`) says."""
  parallelism = parallelism or cfg.parallelism
  if parallelism == "pmap":
    return DataParallel(train_step=pmap_train_step(cfg, optimizer, devices),
                        eval_step=pmap_eval_step(cfg, devices),
                        put_state=functools.partial(replicate, devices=devices),
                        put_batch=functools.partial(shard_batch, devices=devices),
                        get=unreplicate, fetch=fetch_first)
  if parallelism != "shard_map":
    raise ValueError(f"parallelism={parallelism!r}: use one of {PARALLELISMS}")
  m = data_mesh(devices)
  replicated, split = NamedSharding(m, P()), NamedSharding(m, P(AXIS))

  def put_state(tree):
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(replicated, np.asarray(x)), tree)

  def put_batch(batch):
    local = sum(d.process_index == jax.process_index() for d in m.devices.flat)
    for name, x in batch.items():
      if x.shape[0] != local:
        raise ValueError(f"batch[{name!r}] has leading dimension {x.shape[0]}, expected one "
                         f"slice per local device ({local}); build batches for {local} devices")
    return {name: jax.make_array_from_process_local_data(split, x) for name, x in batch.items()}

  return DataParallel(train_step=jit_shard_map_train_step(cfg, optimizer, m),
                      eval_step=jit_shard_map_eval_step(cfg, m), put_state=put_state,
                      put_batch=put_batch,
                      get=lambda tree: jax.tree.map(lambda x: x.addressable_data(0), tree),
                      fetch=lambda tree: fetch_first(tree, stacked=False))


# ----------------------------------------------------------------------------- build


@dataclasses.dataclass(frozen=True)
class TrainStep:
  """One config's update over some devices, and the state it takes."""
  cfg: TransformerConfig
  optimizer: optax.GradientTransformation
  parallelism: str                              # "pmap" or "shard_map"
  devices: Optional[tuple[jax.Device, ...]]     # None: `data_mesh`'s default devices
  mapped: DataParallel                          # the train and eval steps, placement

  def init_state(self, key: jax.Array) -> TrainState:
    """The state at step 0: parameters drawn with `key`, the optimiser's zero moments."""
    return create_train_state(self.cfg, self.optimizer, key)

  def abstract_state(self) -> TrainState:
    """`init_state`'s shapes and dtypes (`jax.eval_shape`): nothing is allocated."""
    return jax.eval_shape(self.init_state, jax.random.key(0))

  def lower(self, rows: int, length: int, accum_steps: int = 1,
            packed: bool = False) -> jax.stages.Lowered:
    """The mapped train step traced for micro-batches of [rows, length] on each device,
    `accum_steps` of them per update (`packed`: with segment ids), on shapes only."""
    return self.mapped.train_step.lower(*self._abstract_arguments(rows, length, accum_steps,
                                                                  packed))

  def _abstract_arguments(self, rows: int, length: int, accum_steps: int,
                          packed: bool) -> tuple[Any, dict[str, Any], Any]:
    """(state, batch, root key) as the mapped train step takes them, shapes only."""
    state = self.abstract_state()
    key = jax.eval_shape(lambda: jax.random.key(0))
    names = ("inputs", "targets") + (SEGMENT_KEYS if packed else ())
    if self.parallelism == "pmap":
      count = len(self.devices) if self.devices is not None else jax.local_device_count()
      stacked = jax.tree.map(lambda x: jax.ShapeDtypeStruct((count, *x.shape), x.dtype), state)
      # [devices, accum_steps, micro_batch, length]
      batch = {n: jax.ShapeDtypeStruct((count, accum_steps, rows, length), jnp.int32)
               for n in names}
      return stacked, batch, key
    mesh = data_mesh(self.devices)
    replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))
    placed = lambda tree: jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), tree)
    batch = {n: jax.ShapeDtypeStruct((mesh.size, accum_steps, rows, length), jnp.int32,
                                     sharding=split) for n in names}
    return placed(state), batch, placed(key)


def check_trainable(cfg: TransformerConfig) -> None:
  """Raises ValueError for a config only decoding takes (int8 quantization)."""
  if cfg.quantization is not None:
    raise ValueError(f"quantization={cfg.quantization!r} is for decoding only (t2t-translate "
                     "--int8): train in float32 and quantise when translating")


def build(cfg: TransformerConfig, devices: Optional[Sequence[jax.Device]] = None,
          parallelism: Optional[str] = None) -> TrainStep:
  """`cfg`'s optimiser (the paper's Adam and schedule) and its steps mapped over
  `devices` as `parallelism` says (default `cfg.parallelism`; pmap maps over this
  process's devices, shard_map over every process's unless `devices` are given),
  each donating the state it is given."""
  check_trainable(cfg)
  parallelism = parallelism or cfg.parallelism
  devices = tuple(devices) if devices is not None else None
  optimizer = make_optimizer(cfg)
  return TrainStep(cfg, optimizer, parallelism, devices,
                   data_parallel(cfg, optimizer, devices, parallelism))
