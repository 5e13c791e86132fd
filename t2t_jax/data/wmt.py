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
from typing import Optional

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


def builder(cfg, download: bool = True):
  """The prepared tfds builder for config.dataset; prepares it first when allowed.

  Raises a one-line FileNotFoundError saying how to prepare the data elsewhere
  when it is not prepared and cannot be downloaded here; ValueError for an
  unknown dataset or language.
  """
  import tensorflow as tf
  import tensorflow_datasets as tfds
  # TensorFlow only reads files here; keep it off any accelerator JAX uses.
  tf.config.set_visible_devices([], "GPU")
  data_dir = resolve_data_dir(cfg)
  try:
    b = tfds.builder(cfg.dataset, data_dir=data_dir)
  except Exception as e:  # unknown name or config: say which
    raise ValueError(f"unknown tfds dataset {cfg.dataset!r} ({type(e).__name__}: "
                     f"{str(e).splitlines()[0] if str(e) else ''}); use e.g. "
                     "'wmt14_translate/de-en', 'demo' or 'text'") from None
  languages = set(b.info.features.keys()) if hasattr(b.info.features, "keys") else set()
  for lang in (cfg.source_lang, cfg.target_lang):
    if languages and lang not in languages:
      raise ValueError(f"{cfg.dataset} has languages {sorted(languages)}, not {lang!r}; "
                       "set --config.source_lang/--config.target_lang")
  if not b.is_prepared():
    if not download:
      raise FileNotFoundError(f"{cfg.dataset} is not prepared in {data_dir or 'the tfds default dir'}"
                       f"; {_prepare_hint(cfg.dataset, data_dir)}")
    log.info("Preparing %s in %s (downloads several GB the first time)", cfg.dataset,
             data_dir or "the tfds default data dir")
    try:
      b.download_and_prepare()
    except Exception as e:  # offline, or a mirror is down: one clear line, no traceback
      reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
      raise FileNotFoundError(f"{cfg.dataset} is not prepared and could not be downloaded "
                       f"({type(e).__name__}: {reason}); {_prepare_hint(cfg.dataset, data_dir)}"
                       ) from None
  return b


def load_pairs(cfg, split: str, download: bool = True) -> list[tuple[str, str]]:
  """All (source, target) pairs of `split` ("train", "dev" or "test")."""
  if split not in SPLITS:
    raise ValueError(f"split={split!r}: use one of {sorted(SPLITS)}")
  import tensorflow_datasets as tfds
  b = builder(cfg, download)
  ds = b.as_dataset(split=SPLITS[split], shuffle_files=False).batch(4096)
  src_lang, tgt_lang = cfg.source_lang, cfg.target_lang
  pairs = []
  for batch in tfds.as_numpy(ds):
    pairs += zip((s.decode("utf-8") for s in batch[src_lang]),
                 (t.decode("utf-8") for t in batch[tgt_lang]))
  if split == "test" and cfg.dataset.startswith("wmt14_translate") and \
      len(pairs) != NEWSTEST2014_LINES:
    log.warning("%s test split has %d pairs, not the %d lines of newstest2014; BLEU will "
                "not be comparable with the paper's", cfg.dataset, len(pairs),
                NEWSTEST2014_LINES)
  log.info("Read %d %s pairs of %s (%s -> %s)", len(pairs), split, cfg.dataset, src_lang,
           tgt_lang)
  return pairs
