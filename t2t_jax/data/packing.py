"""Several sentence pairs per training row: the packed batch plan and its layout. Pure NumPy.

A row holds as many whole pairs as fit on both sides; `inputs_segments` and
`targets_segments` number them 1, 2, ... (0 = padding) and the model keeps
attention within each pair (docs/model.md, "Packed rows"). Compared with one
pair per length bucket, packing removes most of the padding (docs/benchmarks.md,
"Input pipeline") and needs far fewer batch shapes.

Row lengths halve from the longest bucket down to `SHORTEST_ROW` (256, 128, 64,
32 for WMT's limits; 64, 32 for the demo's): attention costs grow with the row,
so a pair goes to the shortest rows it needs. Within a window of pairs, those
longer than half of the longest rows each open a row of the longest length,
whose space is then filled with the largest smaller pairs that fit (first fit);
the next length down does the same with what is left, and the shortest rows
take the rest first-fit decreasing. Each length makes its own batches of
`tokens_per_batch // length` rows, so a batch has one shape and about the same
number of tokens whatever its length.

The plan of an epoch depends only on (seed, epoch) and the lengths, never on the
device count: the pairs are shuffled, cut into windows of `WINDOW` pairs and
packed window by window; each length's rows are shuffled within the window and
consecutive rows form its batches. It is built lazily, so a 4.5M-pair epoch
costs nothing up front, and resuming at batch i packs the windows before it
again (deterministically).
"""

from __future__ import annotations

from typing import Iterator, Optional, Protocol

import numpy as np

from t2t_jax.ids import SEGMENT_KEYS  # the batch fields packing adds

# Pairs packed together. First-fit decreasing already fills rows about as well as it
# can in much smaller windows of the demo corpus (docs/benchmarks.md, "Input
# pipeline"); bigger windows only cost time.
WINDOW = 4096
# The shortest rows. Shorter ones would hold about one sentence: nothing to pack.
SHORTEST_ROW = 32


Rows = list[np.ndarray]  # pair indices of each row, in row order


class RaggedPairs(Protocol):
  """Sequence i is `src_ids[src_offsets[i]:src_offsets[i + 1]]` (see tokenized.TokenizedSplit).

  The input of batching.py and of this module.
  """
  src_ids: np.ndarray
  src_offsets: np.ndarray
  tgt_ids: np.ndarray
  tgt_offsets: np.ndarray

  def __len__(self) -> int: ...


def row_lengths(longest: int, shortest: int = SHORTEST_ROW) -> list[int]:
  """`longest`, then halves of it while they stay >= `shortest`: 256 -> [256, 128, 64, 32]."""
  lengths = [longest]
  while lengths[-1] % 2 == 0 and lengths[-1] // 2 >= shortest:
    lengths.append(lengths[-1] // 2)
  return lengths


def first_fit_decreasing(sizes: np.ndarray, capacity: int) -> np.ndarray:
  """Row of each item ([n] int) after first-fit decreasing into rows of `capacity`.

  Items are taken longest first (ties in input order); each goes into the first
  row with room, else a new row. Rows are numbered in order of creation.
  """
  if len(sizes) and int(sizes.max()) > capacity:
    raise ValueError(f"an item of size {int(sizes.max())} exceeds the row length {capacity}")
  row_of = np.empty(len(sizes), np.int64)
  free = np.empty(len(sizes), np.int64)
  rows = 0
  for i in np.argsort(-sizes, kind="stable"):
    fits = np.flatnonzero(free[:rows] >= sizes[i])
    if len(fits):
      row = fits[0]
    else:
      row, rows = rows, rows + 1
      free[row] = capacity
    free[row] -= sizes[i]
    row_of[i] = row
  return row_of


def _group(items: np.ndarray, row_of: np.ndarray) -> Rows:
  """`items` grouped by their row number (rows in number order, items in input order)."""
  by_row = np.argsort(row_of, kind="stable")
  return np.split(items[by_row], np.flatnonzero(np.diff(row_of[by_row])) + 1)


def pack_window(sizes: np.ndarray, lengths: list[int]) -> list[tuple[int, Rows]]:
  """The rows of one window per row length (longest first), as indices into `sizes`."""
  if len(sizes) and int(sizes.max()) > lengths[0]:
    raise ValueError(f"an item of size {int(sizes.max())} exceeds the row length {lengths[0]}")
  order = np.argsort(-sizes, kind="stable")                         # longest first
  placed = np.zeros(len(sizes), bool)
  packed = []
  for length, half in zip(lengths[:-1], lengths[1:]):
    seeds = order[(sizes[order] > half) & ~placed[order]]           # one per row: > length / 2
    members = [[i] for i in seeds]
    free = length - sizes[seeds]
    placed[seeds] = True
    for i in order[~placed[order]]:                                 # fill, largest first
      if not len(free) or free.max() < sizes[order[-1]]:
        break
      fits = np.flatnonzero(free >= sizes[i])
      if len(fits):
        free[fits[0]] -= sizes[i]
        members[fits[0]].append(i)
        placed[i] = True
    packed.append((length, [np.asarray(m) for m in members]))
  rest = np.flatnonzero(~placed)
  packed.append((lengths[-1], _group(rest, first_fit_decreasing(sizes[rest], lengths[-1]))
                 if len(rest) else []))
  return packed


class EpochPlan:
  """One epoch's packed batches, in order, built window by window as they are asked for.

  `rows_per_batch` maps each row length (longest first) to the rows of its batches.
  """

  def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray,
               rows_per_batch: dict[int, int], seed: int, epoch: int):
    self.epoch = epoch
    self.rows_per_batch = rows_per_batch
    self._windows = self._window_rows(np.maximum(src_lengths, tgt_lengths), seed, epoch)
    self._pending: dict[int, Rows] = {length: [] for length in rows_per_batch}
    self._batches: list[tuple[int, Rows]] = []
    self._done = False

  def _window_rows(self, sizes: np.ndarray, seed: int, epoch: int
                   ) -> Iterator[list[tuple[int, Rows]]]:
    order = np.random.default_rng([seed, epoch]).permutation(len(sizes))
    for number, start in enumerate(range(0, len(order), WINDOW)):
      window = order[start:start + WINDOW]
      rng = np.random.default_rng([seed, epoch, number])
      yield [(length, [window[rows[i]] for i in rng.permutation(len(rows))])
             for length, rows in pack_window(sizes[window], list(self.rows_per_batch))]

  def batch(self, index: int) -> Optional[tuple[int, Rows]]:
    """(row length, rows) of batch `index`, or None past the epoch's end."""
    while len(self._batches) <= index and not self._done:
      try:
        window = next(self._windows)
      except StopIteration:  # the epoch's last, partial batches
        self._batches += [(length, rows) for length, rows in self._pending.items() if rows]
        self._done = True
        break
      for length, rows in window:
        pending = self._pending[length]
        pending += rows
        size = self.rows_per_batch[length]
        while len(pending) >= size:
          self._batches.append((length, pending[:size]))
          del pending[:size]
    return self._batches[index] if index < len(self._batches) else None


def layout_packed(split: RaggedPairs, rows: list[np.ndarray], num_rows: int, length: int,
                  local_devices: int, accum: int, process_index: int,
                  process_count: int) -> dict[str, np.ndarray]:
  """One packed global batch of `num_rows` rows (fillers after), this process's share.

  Returns `inputs`, `targets` and their segment ids, each int32
  [local_devices, accum, micro_batch, length], cut up as `batching.layout_batch`
  cuts unpacked rows: each process takes a contiguous block of rows.
  """
  per_process = num_rows // process_count
  micro = per_process // (local_devices * accum)
  if micro * local_devices * accum * process_count != num_rows:
    raise ValueError(f"num_rows={num_rows} is not divisible by process_count*local_devices*"
                     f"accum_steps={process_count * local_devices * accum}")
  mine = rows[process_index * per_process:(process_index + 1) * per_process]
  batch = {}
  for side, ids, offsets in (("inputs", split.src_ids, split.src_offsets),
                             ("targets", split.tgt_ids, split.tgt_offsets)):
    tokens, segments = _pack_side(ids, offsets, mine, per_process, length)
    batch[side] = tokens.reshape(local_devices, accum, micro, length)
    batch[f"{side}_segments"] = segments.reshape(local_devices, accum, micro, length)
  return batch


def _pack_side(ids: np.ndarray, offsets: np.ndarray, rows: list[np.ndarray], num_rows: int,
               length: int) -> tuple[np.ndarray, np.ndarray]:
  """[num_rows, length] token ids and segment ids of one side of the packed rows."""
  tokens = np.zeros((num_rows, length), np.int32)
  segments = np.zeros((num_rows, length), np.int32)
  if not rows:
    return tokens, segments
  pairs = np.concatenate(rows)                                        # row-major
  row_of = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
  first = np.r_[0, np.cumsum([len(r) for r in rows])[:-1]]            # first pair of each row
  segment = np.arange(len(pairs)) - first[row_of] + 1                 # 1, 2, ... within a row
  starts, lengths = offsets[pairs], offsets[pairs + 1] - offsets[pairs]
  before = np.cumsum(lengths) - lengths                               # tokens before each pair
  column = before - before[first][row_of]                             # where it starts in its row
  # One entry per token: its pair, then its place in the row and in `ids`.
  owner = np.repeat(np.arange(len(pairs)), lengths)
  within = np.arange(len(owner)) - np.repeat(before, lengths)
  if len(owner) and int((column[owner] + within).max()) >= length:
    raise ValueError(f"a packed row holds more than {length} tokens")
  tokens[row_of[owner], column[owner] + within] = ids[starts[owner] + within]
  segments[row_of[owner], column[owner] + within] = segment[owner]
  return tokens, segments


def plan_stats(src_lengths: np.ndarray, tgt_lengths: np.ndarray,
               rows_per_batch: dict[int, int], seed: int, max_batches: int = 256) -> dict:
  """Padding efficiency, real tokens per batch and the shapes of epoch 0's packed batches.

  Measured on the first `max_batches` batches (the whole epoch if it is shorter);
  `batches_per_epoch` is then extrapolated from the pairs they hold.
  """
  plan = EpochPlan(src_lengths, tgt_lengths, rows_per_batch, seed, 0)
  src_real, tgt_real, positions, pairs, rows_used = [], [], 0, 0, 0
  while len(src_real) < max_batches and (batch := plan.batch(len(src_real))) is not None:
    length, rows = batch
    members = np.concatenate(rows)
    src_real.append(int(src_lengths[members].sum()))
    tgt_real.append(int(tgt_lengths[members].sum()))
    positions += rows_per_batch[length] * length
    pairs += len(members)
    rows_used += len(rows)
  complete = plan.batch(len(src_real)) is None
  batches = len(src_real) if complete else round(len(src_real) * len(src_lengths) / pairs)
  summary = lambda v: {"mean": float(np.mean(v)), "min": int(np.min(v)), "max": int(np.max(v))}
  return {
      "batches_per_epoch": batches,
      "padding_efficiency_source": float(sum(src_real) / positions),
      "padding_efficiency_target": float(sum(tgt_real) / positions),
      "source_tokens_per_batch": summary(src_real),
      "target_tokens_per_batch": summary(tgt_real),
      "batch_shapes": [[rows, length] for length, rows in sorted(rows_per_batch.items())],
      "pairs_per_row": pairs / max(rows_used, 1),
  }
