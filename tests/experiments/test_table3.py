"""experiments/table3.py: two rows end to end on a tiny demo run, ours
beside the paper; its flags' errors; `--param_counts`."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

import scripts  # tests/scripts.py
from t2t_jax import configs
from t2t_jax.configs import count_params, get_config
from t2t_jax.corpora import demo
from t2t_jax.recipes import paper

table3 = scripts.load("table3")

ROOT = pathlib.Path(__file__).resolve().parents[2]

# One layer, tiny widths: rows D3 (eps_ls 0) and E (learned positions) keep their own
# settings, which these overrides do not touch.
TINY = ["--config.num_layers=1", "--config.d_model=32", "--config.d_ff=64",
        "--config.num_heads=2", "--config.vocab_size=200", "--config.vocab_sample_sentences=2000",
        "--config.tokens_per_batch=512", "--config.max_tokens_per_device=512",
        "--config.max_source_length=24", "--config.max_target_length=24",
        "--config.num_eval_batches=1", "--config.beam_size=2", "--config.max_decode_extra=4"]


def test_two_rows_on_demo_data(tmp_path):
  # A small demo corpus where the rows' shared data directory will look for it.
  demo.write_corpus(str(tmp_path / "data" / "demo"), num_train=600, num_dev=8,
                           num_test=8)
  results = table3.main(["--rows=D3,E", "--steps=1", "--dataset=demo",
                         f"--workdir={tmp_path}", *TINY])
  assert [r["row"] for r in results] == ["D3", "E"]

  saved = json.loads((tmp_path / "table3.json").read_text())
  assert saved["dataset"] == "demo"
  for r in saved["rows"]:
    row_cfg = configs.TransformerConfig(**json.loads((tmp_path / r["row"] / "config.json")
                                                     .read_text()))
    assert r["steps"] == 1
    assert r["params_m"] == pytest.approx(configs.count_params(row_cfg) / 1e6)
    assert (r["paper_dev_perplexity"], r["paper_dev_bleu"]) == paper.DEV[r["row"]]
    assert r["dev_perplexity"] > 1.0
    assert 0.0 <= r["dev_bleu"] <= 100.0
    assert len((tmp_path / r["row"] / "dev.hyp").read_text().splitlines()) == 8
  d3, e = (configs.TransformerConfig(**json.loads((tmp_path / row / "config.json").read_text()))
           for row in ("D3", "E"))
  assert (d3.label_smoothing, d3.positional_encoding) == (0.0, "sinusoidal")
  assert (e.label_smoothing, e.positional_encoding) == (0.1, "learned")
  assert d3.vocab_size == e.vocab_size == 200 and d3.dataset == "demo" and d3.num_layers == 1
  # E's learned position tables are the only difference in size.
  assert saved["rows"][1]["params_m"] - saved["rows"][0]["params_m"] == pytest.approx(
      2 * d3.max_len * 32 / 1e6)
  # Both rows used the one shared vocabulary.
  assert (tmp_path / "D3" / "vocab").resolve() == (tmp_path / "vocab").resolve()

  table = (tmp_path / "table3.md").read_text()
  rows = {line.split("|")[1].strip(): line for line in table.splitlines()
          if line.startswith("| D3 ") or line.startswith("| E ")}
  assert "| eps_ls=0.0 |" in rows["D3"] and "| 4.67 |" in rows["D3"] and "| 25.3 |" in rows["D3"]
  assert "| learned positional embedding |" in rows["E"] and "| 4.92 |" in rows["E"]
  assert "| 25.7 |" in rows["E"]

  # A second call finds both rows done and returns them without training.
  again = table3.main(["--rows=D3,E", "--steps=1", "--dataset=demo", f"--workdir={tmp_path}",
                       *TINY])
  assert [r["dev_perplexity"] for r in again] == [r["dev_perplexity"] for r in results]

  # A decoding setting changed: each row decodes its dev set again without training and
  # keeps the time its training took (not the new decoding's).
  greedy = [flag for flag in TINY if not flag.startswith("--config.beam_size=")]
  redecoded = table3.main(["--rows=D3,E", "--steps=1", "--dataset=demo",
                           f"--workdir={tmp_path}", *greedy, "--config.beam_size=1"])
  assert [r["config"]["beam_size"] for r in redecoded] == [1, 1]
  assert all(r["train_wall_time_s"] > 0 for r in results)
  assert [r["train_wall_time_s"] for r in redecoded] == [r["train_wall_time_s"] for r in results]


def test_bad_rows_and_no_rows_end_in_one_line(capsys):
  with pytest.raises(SystemExit, match="unknown --rows"):
    table3.main(["--rows=A9"])
  with pytest.raises(SystemExit):
    table3.main(["--steps=3"])
  assert "give --rows=" in capsys.readouterr().err


def test_param_counts_command_prints_every_row():
  out = subprocess.run([sys.executable, str(ROOT / "experiments" / "table3.py"), "--param_counts"],
                       env=dict(os.environ, PYTHONPATH=str(ROOT)),  # this checkout's package
                       capture_output=True, text=True, check=True).stdout
  rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:]}
  assert list(rows) == ["base", *configs.TABLE3_ROWS, "big"]
  for name, theirs in paper.PARAMS_M.items():
    ours, paper_text, diff = rows[name]
    assert float(paper_text) == theirs
    assert float(ours) == pytest.approx(count_params(get_config(name)) / 1e6, abs=0.05)
    assert abs(float(diff.rstrip("%"))) < 7
  assert rows["A1"][1] == "-"
