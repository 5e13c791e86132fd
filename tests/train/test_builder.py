"""train/builder.py: one config's optimiser, state and mapped steps, for every caller."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from t2t_jax import configs
from t2t_jax.runtime import checkpoint
from t2t_jax.train import builder
from t2t_jax.train import optim
from t2t_jax.train import parallel

CFG = configs.get_config("demo", vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2,
                         dropout_rate=0.3, max_len=16, warmup_steps=10)


def _batch(devices, accum=2, rows=2, length=5, seed=0):
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
  placed, metrics = mapped.train_step(placed, mapped.put_batch(_batch(jax.local_device_count())),
                                      key)
  return jax.device_get(mapped.get((placed, metrics)))


def test_the_state_is_what_a_checkpoint_restores(tmp_path):
  """The loop restores into `abstract_state()` what it saved of `init_state`'s updates."""
  built = builder.build(CFG)
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


def test_pmap_and_shard_map_builds_give_the_same_update():
  """Dropout on and 2 micro-steps: the same per-device keys, sums and Adam update."""
  assert jax.device_count() == 8
  p_state, p_metrics = _one_update(builder.build(CFG, parallelism="pmap"))
  s_built = builder.build(CFG.replace(parallelism="shard_map"))
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
  _, other = _one_update(builder.build(CFG), key=jax.random.key(4))
  assert abs(float(other["loss"]) - float(p_metrics["loss"])) > 1e-4


def test_the_optimizer_is_adam_on_the_papers_schedule():
  """Constant unit gradients: Adam's bias-corrected step is the learning rate itself, so
  the first updates move a parameter by the schedule at the paper's steps 1, 2, 3."""
  optimizer = builder.build(CFG).optimizer
  schedule = optim.learning_rate_schedule(CFG)
  params = np.zeros(3, np.float32)
  state = optimizer.init(params)
  for step in (1, 2, 3):
    updates, state = optimizer.update(np.ones(3, np.float32), state, params)
    np.testing.assert_allclose(np.asarray(updates), -float(schedule(step)), rtol=1e-5)


@pytest.mark.parametrize("parallelism", ["pmap", "shard_map"])
def test_lower_traces_the_program_the_loop_runs(parallelism):
  """Shapes only (memory fitting, t2t-compile) give the program of placed arrays."""
  built = builder.build(CFG, parallelism=parallelism)
  mapped = built.mapped
  placed = mapped.put_state(built.init_state(jax.random.key(0)))
  batch = mapped.put_batch(_batch(jax.local_device_count(), accum=2, rows=4, length=8))
  key = jax.random.key(1)
  if parallelism == "shard_map":
    # The loop passes its key unplaced and jit replicates it; on shapes it is said outright.
    key = jax.device_put(key, NamedSharding(parallel.data_mesh(), P()))
  real = mapped.train_step.lower(placed, batch, key).as_text()
  assert built.lower(rows=4, length=8, accum_steps=2, packed=True).as_text() == real


def test_devices_and_parallelism_override_the_config():
  shard_map_cfg = CFG.replace(parallelism="shard_map")
  one = builder.build(shard_map_cfg, devices=jax.devices()[:1], parallelism="pmap")
  state, batch, _ = one.lower(rows=3, length=8).args_info[0]
  assert {leaf.shape[0] for leaf in jax.tree.leaves(state)} == {1}  # one stacked copy
  assert {k: v.shape for k, v in batch.items()} == {"inputs": (1, 1, 3, 8),
                                                    "targets": (1, 1, 3, 8)}
  two = builder.build(CFG, devices=jax.devices()[:2], parallelism="shard_map")
  lowered = two.lower(rows=3, length=8, accum_steps=4)
  state, batch, key = lowered.args_info[0]
  assert batch["inputs"].shape == (2, 4, 3, 8)
  assert all(leaf.donated for leaf in jax.tree.leaves(state)) and not key.donated
  assert '<["batch"=2]>' in lowered.as_text()  # the mesh of the two devices given
  with pytest.raises(ValueError, match="parallelism='pjit'"):
    builder.build(CFG, parallelism="pjit")
