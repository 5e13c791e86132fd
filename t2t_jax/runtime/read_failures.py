"""What a failed checkpoint read means: damaged files, a read that failed now, or neither.

Only evidence that the files themselves are damaged may set a checkpoint aside
(docs/checkpoints.md has the rule and what `Checkpointer.restore_latest` does
with each kind). Orbax has no error types of its own for these cases; the kinds
come from Python's exception types, errno and tensorstore's status codes.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import errno
import json
import pathlib
import re
from typing import Iterator, Optional

from t2t_jax.runtime import multihost


def describe(error: BaseException) -> str:
  """One line: the type and the message, without tensorstore's spec, its ends if too long."""
  text = str(error).splitlines()[0] if str(error) else ""
  text = re.sub(r"\s*\[tensorstore_spec='[^']*'\]", "", text)
  if len(text) > 300:  # the cause (e.g. "Permission denied") is at the end
    text = f"{text[:80]} ... {text[-200:]}"
  return f"{type(error).__name__}: {text}"


# What one attempt to restore a step found.
DAMAGED = "damaged"  # the files are wrong or missing: set the step aside, use an older one
UNREADABLE = "unreadable"  # reading failed now (I/O, permissions, memory): retry, then stop
INCOMPATIBLE = "incompatible"  # anything else, e.g. the state's structure or shapes changed

# tensorstore, which reads orbax's arrays, raises ValueError with the absl status code
# first. These codes describe the bytes on disk (missing, short, undecodable) ...
_DAMAGE_CODES = ("DATA_LOSS", "NOT_FOUND", "OUT_OF_RANGE")
# ... and these a read that failed now (EACCES, EIO, EAGAIN, timeouts, ENOMEM, ENOSPC).
_TROUBLE_CODES = ("PERMISSION_DENIED", "UNAVAILABLE", "DEADLINE_EXCEEDED",
                  "RESOURCE_EXHAUSTED", "ABORTED", "CANCELLED")
_STATUS = re.compile(r"\b(" + "|".join(_DAMAGE_CODES + _TROUBLE_CODES) + r"): ")
_FILE = re.compile(r'local file "([^"]+)"')
_OS_ERROR = re.compile(r"os_error_code='(\d+)'")  # tensorstore's errno, where it has one
_MISSING = (errno.ENOENT, errno.ENOTDIR)


def _chain(error: BaseException) -> Iterator[BaseException]:
  while error is not None:
    yield error
    error = error.__cause__ or error.__context__


def classify(error: BaseException) -> str:
  """DAMAGED, UNREADABLE or INCOMPATIBLE (see above) for an error raised by a restore.

  Only evidence about the files counts as damage: a missing file (ENOENT), a
  JSON metadata file that does not decode (as UTF-8 or as JSON), a missing
  item, tensorstore's DATA_LOSS, NOT_FOUND or OUT_OF_RANGE (a truncated array
  file). Any other OSError (also
  one tensorstore reports with its errno), a MemoryError or a timeout is
  UNREADABLE: retried, never set aside.
  """
  for e in _chain(error):
    if isinstance(e, (MemoryError, TimeoutError, concurrent.futures.TimeoutError)):
      return UNREADABLE
    if isinstance(e, OSError):
      missing = isinstance(e, (FileNotFoundError, NotADirectoryError)) or e.errno in _MISSING
      return DAMAGED if missing else UNREADABLE
    if isinstance(e, (json.JSONDecodeError, UnicodeDecodeError)):
      return DAMAGED  # a metadata file that is not JSON, or not even text (garbled bytes)
    if isinstance(e, KeyError) and "was not found in the checkpoint" in str(e):
      return DAMAGED  # orbax: an item directory (e.g. `meta`) is missing
    os_error = _OS_ERROR.search(str(e))
    if isinstance(e, ValueError) and os_error:
      return DAMAGED if int(os_error.group(1)) in _MISSING else UNREADABLE
    status = _STATUS.search(str(e))
    if isinstance(e, ValueError) and status:
      return DAMAGED if status.group(1) in _DAMAGE_CODES else UNREADABLE
  return INCOMPATIBLE


def culprit(error: BaseException, step_dir: pathlib.Path) -> str:
  """The file an error names (the most specific one tensorstore mentions), else `step_dir`."""
  for e in _chain(error):
    if isinstance(e, OSError) and e.filename:
      return str(e.filename)
    files = _FILE.findall(str(e))
    if files:
      return files[-1]
  return str(step_dir)


@dataclasses.dataclass(frozen=True)
class Failure:
  """Why one step did not restore, as every process agrees on it (JSON-able fields)."""
  kind: str
  file: str
  cause: str
  attempts: int
  process: Optional[int] = None  # set in a multi-process run

  def where(self) -> str:
    return "" if self.process is None else f"process {self.process}: "


def pooled(name: str, failure: Optional[Failure]) -> Optional[Failure]:
  """Every process's outcome pooled into one, the same on every process.

  None when every process restored; else the failure that weighs most (a read
  that failed now, then an incompatible state, then damage), the lowest process first.
  """
  mine = json.dumps(None if failure is None else dataclasses.asdict(failure))
  outcomes = [json.loads(text) for text in multihost.gather(name, mine)]
  failures = [(i, f) for i, f in enumerate(outcomes) if f is not None]
  if not failures:
    return None
  weight = {UNREADABLE: 0, INCOMPATIBLE: 1, DAMAGED: 2}
  process, worst = min(failures, key=lambda f: (weight[f[1]["kind"]], f[0]))
  return Failure(**{**worst, "process": process if len(outcomes) > 1 else None})
