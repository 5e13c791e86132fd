"""Multi30k English->German end to end: fetch the corpus (corpora/multi30k.py), train the
`multi30k` preset with `t2t-train`, then translate its test set each way a CPU user can
ship the model (float32, int8, bfloat16, each with the lexical shortlist too) and score each
with sacreBLEU.

    argv = multi30k.train_argv("runs/multi30k", corpora.multi30k.fetch("data/multi30k"))
    modes = multi30k.compare_modes("runs/multi30k", "data/multi30k/test.en,data/multi30k/test.de")

(`experiments/multi30k.py` runs the three steps.)
`compare_modes` builds the shortlist from the run's training data where the work
directory has none (`t2t-shortlist`'s defaults), and writes WORKDIR/modes.json: per mode the three BLEU scores, how many test
lines are the same as float32's, and the seconds the whole test set took once its
programs were compiled (best of `repeats`). Every mode reads the same averaged parameters.
"""

from __future__ import annotations

import logging
import os
import pathlib
import time
from typing import Any, Optional, Sequence

from t2t_jax.inference import shortlist
from t2t_jax.data import sources
from t2t_jax.evaluation import bleu as bleu_lib
from t2t_jax.inference import translator as translator_lib
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

# Each mode's keywords for `inference.Translator`.
MODES: dict[str, dict[str, Any]] = {
    "float32": {},
    "int8": {"int8": True},
    "shortlist": {"shortlist": True},
    "int8+shortlist": {"int8": True, "shortlist": True},
    "bfloat16": {"dtype": "bfloat16"},
    "bfloat16+shortlist": {"dtype": "bfloat16", "shortlist": True},
}


def train_argv(workdir: str | os.PathLike, specs: dict[str, str],
               extra: Sequence[str] = ()) -> list[str]:
  """`t2t-train`'s arguments for the `multi30k` preset on the fetched files; `extra`
  (e.g. `--config.num_train_steps=2000`) after them, so they win."""
  return ["--config=multi30k", f"--workdir={workdir}", f"--train={specs['train']}",
          f"--dev={specs['dev']}", f"--test={specs['test']}", *extra]


def compare_modes(workdir: str | os.PathLike, test_spec: str,
                  modes: Optional[Sequence[str]] = None, repeats: int = 2) -> dict[str, Any]:
  """Translates the test set ("src_path,ref_path") in each of `modes` (default: all of
  `MODES`), scores it, writes WORKDIR/test.<mode>.hyp and WORKDIR/modes.json."""
  workdir = pathlib.Path(workdir)
  pairs = sources.read_pairs(test_spec)
  lines, refs = [s for s, _ in pairs], [t for _, t in pairs]
  results: dict[str, Any] = {}
  baseline: Optional[list[str]] = None
  modes = list(modes or MODES)
  unknown = [m for m in modes if m not in MODES]
  if unknown:
    raise ValueError(f"unknown modes {', '.join(unknown)}; choose from {', '.join(MODES)}")
  if any(MODES[m].get("shortlist") for m in modes) and not (workdir / shortlist.FILE).is_file():
    shortlist.build_for_workdir(workdir)       # from the run's own training data
  for mode in modes:
    translator = translator_lib.Translator(workdir, **MODES[mode])
    hyps = translator.translate(lines)                       # compiles; not timed
    seconds = []
    for _ in range(repeats):
      start = time.perf_counter()
      again = translator.translate(lines)
      seconds.append(time.perf_counter() - start)
      if again != hyps:
        raise RuntimeError(f"mode {mode}: a second translation of the test set differs")
    (workdir / f"test.{mode}.hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    baseline = hyps if mode == "float32" else baseline
    scores = bleu_lib.bleu_scores(hyps, refs, translator.cfg.target_lang)
    results[mode] = {
        "bleu": {k: None if v["score"] is None else round(v["score"], 2)
                 for k, v in scores.items()},
        "signature": scores["sacrebleu"]["signature"],
        "seconds": round(min(seconds), 2),
        "same_as_float32": (None if baseline is None
                            else sum(a == b for a, b in zip(hyps, baseline))),
        "lines": len(hyps),
    }
    log.info("%s: sacreBLEU %.2f, %.2f s", mode, scores["sacrebleu"]["score"], min(seconds))
  workdir_lib.write_json_atomic(workdir / "modes.json", results)
  return results
