"""Resume == uninterrupted: SIGKILL a tiny training run, restart it, compare bit for bit.

Three processes run the same command: A trains to the end; B is killed as soon
as it has written its second checkpoint (wherever it is then: mid-step or
mid-save), then run again. A and B must end with the same state bit for bit
(params, Adam moments, step, data position), and every logged training metric
must match step for step.
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import trained
import xla_flags  # tests/xla_flags.py
from t2t_jax import configs
from t2t_jax.runtime import checkpoint
from t2t_jax.train import step as step_lib

NUM_STEPS = 24
EVERY = 2
# Logged values that depend on the computation only (not on the wall clock).
_DETERMINISTIC = ("train_loss", "train_nll", "train_accuracy", "train_perplexity",
                  "learning_rate", "grad_norm", "eval_loss", "eval_nll", "eval_accuracy",
                  "eval_perplexity")

# Reports which step each process restored, without relying on train/trainer.py's log text;
# runs through exits.command, as the scripts do (one-line errors, exit statuses). With a
# third argument, a file name: waits after reading step PAUSE_AT's metrics until that file
# exists.
_DRIVER = """
import json, os, sys, time
from t2t_jax import configs
from t2t_jax.cli import exits
from t2t_jax.runtime import checkpoint
from t2t_jax.train import trainer
restore = checkpoint.Checkpointer.restore_latest
def spy(self, target):
  restored = restore(self, target)
  print("RESTORED", None if restored is None else int(restored[0].step), flush=True)
  return restored
checkpoint.Checkpointer.restore_latest = spy
if len(sys.argv) > 3:
  read_metrics = trainer.Trainer.read_metrics
  def pause(self, step, *args):
    read_metrics(self, step, *args)
    if step == PAUSE_AT:
      print("PAUSED", flush=True)
      while not os.path.exists(sys.argv[3]):
        time.sleep(0.02)
  trainer.Trainer.read_metrics = pause
@exits.command
def main(argv):
  trainer.train_and_evaluate(configs.get_config("demo", **json.loads(sys.argv[1])), sys.argv[2])
  print("FINISHED", flush=True)
main(None)
""".replace("PAUSE_AT", "4")
# The signal lands while step 4's metrics are read, after the loop's check for that step;
# the run stops after step 5, off the checkpoint schedule (an interim save).
STOP_STEP = 5


@pytest.fixture(scope="module")
def overrides(tmp_path_factory):
  """A tiny model on short generated sentences: one batch shape, so one compilation."""
  files = trained.write_text_corpus(tmp_path_factory.mktemp("corpus"), 1040, 20, 20)
  # ~130 pairs of at most 8 tokens: 9 batches of [16, 8] per epoch, so the run
  # crosses two epoch boundaries and the iterator position must survive them.
  return dict(dataset="text", **files, vocab_size=400, num_layers=1, d_model=32, d_ff=64,
              num_heads=2, max_len=16, max_source_length=8, max_target_length=8,
              tokens_per_batch=128, max_tokens_per_device=128, dropout_rate=0.1,
              num_train_steps=NUM_STEPS, warmup_steps=8, log_every_steps=1,
              eval_every_steps=1000, num_eval_batches=1, checkpoint_every_steps=EVERY,
              checkpoint_every_minutes=None, average_last=2)


@pytest.fixture(scope="module")
def compilation_cache(tmp_path_factory):
  """Shared by the three processes: only the first one compiles."""
  return tmp_path_factory.mktemp("jax_cache")


def _command(overrides, workdir, *extra):
  return [sys.executable, "-c", _DRIVER, json.dumps(overrides), str(workdir), *extra]


def _env(cache_dir):
  # Two devices keep the cross-device sums in play at a fraction of eight's cost.
  return {**os.environ, "XLA_FLAGS": xla_flags.with_devices(2),
          "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
          "JAX_COMPILATION_CACHE_DIR": str(cache_dir),
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
          "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def _run(overrides, workdir, cache_dir):
  result = subprocess.run(_command(overrides, workdir), env=_env(cache_dir), capture_output=True,
                          text=True, timeout=300, cwd=pathlib.Path(__file__).parents[2])
  assert result.returncode == 0 and "FINISHED" in result.stdout, result.stderr[-4000:]
  return result.stdout


def _committed_steps(workdir):
  directory = workdir / checkpoint.CHECKPOINT_DIR
  if not directory.is_dir():
    return []
  return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _metrics(workdir):
  lines = (workdir / "metrics.jsonl").read_text().splitlines()
  return {r["step"]: {k: r[k] for k in _DETERMINISTIC if k in r}
          for r in map(json.loads, lines)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory, overrides, compilation_cache):
  """The uninterrupted run both tests compare with."""
  workdir = tmp_path_factory.mktemp("reference")
  assert "RESTORED None" in _run(overrides, workdir, compilation_cache)
  return workdir


def _final(workdir, overrides):
  cfg = configs.get_config("demo", **overrides)
  with checkpoint.Checkpointer(workdir, cfg) as ckpt:
    return ckpt.restore_latest(step_lib.build(cfg).abstract_state())


def _assert_same_run(reference, resumed, overrides, restored_step):
  """The same final state bit for bit, data position, and every logged metric."""
  assert _committed_steps(reference)[-1] == _committed_steps(resumed)[-1] == NUM_STEPS
  leftovers = [p.name for p in (resumed / checkpoint.CHECKPOINT_DIR).iterdir()
               if not p.name.isdigit()]
  assert not leftovers, f"temporary directories left behind: {leftovers}"
  (ref_state, ref_extras), (new_state, new_extras) = (_final(reference, overrides),
                                                      _final(resumed, overrides))
  assert int(new_state.step) == NUM_STEPS
  assert new_extras["data"] == ref_extras["data"]
  ref_leaves = jax.tree_util.tree_leaves_with_path(ref_state)
  new_leaves = jax.tree_util.tree_leaves_with_path(new_state)
  assert len(ref_leaves) == len(new_leaves)
  for (path, ref), (_, new) in zip(ref_leaves, new_leaves):
    np.testing.assert_array_equal(new, ref, err_msg=jax.tree_util.keystr(path))

  ref_metrics, new_metrics = _metrics(reference), _metrics(resumed)
  assert sorted(new_metrics) == list(range(1, NUM_STEPS + 1))
  assert all("train_loss" in record for record in new_metrics.values())
  for step in range(restored_step + 1, NUM_STEPS + 1):
    assert new_metrics[step] == ref_metrics[step], f"step {step}"
  assert ref_metrics == new_metrics  # the lines kept from before the stop match too
  # The same checkpoints are left to average: an interim save does not displace one.
  assert _committed_steps(resumed) == _committed_steps(reference)


def test_killed_run_resumes_exactly(tmp_path, overrides, compilation_cache, reference):
  resumed = tmp_path / "resumed"

  log = tmp_path / "killed.log"
  with open(log, "w") as stderr:  # a file, not a pipe that could fill up and stall the run
    process = subprocess.Popen(_command(overrides, resumed), env=_env(compilation_cache),
                               stdout=subprocess.DEVNULL, stderr=stderr,
                               cwd=pathlib.Path(__file__).parents[2])
    deadline = time.monotonic() + 240
    while len(_committed_steps(resumed)) < 2 and process.poll() is None:
      if time.monotonic() > deadline:
        process.kill()
        pytest.fail("no checkpoint appeared in time")
      time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
  assert process.returncode == -signal.SIGKILL, (
      f"the run ended (rc {process.returncode}) before it could be killed: "
      f"{log.read_text()[-2000:]}")
  killed_at = _committed_steps(resumed)
  assert killed_at and killed_at[-1] < NUM_STEPS

  out = _run(overrides, resumed, compilation_cache)
  restored_step = int(out.split("RESTORED ")[1].split()[0])
  assert restored_step == killed_at[-1] and restored_step % EVERY == 0, (restored_step, killed_at)

  _assert_same_run(reference, resumed, overrides, restored_step)


def test_sigterm_saves_the_step_in_flight_and_resumes_exactly_and_a_second_run_is_refused(
    tmp_path, overrides, compilation_cache, reference):
  resumed, go = tmp_path / "resumed", tmp_path / "go"
  log = tmp_path / "stopped.log"
  with open(log, "w") as stderr:
    process = subprocess.Popen(_command(overrides, resumed, str(go)), env=_env(compilation_cache),
                               stdout=subprocess.PIPE, stderr=stderr, text=True,
                               cwd=pathlib.Path(__file__).parents[2])
    try:
      for line in process.stdout:
        if line.startswith("PAUSED"):
          break
      assert process.poll() is None, log.read_text()[-2000:]
      # A second run on the same work directory is refused, naming the first.
      second = subprocess.run(_command(overrides, resumed), env=_env(compilation_cache),
                              capture_output=True, text=True, timeout=120,
                              cwd=pathlib.Path(__file__).parents[2])
      assert second.returncode == 1
      message = second.stderr.strip().splitlines()[-1]
      assert message.startswith(f"error: {resumed.absolute()} is in use by another run: "
                                f"pid {process.pid} on host "), second.stderr[-2000:]
      process.send_signal(signal.SIGTERM)
      go.touch()
      process.wait(timeout=60)
    finally:
      process.kill()
  err = log.read_text()
  assert process.returncode == 128 + signal.SIGTERM, err[-2000:]
  assert "SIGTERM received: finishing the current step" in err
  assert err.strip().splitlines()[-1] == (
      f"stopped on SIGTERM after step {STOP_STEP}; saved a checkpoint of step {STOP_STEP} in "
      f"{resumed.absolute() / checkpoint.CHECKPOINT_DIR}: run the same command again to resume")
  assert _committed_steps(resumed)[-1] == STOP_STEP
  assert not (resumed / "run.lock").exists()

  out = _run(overrides, resumed, compilation_cache)
  assert f"RESTORED {STOP_STEP}" in out
  _assert_same_run(reference, resumed, overrides, STOP_STEP)


def test_a_garbled_newest_checkpoint_is_set_aside_and_the_run_finishes_from_the_one_before(
    tmp_path, overrides, compilation_cache, reference):
  # A finished run whose newest checkpoint's files are all random bytes (a disk or a
  # copy gone wrong): run again, it sets that step aside and trains it again from the
  # step before, unattended, to the same end as the uninterrupted run.
  resumed = tmp_path / "resumed"
  shutil.copytree(reference, resumed)
  newest = resumed / checkpoint.CHECKPOINT_DIR / str(NUM_STEPS)
  rng = np.random.default_rng(0)
  for path in [p for p in newest.rglob("*") if p.is_file()]:
    path.write_bytes(rng.bytes(max(path.stat().st_size, 16)))

  out = _run(overrides, resumed, compilation_cache)
  assert f"RESTORED {NUM_STEPS - EVERY}" in out
  set_aside = newest.with_name(f"{NUM_STEPS}{checkpoint.CORRUPT_SUFFIX}")
  assert set_aside.is_dir()
  shutil.rmtree(set_aside)  # kept for a person to look at; not part of the run's state
  _assert_same_run(reference, resumed, overrides, NUM_STEPS - EVERY)
