"""The dataset of a run: vocabulary, cached token ids, raw dev/test text, batches.

`prepare(cfg, workdir)` reads the source named by `cfg.dataset` (data/sources.py),
builds or reloads the vocabulary (data/vocab.py) and the token ids (data/tokenized.py), and
returns a `Dataset` whose `train_iterator` and `dev_batches` come from
data/batching.py:

    {"inputs", "targets"}: int32 [local_devices, accum_steps, micro_batch, length]

Which pairs form a global batch depends only on the config and the epoch, never
on the device count (docs/data.md).
"""

from __future__ import annotations

import logging
import math
import os
from typing import Iterator, Optional

import numpy as np

from t2t_jax.data import batching
from t2t_jax.data import packing
from t2t_jax.data import sources
from t2t_jax.data import tokenized
from t2t_jax.data import vocab as vocab_lib
from t2t_jax.data.batching import BatchIterator, epoch_plan
from t2t_jax.ids import bucket_lengths
from t2t_jax.data.sources import Pairs
from t2t_jax.data.tokenized import TokenizedSplit

log = logging.getLogger(__name__)


def accum_steps(cfg, num_global_devices: int) -> int:
  """Micro-steps per update, so one device sees at most max_tokens_per_device per step."""
  if cfg.max_tokens_per_device is None:
    raise ValueError("max_tokens_per_device=None (fit to the device's memory) must be resolved "
                     "first: memory.resolve_max_tokens_per_device(cfg, ...), or set it")
  return max(1, math.ceil(cfg.tokens_per_batch /
                          (num_global_devices * cfg.max_tokens_per_device)))


class Dataset:
  """Tokenised splits, the tokenizer, raw dev/test text and batching statistics."""

  def __init__(self, cfg, tokenizer: vocab_lib.Tokenizer, splits: dict[str, TokenizedSplit],
               dev_pairs: Pairs, test_pairs: Pairs, counts: dict):
    self.cfg = cfg
    self.tokenizer = tokenizer
    self.train, self.dev, self.test = splits["train"], splits["dev"], splits["test"]
    self._dev_pairs, self._test_pairs = dev_pairs, test_pairs
    self.counts = counts
    self.buckets = bucket_lengths(max(cfg.max_source_length, cfg.max_target_length))
    self.bucket_index = batching.assign_buckets(self.train.src_lengths,
                                                self.train.tgt_lengths, self.buckets)
    # Packed rows: the longest bucket (every pair fits), then halves of it.
    self.pack_lengths = packing.row_lengths(self.buckets[-1]) if cfg.packing else None
    if self.pack_lengths:
      plan_stats = packing.plan_stats(
          self.train.src_lengths, self.train.tgt_lengths,
          {n: batching.rows_per_batch(cfg.tokens_per_batch, n) for n in self.pack_lengths},
          cfg.seed)
    else:
      plan = epoch_plan(self.bucket_index, self.buckets, cfg.tokens_per_batch, cfg.seed, 0)
      plan_stats = batching.plan_stats(self.train, plan, self.buckets, cfg.tokens_per_batch)
    self.stats = {"train_pairs": len(self.train), "dev_pairs": len(self.dev),
                  "test_pairs": len(self.test), **plan_stats}

  def log_stats(self) -> None:
    s = self.stats
    log.info("Data: %d train pairs (%d empty and %d over-long dropped), %d dev, %d test",
             s["train_pairs"], self.counts.get("empty", 0), self.counts.get("too_long", 0),
             s["dev_pairs"], s["test_pairs"])
    log.info("Batches: %d per epoch; shapes [rows, length] %s%s", s["batches_per_epoch"],
             s["batch_shapes"], f"; {s['pairs_per_row']:.2f} pairs per packed row"
             if "pairs_per_row" in s else "")
    log.info("Padding efficiency (real / padded tokens): source %.3f, target %.3f",
             s["padding_efficiency_source"], s["padding_efficiency_target"])
    log.info("Real tokens per batch: source %s, target %s", s["source_tokens_per_batch"],
             s["target_tokens_per_batch"])

  def train_iterator(self, num_devices: int, accum_steps: int = 1, process_index: int = 0,
                     process_count: int = 1, prefetch: int = 2) -> BatchIterator:
    """Batches for `num_devices` local devices (of num_devices * process_count in all)."""
    return BatchIterator(self.train, self.bucket_index, self.buckets,
                         self.cfg.tokens_per_batch, self.cfg.seed, num_devices, accum_steps,
                         process_index, process_count, prefetch, self.pack_lengths)

  def dev_batches(self, num_devices: int, process_index: int = 0, process_count: int = 1,
                  split: str = "dev") -> Iterator[dict[str, np.ndarray]]:
    """The whole split as {"inputs", "targets"} int32 [num_devices, batch, length].

    Same buckets as training but nothing dropped; pairs longer than the last bucket
    go to buckets of cfg.max_len (truncated beyond it, with a warning).
    """
    return batching.eval_batches(self.dev if split == "dev" else self.test, self.buckets,
                                 self.cfg.tokens_per_batch, self.cfg.max_len, num_devices,
                                 process_index, process_count, name=split)

  def dev_sources(self) -> list[str]:
    return [p[0] for p in self._dev_pairs]

  def dev_references(self) -> list[str]:
    return [p[1] for p in self._dev_pairs]

  def test_sources(self) -> list[str]:
    return [p[0] for p in self._test_pairs]

  def test_references(self) -> list[str]:
    return [p[1] for p in self._test_pairs]


def prepare(cfg, workdir: str) -> Dataset:
  """Vocabulary (cached), token ids (cached), raw dev/test text, and batching stats."""
  source = sources.get_source(cfg, workdir)
  train_pairs: Optional[Pairs] = None

  def load_train() -> Pairs:  # read at most once, and only when something needs it
    nonlocal train_pairs
    if train_pairs is None:
      train_pairs = source.train()
    return train_pairs

  tokenizer = vocab_lib.build_or_load(cfg.vocab_size, os.path.join(workdir, "vocab"),
                                      load_train, cfg.vocab_type,
                                      cfg.vocab_sample_sentences, cfg.seed)
  dev_pairs, test_pairs = source.dev(), source.test()
  splits, counts = tokenized.load_or_tokenize(
      tokenizer, os.path.join(workdir, "data"), source.signature, load_train, dev_pairs,
      test_pairs, cfg.max_source_length, cfg.max_target_length)
  if counts["empty"] or counts["too_long"]:
    log.info("Dropped from training: %d pairs with an empty side, %d longer than %d/%d "
             "tokens", counts["empty"], counts["too_long"], cfg.max_source_length,
             cfg.max_target_length)
  ds = Dataset(cfg, tokenizer, splits, dev_pairs, test_pairs, counts)
  ds.log_stats()
  return ds
