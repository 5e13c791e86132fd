"""recipes/parsing.py: treebank files found in either layout, decoded trees scored.

The pipeline end to end, through the command: tests/cli/test_parsing.py.
"""

import pathlib

import pytest

import treebanks  # tests/ is on sys.path
from t2t_jax.recipes import parsing
from t2t_jax.recipes import treebank

GOLD = "(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"


def test_finds_treebank_files_and_scores(tmp_path):
  treebanks.write_treebank(tmp_path / "wsj", "sections")
  files = parsing.find_treebank_files(str(tmp_path / "wsj"))
  assert [pathlib.Path(p).name for p in files["dev"]] == ["22"]
  assert [pathlib.Path(p).name for p in files["test"]] == ["23"]
  assert len(files["train"]) == 20 and pathlib.Path(files["train"][0]).name == "02"
  with pytest.raises(FileNotFoundError, match="licensed"):
    parsing.find_treebank_files(str(tmp_path / "missing"))
  # Scoring decoded strings: gold sequences give 100, a wrong one the partial F1.
  gold = [treebanks.tree(GOLD)]
  assert parsing.score(gold, [treebank.linearize(gold[0])])[0]["f1"] == 100.0
  wrong = "(S (NP XX XX )NP (VP XX (NP XX XX XX )NP )VP XX )S"
  assert parsing.score(gold, [wrong])[0]["f1"] == pytest.approx(2 * 75 * 60 / 135)
