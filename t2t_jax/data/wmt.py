"""WMT14 En-De / En-Fr (section 5.1) through tensorflow-datasets, as (source, target) text.

tfds names the pairs "de-en" and "fr-en"; we translate FROM English, so the source
is the `en` field (config.source_lang) and the target the other one. Splits:
train = `train`; dev = `validation` (newstest2013); test = `test` (newstest2014,
3003 sentences).

tfds writes its examples in a hashed order, so lines do not come back in the
order of the original files; sources and references stay aligned, which is
all BLEU needs.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from t2t_jax import errors

log = logging.getLogger(__name__)

SPLITS = {"train": "train", "dev": "validation", "test": "test"}
NEWSTEST2014_LINES = 3003


def resolve_data_dir(cfg) -> Optional[str]:
  """config.data_dir, else $TFDS_DATA_DIR, else None (tfds's own default)."""
  return cfg.data_dir or os.environ.get("TFDS_DATA_DIR") or None


def _prepare_hint(name: str, data_dir: Optional[str]) -> str:
  where = data_dir or "~/tensorflow_datasets"
  return (f"on a machine with internet run `tfds build {name} --data_dir {where}` "
          f"(or python -c \"import tensorflow_datasets as tfds; "
          f"tfds.builder('{name}', data_dir='{where}').download_and_prepare()\"), "
          f"copy {where} here and point --config.data_dir (or TFDS_DATA_DIR) at it")


def libraries() -> tuple[Any, Any]:
  """(tensorflow, tensorflow_datasets); the `wmt` extra brings them, not the package itself
  (a user of the layers, or a GPU image, has no TensorFlow)."""
  try:
    import tensorflow as tf
    import tensorflow_datasets as tfds
  except ImportError as e:
    raise errors.MissingExtraError(
        f"a tfds dataset needs TensorFlow and tensorflow-datasets ({e}): "
        f"{errors.install('wmt')}, or use --config.dataset=text with your own files") from None
  return tf, tfds


def _first_line(error: BaseException) -> str:
  text = str(error).strip()
  return f"{type(error).__name__}: {text.splitlines()[0][:200]}" if text else type(error).__name__


def _network_errors() -> tuple[type[BaseException], ...]:
  """What a download that cannot reach its server raises (tfds fetches with requests)."""
  import urllib.error
  import requests
  _, tfds = libraries()
  return (ConnectionError, TimeoutError, urllib.error.URLError, requests.ConnectionError,
          requests.Timeout, tfds.download.DownloadError)


def _check_data_dir(data_dir: Optional[str], download: bool) -> None:
  if data_dir is None:
    return
  if os.path.exists(data_dir) and not os.path.isdir(data_dir):
    raise NotADirectoryError(f"data_dir {data_dir} is a file, not a directory; point "
                             "--config.data_dir (or TFDS_DATA_DIR) at the tfds data directory")
  if not download and not os.path.isdir(data_dir):
    raise FileNotFoundError(f"data_dir {data_dir} does not exist; point --config.data_dir "
                            "(or TFDS_DATA_DIR) at the directory the dataset was prepared in")


def _open(name: str, data_dir: Optional[str]):
  """tfds.builder, with an unknown dataset or config said in one line."""
  _, tfds = libraries()
  try:
    return tfds.builder(name, data_dir=data_dir)
  except tfds.core.DatasetNotFoundError:
    raise ValueError(f"unknown tfds dataset {name!r}; use e.g. 'wmt14_translate/de-en', "
                     "'demo' or 'text'") from None
  except ValueError as e:
    if "BuilderConfig" not in str(e):
      raise  # another failure of tfds: its own message
    line = next((l for l in str(e).splitlines() if "BuilderConfig" in l), "")
    raise ValueError(f"tfds dataset {name!r} has no such config ({line.strip()[:200]}); use "
                     "e.g. 'wmt14_translate/de-en' or 'wmt14_translate/fr-en'") from None


def builder(cfg, download: bool = True):
  """The prepared tfds builder for config.dataset; prepares it first when allowed.

  Each failure keeps its own cause in one line: a data_dir that is a file or
  (without download) does not exist: NotADirectoryError / FileNotFoundError; an
  unknown dataset, config or language: ValueError; not prepared and no network
  (or no download allowed): FileNotFoundError saying how to prepare the data
  elsewhere; preparing failed on this machine (disk full, not writable): OSError.
  """
  tf, _ = libraries()
  # TensorFlow only reads files here; keep it off any accelerator JAX uses.
  tf.config.set_visible_devices([], "GPU")
  data_dir = resolve_data_dir(cfg)
  _check_data_dir(data_dir, download)
  b = _open(cfg.dataset, data_dir)
  languages = set(b.info.features.keys()) if hasattr(b.info.features, "keys") else set()
  for lang in (cfg.source_lang, cfg.target_lang):
    if languages and lang not in languages:
      raise ValueError(f"{cfg.dataset} has languages {sorted(languages)}, not {lang!r}; "
                       "set --config.source_lang/--config.target_lang")
  if not b.is_prepared():
    where = data_dir or "the tfds default dir"
    if not download:
      raise FileNotFoundError(f"{cfg.dataset} is not prepared in {where}; "
                              f"{_prepare_hint(cfg.dataset, data_dir)}")
    log.info("Preparing %s in %s (downloads several GB the first time)", cfg.dataset, where)
    try:
      b.download_and_prepare()
    except _network_errors() as e:  # offline, or a mirror is down
      raise FileNotFoundError(f"{cfg.dataset} is not prepared and could not be downloaded "
                              f"({_first_line(e)}); {_prepare_hint(cfg.dataset, data_dir)}"
                              ) from None
    except OSError as e:  # the download worked; writing the dataset here did not
      raise OSError(f"could not prepare {cfg.dataset} in {where} ({_first_line(e)}); free "
                    "space or make it writable, or "
                    f"{_prepare_hint(cfg.dataset, data_dir)}") from None
  return b


def load_pairs(cfg, split: str, download: bool = True) -> list[tuple[str, str]]:
  """All (source, target) pairs of `split` ("train", "dev" or "test")."""
  if split not in SPLITS:
    raise ValueError(f"split={split!r}: use one of {sorted(SPLITS)}")
  tf, tfds = libraries()
  b = builder(cfg, download)
  src_lang, tgt_lang = cfg.source_lang, cfg.target_lang
  pairs = []
  try:
    ds = b.as_dataset(split=SPLITS[split], shuffle_files=False).batch(4096)
    for batch in tfds.as_numpy(ds):
      pairs += zip((s.decode("utf-8") for s in batch[src_lang]),
                   (t.decode("utf-8") for t in batch[tgt_lang]))
  except (tf.errors.NotFoundError, FileNotFoundError) as e:  # a prepared file went missing
    raise FileNotFoundError(
        f"{cfg.dataset} in {b.data_dir} is missing files ({_first_line(e)}); prepare it again: "
        f"{_prepare_hint(cfg.dataset, resolve_data_dir(cfg))}") from None
  if split == "test" and cfg.dataset.startswith("wmt14_translate") and \
      len(pairs) != NEWSTEST2014_LINES:
    log.warning("%s test split has %d pairs, not the %d lines of newstest2014; BLEU will "
                "not be comparable with the paper's", cfg.dataset, len(pairs),
                NEWSTEST2014_LINES)
  log.info("Read %d %s pairs of %s (%s -> %s)", len(pairs), split, cfg.dataset, src_lang,
           tgt_lang)
  return pairs
