"""The Multi30k recipe's parts (the whole of it, fetch to modes.json: tests/cli/test_multi30k.py)."""

import pytest

from t2t_jax.recipes import multi30k


def test_train_argv_runs_the_preset_on_the_fetched_files_with_the_callers_flags_last():
  specs = {"train": "t.en,t.de", "dev": "v.en,v.de", "test": "x.en,x.de"}
  argv = multi30k.train_argv("runs/m", specs, ["--config=demo", "--config.num_train_steps=5"])
  assert argv[:5] == ["--config=multi30k", "--workdir=runs/m", "--train=t.en,t.de",
                      "--dev=v.en,v.de", "--test=x.en,x.de"]
  assert argv[5:] == ["--config=demo", "--config.num_train_steps=5"]   # argparse: last wins


def test_unknown_modes_are_refused_in_one_line_before_any_model_loads(tmp_path):
  (tmp_path / "t.en").write_text("a\n")
  (tmp_path / "t.de").write_text("b\n")
  spec = f"{tmp_path / 't.en'},{tmp_path / 't.de'}"
  with pytest.raises(ValueError, match=r"unknown modes fp16, int4; choose from float32, int8, "
                                       r"shortlist, int8\+shortlist, bfloat16, "
                                       r"bfloat16\+shortlist$"):
    multi30k.compare_modes(tmp_path / "no_run", spec, ["float32", "fp16", "int4"])
