"""decoding/sentence_batches.py: many sentences into decoding batches (input order kept, batch
shapes from a few buckets), several batches in flight with results in input order."""

import threading
import time

import numpy as np
import pytest

import tiny
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import sentence_batches
from t2t_jax.ids import EOS_ID, strip_eos


TINY = tiny.TINY


def test_decode_ids_restores_input_order():
  # Distinct lengths sort the same whatever the input order: the same batches of
  # 4 (the last padded with a filler row).
  params = tiny.params()
  sources = tiny.sources(1, [6, 2, 0, 4, 1, 5, 3])
  order = np.random.default_rng(0).permutation(len(sources))
  outputs = sentence_batches.decode_ids(TINY, params, sources)
  shuffled = sentence_batches.decode_ids(TINY, params, [sources[i] for i in order])
  assert shuffled == [outputs[i] for i in order]
  # Two batches decoding at once (the default) give what one at a time gives.
  assert sentence_batches.decode_ids(TINY, params, sources, in_flight=1) == outputs
  # Each sentence decoded on its own gives the same output.
  single = tiny.rows([sources[2], sources[0], sources[1], sources[3]])
  tokens, _ = batch_decoder.decode_batch([batch_decoder.Member(TINY.model, params)], single,
                                    batch_decoder.Search.from_config(TINY))
  assert [strip_eos(t) for t in tokens[:, 0]] == [outputs[2], outputs[0], outputs[1], outputs[3]]
  assert all(len(out) <= len(src) + 1 + TINY.max_decode_extra
             for src, out in zip(sources, outputs))
  with pytest.raises(ValueError, match="truncate"):
    sentence_batches.decode_ids(TINY, params, [[5] * TINY.max_len])


def test_source_rows_pad_to_the_bucket_of_the_longest_source():
  # 43 ids + EOS fit the bucket 48 (not the power of two 64); 3 rows round up to 4.
  rows = sentence_batches.source_rows([[5] * 43, [6] * 7, []], batch_size=64, max_len=128)
  assert rows.shape == (4, 48) and rows.dtype == np.int32
  assert rows[0, 42:45].tolist() == [5, EOS_ID, 0]
  assert rows[1, :9].tolist() == [6] * 7 + [EOS_ID, 0]
  assert rows[2, 0] == EOS_ID and not rows[3].any()          # the filler row is all padding
  assert sentence_batches.source_rows([[5] * 3], batch_size=64, max_len=128).shape == (1, 8)
  assert sentence_batches.source_rows([[5] * 90], batch_size=64, max_len=96).shape == (1, 96)
  assert sentence_batches.source_rows([[5]] * 17, batch_size=24, max_len=128).shape[0] == 24


def test_by_length_sorts_cuts_and_returns_every_index():
  lengths = [5, 1, 3, 9, 2]
  seen = []

  def decode(batch):
    seen.append(list(batch))
    return [f"out{i}" for i in batch]

  found = sentence_batches.by_length(decode, lengths, batch_size=2, in_flight=1,
                                     indices=[0, 1, 2, 3])
  assert found == {i: f"out{i}" for i in (0, 1, 2, 3)}
  assert sorted(map(sorted, seen)) == [[0, 3], [1, 2]]     # by length: [1, 2], then [0, 3]


def test_results_come_in_input_order_whatever_finishes_first():
  finish_late = threading.Event()

  def fn(item):
    if item == 0:  # the first item ends last
      assert finish_late.wait(timeout=30)
    if item == 3:
      finish_late.set()
    return item * 10

  assert sentence_batches.ordered_map(fn, range(6), in_flight=2) == [0, 10, 20, 30, 40, 50]


def test_calls_overlap_up_to_in_flight():
  # Both calls must be under way at once to pass the barrier; one at a time, it breaks.
  barrier = threading.Barrier(2, timeout=30)
  assert sentence_batches.ordered_map(lambda x: barrier.wait() * 0 + x, [1, 2], in_flight=2) == [1, 2]
  lone = threading.Barrier(2, timeout=0.5)
  with pytest.raises(threading.BrokenBarrierError):
    sentence_batches.ordered_map(lambda x: lone.wait(), [1, 2], in_flight=1)


def test_an_error_in_one_call_is_raised_and_later_calls_are_not_made():
  started = []

  def fn(item):
    started.append(item)
    if item == 0:
      raise ValueError("bad batch 0")
    time.sleep(0.2)
    return item

  with pytest.raises(ValueError, match="bad batch 0"):
    sentence_batches.ordered_map(fn, range(20), in_flight=2)
  assert len(started) < 20  # the batches still queued were dropped
  with pytest.raises(ValueError, match="in_flight=0 must be >= 1"):
    sentence_batches.ordered_map(fn, range(4), in_flight=0)


def test_costliest_calls_start_first_and_results_stay_in_input_order():
  started, lock = [], threading.Lock()
  both_busy = threading.Barrier(2, timeout=30)

  def fn(item):
    with lock:
      started.append(item)
      first_two = len(started) <= 2
    if first_two:  # both workers hold their first call: no third can start before
      both_busy.wait()
    return item * 10

  costs = [3, 9, 1, 7, 5, 2]
  assert sentence_batches.ordered_map(fn, range(6), in_flight=2, cost=lambda i: costs[i]) == \
      [0, 10, 20, 30, 40, 50]
  # The two costliest (items 1 and 3) start first; in input order 0 and 1 would.
  assert set(started[:2]) == {1, 3}


def test_with_costs_an_error_still_drops_the_calls_not_yet_started():
  started = []

  def fn(item):
    started.append(item)
    if item == 19:  # the costliest: the first to start
      raise ValueError("bad batch 19")
    time.sleep(0.2)
    return item

  with pytest.raises(ValueError, match="bad batch 19"):
    sentence_batches.ordered_map(fn, range(20), in_flight=2, cost=lambda i: i)
  assert started[0] in (18, 19) and len(started) < 20


def test_an_interrupt_while_waiting_drops_the_calls_not_yet_started(monkeypatch):
  started = []

  def fn(item):
    started.append(item)
    time.sleep(0.2)
    return item

  def interrupted(*args, **kwargs):  # Ctrl-C arrives while the results are awaited
    raise KeyboardInterrupt

  monkeypatch.setattr(sentence_batches.concurrent.futures, "wait", interrupted)
  with pytest.raises(KeyboardInterrupt):
    sentence_batches.ordered_map(fn, range(20), in_flight=2)
  assert len(started) < 20
