"""A server in a process of its own, as a user starts it; its address read from its log."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
from typing import Optional, Sequence

from fake_engine import WAIT, request, wait_until

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]

# Lines of at most 6 pieces: with --max_batch 2 they decode in the 2 batch shapes the
# warm-up compiles ([1 or 2 rows, 8 positions]), so the tests pay for no others.
LINES = ["I slept.", "We sleep.", "Do we wait?", "They sing.", "She is rich.", "He plays.",
         "They wait.", "We are big."]
SERVER_FLAGS = ["--max_batch", "2", "--warmup_pieces", "6", "--max_wait_ms", "20"]


@dataclasses.dataclass
class Process:
  proc: subprocess.Popen
  log: list[str]
  address: Optional[tuple[str, int]] = None
  reader: Optional[threading.Thread] = None   # appends the process's stderr to `log`

  def stop(self) -> int:
    """SIGTERM, then the exit status; `log` then holds all the process wrote."""
    if self.proc.poll() is None:
      self.proc.send_signal(signal.SIGTERM)
    try:
      status = self.proc.wait(WAIT)
    except subprocess.TimeoutExpired:
      self.proc.kill()
      raise AssertionError("the server did not stop within WAIT s of SIGTERM:\n"
                           + "".join(self.log[-20:])) from None
    if self.reader is not None:
      self.reader.join(WAIT)
    return status


def _healthy(address) -> bool:
  try:
    return request(address, "GET", "/health")[0] == 200
  except OSError:
    return False


def start(argv: Sequence[str], ready: bool = True) -> Process:
  """Runs `python argv...` from the repository root; waits for its address (and /health 200)."""
  # This checkout's package, also for a script whose own folder comes first on sys.path.
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(
      [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
  proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, stderr=subprocess.PIPE,
                          text=True, stdin=subprocess.DEVNULL)
  process = Process(proc, [])

  def read():
    for line in proc.stderr:
      process.log.append(line)
      found = re.search(r"on http://(127\.0\.0\.1):(\d+)/", line)
      if found and process.address is None:
        process.address = (found.group(1), int(found.group(2)))

  process.reader = threading.Thread(target=read, daemon=True)
  process.reader.start()
  try:
    wait_until(lambda: process.address is not None or proc.poll() is not None, "an address")
    assert process.address is not None, "the server ended:\n" + "".join(process.log[-20:])
    if ready:
      for _ in range(5):   # the first compilation may take minutes on a busy machine
        try:
          wait_until(lambda: _healthy(process.address), "ready")
          break
        except AssertionError:
          assert proc.poll() is None, "the server ended:\n" + "".join(process.log[-20:])
  except BaseException:
    proc.kill()
    raise
  return process
