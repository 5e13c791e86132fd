"""Fetching Multi30k: every file once, checked by its line count, atomically; one-line errors.

The "server" is a folder of gzipped files read through file:// URLs: nothing here
touches the network.
"""

import gzip

import pytest

from t2t_jax.corpora import multi30k
from t2t_jax.data import sources

SMALL = {"train": ("train", 3), "dev": ("val", 2), "test": ("test_2016_flickr", 1)}


@pytest.fixture
def server(tmp_path, monkeypatch):
  """A folder laid out as the dataset's data/task1/raw/, and `fetch`'s calls counted."""
  monkeypatch.setattr(multi30k, "SPLITS", SMALL)
  root = tmp_path / "raw"
  root.mkdir()
  for stem, lines in SMALL.values():
    for lang in multi30k.LANGUAGES:
      text = "".join(f"{stem} {lang} {i}\n" for i in range(lines))
      (root / f"{stem}.{lang}.gz").write_bytes(gzip.compress(text.encode()))
  calls = []
  download = multi30k._download
  monkeypatch.setattr(multi30k, "_download",
                      lambda url, timeout_s: calls.append(url) or download(url, timeout_s))
  return root.as_uri() + "/", calls


def test_fetches_each_file_once_and_gives_the_pairs(server, tmp_path):
  base_url, calls = server
  specs = multi30k.fetch(tmp_path / "data", base_url)
  assert sorted(specs) == ["dev", "test", "train"]
  assert sources.read_pairs(specs["dev"]) == [("val en 0", "val de 0"), ("val en 1", "val de 1")]
  assert sources.read_pairs(specs["test"]) == [("test_2016_flickr en 0", "test_2016_flickr de 0")]
  assert len(calls) == 6
  assert multi30k.fetch(tmp_path / "data", base_url) == specs   # all there: nothing fetched
  assert len(calls) == 6


def test_an_incomplete_file_is_fetched_again(server, tmp_path):
  base_url, calls = server
  multi30k.fetch(tmp_path / "data", base_url)
  (tmp_path / "data" / "train.de").write_text("train de 0\n")    # a download cut short
  multi30k.fetch(tmp_path / "data", base_url)
  assert calls[6:] == [base_url + "train.de.gz"]
  assert (tmp_path / "data" / "train.de").read_text().count("\n") == 3


def test_errors_name_what_to_do(server, tmp_path):
  base_url, _ = server
  (tmp_path / "raw" / "val.de.gz").unlink()
  with pytest.raises(ValueError, match=r"cannot fetch .*val\.de\.gz .*save it as .*dev\.de") as e:
    multi30k.fetch(tmp_path / "data", base_url)
  assert "\n" not in str(e.value)
  (tmp_path / "raw" / "val.de.gz").write_bytes(gzip.compress(b"only one line\n"))
  with pytest.raises(ValueError, match=r"val\.de\.gz has 1 lines, Multi30k's val\.de has 2"):
    multi30k.fetch(tmp_path / "data", base_url)
  assert not (tmp_path / "data" / "dev.de").exists()             # nothing half-right written
