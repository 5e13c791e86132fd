"""recipes/parsing.py: a treebank to a trained parser and its F1, end to end on a tiny run."""

import json
import pathlib

import pytest

from t2t_jax.recipes import parsing as parsing_experiment
from t2t_jax.recipes import treebank as parsing

GOLD = "(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"


def tree(text):
  return parsing.clean(parsing.parse_trees(text)[0])


# A handful of WSJ-style trees (root wrappers, function tags, a trace) for the pipeline.
TREES = [
    "( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (PP-LOC (IN on) (NP (DT the) (NN mat)))) (. .)) )",
    "( (S (NP-SBJ (PRP It)) (VP (VBD rained)) (. .)) )",
    "( (S (NP-SBJ (NNP John)) (VP (VBZ likes) (NP (JJ red) (NNS apples))) (. .)) )",
    "( (S (NP-SBJ-1 (NNS Dogs)) (VP (VBP want) (S (NP-SBJ (-NONE- *-1)) (VP (TO to) "
    "(VP (VB run))))) (. .)) )",
    "( (S (NP-SBJ (DT A) (NN man)) (VP (VBD saw) (NP (DT a) (NN dog)) (PP (IN with) "
    "(NP (DT a) (NN telescope)))) (. .)) )",
    "( (S (NP-SBJ (PRP She)) (VP (VBD gave) (NP (PRP him)) (NP (DT a) (NN book))) (. .)) )",
]


def _write_treebank(directory, layout):
  directory.mkdir()
  if layout == "named":
    (directory / "train.mrg").write_text("\n".join(TREES * 3) + "\n")
    (directory / "dev.mrg").write_text("\n".join(TREES[:2]) + "\n")
    (directory / "test.mrg").write_text("\n".join(TREES[2:5]) + "\n")
  else:  # WSJ sections 00..24, one file each
    for section in range(25):
      (directory / f"{section:02d}").mkdir()
      (directory / f"{section:02d}" / f"wsj_{section:02d}01.mrg").write_text(
          TREES[section % len(TREES)] + "\n")


def test_parsing_pipeline_end_to_end(tmp_path):
  _write_treebank(tmp_path / "treebank", "named")
  workdir = tmp_path / "run"
  out = parsing_experiment.main([
      f"--treebank_dir={tmp_path / 'treebank'}", f"--workdir={workdir}",
      "--config.num_layers=1", "--config.d_model=32", "--config.d_ff=64",
      "--config.num_heads=2", "--config.vocab_size=80", "--config.num_train_steps=1",
      "--config.tokens_per_batch=512", "--config.max_tokens_per_device=512",
      "--config.warmup_steps=10", "--config.checkpoint_every_steps=1",
      "--config.checkpoint_every_minutes=none", "--config.eval_every_steps=1",
      "--config.log_every_steps=1", "--config.average_last=1", "--config.beam_size=2",
      "--config.max_decode_extra=20"])
  scores = out["test"]
  assert scores["sentences"] == 3 and 0.0 <= scores["f1"] <= 100.0
  assert out["trees"] == {"train": 18, "dev": 2, "test": 3}
  # The training pairs are sentence -> linearised cleaned tree.
  src = (workdir / "treebank" / "train.src").read_text().splitlines()
  tgt = (workdir / "treebank" / "train.tgt").read_text().splitlines()
  assert src[3] == "Dogs want to run ."
  assert tgt[3] == "(S (NP XX )NP (VP XX (S (VP XX (VP XX )VP )VP )S )VP XX )S"
  # Every decoded line became a tree over exactly its sentence.
  predicted = [parsing.parse_trees(line)[0] for line in
               (workdir / "test.trees").read_text().splitlines()]
  gold = [tree(t) for t in TREES[2:5]]
  assert [parsing.words(p) for p in predicted] == [parsing.words(g) for g in gold]
  assert json.loads((workdir / "parsing_results.json").read_text())["test"] == scores
  assert json.loads((workdir / "config.json").read_text())["beam_size"] == 2


def test_parsing_script_finds_files_and_scores(tmp_path, capsys):
  _write_treebank(tmp_path / "wsj", "sections")
  files = parsing_experiment.find_treebank_files(str(tmp_path / "wsj"))
  assert [pathlib.Path(p).name for p in files["dev"]] == ["22"]
  assert [pathlib.Path(p).name for p in files["test"]] == ["23"]
  assert len(files["train"]) == 20 and pathlib.Path(files["train"][0]).name == "02"
  with pytest.raises(SystemExit, match="licensed"):
    parsing_experiment.main([f"--treebank_dir={tmp_path / 'missing'}"])
  with pytest.raises(SystemExit):
    parsing_experiment.main([])
  assert "--treebank_dir" in capsys.readouterr().err
  # Scoring decoded strings: gold sequences give 100, a wrong one the partial F1.
  gold = [tree(GOLD)]
  assert parsing_experiment.score(gold, [parsing.linearize(gold[0])])[0]["f1"] == 100.0
  wrong = "(S (NP XX XX )NP (VP XX (NP XX XX XX )NP )VP XX )S"
  assert parsing_experiment.score(gold, [wrong])[0]["f1"] == pytest.approx(2 * 75 * 60 / 135)
