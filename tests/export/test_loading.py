"""What every export loads: the vocabulary by id, and the export libraries only when asked."""

import subprocess
import sys

import pytest

from t2t_jax import errors
from t2t_jax.data import vocab
from t2t_jax.export import loading


def test_core_modules_never_import_the_export_libraries():
  code = ("import sys; import t2t_jax.export.huggingface, t2t_jax.export.ctranslate2, "
          "t2t_jax.export.exported_search, t2t_jax.cli.export, t2t_jax.cli.translate, "
          "t2t_jax.decoding.batch_decoder, t2t_jax.runtime.checkpoint, t2t_jax.model.transformer\n"
          "loaded = {'torch', 'transformers', 'ctranslate2', 'safetensors'} & set(sys.modules)\n"
          "assert not loaded, loaded")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
  assert result.returncode == 0, result.stderr[-2000:]


def test_a_missing_library_names_the_extra(monkeypatch):
  monkeypatch.setitem(sys.modules, "ctranslate2", None)   # import now raises ImportError
  with pytest.raises(errors.MissingExtraError, match=r"pip install -e '\.\[export\]'"):
    loading.require("ctranslate2")


def test_vocabulary_lists_the_pieces_then_placeholders(trained_workdir):
  spm = str(trained_workdir / "vocab" / "spm.model")
  pieces = vocab.Tokenizer(spm).vocab_size
  tokens = loading.vocabulary(spm, pieces + 3)
  assert tokens[:3] == ["<pad>", "</s>", "<unk>"]
  assert tokens[pieces:] == [f"<unused{i}>" for i in range(pieces, pieces + 3)]
  assert len(set(tokens)) == len(tokens)
  with pytest.raises(ValueError, match="inconsistent"):
    loading.vocabulary(spm, pieces - 1)
