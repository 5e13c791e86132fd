"""train/step.py, top to bottom: the label-smoothed loss against NumPy, the schedule and Adam
against the paper's formulas, the update against the token-mean gradient (devices, micro-steps,
packing and bfloat16 change nothing), pmap against shard_map, `build`'s state and
programs as every caller gets them, and the output layer fused with the loss against the
reference loss, gradients included."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from compilers import SMALL
from t2t_jax import configs
from t2t_jax.ids import SEGMENT_KEYS
from t2t_jax.model import transformer
from t2t_jax.runtime import checkpoint
from t2t_jax.train import step as step_lib


# ---------------------------------------------------------------------------------- loss


def _reference(logits, targets, eps):
  """Per-token KL(q || p) and -log p(gold) with the smoothed q written out in full."""
  logits = np.asarray(logits, np.float64)
  vocab = logits.shape[-1]
  log_p = logits - logits.max(-1, keepdims=True)
  log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
  q = np.full(logits.shape, eps / (vocab - 1))
  np.put_along_axis(q, targets[..., None], 1.0 - eps, axis=-1)
  log_q = np.log(np.where(q > 0, q, 1.0))  # 0 log 0 = 0
  kl = np.sum(q * (log_q - log_p), axis=-1)
  nll = -np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
  return kl, nll


def _batch(seed=0, batch=3, length=7, vocab=11):
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(batch, length, vocab)).astype(np.float32) * 3
  targets = rng.integers(1, vocab, size=(batch, length)).astype(np.int32)
  targets[0, 4:] = 0  # trailing padding
  targets[2, 1:] = 0
  return logits, targets


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.2])
def test_matches_numpy_reference(eps):
  logits, targets = _batch()
  kl, nll = _reference(logits, targets, eps)
  got_loss, got_nll = step_lib.smoothed_cross_entropy(jnp.asarray(logits), jnp.asarray(targets), eps)
  np.testing.assert_allclose(got_loss, kl, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got_nll, nll, rtol=1e-5, atol=1e-5)

  sums = step_lib.compute_metrics(jnp.asarray(logits), jnp.asarray(targets), eps)
  weights = targets != 0
  np.testing.assert_allclose(sums["loss"], kl[weights].sum(), rtol=1e-5)
  np.testing.assert_allclose(sums["nll"], nll[weights].sum(), rtol=1e-5)
  assert float(sums["tokens"]) == weights.sum()
  correct = (logits.argmax(-1) == targets) & weights
  assert float(sums["correct"]) == correct.sum()


def test_padding_is_ignored():
  logits, targets = _batch(seed=1)
  sums = step_lib.compute_metrics(jnp.asarray(logits), jnp.asarray(targets), 0.1)
  # Anything at padded positions, and whole filler rows, change nothing.
  noisy = logits.copy()
  noisy[targets == 0] = np.random.default_rng(2).normal(size=noisy[targets == 0].shape) * 50
  padded_logits = np.concatenate([noisy, np.ones_like(noisy[:2])], axis=0)
  padded_targets = np.concatenate([targets, np.zeros_like(targets[:2])], axis=0)
  again = step_lib.compute_metrics(jnp.asarray(padded_logits), jnp.asarray(padded_targets), 0.1)
  for name in sums:
    np.testing.assert_allclose(again[name], sums[name], rtol=1e-6)


def test_perfect_prediction_scores_zero_smoothed_loss():
  eps, vocab = 0.1, 11
  targets = np.array([[3, 5, 0]], np.int32)
  q = np.full((1, 3, vocab), eps / (vocab - 1))
  np.put_along_axis(q, targets[..., None], 1 - eps, axis=-1)
  per_token, nll = step_lib.smoothed_cross_entropy(jnp.log(jnp.asarray(q, jnp.float32)),
                                               jnp.asarray(targets), eps)
  np.testing.assert_allclose(per_token, 0.0, atol=1e-5)
  np.testing.assert_allclose(nll, -np.log(1 - eps), rtol=1e-5)


def test_bfloat16_logits_give_float32_sums():
  logits, targets = _batch(seed=3)
  sums = step_lib.compute_metrics(jnp.asarray(logits, jnp.bfloat16), jnp.asarray(targets), 0.1)
  assert all(v.dtype == jnp.float32 for v in sums.values())
  kl, _ = _reference(np.asarray(jnp.asarray(logits, jnp.bfloat16).astype(jnp.float32)),
                     targets, 0.1)
  np.testing.assert_allclose(sums["loss"], kl[targets != 0].sum(), rtol=1e-4)


def test_summarize_normalises_by_tokens():
  out = step_lib.summarize({"loss": 6.0, "nll": 8.0, "correct": 3.0, "tokens": 4.0})
  assert out["loss"] == pytest.approx(1.5)
  assert out["accuracy"] == pytest.approx(0.75)
  assert out["perplexity"] == pytest.approx(np.exp(2.0))


def test_shape_mismatch_is_a_clear_error():
  with pytest.raises(ValueError, match="do not match"):
    step_lib.smoothed_cross_entropy(jnp.zeros((2, 3, 5)), jnp.zeros((2, 4), jnp.int32), 0.1)


# ---------------------------------------------------------------- optimiser and schedule


def _paper_lrate(d_model, warmup, step):
  return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("step", [1, 4000, 100_000])
def test_schedule_is_the_papers_formula(step):
  cfg = configs.get_config("base")
  assert (cfg.d_model, cfg.warmup_steps) == (512, 4000)
  got = float(step_lib.learning_rate_schedule(cfg)(step))
  assert got == pytest.approx(_paper_lrate(512, 4000, step), rel=1e-6)


def test_schedule_peaks_at_warmup_and_scales():
  cfg = configs.get_config("base")
  schedule = step_lib.learning_rate_schedule(cfg)
  values = [float(schedule(s)) for s in (3999, 4000, 4001)]
  assert values[1] > values[0] and values[1] > values[2]
  doubled = step_lib.learning_rate_schedule(cfg.replace(learning_rate_scale=2.0))
  assert float(doubled(123)) == pytest.approx(2 * float(schedule(123)), rel=1e-6)
  assert float(schedule(0)) == pytest.approx(float(schedule(1)))  # never 0 or inf


def test_adam_matches_numpy_with_the_papers_hyperparameters():
  """Three updates: optax's count 0, 1, 2 must use the paper's steps 1, 2, 3."""
  cfg = configs.get_config("base", warmup_steps=4, learning_rate_scale=10.0)
  assert (cfg.adam_b1, cfg.adam_b2, cfg.adam_eps) == (0.9, 0.98, 1e-9)
  optimizer = step_lib.make_optimizer(cfg)
  rng = np.random.default_rng(0)
  params = rng.normal(size=(6,)).astype(np.float32)
  # Gradients of very different sizes, some near eps, so that eps and both betas matter.
  grads = [rng.normal(size=(6,)) * np.array([1, 1e-3, 1e-6, 1e-9, 3e-9, 10])
           for _ in range(3)]

  state = optimizer.init(jnp.asarray(params))
  got = jnp.asarray(params)
  for g in grads:
    updates, state = optimizer.update(jnp.asarray(g, jnp.float32), state, got)
    got = got + updates

  b1, b2, eps = 0.9, 0.98, 1e-9
  expected = params.astype(np.float64)
  m = np.zeros(6)
  v = np.zeros(6)
  for step, g in enumerate(grads, start=1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1 ** step), v / (1 - b2 ** step)
    lr = 10.0 * _paper_lrate(512, 4, step)
    expected = expected - lr * m_hat / (np.sqrt(v_hat) + eps)
  np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-7)
  assert not math.isclose(float(got[0]), float(params[0]))  # it did move


# ---------------------------------------------------------------------------- the update


BATCH, LENGTH = 16, 6


@pytest.fixture(scope="module")
def setup():
  cfg = configs.get_config("demo", vocab_size=40, num_layers=1, d_model=16, d_ff=32,
                           num_heads=2, dropout_rate=0.0, max_len=16, warmup_steps=10)
  optimizer = step_lib.make_optimizer(cfg)
  state = step_lib.create_train_state(cfg, optimizer, jax.random.key(0))
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
  step = step_lib.pmap_train_step(cfg, optimizer, devs)
  new_state, metrics = step(step_lib.replicate(state, devs),
                            step_lib.shard_batch(_split(batch, devices, accum), devs),
                            jax.random.key(1))
  return jax.device_get(step_lib.unreplicate((new_state, metrics)))


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
    sums = step_lib.compute_metrics(logits, jnp.asarray(batch["targets"]), cfg.label_smoothing)
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
                             step_lib.learning_rate_schedule(cfg)(1), rtol=1e-6)
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
  eval_step = step_lib.pmap_eval_step(cfg, devs)
  # [devices, chunks, rows, length]: exercises the chunked path as well.
  split = {k: v.reshape(8, 2, 1, LENGTH) for k, v in batch.items()}
  got = jax.device_get(step_lib.unreplicate(
      eval_step(step_lib.replicate(state.params, devs), step_lib.shard_batch(split, devs))))
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
    step_lib.train_step(state, batch, jax.random.key(0), cfg=cfg, optimizer=optimizer)


def _pack_rows(batch):
  """The setup's real rows, two per packed row (segments 1 and 2), zeros after."""
  real = [i for i in range(BATCH) if batch["targets"][i].any()]
  length = 2 * LENGTH
  out = {k: np.zeros((BATCH // 2, length), np.int32)
         for k in ("inputs", "targets", *SEGMENT_KEYS)}
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
  step = step_lib.pmap_train_step(cfg, optimizer, devs)
  split = {k: v.reshape(2, 1, BATCH // 4, length) for k, v in packed.items()}
  new_state, metrics = jax.device_get(step_lib.unreplicate(step(
      step_lib.replicate(state, devs), step_lib.shard_batch(split, devs), jax.random.key(1))))
  assert float(metrics["tokens"]) == float(one_device[1]["tokens"])
  _assert_same_state(new_state, one_device[0])
  _assert_same_state(metrics, one_device[1])


def test_bfloat16_step_keeps_float32_state_and_loss(setup, one_device):
  cfg, optimizer, state, batch = setup
  cfg16 = cfg.replace(dtype="bfloat16")
  devs = jax.devices()[:1]
  step = step_lib.pmap_train_step(cfg16, optimizer, devs)
  args = (step_lib.replicate(state, devs), step_lib.shard_batch(_split(batch, 1, 1), devs),
          jax.random.key(1))
  assert "bf16" in step.lower(*args).as_text()          # the matmuls do run in bfloat16
  new_state, metrics = jax.device_get(step_lib.unreplicate(step(*args)))
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
  step = step_lib.pmap_train_step(cfg, optimizer, devs)
  _, metrics = step(step_lib.replicate(state, devs), step_lib.shard_batch(rows, devs),
                    jax.random.key(1))
  return jax.device_get(step_lib.unreplicate(metrics))


def test_each_device_and_micro_step_draws_its_own_dropout_masks(setup):
  # Copies of one micro-batch on two devices, or in two micro-steps: were their
  # masks the same, the token-mean loss would be one copy's loss exactly.
  one = _copies_loss(setup, devices=1, accum=1)
  for devices, accum in ((2, 1), (1, 2)):
    copies = _copies_loss(setup, devices, accum)
    assert float(copies["tokens"]) == 2 * float(one["tokens"])
    assert abs(float(copies["loss"]) - float(one["loss"])) > 1e-4, (devices, accum)


# ------------------------------------------------------------------------------- devices


def test_replicate_and_unreplicate_round_trip():
  tree = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": jnp.int32(7)}
  replicated = step_lib.replicate(tree)
  n = jax.local_device_count()
  assert replicated["a"].shape == (n, 2, 3) and replicated["b"].shape == (n,)
  # One copy on each device, not all copies on one.
  assert {s.device for s in replicated["a"].addressable_shards} == set(jax.local_devices())
  for shard in replicated["a"].addressable_shards:
    np.testing.assert_array_equal(np.asarray(shard.data)[0], tree["a"])
  back = step_lib.unreplicate(replicated)
  np.testing.assert_array_equal(back["a"], tree["a"])
  assert int(back["b"]) == 7


def test_shard_batch_puts_one_slice_per_device():
  n = jax.local_device_count()
  batch = {"inputs": np.arange(n * 6, dtype=np.int32).reshape(n, 1, 2, 3)}
  sharded = step_lib.shard_batch(batch)
  for shard in sharded["inputs"].addressable_shards:
    index = jax.local_devices().index(shard.device)
    np.testing.assert_array_equal(np.asarray(shard.data)[0], batch["inputs"][index])
  with pytest.raises(ValueError, match="one slice per device"):
    step_lib.shard_batch({"inputs": batch["inputs"][:n - 1]})


def test_shard_map_step_equals_pmap_step():
  """Same state and metrics, with dropout ON and 2 micro-steps, so the per-device,
  per-micro-step dropout keys must agree too."""
  cfg = configs.get_config("demo", vocab_size=40, num_layers=1, d_model=16, d_ff=32,
                           num_heads=2, dropout_rate=0.3, max_len=16, warmup_steps=10)
  optimizer = step_lib.make_optimizer(cfg)
  state = step_lib.create_train_state(cfg, optimizer, jax.random.key(0))
  rng = np.random.default_rng(0)
  batch = {k: rng.integers(1, cfg.vocab_size, (8, 2, 2, 5)).astype(np.int32)
           for k in ("inputs", "targets")}
  batch["targets"][..., 3:] = 0
  key = jax.random.key(3)

  p_step = step_lib.pmap_train_step(cfg, optimizer)
  p_state, p_metrics = p_step(step_lib.replicate(state), step_lib.shard_batch(batch), key)
  p_state, p_metrics = jax.device_get(step_lib.unreplicate((p_state, p_metrics)))

  mesh = Mesh(np.array(jax.devices()), ("batch",))
  s_step = step_lib.jit_shard_map_train_step(cfg, optimizer, mesh)
  s_state, s_metrics = jax.device_get(s_step(jax.tree.map(jnp.copy, state), batch, key))

  assert int(s_state.step) == int(p_state.step) == 1
  for a, b in zip(jax.tree.leaves((s_state, s_metrics)), jax.tree.leaves((p_state, p_metrics))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-8)
  # Dropout was really on: another root key gives another loss.
  _, other = p_step(step_lib.replicate(state), step_lib.shard_batch(batch), jax.random.key(4))
  assert abs(float(step_lib.unreplicate(other)["loss"]) - float(s_metrics["loss"])) > 1e-4


def test_shard_map_step_wants_a_batch_axis():
  cfg = configs.get_config("demo")
  with pytest.raises(ValueError, match="single axis 'batch'"):
    step_lib.jit_shard_map_train_step(cfg, step_lib.make_optimizer(cfg),
                                      Mesh(np.array(jax.devices()), ("data",)))


@pytest.mark.parametrize("parallelism", ["pmap", "shard_map"])
def test_metrics_are_read_by_a_transfer_without_a_device_op(parallelism, monkeypatch):
  cfg = SMALL.replace(parallelism=parallelism)
  devices = step_lib.data_parallel(cfg, step_lib.make_optimizer(cfg))
  placed = devices.put_state({"loss": np.float32(2.5)})  # placed as the step's metrics are
  # A device op on the metrics (e.g. indexing [0]) would queue behind the next step,
  # so reading step t's metrics would wait for step t + 1 (the trainer's read_metrics).
  monkeypatch.setattr(type(placed["loss"]), "__getitem__",
                      lambda *a: pytest.fail("indexed on the device"))
  host = devices.fetch(placed)
  assert isinstance(host["loss"], (np.ndarray, np.generic)) and float(host["loss"]) == 2.5


# --------------------------------------------------------------------------------- build


CFG = configs.get_config("demo", vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2,
                         dropout_rate=0.3, max_len=16, warmup_steps=10)


def _device_batch(devices, accum=2, rows=2, length=5, seed=0):
  """[devices, accum_steps, micro_batch, length] of random ids, packed (one segment a row)."""
  rng = np.random.default_rng(seed)
  shape = (devices, accum, rows, length)
  batch = {k: rng.integers(3, CFG.vocab_size, shape).astype(np.int32)
           for k in ("inputs", "targets")}
  batch["targets"][..., 3:] = 0
  batch.update({k: (batch[k[:-len("_segments")]] > 0).astype(np.int32)
                for k in ("inputs_segments", "targets_segments")})
  return batch


def _one_update(built, key=jax.random.key(3)):
  """The state and metrics after one update from step 0, one copy on the host."""
  mapped = built.mapped
  placed = mapped.put_state(built.init_state(jax.random.key(0)))
  placed, metrics = mapped.train_step(placed, mapped.put_batch(_device_batch(jax.local_device_count())),
                                      key)
  return jax.device_get(mapped.get((placed, metrics)))


@pytest.fixture(scope="module")
def pmap_built():
  """`step_lib.build(CFG)` (pmap, the default), shared: its update is traced and compiled
  once for the tests that run it on `_device_batch`'s shape."""
  return step_lib.build(CFG)


def test_the_state_is_what_a_checkpoint_restores(tmp_path, pmap_built):
  """The loop restores into `abstract_state()` what it saved of `init_state`'s updates."""
  built = pmap_built
  abstract = built.abstract_state()
  fresh = built.init_state(jax.random.key(0))
  assert jax.tree.structure(abstract) == jax.tree.structure(fresh)
  for a, x in zip(jax.tree.leaves(abstract), jax.tree.leaves(fresh)):
    assert (a.shape, a.dtype) == (x.shape, x.dtype)
  state, _ = _one_update(built)
  with checkpoint.Checkpointer(tmp_path, CFG, async_save=False) as ckpt:
    ckpt.maybe_save(1, state, {"data": {}}, force=True)
    restored, _ = ckpt.restore_latest(abstract)
  assert int(restored.step) == 1
  assert jax.tree.structure(restored) == jax.tree.structure(state)
  for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state)):
    assert np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_pmap_and_shard_map_builds_give_the_same_update(pmap_built):
  """Dropout on and 2 micro-steps: the same per-device keys, sums and Adam update."""
  assert jax.device_count() == 8
  assert pmap_built.parallelism == "pmap"
  p_state, p_metrics = _one_update(pmap_built)
  s_built = step_lib.build(CFG.replace(parallelism="shard_map"))
  assert s_built.parallelism == "shard_map"
  # Placed as its mapping wants: pmap stacks a copy per device, shard_map does not.
  params = s_built.init_state(jax.random.key(0)).params
  placed = s_built.mapped.put_state(params)
  assert jax.tree.leaves(placed)[0].shape == jax.tree.leaves(params)[0].shape
  s_state, s_metrics = _one_update(s_built)
  assert int(s_state.step) == int(p_state.step) == 1
  for a, b in zip(jax.tree.leaves((s_state, s_metrics)), jax.tree.leaves((p_state, p_metrics))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-8)
  # Dropout was really on: another root key gives another loss.
  _, other = _one_update(pmap_built, key=jax.random.key(4))
  assert abs(float(other["loss"]) - float(p_metrics["loss"])) > 1e-4


def test_the_optimizer_is_adam_on_the_papers_schedule():
  """Constant unit gradients: Adam's bias-corrected step is the learning rate itself, so
  the first updates move a parameter by the schedule at the paper's steps 1, 2, 3."""
  optimizer = step_lib.build(CFG).optimizer
  schedule = step_lib.learning_rate_schedule(CFG)
  params = np.zeros(3, np.float32)
  state = optimizer.init(params)
  for step in (1, 2, 3):
    updates, state = optimizer.update(np.ones(3, np.float32), state, params)
    np.testing.assert_allclose(np.asarray(updates), -float(schedule(step)), rtol=1e-5)


@pytest.mark.parametrize("parallelism", ["pmap", "shard_map"])
def test_lower_traces_the_program_the_loop_runs(parallelism):
  """Shapes only (memory fitting, t2t-compile) give the program of placed arrays."""
  built = step_lib.build(CFG, parallelism=parallelism)
  mapped = built.mapped
  placed = mapped.put_state(built.init_state(jax.random.key(0)))
  batch = mapped.put_batch(_device_batch(jax.local_device_count(), accum=2, rows=4, length=8))
  key = jax.random.key(1)
  if parallelism == "shard_map":
    # The loop passes its key unplaced and jit replicates it; on shapes it is said outright.
    key = jax.device_put(key, NamedSharding(step_lib.data_mesh(), P()))
  real = mapped.train_step.lower(placed, batch, key).as_text()
  assert built.lower(rows=4, length=8, accum_steps=2, packed=True).as_text() == real


def test_devices_and_parallelism_override_the_config():
  shard_map_cfg = CFG.replace(parallelism="shard_map")
  one = step_lib.build(shard_map_cfg, devices=jax.devices()[:1], parallelism="pmap")
  state, batch, _ = one.lower(rows=3, length=8).args_info[0]
  assert {leaf.shape[0] for leaf in jax.tree.leaves(state)} == {1}  # one stacked copy
  assert {k: v.shape for k, v in batch.items()} == {"inputs": (1, 1, 3, 8),
                                                    "targets": (1, 1, 3, 8)}
  two = step_lib.build(CFG, devices=jax.devices()[:2], parallelism="shard_map")
  lowered = two.lower(rows=3, length=8, accum_steps=4)
  state, batch, key = lowered.args_info[0]
  assert batch["inputs"].shape == (2, 4, 3, 8)
  assert all(leaf.donated for leaf in jax.tree.leaves(state)) and not key.donated
  assert '<["batch"=2]>' in lowered.as_text()  # the mesh of the two devices given
  with pytest.raises(ValueError, match="parallelism='pjit'"):
    step_lib.build(CFG, parallelism="pjit")


# ------------------------------------------ the output layer fused with the loss


def _fused(features, kernel, targets, eps):
  """The fused output layer + loss with q's constants for eps, as the train step calls it."""
  return step_lib.output_metrics(features, kernel, targets,
                                   step_lib.smoothing(eps, kernel.shape[0]))


def _features(seed, dtype=jnp.float32, tokens=(3, 7), d=5, vocab=11):
  rng = np.random.default_rng(seed)
  features = jnp.asarray(rng.normal(size=(*tokens, d)), dtype)
  kernel = jnp.asarray(rng.normal(size=(vocab, d)), jnp.float32)
  targets = rng.integers(1, vocab, size=tokens).astype(np.int32)
  targets[0, 4:] = 0  # trailing padding
  targets[2, 1:] = 0
  return features, kernel, jnp.asarray(targets)


@pytest.mark.exact
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_output_metrics_equal_the_reference_and_its_gradient(eps):
  features, kernel, targets = _features(4)

  def reference(f, k):
    logits = jnp.einsum("bld,vd->blv", f, k)
    return step_lib.compute_metrics(logits, targets, eps)

  def fused(f, k):
    return _fused(f, k, targets, eps)

  want, got = reference(features, kernel), fused(features, kernel)
  for name in step_lib.METRIC_SUMS:
    np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)
  # Both differentiable sums at once, with different weights, so a swapped term shows.
  combine = lambda f: lambda *a: f(*a)["loss"] + 0.3 * f(*a)["nll"]
  want_grads = jax.grad(combine(reference), argnums=(0, 1))(features, kernel)
  got_grads = jax.jit(jax.grad(combine(fused), argnums=(0, 1)))(features, kernel)
  for w, g in zip(want_grads, got_grads):
    assert g.dtype == w.dtype and g.shape == w.shape
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.exact
def test_a_gold_logit_tied_for_the_largest_counts_as_correct_in_both_paths():
  # Three tokens, vocabulary 4, d = 4: the kernel is the identity, so logits = features.
  features = jnp.asarray([[[1.0, 3.0, 3.0, 0.0],     # gold 2 ties id 1 for the top: correct
                           [1.0, 3.0, 3.0, 0.0],     # gold 3 is below the top: wrong
                           [0.0, 0.0, 5.0, 1.0]]])   # gold 2 is the top: correct
  targets = jnp.asarray([[2, 3, 2]])
  kernel = jnp.eye(4)
  assert float(_fused(features, kernel, targets, 0.1)["correct"]) == 2.0
  assert float(step_lib.compute_metrics(features, targets, 0.1)["correct"]) == 2.0


@pytest.mark.exact
def test_output_metrics_in_bfloat16_keep_float32_sums_and_kernel_gradient():
  features, kernel, targets = _features(5, jnp.bfloat16)
  sums = _fused(features, kernel, targets, 0.1)
  assert all(v.dtype == jnp.float32 for v in sums.values())
  want = step_lib.compute_metrics(
      jnp.einsum("bld,vd->blv", features.astype(jnp.float32),
                 kernel.astype(jnp.bfloat16).astype(jnp.float32)), targets, 0.1)
  np.testing.assert_allclose(sums["loss"], want["loss"], rtol=1e-5)
  d_features, d_kernel = jax.grad(lambda f, k: _fused(f, k, targets, 0.1)["loss"],
                                  argnums=(0, 1))(features, kernel)
  assert d_features.dtype == jnp.bfloat16 and d_kernel.dtype == jnp.float32


def test_output_metrics_shape_mismatch_is_a_clear_error():
  features, kernel, targets = _features(6)
  with pytest.raises(ValueError, match="do not match"):
    _fused(features, kernel, targets[:, :3], 0.1)
