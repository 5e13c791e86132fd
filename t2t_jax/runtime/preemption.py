"""Stopping cleanly on SIGTERM or Ctrl-C: finish the step, save, stop; a second signal stops now.

Cloud schedulers send SIGTERM some seconds before they take a machine away.
Inside `with StopSignals() as stop:` the first SIGTERM or SIGINT only sets
`stop.requested`; the training loop looks at it after each step, saves a
checkpoint with the data position and raises `Preempted`. A second signal
raises `SignalledAgain` at once, from wherever the main thread is (as Ctrl-C
raises KeyboardInterrupt); nothing here ends the process. A command ends it
then without waiting for anything (cli.py: exit status 128 + signal number): a
checkpoint being written is left unfinished, which the next run ignores (orbax
renames a step into place only when it is complete).

Several hosts must stop at the same step; `requested` is this process's view
only, so a multi-host loop combines it across processes before acting on it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Optional, Sequence

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def signal_name(signum: int) -> str:
  return signal.Signals(signum).name


class Preempted(Exception):
  """A run stopped early on a signal after saving; running it again resumes it.

  `exit_code` is 128 + the signal number, what a shell reports for a process
  ended by that signal, so schedulers that requeue on it still do.
  """

  def __init__(self, message: str, signum: int):
    super().__init__(message)
    self.signum = signum
    self.exit_code = 128 + signum


class SignalledAgain(BaseException):
  """A second stop signal: stop at once without saving.

  A BaseException, as KeyboardInterrupt is, so that no `except Exception` on
  the way up swallows it. `exit_code` is 128 + the signal number.
  """

  def __init__(self, message: str, signum: int):
    super().__init__(message)
    self.signum = signum
    self.exit_code = 128 + signum


class StopSignals:
  """Turns the first SIGTERM/SIGINT into a request to stop; the second raises SignalledAgain.

  Handlers can only be installed from the main thread; elsewhere this does
  nothing (signals keep their usual effect) and says so in the log. The
  previous handlers come back on exit.
  """

  def __init__(self, signals: Sequence[int] = SIGNALS):
    self._signals = tuple(signals)
    self._previous: dict[int, object] = {}
    self.signum: Optional[int] = None

  @property
  def requested(self) -> bool:
    return self.signum is not None

  @property
  def name(self) -> str:
    return signal_name(self.signum) if self.signum is not None else ""

  def _handle(self, signum: int, frame) -> None:  # pylint: disable=unused-argument
    name = signal.Signals(signum).name
    if self.signum is not None:
      self._restore()  # a third signal has its usual effect
      raise SignalledAgain(f"{name} again: exiting at once without saving (the last "
                           "complete checkpoint is kept)", signum)
    self.signum = signum
    os.write(sys.stderr.fileno(),
             f"\n{name} received: finishing the current step, then saving a checkpoint and "
             f"exiting (send {name} again to exit at once)\n".encode())

  def __enter__(self) -> "StopSignals":
    if threading.current_thread() is not threading.main_thread():
      log.info("Not in the main thread: SIGTERM/Ctrl-C stop the run without saving")
      return self
    for signum in self._signals:
      self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def _restore(self) -> None:
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous.clear()

  def __exit__(self, *exc_info) -> None:
    self._restore()
