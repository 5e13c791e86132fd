"""Many sentences sorted by length into decoding batches, decoded, returned in input order.

    results = by_length(decode, lengths, batch_size=64)    # {index: result}
    inputs = source_rows(list_of_id_lists, batch_size, cfg.max_len)   # one batch, padded
    ids = decode_ids(cfg, params, list_of_id_lists)         # one model, ids in, ids out

`by_length` is the one sort-into-batches loop (inference/streaming.py and
`decode_ids` use it); `source_rows` shapes each batch from a few buckets, so a
test set compiles a handful of programs (decoding/batch_decoder.py).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar

import numpy as np

from t2t_jax import configs
from t2t_jax.data.buckets import bucket_length
from t2t_jax.decoding import ensemble
from t2t_jax.decoding import in_flight as in_flight_lib
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import search as search_lib
from t2t_jax.ids import EOS_ID, strip_eos

Result = TypeVar("Result")


def source_rows(sources: Sequence[Sequence[int]], batch_size: int, max_len: int) -> np.ndarray:
  """EOS-terminated id rows [rows, width] int32 of a decoding batch, padded with PAD.

  width: the bucket (data/buckets.py) of the longest source with EOS, at most
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
              batch_size: int, in_flight: int = in_flight_lib.DEFAULT,
              indices: Optional[Iterable[int]] = None) -> dict[int, Result]:
  """`decode(batch)` over batches of up to `batch_size` sentences of similar length.

  The sentences `indices` (default: all of `lengths`) are sorted by length, so
  that a batch pads little and its shape comes from few buckets
  (`source_rows`), and cut into batches of indices; `in_flight` batches decode
  at once (decoding/in_flight.py), the costliest first. `decode` returns one
  result per index of its batch. Returns {index: result}.
  """
  order = sorted(range(len(lengths)) if indices is None else indices, key=lambda i: lengths[i])
  batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
  cost = lambda batch: len(batch) * lengths[batch[-1]]  # sentences x longest source
  results = {}
  for batch, outputs in zip(batches, in_flight_lib.ordered_map(decode, batches, in_flight, cost)):
    results.update(zip(batch, outputs))
  return results


def decode_ids(cfg: configs.TransformerConfig, params: Any, sources: Sequence[Sequence[int]], *,
               batch_size: Optional[int] = None, in_flight: int = in_flight_lib.DEFAULT,
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
  members = [ensemble.Member(cfg.model, params)]
  settings = search_lib.Search.from_config(cfg, **search)

  def best(batch: list[int]) -> list[list[int]]:
    inputs = source_rows([sources[i] for i in batch], batch_size, cfg.max_len)
    tokens, _ = batch_decoder.decode_batch(members, inputs, settings)
    return [strip_eos(row) for row in tokens[:, 0]]

  found = by_length(best, [len(s) for s in sources], batch_size=batch_size, in_flight=in_flight)
  return [found[i] for i in range(len(sources))]
