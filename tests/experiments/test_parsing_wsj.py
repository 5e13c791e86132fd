"""experiments/parsing_wsj.py: a treebank to a trained parser and its F1,
end to end on a tiny run; its flags' errors."""

import json

import pytest

import scripts  # tests/ is on sys.path
import treebanks
from t2t_jax.recipes import parsing
from t2t_jax.recipes import treebank

parsing_wsj = scripts.load("parsing_wsj")


def test_parsing_pipeline_end_to_end(tmp_path):
  treebanks.write_treebank(tmp_path / "treebank", "named")
  workdir = tmp_path / "run"
  out = parsing_wsj.main([
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
  predicted = [treebank.parse_trees(line)[0] for line in
               (workdir / "test.trees").read_text().splitlines()]
  gold = [treebanks.tree(t) for t in treebanks.TREES[2:5]]
  assert [treebank.words(p) for p in predicted] == [treebank.words(g) for g in gold]
  assert json.loads((workdir / "parsing_results.json").read_text())["test"] == scores
  written = json.loads((workdir / "config.json").read_text())
  assert written["beam_size"] == 2   # a flag
  # the command's own default between the preset (256) and the flags
  assert written["max_target_length"] == parsing.SCRIPT_DEFAULTS["max_target_length"]


def test_a_missing_treebank_or_no_files_end_in_one_line(tmp_path, capsys):
  with pytest.raises(SystemExit, match="licensed"):
    parsing_wsj.main([f"--treebank_dir={tmp_path / 'missing'}"])
  with pytest.raises(SystemExit):
    parsing_wsj.main([])
  assert "--treebank_dir" in capsys.readouterr().err
