"""How a command logs: INFO lines on stderr with time and module, the libraries' chatter
kept to warnings; `--log_level` / `--quiet` (cli/flags.py adds them to every parser).

    logs.setup_logging()          # exits.command does it before a command's main
    logs.apply_log_level(args)    # the parser does it when it parses
"""

from __future__ import annotations

import argparse
import logging
import sys

LOG_LEVELS = ("debug", "info", "warning", "error")


def apply_log_level(args: argparse.Namespace) -> None:
  """--quiet / --log_level, if given, on the root logger (parse_args does this)."""
  level = "warning" if getattr(args, "quiet", False) else getattr(args, "log_level", None)
  if level is not None:
    logging.getLogger().setLevel(level.upper())


class _StderrHandler(logging.StreamHandler):
  """Writes to whatever `sys.stderr` is when a line is logged (tests replace it)."""

  def __init__(self):
    super().__init__()
    self.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))

  @property
  def stream(self):
    return sys.stderr

  @stream.setter
  def stream(self, _):
    pass


def setup_logging() -> None:
  """INFO lines on stderr with time and module; the libraries' chatter kept to warnings."""
  root = logging.getLogger()
  root.setLevel(logging.INFO)
  if not any(isinstance(h, _StderrHandler) for h in root.handlers):
    # absl's first log call (orbax logs at import) runs a bare logging.basicConfig();
    # ours replaces that handler, so every line is printed once, in one format.
    for handler in list(root.handlers):
      if type(handler) is logging.StreamHandler and handler.stream in (sys.stderr,
                                                                        sys.__stderr__):
        root.removeHandler(handler)
    root.addHandler(_StderrHandler())
  # Orbax reports every save step at INFO through absl; keep its warnings only.
  logging.getLogger("absl").setLevel(logging.WARNING)
  logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "no TPU" notices
