"""Two real JAX processes training together through the experiment script (issue 14).

One run of 2 processes x 4 CPU devices, gloo collectives over the loopback:
killed outright (SIGKILL, both processes) once it has checkpointed, restarted,
stopped by a SIGTERM that reaches process 1 only (both must stop after the same
step), restarted again to the end. Its per-step training losses must equal
those of 1 process x 8 devices to float32 tolerance, only process 0 writes the
run's files, and its checkpoint restores in this single process (another
topology) for averaging and decoding.
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import trained
import xla_flags  # tests/xla_flags.py
from t2t_jax.inference import translator
from t2t_jax.runtime import averaging
from t2t_jax.runtime import checkpoint
from t2t_jax.runtime import workdir as workdir_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
NUM_STEPS = 24
EVERY = 4
PAUSE_AT = 14  # process 1 waits after this step's metrics until the test has signalled it

# t2t-train's main; with T2T_TEST_PAUSE=<file>, waits after reading step
# PAUSE_AT's metrics until that file exists.
_DRIVER = """
import os, sys, time
from t2t_jax.cli import train
from t2t_jax.train import trainer
if os.environ.get("T2T_TEST_PAUSE"):
  read_metrics = trainer.Trainer.read_metrics
  def pause(self, step, *args):
    read_metrics(self, step, *args)
    if step == PAUSE_AT:
      print("PAUSED", flush=True)
      while not os.path.exists(os.environ["T2T_TEST_PAUSE"]):
        time.sleep(0.02)
  trainer.Trainer.read_metrics = pause
train.main(sys.argv[1:])
""".replace("PAUSE_AT", str(PAUSE_AT))


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def flags(tmp_path_factory):
  files = trained.write_text_corpus(tmp_path_factory.mktemp("corpus"), 1030, 16, 14)
  fields = dict(dataset="text", **files, vocab_size=300, num_layers=1, d_model=32, d_ff=64,
                num_heads=2, max_len=16, max_source_length=8, max_target_length=8,
                tokens_per_batch=256, max_tokens_per_device=64, dropout_rate=0.1,
                num_train_steps=NUM_STEPS, warmup_steps=8, log_every_steps=1,
                eval_every_steps=1000, num_eval_batches=1, checkpoint_every_steps=EVERY,
                checkpoint_every_minutes="none", average_last=2, beam_size=2,
                max_decode_extra=4)
  return ["--config=demo", *(f"--config.{k}={v}" for k, v in fields.items())]


def _env(devices, cache=None, **extra):
  env = {**os.environ, "XLA_FLAGS": xla_flags.with_devices(devices),
         "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2", **extra}
  # Not the suite's compilation cache: a process must not load what the other compiles, or it
  # reaches the first collective long after it. `cache`: the two processes' own (JAX writes
  # from process 0 only and both read it), so the first start compiles in both and the later
  # ones load in both.
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  env["T2T_JAX_COMPILATION_CACHE"] = str(cache) if cache else "off"
  return env


class _Run:
  """The processes of one start of the run, each with its output in a file."""

  def __init__(self, workdir, flags, name, pause=None):
    self.logs = [workdir.parent / f"{name}.{i}.log" for i in range(2)]
    port = _free_port()
    self.processes = []
    for i, log in enumerate(self.logs):
      extra = {"T2T_TEST_PAUSE": str(pause)} if pause and i == 1 else {}
      with open(log, "w") as out:  # a file: a full pipe would stall the process
        self.processes.append(subprocess.Popen(
            [sys.executable, "-c", _DRIVER, *flags, f"--workdir={workdir}",
             f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
             f"--process_id={i}"],
            env=_env(4, workdir.parent / "jax_cache", **extra), cwd=ROOT, stdout=out,
            stderr=subprocess.STDOUT))

  def output(self, i):
    return self.logs[i].read_text()

  def wait_for(self, condition, what, timeout=300):
    deadline = time.monotonic() + timeout
    while not condition():
      if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
        self.kill()
        pytest.fail(f"{what} did not happen: " + self.output(0)[-3000:] + self.output(1)[-2000:])
      time.sleep(0.005)

  def wait(self, timeout=300):
    try:
      return [p.wait(timeout) for p in self.processes]
    finally:
      self.kill()

  def kill(self):
    for p in self.processes:
      if p.poll() is None:
        p.kill()


def _committed(workdir):
  directory = workdir / checkpoint.CHECKPOINT_DIR
  return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) \
      if directory.is_dir() else []


def _losses(workdir):
  records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  steps = [r["step"] for r in records]
  assert steps == list(range(1, NUM_STEPS + 1)), steps  # written once, by one process
  return np.array([r["train_loss"] for r in records])


def test_two_processes_train_like_one_survive_kills_and_restore_in_one(tmp_path, flags):
  reference = tmp_path / "one_process"
  single = subprocess.run([sys.executable, "-c", _DRIVER, *flags, f"--workdir={reference}"],
                          env=_env(8), cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert single.returncode == 0, single.stderr[-3000:]

  workdir = tmp_path / "two_processes"
  first = _Run(workdir, flags, "first")
  first.wait_for(lambda: len(_committed(workdir)) >= 2, "a second checkpoint")
  for p in first.processes:
    p.send_signal(signal.SIGKILL)
  assert first.wait() == [-signal.SIGKILL] * 2
  killed_at = _committed(workdir)[-1]
  assert killed_at < PAUSE_AT and not (workdir / "results.json").exists()

  # A SIGTERM that reaches process 1 only: both stop after the same step, and save it.
  go = tmp_path / "go"
  second = _Run(workdir, flags, "second", pause=go)
  second.wait_for(lambda: "PAUSED" in second.output(1), "the pause")
  second.processes[1].send_signal(signal.SIGTERM)
  go.touch()
  assert second.wait() == [128 + signal.SIGTERM] * 2, second.output(0)[-3000:]
  stopped = [second.output(i).strip().splitlines()[-1] for i in range(2)]
  assert stopped[0] == stopped[1] and stopped[0].startswith("stopped on SIGTERM after step ")
  stop_step = int(stopped[0].split()[5].rstrip(";"))
  assert PAUSE_AT <= stop_step < NUM_STEPS and _committed(workdir)[-1] == stop_step
  assert f"Resumed from step {killed_at}" in second.output(0)

  third = _Run(workdir, flags, "third")
  assert third.wait() == [0, 0], third.output(0)[-3000:] + third.output(1)[-3000:]
  assert f"Resumed from step {stop_step}" in third.output(0)
  # Only process 0 logs (INFO) and prints the results; process 1 says nothing.
  assert '"bleu"' in third.output(0) and '"bleu"' not in third.output(1)
  assert "Resumed from step" not in third.output(1)

  np.testing.assert_allclose(_losses(workdir), _losses(reference), rtol=2e-5)
  ref_results = json.loads((reference / "results.json").read_text())
  results = json.loads((workdir / "results.json").read_text())
  assert results["num_devices"] == 8 and results["averaged_steps"] == [20, 24]
  assert results["averaged_steps"] == ref_results["averaged_steps"]
  assert len((workdir / "test.hyp").read_text().splitlines()) == 14

  # Another topology: this single process restores the 2-process checkpoints.
  params = averaging.load_params(workdir)  # the average of steps 20 and 24
  ref_params = averaging.load_params(reference)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  cfg = workdir_lib.load_config(workdir)
  tokenizer = translator.load_tokenizer(workdir)
  hyps = translator.Translator.from_params(cfg, params, tokenizer).translate(["the house is small"])
  assert len(hyps) == 1 and hyps[0]
