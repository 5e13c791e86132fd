"""WMT14 through the real tfds builder, offline: tiny files in the real formats.

Only the download step is replaced (URL -> a local directory laid out like the
real archive); tfds's own WMT code parses the plain-text corpora and the SGML
test sets and writes the dataset.
"""

import logging
import socket

import pytest

import extras as extras_lib
from t2t_jax import configs
from t2t_jax.data import dataset
from t2t_jax.data import wmt

extras_lib.skip_module_if_missing("wmt", "tensorflow_datasets")
import tensorflow_datasets as tfds  # noqa: E402  (after the skip)
import tree  # noqa: E402  (installed with tensorflow-datasets)

URLS = {
    "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz": "europarl",
    "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz": "commoncrawl",
    "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz": "nc",
    "http://data.statmt.org/wmt19/translation-task/dev.tgz": "dev",
}
TRAIN = [("The house is small.", "Das Haus ist klein."),
         ("Yesterday the man saw the dog.", "Gestern sah der Mann den Hund."),
         ("The child opens the door.", "Das Kind macht die Tür auf."),
         ("Prices rose by 3 %.", "Die Preise stiegen um 3 %."),
         ("I know that he reads the book.", "Ich weiß, dass er das Buch liest.")]


def _sgm(lang, lines, setid="newstest2014"):
  head = [f'<srcset setid="{setid}" srclang="any">',
          '<doc sysid="ref" docid="1012-bbc" genre="news" origlang="en">', "<p>"]
  segs = [f'<seg id="{i}">{text}</seg>' for i, text in enumerate(lines, 1)]
  return "\n".join(head + segs + ["</p>", "</doc>", "</srcset>"]) + "\n"


def _write_archives(root, num_test):
  """Directories laid out like the extracted WMT14 archives (de-en files only)."""
  de = [p[1] for p in TRAIN]
  en = [p[0] for p in TRAIN]
  files = {
      "europarl/training/europarl-v7.de-en.de": "\n".join(de[:3]) + "\n",
      "europarl/training/europarl-v7.de-en.en": "\n".join(en[:3]) + "\n",
      "commoncrawl/commoncrawl.de-en.de": de[3] + "\n",
      "commoncrawl/commoncrawl.de-en.en": en[3] + "\n",
      "nc/training/news-commentary-v9.de-en.de": de[4] + "\n",
      "nc/training/news-commentary-v9.de-en.en": en[4] + "\n",
      "dev/dev/newstest2013.de": "Guten Morgen.\nDer Zug kommt an.\n",
      "dev/dev/newstest2013.en": "Good morning.\nThe train arrives.\n",
      "dev/dev/newstest2014-deen-src.de.sgm": _sgm("de", [f"Satz Nummer {i}." for i in
                                                          range(num_test)]),
      "dev/dev/newstest2014-deen-ref.en.sgm": _sgm("en", [f"Sentence number {i}." for i in
                                                          range(num_test)]),
  }
  for rel, text in files.items():
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def offline(monkeypatch):
  """No network: any socket connection fails the test."""
  def refuse(*args, **kwargs):
    raise AssertionError("the test tried to use the network")
  monkeypatch.setattr(socket.socket, "connect", refuse)
  monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def local_downloads(tmp_path, monkeypatch, offline):
  archives = tmp_path / "archives"
  _write_archives(archives, num_test=4)

  def download_and_extract(self, url_or_urls):
    return tree.map_structure(lambda url: str(archives / URLS[url]), url_or_urls)

  monkeypatch.setattr(tfds.download.DownloadManager, "download_and_extract",
                      download_and_extract)
  return tmp_path


def test_real_builder_over_local_files(local_downloads, caplog):
  cfg = configs.get_config("base", dataset="wmt14_translate/de-en",
                           data_dir=str(local_downloads / "tfds"))
  with caplog.at_level(logging.WARNING, logger="t2t_jax.data.wmt"):
    train = wmt.load_pairs(cfg, "train")
    dev = wmt.load_pairs(cfg, "dev")
    test = wmt.load_pairs(cfg, "test")
  # English is the source, whichever way round tfds names the pair.
  assert sorted(train) == sorted(TRAIN)
  assert sorted(dev) == [("Good morning.", "Guten Morgen."),
                         ("The train arrives.", "Der Zug kommt an.")]
  assert sorted(test) == sorted((f"Sentence number {i}.", f"Satz Nummer {i}.")
                                for i in range(4))
  assert "not the 3003 lines" in caplog.text  # our tiny test set is not newstest2014
  # Now prepared: read again without any download step, and through dataset.prepare.
  monkeypatch_free = wmt.load_pairs(cfg, "dev", download=False)
  assert sorted(monkeypatch_free) == sorted(dev)
  ds = dataset.prepare(cfg.replace(vocab_size=120, tokens_per_batch=256),
                    str(local_downloads / "work"))
  assert len(ds.train) == 5 and sorted(ds.test_references()) == sorted(t for _, t in test)
  assert ds.tokenizer.decode(ds.tokenizer.encode(TRAIN[2][1])) == TRAIN[2][1]
  # A prepared file that went missing is said as such (not "unknown", not "download").
  shards = list((local_downloads / "tfds").rglob("*test.tfrecord*"))
  assert shards
  for shard in shards:
    shard.unlink()
  with pytest.raises(FileNotFoundError) as e:
    wmt.load_pairs(cfg, "test", download=False)
  assert "\n" not in str(e.value) and "is missing files (" in str(e.value)
  assert "prepare it again" in str(e.value)


def test_unprepared_and_offline_gives_one_clear_line(tmp_path, monkeypatch, offline):
  def no_network(self, url_or_urls):
    raise ConnectionError("Failed to resolve 'www.statmt.org'\nmore lines")

  monkeypatch.setattr(tfds.download.DownloadManager, "download_and_extract", no_network)
  cfg = configs.get_config("base", dataset="wmt14_translate/de-en", data_dir=str(tmp_path))
  with pytest.raises(FileNotFoundError) as e:
    wmt.load_pairs(cfg, "test")
  message = str(e.value)
  assert "\n" not in message and "could not be downloaded" in message
  assert f"tfds build wmt14_translate/de-en --data_dir {tmp_path}" in message
  with pytest.raises(FileNotFoundError, match="is not prepared in"):
    wmt.load_pairs(cfg, "test", download=False)
  with pytest.raises(ValueError, match="has languages"):
    wmt.load_pairs(cfg.replace(target_lang="fr"), "test")


def test_each_data_source_failure_keeps_its_cause(tmp_path, monkeypatch, offline):
  def one_line(error_type, cfg, download=True):
    with pytest.raises(error_type) as e:
      wmt.load_pairs(cfg, "test", download=download)
    assert "\n" not in str(e.value)
    return str(e.value)

  cfg = configs.get_config("base", dataset="wmt14_translate/de-en", data_dir=str(tmp_path))
  assert one_line(ValueError, cfg.replace(dataset="no_such_dataset")).startswith(
      "unknown tfds dataset 'no_such_dataset'; use e.g.")
  assert "has no such config (" in one_line(ValueError,
                                            cfg.replace(dataset="wmt14_translate/xx-en"))
  (tmp_path / "a_file").write_text("")
  assert one_line(NotADirectoryError, cfg.replace(data_dir=str(tmp_path / "a_file"))
                  ).startswith(f"data_dir {tmp_path / 'a_file'} is a file, not a directory")
  assert one_line(FileNotFoundError, cfg.replace(data_dir=str(tmp_path / "nowhere")),
                  download=False).startswith(f"data_dir {tmp_path / 'nowhere'} does not exist")

  def disk_full(self, url_or_urls):
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(tfds.download.DownloadManager, "download_and_extract", disk_full)
  message = one_line(OSError, cfg)
  assert message.startswith("could not prepare wmt14_translate/de-en in ")
  assert "No space left on device" in message and "could not be downloaded" not in message

  def bug(self, url_or_urls):
    raise KeyError("a bug in the download code")

  monkeypatch.setattr(tfds.download.DownloadManager, "download_and_extract", bug)
  with pytest.raises(KeyError, match="a bug"):  # not rewritten as a download failure
    wmt.load_pairs(cfg, "test")
