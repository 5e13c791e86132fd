"""Many sentences sorted by length into decoding batches, decoded, returned in input order.

    results = by_length(decode, lengths, batch_size=64)    # {index: result}
    inputs = source_rows(list_of_id_lists, batch_size, cfg.max_len)   # one batch, padded
    ids = decode_ids(cfg, params, list_of_id_lists)         # one model, ids in, ids out

`by_length` is the one sort-into-batches loop (inference/streaming.py and
`decode_ids` use it); `source_rows` shapes each batch from a few buckets, so a
test set compiles a handful of programs (decoding/batch_decoder.py).

Several batches at once (`ordered_map`). One batch's search is a chain of small
dependent operations (a step of the demo model is about a hundred, most of them too
small to split across cores), and between chunks of steps it waits for the host. On
a CPU the busy time of all threads of one batch's trace adds up to its wall time:
one core idles. Two batches decoded from two threads fill that core and those waits:
the demo test set decodes faster on 2 cores (docs/benchmarks.md, "Decoding"). Each
batch is still decoded alone by the same programs, so no output changes. Batches
start costliest first: a test set sorted by length ends with its longest batches,
and started in input order they would run last, alone on one core while the other
idles.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar

import numpy as np

from t2t_jax import configs
from t2t_jax.ids import bucket_length
from t2t_jax.decoding import batch_decoder
from t2t_jax.ids import EOS_ID, strip_eos

Item = TypeVar("Item")
Result = TypeVar("Result")

# Batches decoded at once unless a caller says otherwise; 1 decodes one at a time.
IN_FLIGHT = 2


def source_rows(sources: Sequence[Sequence[int]], batch_size: int, max_len: int) -> np.ndarray:
  """EOS-terminated id rows [rows, width] int32 of a decoding batch, padded with PAD.

  width: the bucket (ids.py) of the longest source with EOS, at most
  max_len; rows: a power of two, at most batch_size. Each shape is a program
  to compile, so they come from short series; the width follows the sources
  closely because the encoder and every step's cross-attention pay for it.
  """
  width = min(bucket_length(max(len(s) for s in sources) + 1), max_len)
  inputs = np.zeros((min(batch_size, 1 << (len(sources) - 1).bit_length()), width), np.int32)
  for row, ids in enumerate(sources):
    inputs[row, :len(ids) + 1] = [*ids, EOS_ID]
  return inputs


def by_length(decode: Callable[[list[int]], Sequence[Result]], lengths: Sequence[int], *,
              batch_size: int, in_flight: int = IN_FLIGHT,
              indices: Optional[Iterable[int]] = None) -> dict[int, Result]:
  """`decode(batch)` over batches of up to `batch_size` sentences of similar length.

  The sentences `indices` (default: all of `lengths`) are sorted by length, so
  that a batch pads little and its shape comes from few buckets
  (`source_rows`), and cut into batches of indices; `in_flight` batches decode
  at once (`ordered_map`), the costliest first. `decode` returns one
  result per index of its batch. Returns {index: result}.
  """
  order = sorted(range(len(lengths)) if indices is None else indices, key=lambda i: lengths[i])
  batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
  cost = lambda batch: len(batch) * lengths[batch[-1]]  # sentences x longest source
  results = {}
  for batch, outputs in zip(batches, ordered_map(decode, batches, in_flight, cost)):
    results.update(zip(batch, outputs))
  return results


def decode_ids(cfg: configs.TransformerConfig, params: Any, sources: Sequence[Sequence[int]], *,
               batch_size: Optional[int] = None, in_flight: int = IN_FLIGHT,
               **search: Any) -> list[list[int]]:
  """Translates id sequences (without EOS) to id sequences (without EOS), in input order.

  One model's beam search over `by_length` batches of `batch_size` (default
  cfg.decode_batch_size) sentences; batch shapes are rounded up to a few buckets
  (`source_rows`) so that a test set compiles a handful of programs. `search`:
  beam settings for `Search.from_config` (beam_size, alpha, max_decode_extra, min_len).
  """
  batch_size = cfg.decode_batch_size if batch_size is None else batch_size
  too_long = [i for i, s in enumerate(sources) if len(s) + 1 > cfg.max_len]
  if too_long:
    raise ValueError(f"source {too_long[0]} has {len(sources[too_long[0]])} ids; at most "
                     f"cfg.max_len - 1 = {cfg.max_len - 1} fit with EOS: truncate it first")
  members = [batch_decoder.Member(cfg.model, params)]
  settings = batch_decoder.Search.from_config(cfg, **search)

  def best(batch: list[int]) -> list[list[int]]:
    inputs = source_rows([sources[i] for i in batch], batch_size, cfg.max_len)
    tokens, _ = batch_decoder.decode_batch(members, inputs, settings)
    return [strip_eos(row) for row in tokens[:, 0]]

  found = by_length(best, [len(s) for s in sources], batch_size=batch_size, in_flight=in_flight)
  return [found[i] for i in range(len(sources))]


def ordered_map(fn: Callable[[Item], Result], items: Iterable[Item],
                in_flight: int = IN_FLIGHT,
                cost: Optional[Callable[[Item], float]] = None) -> list[Result]:
  """[fn(item) for item in items], with up to `in_flight` calls running at once.

  `cost(item)`: calls start in decreasing cost (ties in input order), so that the
  longest ones overlap with the rest instead of ending the run alone. When a
  call raises, the calls not yet started are not made; once those under way have
  ended, the exception of the first failed call in item order is raised here.
  """
  if in_flight < 1:
    raise ValueError(f"in_flight={in_flight} must be >= 1 (1: one batch at a time)")
  items = list(items)
  if in_flight == 1 or len(items) < 2:
    return [fn(item) for item in items]
  start = list(range(len(items)))
  if cost is not None:
    start.sort(key=lambda i: -cost(items[i]))
  with concurrent.futures.ThreadPoolExecutor(min(in_flight, len(items)),
                                             thread_name_prefix="t2t_jax-decode") as pool:
    futures = [None] * len(items)
    try:
      for i in start:
        futures[i] = pool.submit(fn, items[i])
      concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
    finally:  # after an error in a call or here (Ctrl-C): the calls not yet started are dropped
      for future in futures:
        if future is not None:
          future.cancel()
    failed = [f for f in futures if not f.cancelled() and f.done() and f.exception()]
    if failed:
      raise failed[0].exception()  # leaving the pool waits for the calls under way
    return [future.result() for future in futures]
