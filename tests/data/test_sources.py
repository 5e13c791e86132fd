"""Reading text pairs: line-aligned files, TSV, the registered sources and their signatures."""

import sys

import pytest

from t2t_jax import configs
from t2t_jax import errors
from t2t_jax.data import sources


def _write(path, lines):
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


def test_reading_errors(tmp_path):
  a = _write(tmp_path / "a.txt", ["one", "two", "three"])
  b = _write(tmp_path / "b.txt", ["eins", "zwei"])
  with pytest.raises(ValueError, match=r"a\.txt has 3 lines but .*b\.txt has 2"):
    sources.read_pairs(f"{a},{b}")
  bad = tmp_path / "bad.txt"
  bad.write_bytes("eins\nzwei\ndr\xc3\n".encode("latin-1"))
  with pytest.raises(ValueError, match=r"bad\.txt: line 3 is not valid UTF-8"):
    sources.read_pairs(f"{a},{bad}")
  tsv = _write(tmp_path / "p.tsv", ["a\tb", "c\u2028d\te"])  # U+2028 is not a line break
  assert sources.read_pairs(tsv) == [("a", "b"), ("c\u2028d", "e")]
  with pytest.raises(ValueError, match=r"line 2 has 3 tab-separated fields"):
    sources.read_pairs(_write(tmp_path / "q.tsv", ["a\tb", "c\td\te"]))
  with pytest.raises(ValueError, match="needs config.dev_files"):
    sources.get_source(configs.get_config("base", dataset="text", train_files=tsv,
                                          test_files=tsv), str(tmp_path))


def test_sources_by_dataset_name_and_signature_follows_the_files(tmp_path):
  a = _write(tmp_path / "a.en", ["one", "two"])
  b = _write(tmp_path / "a.de", ["eins", "zwei"])
  spec = f"{a},{b}"
  cfg = configs.get_config("base", dataset="text", train_files=spec, dev_files=spec,
                           test_files=spec)
  source = sources.get_source(cfg, str(tmp_path))
  assert source.train() == source.test() == [("one", "eins"), ("two", "zwei")]
  before = source.signature
  _write(tmp_path / "a.de", ["eins", "zwei!"])  # changed data must not hit a stale cache
  assert sources.get_source(cfg, str(tmp_path)).signature != before
  assert sources.SOURCES["demo"] is sources.demo_source


def test_text_without_test_files_has_no_test_set(tmp_path):
  spec = f"{_write(tmp_path / 'a.en', ['one'])},{_write(tmp_path / 'a.de', ['eins'])}"
  cfg = configs.get_config("base", dataset="text", train_files=spec, dev_files=spec)
  source = sources.get_source(cfg, str(tmp_path))
  assert source.test() == [] and source.dev() == [("one", "eins")]
  assert set(source.signature) == {"train", "dev"}
  with pytest.raises(ValueError, match="needs config.train_files"):
    sources.get_source(configs.get_config("base", dataset="text", dev_files=spec),
                       str(tmp_path))


def test_a_tfds_dataset_without_the_wmt_extra_says_how_to_install_it(tmp_path, monkeypatch):
  # The package itself has no TensorFlow (a GPU image, a user of the layers): the `wmt` extra.
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)   # import raises ImportError
  source = sources.get_source(configs.get_config("base"), str(tmp_path))
  with pytest.raises(errors.MissingExtraError, match=r"pip install -e '\.\[wmt\]'"):
    source.test()
