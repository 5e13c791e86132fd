"""Two real JAX processes on the loopback: waiting for process 0, agreeing, failing together.

The training run across processes (loss agreement, kill and resume, another
topology restoring the checkpoint) is tests/test_multihost_training.py.
"""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import xla_flags  # tests/xla_flags.py

from t2t_jax.runtime import multihost

ROOT = pathlib.Path(__file__).parents[2]

# argv: mode ("fail" or "loop"), a scratch directory. The coordinator, the process
# count and the process id come from the environment, as a launcher would set them.
_DRIVER = """
import pathlib, sys, time
from t2t_jax.cli import exits
from t2t_jax.runtime import multihost
multihost.initialize(heartbeat_timeout_s=int(sys.argv[3]), on_peer_failure=exits.stop_for_peer)
import jax, jax.numpy as jnp
mode, scratch = sys.argv[1], pathlib.Path(sys.argv[2])
me = jax.process_index()

def build():  # slow on purpose: the other process must wait, not read a half-built file
  time.sleep(1.0)
  (scratch / "built").write_text(f"by {me}")
  return "built"
result = multihost.main_first("build", build if me == 0 else lambda: (scratch / "built").read_text())
print("main_first", result, flush=True)
print("agree", multihost.agree("who", lambda: f"process {me}"), flush=True)

psum = jax.pmap(lambda x: jax.lax.psum(x, "batch"), axis_name="batch")
total = psum(jnp.full(jax.local_device_count(), me + 1.0))
print("psum", float(total[0]), jax.device_count(), flush=True)
print("ready", flush=True)

@exits.command  # ends every process when one fails; the library only raises
def loop(argv):
  for step in range(10**9):
    if mode == "fail" and me == 1 and step == 3:
      raise OSError("disk full")
    psum(jnp.ones(jax.local_device_count())).block_until_ready()
    time.sleep(0.05)
loop([])
"""


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(mode, scratch, heartbeat_s):
  port = free_port()
  processes = []
  for i in range(2):
    env = {**os.environ, "XLA_FLAGS": xla_flags.with_devices(2),
           "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
           multihost.ENV_COORDINATOR: f"127.0.0.1:{port}", multihost.ENV_NUM_PROCESSES: "2",
           multihost.ENV_PROCESS_ID: str(i)}
    log = open(scratch / f"{mode}.{i}.log", "w")  # a file: a full pipe would stall the process
    processes.append(subprocess.Popen(
        [sys.executable, "-c", _DRIVER, mode, str(scratch), str(heartbeat_s)],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
  return processes


def _output(scratch, mode, i):
  return (scratch / f"{mode}.{i}.log").read_text()


def _wait_ready(processes, scratch, mode, timeout=120):
  deadline = time.monotonic() + timeout
  while not all("ready" in _output(scratch, mode, i) for i in range(2)):
    if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
      for p in processes:
        p.kill()
      pytest.fail("the processes did not get ready: " + _output(scratch, mode, 0)[-3000:])
    time.sleep(0.1)


def _expect_exit_within(process, timeout):
  try:
    process.wait(timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    pytest.fail(f"the surviving process still ran {timeout} s after the other one ended")


def test_processes_wait_for_process_0_agree_and_stop_together_on_a_failure(tmp_path):
  processes = _start("fail", tmp_path, heartbeat_s=100)
  _wait_ready(processes, tmp_path, "fail")
  for i in range(2):
    out = _output(tmp_path, "fail", i)
    assert "main_first built" in out if i == 0 else "main_first by 0" in out
    assert "agree process 0" in out
    assert "psum 6.0 4" in out  # 1 + 1 + 2 + 2: two devices per process
  processes[1].wait(60)
  # The failed process names itself; the other stops within seconds (not the 100 s
  # heartbeat timeout, nor JAX's 300 s shutdown barrier) and says why.
  _expect_exit_within(processes[0], timeout=30)
  assert processes[1].returncode == 1
  assert "error: process 1 failed: disk full" in _output(tmp_path, "fail", 1)
  assert processes[0].returncode == 1
  assert "stopping process 0 because process 1 failed: disk full" in _output(tmp_path, "fail", 0)


def test_a_killed_process_stops_the_others_after_the_heartbeat_timeout(tmp_path):
  heartbeat_s = 5
  processes = _start("loop", tmp_path, heartbeat_s=heartbeat_s)
  _wait_ready(processes, tmp_path, "loop")
  processes[1].send_signal(signal.SIGKILL)
  processes[1].wait()
  _expect_exit_within(processes[0], timeout=heartbeat_s + 60)
  assert processes[0].returncode != 0
  # Whichever notices first: the coordination service missing the heartbeats, or the next
  # collective's connection to the killed process breaking (gloo's read fails; the command
  # then ends this process as for any failure).
  out = _output(tmp_path, "loop", 0)
  assert "another task died" in out or (
      "Connection reset by peer" in out and "error: process 0 failed:" in out), out[-3000:]


def test_bad_process_settings_fail_with_the_value():
  with pytest.raises(ValueError, match=r"process_id=2 must be in \[0, 2\)"):
    multihost.initialize("127.0.0.1:1", 2, 2)
  with pytest.raises(ValueError, match="num_processes=0 must be at least 1"):
    multihost.initialize("127.0.0.1:1", 0, 0)


# argv: a work directory with checkpoints of steps 2, 4 and 6, and the fault process 1
# alone meets when it reads step 6: "unreadable" (EIO, every attempt) or "damaged".
_RESTORE_DRIVER = """
import errno, pathlib, sys
from t2t_jax.runtime import multihost
multihost.initialize()
import jax, orbax.checkpoint as ocp
from t2t_jax import configs
from t2t_jax.runtime import checkpoint
workdir, fault = pathlib.Path(sys.argv[1]), sys.argv[2]
if jax.process_index() == 1:
  restore = ocp.StandardCheckpointHandler.restore
  def failing(handler, directory, *args, **kwargs):
    if pathlib.Path(directory).parent.name == "6":
      if fault == "unreadable":
        raise OSError(errno.EIO, "Input/output error", str(directory))
      raise ValueError('DATA_LOSS: Error reading local file "' + str(directory) + '/d/1"')
    return restore(handler, directory, *args, **kwargs)
  ocp.StandardCheckpointHandler.restore = failing
cfg = configs.get_config("demo", checkpoint_every_steps=None, checkpoint_every_minutes=None)
ckpt = checkpoint.Checkpointer(workdir, cfg, retry_delays_s=(0,))
try:
  _, extras = ckpt.restore_latest({"w": jax.ShapeDtypeStruct((3,), "float32")})
  print("restored step", extras["step"], flush=True)
except checkpoint.CheckpointUnreadableError as e:
  print("stopped:", e, flush=True)
ckpt.close()
multihost.barrier("done")
print("done", flush=True)
"""


@pytest.mark.parametrize("fault", ["unreadable", "damaged"])
def test_processes_restore_the_same_step_when_only_one_fails_to_read_it(tmp_path, fault):
  from t2t_jax import configs  # pylint: disable=g-import-not-at-top
  from t2t_jax.runtime import checkpoint  # pylint: disable=g-import-not-at-top
  cfg = configs.get_config("demo", checkpoint_every_steps=None, checkpoint_every_minutes=None)
  with checkpoint.Checkpointer(tmp_path, cfg) as ckpt:
    for step in (2, 4, 6):
      ckpt.maybe_save(step, {"w": np.full(3, step, np.float32)}, {"step": step}, force=True)
  port = free_port()
  processes = []
  for i in range(2):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
           multihost.ENV_COORDINATOR: f"127.0.0.1:{port}", multihost.ENV_NUM_PROCESSES: "2",
           multihost.ENV_PROCESS_ID: str(i)}
    processes.append(subprocess.Popen(
        [sys.executable, "-c", _RESTORE_DRIVER, str(tmp_path), fault], env=env, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  outputs = [p.communicate(timeout=180)[0] for p in processes]
  lines = [[line for line in out.splitlines() if line.startswith(("restored", "stopped"))]
           for out in outputs]
  # Both passed the same barriers and ended, with the same outcome.
  assert [p.returncode for p in processes] == [0, 0], outputs
  assert all("done" in out for out in outputs), outputs
  assert len(lines[0]) == 1 and lines[0] == lines[1], outputs
  steps = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
  if fault == "unreadable":
    assert lines[0][0].startswith("stopped: process 1: could not read checkpoint step 6 (")
    assert "Input/output error" in lines[0][0] and "nothing was moved" in lines[0][0]
    assert steps == ["2", "4", "6"]
  else:
    assert lines[0] == ["restored step 4"]
    assert steps == ["2", "4", "6.corrupt"]
