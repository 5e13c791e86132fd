"""The one error for a missing extra (setup.py's `wmt`, `export`, `serve`, `accelerators`).

    raise extras.MissingExtraError(f"ctranslate2 is not installed: {extras.install('export')}")

An ImportError, and one of the errors a command reports in one line (cli/exits.py).
"""

from __future__ import annotations


class MissingExtraError(ImportError):
  """A library of an extra is not installed; the message says how to install it."""


def install(extra: str) -> str:
  """The command that installs `extra`."""
  return f"pip install -e '.[{extra}]'"
