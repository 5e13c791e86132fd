"""The config a work directory belongs to, and JSON files that are never half written.

A work directory holds one run: `config.json` (written when the run starts,
checked when it resumes), the vocabulary and token caches (data/dataset.py), the
checkpoints (runtime/checkpoint.py), metrics (train/metrics.py) and results. No JAX.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import tempfile
from typing import Any

from t2t_jax import configs

CONFIG_FILE = "config.json"
TRAIN_FIRST = "train a model there first, or pass the right --workdir"

# Fields that may differ between a run and its resumption: they change how the
# run proceeds, not the shape or meaning of what the checkpoints hold.
RESUMABLE_FIELDS = frozenset({
    "num_train_steps", "log_every_steps", "eval_every_steps", "num_eval_batches",
    "peak_tflops", "checkpoint_every_steps", "checkpoint_every_minutes", "average_last",
    "beam_size", "alpha", "max_decode_extra", "decode_batch_size", "data_dir",
    "max_tokens_per_device", "memory_margin", "parallelism", "compilation_cache",
    "attention_impl",
})


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
  """Writes `data` so that a reader never sees half a file, even after a kill or beside
  another process writing the same path (each writes its own temporary file)."""
  path = pathlib.Path(path)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException:
    pathlib.Path(tmp).unlink(missing_ok=True)
    raise


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
  """Writes `obj` as JSON, atomically (`write_bytes_atomic`)."""
  write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def load_config(workdir: str | os.PathLike) -> configs.TransformerConfig:
  """The config a work directory was trained with (`workdir/config.json`).

  FileNotFoundError when there is none; ValueError when it does not match this
  version's `TransformerConfig` (an unknown field, a value out of range).
  """
  path = pathlib.Path(workdir) / CONFIG_FILE
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: {TRAIN_FIRST}")
  try:
    fields = json.loads(path.read_text())
  except (ValueError, UnicodeDecodeError) as e:
    raise ValueError(f"{path} is damaged ({e}); restore it from a copy, or write it again "
                     "by running the training command with the run's settings") from None
  return configs.from_dict(fields, str(path))


def check_or_write_config(cfg: configs.TransformerConfig, workdir: str | os.PathLike,
                          write: bool = True) -> None:
  """Writes `cfg` as the run's config (if `write`); ValueError if the run there has an
  incompatible one, or if its config.json is damaged."""
  path = pathlib.Path(workdir) / CONFIG_FILE
  if path.exists():
    try:
      old = json.loads(path.read_text())
      if not isinstance(old, dict):
        raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
      raise ValueError(
          f"{path} is damaged ({e}); restore it, or delete it to resume with the config "
          "given now (it must be the run's config: the checkpoints hold its shapes)") from None
    new = dataclasses.asdict(cfg)
    changed = sorted(k for k in new if k not in RESUMABLE_FIELDS and old.get(k) != new[k])
    if changed:
      diffs = ", ".join(f"{k}: {old.get(k)!r} -> {new[k]!r}" for k in changed)
      raise ValueError(
          f"{workdir} holds a run with a different config ({diffs}); "
          "use a new --workdir or the same settings")
  if write:
    write_json_atomic(path, dataclasses.asdict(cfg))
