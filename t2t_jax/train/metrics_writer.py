"""Where training metrics go: `metrics.jsonl`, TensorBoard events and a log line per record.

    writer = MetricsWriter(workdir, start_step)   # a resumed run drops the lines after it
    writer.write({"step": 100, "train_loss": 2.5, ...})
    writer.close()

Only the main process writes (`enabled=False` elsewhere makes every call a no-op).
`metrics.jsonl` holds one JSON object per record; TensorBoard events go to
`workdir/tb`, one scalar per field, where tensorboardX is installed (a plain
JAX GPU host may lack it: then a warning, and metrics.jsonl alone).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import sys
from typing import Any

log = logging.getLogger("t2t_jax.train.trainer")  # the log lines belong to the training run

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tb"


def truncate(path: str | os.PathLike, last_step: int) -> None:
  """Keeps the lines of steps <= last_step, so a resumed run has no duplicate steps.

  A line cut short by a kill mid-write is dropped too.
  """
  path = pathlib.Path(path)
  if not path.exists():
    return
  kept, damaged = [], 0
  for line in path.read_text(errors="replace").splitlines():
    try:
      if json.loads(line)["step"] <= last_step:
        kept.append(line)
    except (ValueError, KeyError, TypeError):
      damaged += 1
  if damaged:
    log.warning("Dropped %d damaged line(s) of %s (a write cut short by a kill, or a "
                "damaged file); the others are kept", damaged, path)
  tmp = path.with_suffix(".jsonl.tmp")
  tmp.write_text("".join(line + "\n" for line in kept))
  os.replace(tmp, path)


def _summary_writer(directory: str, purge_step: int | None) -> Any:
  """tensorboardX's SummaryWriter, imported without torch; None without tensorboardX.

  tensorboardX imports torch whenever it is installed, only to accept torch
  tensors; this package writes Python floats and never imports torch (seconds
  of start-up, and not our dependency). Imported here, when a run starts
  writing, so that importing the training code stays cheap.
  """
  hidden = "torch" not in sys.modules
  if hidden:
    sys.modules["torch"] = None  # makes `import torch` raise ImportError
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
  except ImportError:
    log.warning("tensorboardX is not installed: no TensorBoard events, metrics go to %s "
                "alone (pip install tensorboardX for them)", METRICS_FILE)
    return None
  finally:
    if hidden:
      del sys.modules["torch"]
  return SummaryWriter(directory, purge_step=purge_step)


class MetricsWriter:
  """Appends records to `workdir/metrics.jsonl` and TensorBoard, and logs each one."""

  def __init__(self, workdir: str | os.PathLike, start_step: int = 0, enabled: bool = True):
    """`start_step`: the step the run resumes from (0: a fresh run; later lines are dropped)."""
    self.path = pathlib.Path(workdir) / METRICS_FILE
    self._enabled = enabled
    self._tb = None
    if enabled:
      truncate(self.path, start_step)
      self._tb = _summary_writer(str(pathlib.Path(workdir) / TENSORBOARD_DIR),
                                 start_step + 1 if start_step else None)

  def write(self, record: dict[str, Any]) -> None:
    """One record: "step" (int) and named numbers."""
    if not self._enabled:
      return
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")
    if self._tb is not None:
      for name, value in record.items():
        if name != "step":
          self._tb.add_scalar(name, value, record["step"])
      self._tb.flush()
    text = ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "step")
    log.info("step %d: %s", record["step"], text)

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
      self._tb = None
