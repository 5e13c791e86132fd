"""runtime/preemption.py on a real process: the first signal stops after the step, the second at once."""

import pathlib
import signal
import subprocess
import sys
import time

import pytest

from t2t_jax.runtime import preemption

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A command looping over 0.1 s "steps"; on a stop request it "saves" for argv[1] seconds
# and stops. exits.command turns what the library raises into the exit.
_LOOP = """
import sys, time
from t2t_jax.cli import exits
from t2t_jax.runtime import preemption
@exits.command
def main(argv):
  save_seconds = float(argv[0])
  with preemption.StopSignals() as stop:
    for step in range(1, 10_000):
      time.sleep(0.1)
      print("STEP", step, flush=True)
      if stop.requested:
        time.sleep(save_seconds)
        print("SAVED", step, flush=True)
        raise preemption.Preempted(f"stopped at step {step} on {stop.name}", stop.signum)
main(sys.argv[1:])
"""


def _start(save_seconds):
  process = subprocess.Popen([sys.executable, "-c", _LOOP, str(save_seconds)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  first = process.stdout.readline()
  assert first.startswith("STEP"), process.stderr.read()
  return process, first


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_finishes_the_step_saves_and_exits(signum):
  process, first = _start(save_seconds=0.0)
  process.send_signal(signum)
  out, err = process.communicate(timeout=30)
  # The signal may land in step 1, whose STEP line `_start` has already read.
  lines = (first + out).splitlines()
  saved = int(lines[-1].split()[1])
  assert lines[-1] == f"SAVED {saved}" and lines[-2] == f"STEP {saved}", out
  assert process.returncode == 128 + signum
  name = signal.Signals(signum).name
  assert f"{name} received: finishing the current step" in err
  assert f"stopped at step {saved} on {name}" in err


def test_second_signal_exits_at_once_without_saving():
  process, _ = _start(save_seconds=60.0)  # a save that would take a minute
  process.send_signal(signal.SIGTERM)
  time.sleep(0.5)  # the loop is now "saving"
  process.send_signal(signal.SIGTERM)
  out, err = process.communicate(timeout=10)
  assert "SAVED" not in out
  assert process.returncode == 128 + signal.SIGTERM
  assert "SIGTERM again: exiting at once without saving" in err


def test_handlers_are_restored_and_a_thread_leaves_them_alone():
  before = signal.getsignal(signal.SIGTERM)
  with preemption.StopSignals() as stop:
    assert signal.getsignal(signal.SIGTERM) != before
    assert not stop.requested
  assert signal.getsignal(signal.SIGTERM) == before
  import threading
  seen = []
  thread = threading.Thread(target=lambda: seen.append(preemption.StopSignals().__enter__()))
  thread.start()
  thread.join()
  assert signal.getsignal(signal.SIGTERM) == before and seen


def test_a_second_signal_raises_in_the_caller_and_ends_nothing():
  before = signal.getsignal(signal.SIGTERM)
  with pytest.raises(preemption.SignalledAgain) as e:
    with preemption.StopSignals() as stop:
      signal.raise_signal(signal.SIGTERM)
      assert stop.requested
      signal.raise_signal(signal.SIGTERM)
      pytest.fail("the second signal did not interrupt the caller")
  assert e.value.exit_code == 128 + signal.SIGTERM and "SIGTERM again" in str(e.value)
  assert signal.getsignal(signal.SIGTERM) == before  # this process goes on, as it was
