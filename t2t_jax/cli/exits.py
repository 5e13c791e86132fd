"""How a command ends: one line and an exit status for what a user can fix, a traceback
for a bug, and the only places a process is ended at once.

    @exits.command
    def main(argv=None): ...

`command` wraps a script's `main(argv)`: it sets up logging (`flags.setup_logging`),
computes on the CPU on a host without accelerators unless `--device` or
JAX_PLATFORMS says otherwise (`platform.cpu_without_accelerators`), and turns
the errors library code raises on bad input or a failed run (USER_ERRORS:
OSError, ValueError, FloatingPointError, MemoryError, a missing extra, a busy
work directory) into one line on stderr and exit status 1, and a run stopped
by a signal after saving (`preemption.Preempted`) into its one line and exit
status 128 + the signal number. Anything else, RuntimeError included, is a bug
and keeps its traceback. The decisions to end a process at once are taken here,
not in the library: a second stop signal (`preemption.SignalledAgain`); a
failure in a multi-process run, which the other processes are told of
(`multihost.report_failure`) and stop on (`stop_for_peer`, given to
`multihost.initialize`).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
import typing
from typing import Any, Callable, Optional, Sequence

import jax

from t2t_jax import errors
from t2t_jax.cli import flags
from t2t_jax.runtime import multihost
from t2t_jax.runtime import platform
from t2t_jax.runtime import preemption
from t2t_jax.runtime import workdir as workdir_lib

# What a command reports in one line: what the user can fix (the message says how).
USER_ERRORS = (OSError, ValueError, FloatingPointError, MemoryError, errors.MissingExtraError,
               workdir_lib.WorkdirBusyError)


def exit_at_once(line: str, status: int) -> typing.NoReturn:
  """Prints `line` on stderr and ends the process now, running no exit handler.

  A plain exit would wait: JAX's exit handler waits for every process at a
  shutdown barrier while the others may wait for this one inside a collective,
  and orbax's waits for a checkpoint being written.
  """
  print(line, file=sys.stderr, flush=True)
  sys.stdout.flush()
  os._exit(status)  # pylint: disable=protected-access


def fail_together(message: str) -> typing.NoReturn:
  """Ends this process with status 1 after telling the others, which stop within seconds."""
  exit_at_once(f"error: {multihost.report_failure(message)}", 1)


def stop_for_peer(text: str) -> typing.NoReturn:
  """`multihost.initialize`'s `on_peer_failure` for commands: this process stops too."""
  exit_at_once(f"error: stopping process {jax.process_index()} because {text}", 1)


def command(main: Callable[..., Any]) -> Callable[..., Any]:
  """Wraps a script's `main(argv=None)`: logging, and USER_ERRORS as one line + exit status 1."""

  @functools.wraps(main)
  def run(argv: Optional[Sequence[str]] = None, *args: Any, **kwargs: Any) -> Any:
    flags.setup_logging()
    if flags.given_value(sys.argv[1:] if argv is None else argv, "--device") is None:
      platform.cpu_without_accelerators()  # before JAX starts: no plugin's traceback on a CPU host
    try:
      return main(argv, *args, **kwargs)
    except preemption.Preempted as e:
      print(errors.one_line(e), file=sys.stderr, flush=True)
      raise SystemExit(e.exit_code) from None
    except preemption.SignalledAgain as e:
      exit_at_once(f"\n{errors.one_line(e)}", e.exit_code)
    except Exception as e:  # pylint: disable=broad-except
      if multihost.is_multiprocess():
        if not isinstance(e, USER_ERRORS):
          traceback.print_exc()
        fail_together(errors.one_line(e))  # the other processes stop too, within seconds
      if isinstance(e, USER_ERRORS):
        raise SystemExit(f"error: {errors.one_line(e)}") from None
      raise

  def console() -> None:
    """The console script's entry point (setup.py: `module:main.console`): `run()` with its
    value dropped. setuptools' script calls sys.exit(entry()), which would print a
    returned value (t2t-train's results, t2t-compile's figures) and exit with status 1."""
    run()

  run.console = console  # type: ignore[attr-defined]
  return run
