"""Errors of the whole package and how an exception becomes a message (its first line).

The one error for a missing extra (setup.py's `wmt`, `export`, `serve`, `accelerators`):

    raise errors.MissingExtraError(f"ctranslate2 is not installed: {errors.install('export')}")

an ImportError, and one of the errors a command reports in one line (cli/exits.py).
"""


class MissingExtraError(ImportError):
  """A library of an extra is not installed; the message says how to install it."""


def install(extra: str) -> str:
  """The command that installs `extra`."""
  return f"pip install -e '.[{extra}]'"


def one_line(error: BaseException) -> str:
  """The first line of `error`'s message, or its type's name when it has none."""
  text = str(error).strip()
  return text.splitlines()[0] if text else type(error).__name__
