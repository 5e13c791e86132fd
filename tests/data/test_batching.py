"""Batching on synthetic ragged ids (no vocabulary): padded rows, shapes, evaluation batches."""

import logging

import numpy as np
import pytest

from t2t_jax.data import batching
from t2t_jax.data.tokenized import TokenizedSplit


def _split(src_lengths, tgt_lengths):
  """Pair i's tokens are 3 + i (never 0, so no token looks like padding)."""

  def side(lengths):
    ids = np.concatenate([np.full(n, 3 + i, np.int32) for i, n in enumerate(lengths)])
    return ids, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
  return TokenizedSplit(*side(src_lengths), *side(tgt_lengths))


@pytest.mark.parametrize("tokens_per_batch, length, divisor",
                         [(480, 8, 1), (480, 8, 8), (480, 48, 8), (100, 96, 16), (4096, 12, 6)])
def test_padded_rows_is_the_budget_rounded_up_to_the_divisor(tokens_per_batch, length, divisor):
  rows = batching.rows_per_batch(tokens_per_batch, length)
  padded = batching.padded_rows(tokens_per_batch, length, divisor)
  assert rows == max(1, tokens_per_batch // length)
  assert padded % divisor == 0 and rows <= padded < rows + divisor
  assert batching.padded_rows(tokens_per_batch, length) == rows


def test_iterator_shapes_match_the_batches_it_yields():
  rng = np.random.default_rng(0)
  src, tgt = rng.integers(1, 30, 300), rng.integers(1, 30, 300)
  split, buckets = _split(src, tgt), [8, 16, 32]
  index = batching.assign_buckets(split.src_lengths, split.tgt_lengths, buckets)
  it = batching.BatchIterator(split, index, buckets, 160, 0, local_devices=3, accum=2,
                              prefetch=0)
  plan = batching.epoch_plan(index, buckets, 160, 0, 0)
  seen = set()
  for _ in range(len(plan)):
    batch = next(it)
    shape = batch["inputs"].shape
    assert shape == it.batch_shapes[shape[-1]] == batch["targets"].shape
    seen.add(shape)
  assert seen == set(it.batch_shapes.values())
  stats = batching.plan_stats(split, plan, buckets, 160)
  assert stats["batches_per_epoch"] == len(plan)
  assert stats["batch_shapes"] == [[160 // b, b] for b in buckets]


def test_eval_batches_extend_the_buckets_and_truncate_past_max_len(caplog):
  src, tgt = [3, 10, 20, 40], [5, 12, 18, 2]
  split = _split(src, tgt)
  with caplog.at_level(logging.WARNING):
    batches = list(batching.eval_batches(split, [8, 16], 64, 32, num_devices=2))
  assert "truncated to max_len=32" in caplog.text
  lengths = sorted(b["inputs"].shape[-1] for b in batches)
  assert lengths == [8, 16, 24, 32]  # the series goes on past 16, up to max_len
  for b in batches:
    assert b["inputs"].shape[0] == 2
    assert b["inputs"].shape[1] == batching.padded_rows(64, b["inputs"].shape[-1], 2) // 2
  rows = np.concatenate([b["inputs"].reshape(-1, b["inputs"].shape[-1])[:, 0] for b in batches])
  assert sorted(rows[rows != 0].tolist()) == [3, 4, 5, 6]  # every pair once
  longest = next(b for b in batches if b["inputs"].shape[-1] == 32)["inputs"]
  assert (longest != 0).sum() == 32  # the 40-token source, cut at max_len
