"""`t2t-export`: both formats from a trained work directory; every failure is one line."""

import sys

import pytest

from t2t_jax.cli import export


def test_missing_extras_give_one_line_telling_how_to_install(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, "transformers", None)   # import now raises ImportError
  monkeypatch.setitem(sys.modules, "ctranslate2", None)
  with pytest.raises(SystemExit, match=r"^error: .*pip install -e '\.\[export\]'$"):
    export.main(["--workdir", str(tmp_path), "--to", "ctranslate2", str(tmp_path / "ct2")])


def test_t2t_export_command_writes_both_formats(extras, trained_workdir, tmp_path, capsys):
  ctranslate2, transformers = extras["ctranslate2"], extras["transformers"]
  export.main(["--workdir", str(trained_workdir), "--to", "ctranslate2",
                   str(tmp_path / "ct2"), "--quantization", "int8"])
  translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
  result = translator.translate_batch([["▁The", "▁dog", "</s>"]], beam_size=2)
  assert result[0].hypotheses[0]
  assert "convert_ids_to_tokens" in capsys.readouterr().err   # how to call it
  export.main(["--workdir", str(trained_workdir), "--to", "huggingface", str(tmp_path / "hf")])
  assert transformers.MarianMTModel.from_pretrained(tmp_path / "hf").config.d_model == 64
  assert "Exported" in capsys.readouterr().err
  with pytest.raises(SystemExit, match="does not exist"):
    export.main(["--workdir", str(tmp_path / "nowhere"), "--to", "huggingface", "x"])
  with pytest.raises(SystemExit) as exit_info:
    export.main(["--workdir", str(trained_workdir), "--to", "huggingface", "x", "--force"])
  assert exit_info.value.code == 2 and "ctranslate2 only" in capsys.readouterr().err
