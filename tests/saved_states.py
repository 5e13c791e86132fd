"""Saved training states for the checkpoint and averaging tests: a tiny state by seed, steps
saved with it, and the damage or failed reads that a checkpoint meets."""

import errno
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from t2t_jax import configs
from t2t_jax.runtime import checkpoint
from t2t_jax.train import step as step_lib
from t2t_jax.train.step import TrainState

CFG = configs.get_config("demo", num_layers=1, d_model=16, checkpoint_every_steps=None,
                          checkpoint_every_minutes=None, average_last=3)


def make_state(seed: int) -> TrainState:
  """A TrainState with random params and a non-trivial Adam state (after two updates)."""
  rng = np.random.default_rng(seed)
  params = {
      "embed": jnp.asarray(rng.normal(size=(40, 16)), jnp.float32),
      "layer_0": {"w": jnp.asarray(rng.normal(size=(16, 32)), jnp.float32),
                  "b": jnp.asarray(rng.normal(size=(32,)), jnp.float32)},
  }
  optimizer = step_lib.make_optimizer(CFG)
  opt_state = optimizer.init(params)
  for _ in range(2):
    grads = jax.tree.map(lambda p: p * 0.5, params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
  return TrainState(step=jnp.asarray(seed, jnp.int32), params=params, opt_state=opt_state)


def assert_trees_equal(actual, expected):
  assert jax.tree.structure(actual) == jax.tree.structure(expected)
  for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    assert np.asarray(a).dtype == np.asarray(e).dtype
    np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


def save_steps(workdir, steps, cfg=CFG):
  with checkpoint.Checkpointer(workdir, cfg) as ckpt:
    for step in steps:
      assert ckpt.maybe_save(step, make_state(step), {"data": {"position": step}}, force=True)


def truncate(step_dir):
  """Cuts every array data file in half.

  Not only the largest: which file holds the params depends on how orbax's
  writes were merged, and a params-only restore must fail too.
  """
  files = [p for p in (step_dir / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
  assert files, f"no array data under {step_dir}"
  for path in files:
    with open(path, "r+b") as f:
      f.truncate(path.stat().st_size // 2)


class Unreadable:
  """Makes reading the `state` of `step` raise `error` (the first `times` reads; -1: all)."""

  def __init__(self, monkeypatch, step, error, times=-1, handler=ocp.StandardCheckpointHandler):
    self.step, self.error, self.left, self.reads = str(step), error, times, 0
    restore = handler.restore

    def failing(handler, directory, *args, **kwargs):
      if pathlib.Path(directory).parent.name == self.step and self.left != 0:
        self.reads += 1
        self.left -= 1
        raise self.error
      return restore(handler, directory, *args, **kwargs)

    monkeypatch.setattr(handler, "restore", failing)


def eio(step_dir):
  return OSError(errno.EIO, "Input/output error", str(step_dir / "state" / "d" / "abc"))


def np_mean(steps):
  """The reference: per-leaf float64 mean of freshly built params, rounded to float32."""
  trees = [jax.device_get(make_state(s).params) for s in steps]
  return jax.tree.map(lambda *xs: np.mean(np.stack(xs).astype(np.float64), 0)
                      .astype(np.float32), *trees)
