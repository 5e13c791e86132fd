"""Multi30k task 1 (Elliott et al., 2016), English-German: a small real parallel corpus
fetched at run time (never stored in this repository).

    specs = multi30k.fetch("data/multi30k")        # {"train": "…/train.en,…/train.de", ...}

29000 training pairs of image descriptions, 1014 dev (`val`), 1000 test (the 2016 Flickr
test set, as most Multi30k papers report). The files come gzipped from the dataset's
own repository (`BASE_URL`); each is checked against its known line count and written
atomically, so an interrupted download is fetched again and a finished one never is.
Where there is no network, put the files there by hand (`fetch`'s error names them).
"""

from __future__ import annotations

import gzip
import os
import pathlib
import urllib.error
import urllib.request

from t2t_jax.data import textio
from t2t_jax.runtime import workdir as workdir_lib

BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"

# split -> (the dataset's file stem, its line count)
SPLITS = {"train": ("train", 29000), "dev": ("val", 1014), "test": ("test_2016_flickr", 1000)}
LANGUAGES = ("en", "de")


def file_names() -> list[str]:
  """The plain-text files `fetch` writes, e.g. "train.en"."""
  return [f"{split}.{lang}" for split in SPLITS for lang in LANGUAGES]


def _download(url: str, timeout_s: float) -> bytes:
  with urllib.request.urlopen(url, timeout=timeout_s) as response:
    return response.read()


def fetch(data_dir: str | os.PathLike, base_url: str = BASE_URL,
          timeout_s: float = 60.0) -> dict[str, str]:
  """Each split's "source_path,target_path" (t2t-train's `--train`/`--dev`/`--test`),
  downloading into `data_dir` whatever is missing or incomplete.

  Raises ValueError (one line naming the files to put there by hand) when a file
  cannot be fetched or has the wrong number of lines.
  """
  data_dir = pathlib.Path(data_dir)
  data_dir.mkdir(parents=True, exist_ok=True)
  for split, (stem, lines) in SPLITS.items():
    for lang in LANGUAGES:
      path = data_dir / f"{split}.{lang}"
      if path.is_file() and textio.count_lines(path) == lines:
        continue
      url = f"{base_url}{stem}.{lang}.gz"
      try:
        text = gzip.decompress(_download(url, timeout_s))
      except (urllib.error.URLError, OSError, EOFError) as e:
        raise ValueError(
            f"cannot fetch {url} ({e}); download Multi30k's data/task1/raw/{stem}.{lang}.gz, "
            f"gunzip it and save it as {path} (files: {', '.join(file_names())})") from None
      got = text.count(b"\n") + (text[-1:] not in (b"\n", b""))   # as textio.count_lines
      if got != lines:
        raise ValueError(f"{url} has {got} lines, Multi30k's {stem}.{lang} has {lines}: "
                         f"check --base_url, or save the right file as {path}")
      workdir_lib.write_bytes_atomic(path, text)
  return {split: f"{data_dir / f'{split}.en'},{data_dir / f'{split}.de'}" for split in SPLITS}
