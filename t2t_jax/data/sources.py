"""Where the text pairs come from: one source per `config.dataset`.

    "demo"   the generated corpus (corpora/demo/), written once into WORKDIR/data/demo
    "text"   the user's files: config.{train,dev,test}_files, each "src_path,tgt_path"
             (line-aligned) or one .tsv path; without test_files there is no test set
    other    a tfds name such as "wmt14_translate/de-en" (data/wmt.py; imports TensorFlow)

A `Source` loads each split's (source, target) text on demand and carries a
signature (file paths, sizes and mtimes, or the tfds name and data dir) that
keys the token cache, so changed data is never served from a stale cache.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Callable, Optional

from t2t_jax.data import textio
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

Pairs = list[tuple[str, str]]


@dataclasses.dataclass
class Source:
  """Each split's pairs, loaded when called; `signature` keys the token cache."""
  train: Callable[[], Pairs]
  dev: Callable[[], Pairs]
  test: Callable[[], Pairs]
  signature: dict


def read_pairs(spec: str) -> Pairs:
  """Pairs from "src_path,tgt_path" (line-aligned files) or from one .tsv path."""
  if spec.endswith(".tsv") and "," not in spec:
    pairs = []
    for number, line in enumerate(textio.read_lines(spec), 1):
      fields = line.split("\t")
      if len(fields) != 2:
        raise ValueError(f"{spec}: line {number} has {len(fields)} tab-separated fields; "
                         "each line must be 'source<TAB>target'")
      pairs.append((fields[0], fields[1]))
    return pairs
  paths = spec.split(",")
  if len(paths) != 2:
    raise ValueError(f"bad file spec {spec!r}: use 'source_path,target_path' or a .tsv path")
  src, tgt = textio.read_lines(paths[0]), textio.read_lines(paths[1])
  if len(src) != len(tgt):
    raise ValueError(f"{paths[0]} has {len(src)} lines but {paths[1]} has {len(tgt)}; "
                     "source and target files must be line-aligned")
  return list(zip(src, tgt))


def _file_signature(spec: str) -> list:
  return [[os.path.abspath(p), os.path.getsize(p), os.stat(p).st_mtime_ns]
          for p in spec.split(",") if os.path.exists(p)]


def _files(specs: dict[str, Optional[str]]) -> Source:
  """Each split read from its spec; a split without one (test only) has no pairs."""
  def reader(split: str) -> Callable[[], Pairs]:
    return lambda: read_pairs(specs[split]) if specs[split] else []
  return Source(train=reader("train"), dev=reader("dev"), test=reader("test"),
                signature={split: _file_signature(spec) for split, spec in specs.items()
                           if spec})


def text_source(cfg, workdir: str) -> Source:
  del workdir  # the files are wherever the config says
  specs = {"train": cfg.train_files, "dev": cfg.dev_files, "test": cfg.test_files}
  missing = [f"{split}_files" for split in ("train", "dev") if not specs[split]]
  if missing:
    raise ValueError(f"dataset='text' needs config.{', config.'.join(missing)} "
                     "('src_path,tgt_path' or a .tsv path; t2t-train: --train, --dev)")
  return _files(specs)


def demo_source(cfg, workdir: str) -> Source:
  """The demo corpus in WORKDIR/data/demo, generated there (seeded by cfg.seed) if absent.

  Damaged files (checked against the checksums written with them) are generated
  again, with a warning: the generator is deterministic.
  """
  from t2t_jax.corpora import demo  # the generator: only when the demo corpus is asked for
  directory = os.path.join(workdir, "data", "demo")
  # Processes sharing the work directory write it once; the others wait for it.
  with workdir_lib.file_lock(os.path.join(directory, ".locks", "corpus"),
                              f"writing the demo corpus into {directory}"):
    paths = demo.corpus_paths(directory)
    if paths is None:
      start = time.time()
      paths = demo.write_corpus(directory, seed=cfg.seed)
      log.info("Wrote the demo corpus to %s in %.1f s", directory, time.time() - start)
  return _files({split: ",".join(p) for split, p in paths.items()})


def tfds_source(cfg, workdir: str) -> Source:
  del workdir  # tfds keeps its data in config.data_dir
  from t2t_jax.data import wmt  # imports TensorFlow: only when a tfds dataset is asked for
  return Source(
      train=lambda: wmt.load_pairs(cfg, "train"), dev=lambda: wmt.load_pairs(cfg, "dev"),
      test=lambda: wmt.load_pairs(cfg, "test"),
      signature={"tfds": cfg.dataset, "data_dir": wmt.resolve_data_dir(cfg),
                 "source": cfg.source_lang, "target": cfg.target_lang})


SOURCES: dict[str, Callable[..., Source]] = {"demo": demo_source, "text": text_source}


def get_source(cfg, workdir: str) -> Source:
  """The source named by cfg.dataset; any name not in SOURCES is a tfds dataset."""
  return SOURCES.get(cfg.dataset, tfds_source)(cfg, workdir)
