"""English constituency parsing as translation (section 6.3, Table 4) on your Penn Treebank.

The command and its flags (`--treebank_dir` or `--train/--dev/--test`,
`--workdir`): `python experiments/parsing_wsj.py`.

The Penn Treebank is licensed, so nothing here ships it. A treebank directory
holds either
  * files (or directories of files) named train*, dev*, test*, e.g. train.mrg; or
  * the WSJ section directories 00..24 (the `parsed/mrg/wsj` layout of
    LDC99T42): sections 02-21 train, 22 is dev, 23 is test, as in the paper.
Each file holds bracketed trees, any number per file, one or several lines each.

Each sentence becomes a translation pair: its words -> the tree linearised as in
"Grammar as a Foreign Language" with POS tags normalised to XX (see
t2t_jax/recipes/treebank.py). The pairs are written to `<workdir>/treebank/` and trained on
with the `parsing` preset (4 layers, d_model 1024, WSJ-only vocabulary of 16K;
beam 21, alpha 0.3, max output length input + 300) through the same pipeline as
translation (`dataset="text"`). The test set is decoded, every output is turned
back into a tree over its sentence (malformed brackets repaired) and scored with
EVALB-style labelled bracketing F1. Writes `<workdir>/test.trees` and
`<workdir>/parsing_results.json`.

Expected (paper, WSJ only): 91.3 F1 on section 23. Hardware: as base, 8 GPUs.
Trees, linearisation and F1: t2t_jax/recipes/treebank.py; this module is the experiment.
"""

from __future__ import annotations

import logging
import os
import pathlib
import re
from typing import Any, Sequence

from t2t_jax import configs
from t2t_jax.recipes import experiment
from t2t_jax.recipes import paper
from t2t_jax.recipes import treebank
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
# The standard WSJ split (section 6.3: trained on 02-21, tuned on 22, tested on 23).
WSJ_SECTIONS = {"train": [f"{s:02d}" for s in range(2, 22)], "dev": ["22"], "test": ["23"]}
# Script-level defaults between the preset and the command line: linearised trees
# are about three tokens per word, so long sentences need room on the target side.
SCRIPT_DEFAULTS = dict(dataset="text", max_target_length=768)


def find_treebank_files(treebank_dir: str) -> dict[str, list[str]]:
  """{split: paths} for a directory laid out as the module docstring says."""
  root = pathlib.Path(treebank_dir)
  if not root.is_dir():
    raise FileNotFoundError(f"--treebank_dir={treebank_dir} is not a directory; the Penn Treebank is "
                     "licensed and not shipped with this code: point to your own copy")
  entries = sorted(p for p in root.iterdir() if not p.name.startswith("."))
  named = {split: [str(p) for p in entries if p.name.startswith(split)] for split in SPLITS}
  if all(named.values()):
    return named
  sections = {p.name: p for p in entries if p.is_dir() and re.fullmatch(r"\d\d", p.name)}
  if all(s in sections for split in SPLITS for s in WSJ_SECTIONS[split]):
    return {split: [str(sections[s]) for s in WSJ_SECTIONS[split]] for split in SPLITS}
  missing = [split for split in SPLITS if not named[split]]
  raise FileNotFoundError(
      f"{treebank_dir} has no {'/'.join(missing)} files and not the WSJ sections 02-23: "
      "put train*, dev* and test* files there (or pass --train/--dev/--test)")


def write_parallel(trees: Sequence[treebank.Tree], prefix: pathlib.Path) -> str:
  """Writes `prefix.src` (words) and `prefix.tgt` (linearised trees); returns the file spec."""
  src, tgt = prefix.with_suffix(".src"), prefix.with_suffix(".tgt")
  src.write_text("".join(" ".join(treebank.words(t)) + "\n" for t in trees), encoding="utf-8")
  tgt.write_text("".join(treebank.linearize(t) + "\n" for t in trees), encoding="utf-8")
  return f"{src},{tgt}"


def load_split(paths: Sequence[str], split: str) -> list[treebank.Tree]:
  try:
    trees = [treebank.clean(t) for t in treebank.read_treebank(paths)]
  except ValueError as e:
    raise ValueError(f"cannot read the {split} trees: {e}") from None
  if not trees:
    raise ValueError(f"no trees found in the {split} files {list(paths)}")
  return trees


def score(gold: Sequence[treebank.Tree], hypotheses: Sequence[str]) -> tuple[dict, list]:
  """F1 of decoded sequences against the gold trees; also the repaired predicted trees."""
  if len(hypotheses) != len(gold):
    raise ValueError(f"{len(hypotheses)} decoded lines for {len(gold)} test trees")
  predicted = [treebank.delinearize(h, treebank.words(g)) for g, h in zip(gold, hypotheses)]
  return treebank.bracket_f1(gold, predicted), predicted


def run(cfg: configs.TransformerConfig, workdir: str | os.PathLike,
        files: dict[str, Sequence[str]]) -> dict[str, Any]:
  """Converts the treebank, trains, decodes the test set; returns and writes the scores."""
  trees = {split: load_split(files[split], split) for split in SPLITS}
  workdir = pathlib.Path(workdir)
  data_dir = (workdir / "treebank").absolute()  # the config records where the pairs are
  data_dir.mkdir(parents=True, exist_ok=True)
  specs = {split: write_parallel(trees[split], data_dir / split) for split in SPLITS}
  cfg = cfg.replace(dataset="text", train_files=specs["train"], dev_files=specs["dev"],
                    test_files=specs["test"])
  log.info("Treebank: %s trees", {split: len(t) for split, t in trees.items()})

  results = experiment.run(cfg, workdir)
  hypotheses = (workdir / "test.hyp").read_text(encoding="utf-8").split("\n")[:len(trees["test"])]
  scores, predicted = score(trees["test"], hypotheses)
  (workdir / "test.trees").write_text(
      "".join(treebank.to_string(t) + "\n" for t in predicted), encoding="utf-8")
  out = {"test": scores, "trees": {split: len(t) for split, t in trees.items()},
         "paper_f1_wsj_only": paper.PARSING_F1["wsj_only"], "train": results.get("train")}
  workdir_lib.write_json_atomic(workdir / "parsing_results.json", out)
  return out
