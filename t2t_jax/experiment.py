"""One experiment end to end: data, training, checkpoint averaging, test-set BLEU.

`run(cfg, workdir)` is what `experiments/wmt14_ende.py` (and the En-Fr, Table 3
and notebook code) call. Every stage is resumable: the vocabulary and token
caches are reused, training continues from the latest checkpoint, and a
finished run only re-averages and re-decodes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from typing import Any

import jax

from t2t_jax import checkpoint
from t2t_jax import configs
from t2t_jax import data
from t2t_jax import evaluate
from t2t_jax import train

# Fields that may differ between a run and its resumption: they change how the
# run proceeds, not the shape or meaning of what the checkpoints hold.
_RESUMABLE_FIELDS = {
    "num_train_steps", "log_every_steps", "eval_every_steps", "num_eval_batches",
    "peak_tflops", "checkpoint_every_steps", "checkpoint_every_minutes", "average_last",
    "beam_size", "alpha", "max_decode_extra", "decode_batch_size", "data_dir",
    "max_tokens_per_device",
}


def write_json_atomic(path: pathlib.Path, obj: Any) -> None:
  """Writes `obj` so that a reader never sees half a file, even after a kill."""
  tmp = path.with_suffix(path.suffix + ".tmp")
  tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
  os.replace(tmp, path)


def load_config(workdir: str | os.PathLike) -> configs.TransformerConfig:
  """The config a work directory was trained with (`workdir/config.json`)."""
  path = pathlib.Path(workdir) / "config.json"
  if not path.exists():
    raise FileNotFoundError(
        f"{path} not found: train a model into {workdir} first "
        "(python experiments/wmt14_ende.py --workdir=...)")
  return configs.TransformerConfig(**json.loads(path.read_text()))


def check_or_write_config(cfg: configs.TransformerConfig, workdir: pathlib.Path) -> None:
  """Refuses to resume a work directory with an incompatible config."""
  path = workdir / "config.json"
  if path.exists():
    old = json.loads(path.read_text())
    new = dataclasses.asdict(cfg)
    changed = sorted(k for k in new if k not in _RESUMABLE_FIELDS and old.get(k) != new[k])
    if changed:
      diffs = ", ".join(f"{k}: {old.get(k)!r} -> {new[k]!r}" for k in changed)
      raise SystemExit(
          f"{workdir} holds a run with a different config ({diffs}); "
          "use a new --workdir or the same settings")
  write_json_atomic(path, dataclasses.asdict(cfg))


def run(cfg: configs.TransformerConfig, workdir: str | os.PathLike) -> dict[str, Any]:
  """Trains, averages the last `cfg.average_last` checkpoints, scores the test set.

  Writes `workdir/results.json` and `workdir/test.hyp` and returns the results.
  """
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  check_or_write_config(cfg, workdir)
  start = time.time()

  summary = train.train_and_evaluate(cfg, workdir)

  params = checkpoint.average_checkpoints(workdir, last=cfg.average_last)
  ds = data.prepare(cfg, workdir)
  scores = evaluate.decode_and_score(
      cfg, params, ds.tokenizer, ds.test_sources(), ds.test_references(),
      workdir / "test.hyp")

  names = ("sacrebleu", "sacrebleu_intl", "paper")
  results = {
      "dataset": cfg.dataset,
      "bleu": {name: scores[name]["score"] for name in names},
      "bleu_signatures": {name: scores[name]["signature"] for name in names},
      "dev_perplexity": summary["dev_perplexity"],
      "dev_accuracy": summary["dev_accuracy"],
      "steps": summary["final_step"],
      "averaged_steps": checkpoint.averaged_steps(workdir),
      "train_tokens_per_s": summary["tokens_per_s"],
      "train_wall_time_s": round(summary["wall_time_s"], 1),
      "decode_seconds": scores["decode"]["seconds"],
      "wall_time_s": round(time.time() - start, 1),
      "device_kind": jax.devices()[0].device_kind,
      "num_devices": jax.device_count(),
  }
  write_json_atomic(workdir / "results.json", results)
  return results
