"""Device helpers, and the jit+shard_map step against the pmap step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from compilers import SMALL
from t2t_jax import configs
from t2t_jax.train import optim
from t2t_jax.train import parallel
from t2t_jax.train import steps


def test_replicate_and_unreplicate_round_trip():
  tree = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": jnp.int32(7)}
  replicated = parallel.replicate(tree)
  n = jax.local_device_count()
  assert replicated["a"].shape == (n, 2, 3) and replicated["b"].shape == (n,)
  # One copy on each device, not all copies on one.
  assert {s.device for s in replicated["a"].addressable_shards} == set(jax.local_devices())
  for shard in replicated["a"].addressable_shards:
    np.testing.assert_array_equal(np.asarray(shard.data)[0], tree["a"])
  back = parallel.unreplicate(replicated)
  np.testing.assert_array_equal(back["a"], tree["a"])
  assert int(back["b"]) == 7


def test_shard_batch_puts_one_slice_per_device():
  n = jax.local_device_count()
  batch = {"inputs": np.arange(n * 6, dtype=np.int32).reshape(n, 1, 2, 3)}
  sharded = parallel.shard_batch(batch)
  for shard in sharded["inputs"].addressable_shards:
    index = jax.local_devices().index(shard.device)
    np.testing.assert_array_equal(np.asarray(shard.data)[0], batch["inputs"][index])
  with pytest.raises(ValueError, match="one slice per device"):
    parallel.shard_batch({"inputs": batch["inputs"][:n - 1]})


def test_shard_map_step_equals_pmap_step():
  """Same state and metrics, with dropout ON and 2 micro-steps, so the per-device,
  per-micro-step dropout keys must agree too."""
  cfg = configs.get_config("demo", vocab_size=40, num_layers=1, d_model=16, d_ff=32,
                           num_heads=2, dropout_rate=0.3, max_len=16, warmup_steps=10)
  optimizer = optim.make_optimizer(cfg)
  state = steps.create_train_state(cfg, optimizer, jax.random.key(0))
  rng = np.random.default_rng(0)
  batch = {k: rng.integers(1, cfg.vocab_size, (8, 2, 2, 5)).astype(np.int32)
           for k in ("inputs", "targets")}
  batch["targets"][..., 3:] = 0
  key = jax.random.key(3)

  p_step = parallel.pmap_train_step(cfg, optimizer)
  p_state, p_metrics = p_step(parallel.replicate(state), parallel.shard_batch(batch), key)
  p_state, p_metrics = jax.device_get(parallel.unreplicate((p_state, p_metrics)))

  mesh = Mesh(np.array(jax.devices()), ("batch",))
  s_step = parallel.jit_shard_map_train_step(cfg, optimizer, mesh)
  s_state, s_metrics = jax.device_get(s_step(jax.tree.map(jnp.copy, state), batch, key))

  assert int(s_state.step) == int(p_state.step) == 1
  for a, b in zip(jax.tree.leaves((s_state, s_metrics)), jax.tree.leaves((p_state, p_metrics))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-8)
  # Dropout was really on: another root key gives another loss.
  _, other = p_step(parallel.replicate(state), parallel.shard_batch(batch), jax.random.key(4))
  assert abs(float(parallel.unreplicate(other)["loss"]) - float(s_metrics["loss"])) > 1e-4


def test_shard_map_step_wants_a_batch_axis():
  cfg = configs.get_config("demo")
  with pytest.raises(ValueError, match="single axis 'batch'"):
    parallel.jit_shard_map_train_step(cfg, optim.make_optimizer(cfg),
                                      Mesh(np.array(jax.devices()), ("data",)))


@pytest.mark.parametrize("parallelism", ["pmap", "shard_map"])
def test_metrics_are_read_by_a_transfer_without_a_device_op(parallelism, monkeypatch):
  cfg = SMALL.replace(parallelism=parallelism)
  devices = parallel.data_parallel(cfg, optim.make_optimizer(cfg))
  placed = devices.put_state({"loss": np.float32(2.5)})  # placed as the step's metrics are
  # A device op on the metrics (e.g. indexing [0]) would queue behind the next step,
  # so reading step t's metrics would wait for step t + 1 (the trainer's read_metrics).
  monkeypatch.setattr(type(placed["loss"]), "__getitem__",
                      lambda *a: pytest.fail("indexed on the device"))
  host = devices.fetch(placed)
  assert isinstance(host["loss"], (np.ndarray, np.generic)) and float(host["loss"]) == 2.5

