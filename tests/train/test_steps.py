"""train_step/eval_step: the update does not depend on how the batch is split.

8 devices x 1 micro-step, 1 device x 1 and 1 device x 4 micro-steps (in a loop or
unrolled) must give the same state as a single-device reference computed without pmap (the gradient of
the token-mean loss over the whole batch). Dropout is off so all see one function.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.model import transformer
from t2t_jax.train import loss
from t2t_jax.train import optim
from t2t_jax.train import parallel
from t2t_jax.train import steps

BATCH, LENGTH = 16, 6


@pytest.fixture(scope="module")
def setup():
  cfg = configs.get_config("demo", vocab_size=40, num_layers=1, d_model=16, d_ff=32,
                           num_heads=2, dropout_rate=0.0, max_len=16, warmup_steps=10)
  optimizer = optim.make_optimizer(cfg)
  state = steps.create_train_state(cfg, optimizer, jax.random.key(0))
  rng = np.random.default_rng(0)
  inputs = rng.integers(3, cfg.vocab_size, (BATCH, LENGTH)).astype(np.int32)
  targets = rng.integers(3, cfg.vocab_size, (BATCH, LENGTH)).astype(np.int32)
  lengths = rng.integers(1, LENGTH + 1, BATCH)
  targets[np.arange(LENGTH)[None] >= lengths[:, None]] = 0   # ragged real lengths
  inputs[np.arange(LENGTH)[None] >= rng.integers(1, LENGTH + 1, BATCH)[:, None]] = 0
  inputs[-2:], targets[-2:] = 0, 0                            # two filler rows
  return cfg, optimizer, state, {"inputs": inputs, "targets": targets}


def _split(batch, devices, accum):
  return {k: v.reshape(devices, accum, BATCH // devices // accum, LENGTH) for k, v in batch.items()}


def _run(setup, devices, accum, **overrides):
  cfg, optimizer, state, batch = setup
  cfg = cfg.replace(**overrides)
  devs = jax.devices()[:devices]
  step = parallel.pmap_train_step(cfg, optimizer, devs)
  new_state, metrics = step(parallel.replicate(state, devs),
                            parallel.shard_batch(_split(batch, devices, accum), devs),
                            jax.random.key(1))
  return jax.device_get(parallel.unreplicate((new_state, metrics)))


@pytest.fixture(scope="module")
def one_device(setup):
  return _run(setup, devices=1, accum=1)


def _assert_same_state(a, b, rtol=1e-5, atol=1e-7):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def test_one_device_update_is_the_token_mean_gradient(setup, one_device):
  cfg, optimizer, state, batch = setup
  new_state, metrics = one_device

  def mean_loss(params):
    logits = transformer.Transformer(cfg.model).apply({"params": params}, batch["inputs"],
                                                batch["targets"])
    sums = loss.compute_metrics(logits, jnp.asarray(batch["targets"]), cfg.label_smoothing)
    return sums["loss"] / sums["tokens"], sums

  (_, sums), grads = jax.jit(jax.value_and_grad(mean_loss, has_aux=True))(state.params)
  tokens = float((batch["targets"] != 0).sum())
  assert float(metrics["tokens"]) == tokens
  np.testing.assert_allclose(metrics["loss"], sums["loss"] / tokens, rtol=1e-5)
  np.testing.assert_allclose(metrics["nll"], sums["nll"] / tokens, rtol=1e-5)
  np.testing.assert_allclose(metrics["grad_norm"],
                             np.sqrt(sum(np.sum(np.square(g)) for g in jax.tree.leaves(grads))),
                             rtol=1e-5)
  np.testing.assert_allclose(metrics["learning_rate"],
                             optim.learning_rate_schedule(cfg)(1), rtol=1e-6)
  assert int(new_state.step) == 1
  # Adam's first moment after one update is (1 - b1) * gradient: the normalisation shows.
  mu = new_state.opt_state[0].mu
  _assert_same_state(mu, jax.tree.map(lambda g: (1 - cfg.adam_b1) * g, grads), atol=1e-8)
  updates, _ = jax.jit(optimizer.update)(grads, state.opt_state, state.params)
  _assert_same_state(new_state.params, jax.tree.map(lambda p, u: p + u, state.params, updates))


def test_eight_devices_equal_one_device(setup, one_device):
  new_state, metrics = _run(setup, devices=8, accum=1)
  _assert_same_state(new_state, one_device[0])
  _assert_same_state(metrics, one_device[1])


@pytest.mark.parametrize("unroll", [1, 2, 4])
def test_accumulation_equals_one_big_batch(setup, one_device, unroll):
  # unroll: micro-steps side by side in one loop iteration (all 4 at once with 4).
  new_state, metrics = _run(setup, devices=1, accum=4, unroll_micro_steps=unroll)
  _assert_same_state(new_state, one_device[0])
  _assert_same_state(metrics, one_device[1])


def test_eval_step_sums_over_devices(setup, one_device):
  cfg, _, state, batch = setup
  devs = jax.devices()
  eval_step = parallel.pmap_eval_step(cfg, devs)
  # [devices, chunks, rows, length]: exercises the chunked path as well.
  split = {k: v.reshape(8, 2, 1, LENGTH) for k, v in batch.items()}
  got = jax.device_get(parallel.unreplicate(
      eval_step(parallel.replicate(state.params, devs), parallel.shard_batch(split, devs))))
  # The train step's metrics were computed with the same (pre-update) parameters.
  metrics = one_device[1]
  tokens = float(metrics["tokens"])
  assert float(got["tokens"]) == tokens
  for name, per_token in (("loss", "loss"), ("nll", "nll"), ("correct", "accuracy")):
    np.testing.assert_allclose(got[name], metrics[per_token] * tokens, rtol=1e-5)


def test_bad_batch_rank_is_a_clear_error(setup):
  cfg, optimizer, state, batch = setup
  # [micro_batch, length] without the accumulation axis: refused before any collective.
  with pytest.raises(ValueError, match="accum_steps, micro_batch, length"):
    steps.train_step(state, batch, jax.random.key(0), cfg=cfg, optimizer=optimizer)


def _pack_rows(batch):
  """The setup's real rows, two per packed row (segments 1 and 2), zeros after."""
  real = [i for i in range(BATCH) if batch["targets"][i].any()]
  length = 2 * LENGTH
  out = {k: np.zeros((BATCH // 2, length), np.int32)
         for k in ("inputs", "targets", *steps.SEGMENT_KEYS)}
  for r, pair in enumerate(zip(real[0::2], real[1::2])):
    for side in ("inputs", "targets"):
      start = 0
      for s, i in enumerate(pair, 1):
        ids = batch[side][i][batch[side][i] != 0]
        out[side][r, start:start + len(ids)] = ids
        out[f"{side}_segments"][r, start:start + len(ids)] = s
        start += len(ids)
  return out, length


def test_packed_batch_gives_the_unpacked_update(setup, one_device):
  cfg, optimizer, state, batch = setup
  packed, length = _pack_rows(batch)
  devs = jax.devices()[:2]
  step = parallel.pmap_train_step(cfg, optimizer, devs)
  split = {k: v.reshape(2, 1, BATCH // 4, length) for k, v in packed.items()}
  new_state, metrics = jax.device_get(parallel.unreplicate(step(
      parallel.replicate(state, devs), parallel.shard_batch(split, devs), jax.random.key(1))))
  assert float(metrics["tokens"]) == float(one_device[1]["tokens"])
  _assert_same_state(new_state, one_device[0])
  _assert_same_state(metrics, one_device[1])


def test_bfloat16_step_keeps_float32_state_and_loss(setup, one_device):
  cfg, optimizer, state, batch = setup
  cfg16 = cfg.replace(dtype="bfloat16")
  devs = jax.devices()[:1]
  step = parallel.pmap_train_step(cfg16, optimizer, devs)
  args = (parallel.replicate(state, devs), parallel.shard_batch(_split(batch, 1, 1), devs),
          jax.random.key(1))
  assert "bf16" in step.lower(*args).as_text()          # the matmuls do run in bfloat16
  new_state, metrics = jax.device_get(parallel.unreplicate(step(*args)))
  dtypes = {x.dtype for x in jax.tree.leaves((new_state.params, new_state.opt_state))
            if jnp.issubdtype(x.dtype, jnp.floating)}
  assert dtypes == {jnp.dtype(jnp.float32)}
  assert all(np.asarray(v).dtype == np.float32 for v in metrics.values())
  np.testing.assert_allclose(metrics["loss"], one_device[1]["loss"], rtol=0.02)


def _copies_loss(setup, devices, accum):
  """Metrics of one update with dropout on, every device and micro-step given the same rows."""
  cfg, optimizer, state, batch = setup
  cfg = cfg.replace(dropout_rate=0.3)
  rows = {k: np.broadcast_to(v[:4], (devices, accum, 4, LENGTH)).copy() for k, v in batch.items()}
  devs = jax.devices()[:devices]
  step = parallel.pmap_train_step(cfg, optimizer, devs)
  _, metrics = step(parallel.replicate(state, devs), parallel.shard_batch(rows, devs),
                    jax.random.key(1))
  return jax.device_get(parallel.unreplicate(metrics))


def test_each_device_and_micro_step_draws_its_own_dropout_masks(setup):
  # Copies of one micro-batch on two devices, or in two micro-steps: were their
  # masks the same, the token-mean loss would be one copy's loss exactly.
  one = _copies_loss(setup, devices=1, accum=1)
  for devices, accum in ((2, 1), (1, 2)):
    copies = _copies_loss(setup, devices, accum)
    assert float(copies["tokens"]) == 2 * float(one["tokens"])
    assert abs(float(copies["loss"]) - float(one["loss"])) > 1e-4, (devices, accum)
