"""Token ids -> length buckets -> device batches; seeded, resumable. Pure NumPy.

Training batches are

    {"inputs", "targets"}: int32 [local_devices, accum_steps, micro_batch, length]

where WHICH pairs form a global batch depends only on the seed and the epoch
(`epoch_plan`), never on the device count: the device layout (`layout_batch`)
only appends all-zero filler rows, up to `padded_rows`, and cuts the rows up.
Pairs are grouped by length into a fixed list of buckets, so the set of shapes
(and of compilations) is small and known in advance. With `pack_lengths`, rows
hold several pairs instead (data/packing.py) and batches add `inputs_segments` and
`targets_segments`; there is then one shape per row length. No vocabulary here: the input is a
`TokenizedSplit` (ragged ids) or anything with the same fields.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Iterator, Optional, Sequence

import numpy as np

from t2t_jax.data import packing
from t2t_jax.ids import BUCKET_LENGTHS
from t2t_jax.data.packing import RaggedPairs

log = logging.getLogger(__name__)

Plan = list[tuple[int, np.ndarray]]  # (bucket, pair indices) per batch, in order


# --- Buckets and the plan ----------------------------------------------------------

def assign_buckets(src_lengths: np.ndarray, tgt_lengths: np.ndarray,
                   buckets: Sequence[int]) -> np.ndarray:
  """Index of the smallest bucket >= max(source length, target length), per pair."""
  longest = np.maximum(src_lengths, tgt_lengths)
  index = np.searchsorted(np.asarray(buckets), longest, side="left")
  if len(index) and index.max() >= len(buckets):
    raise ValueError(f"a pair of length {int(longest.max())} exceeds the largest "
                     f"bucket {buckets[-1]}")
  return index


def rows_per_batch(tokens_per_batch: int, bucket_length: int) -> int:
  """Pairs in a batch of `bucket_length`: as many as the token budget holds (at least 1)."""
  return max(1, tokens_per_batch // bucket_length)


def padded_rows(tokens_per_batch: int, bucket_length: int, divisor: int = 1) -> int:
  """Rows of every global batch of `bucket_length`: the budget's, rounded up to `divisor`.

  `divisor` is what the rows are cut into (processes * local devices *
  micro-steps). Every batch of a bucket, the last partial one too, gets this
  many rows, so the step compiles once per bucket, not once per leftover size.
  """
  rows = rows_per_batch(tokens_per_batch, bucket_length)
  return -(-rows // divisor) * divisor


def epoch_plan(bucket_index: np.ndarray, buckets: Sequence[int], tokens_per_batch: int,
               seed: int, epoch: int) -> Plan:
  """The batches of one epoch, in order: (bucket, pair indices) each.

  Rows within each bucket and the order of all batches are shuffled with a
  generator seeded by (seed, epoch); nothing depends on the device layout.
  """
  rng = np.random.default_rng([seed, epoch])
  plan = []
  for b, length in enumerate(buckets):
    members = np.flatnonzero(bucket_index == b)
    if not len(members):
      continue
    members = rng.permutation(members)
    rows = rows_per_batch(tokens_per_batch, length)
    for start in range(0, len(members), rows):
      plan.append((b, members[start:start + rows]))
  order = rng.permutation(len(plan))
  return [plan[i] for i in order]


def plan_stats(split: RaggedPairs, plan: Plan, buckets: Sequence[int],
               tokens_per_batch: int) -> dict:
  """Padding efficiency, real tokens per batch and batch shapes of `plan` (before fillers)."""
  src_len, tgt_len = np.diff(split.src_offsets), np.diff(split.tgt_offsets)
  src_real = np.array([src_len[ix].sum() for _, ix in plan])
  tgt_real = np.array([tgt_len[ix].sum() for _, ix in plan])
  shapes = [(padded_rows(tokens_per_batch, buckets[b]), buckets[b]) for b, _ in plan]
  padded = np.array([rows * length for rows, length in shapes])
  return {
      "batches_per_epoch": len(plan),
      "padding_efficiency_source": float(src_real.sum() / padded.sum()),
      "padding_efficiency_target": float(tgt_real.sum() / padded.sum()),
      "source_tokens_per_batch": _summary(src_real),
      "target_tokens_per_batch": _summary(tgt_real),
      "batch_shapes": [list(s) for s in sorted(set(shapes), key=lambda s: s[1])],
  }


def _summary(values: np.ndarray) -> dict:
  return {"mean": float(values.mean()), "min": int(values.min()), "max": int(values.max())}


# --- The device layout ---------------------------------------------------------------

def _pad_rows(ids: np.ndarray, offsets: np.ndarray, indices: np.ndarray, num_rows: int,
              length: int) -> np.ndarray:
  """[num_rows, length] int32: the sequences at `indices`, then all-zero filler rows."""
  out = np.zeros((num_rows, length), np.int32)
  starts = offsets[indices]
  lengths = np.minimum(offsets[indices + 1] - starts, length)
  positions = np.arange(length)
  mask = positions[None, :] < lengths[:, None]
  source = starts[:, None] + positions[None, :]
  out[:len(indices)][mask] = ids[source[mask]]
  return out


def layout_batch(split: RaggedPairs, indices: np.ndarray, num_rows: int, length: int,
                 local_devices: int, accum: int, process_index: int,
                 process_count: int) -> dict[str, np.ndarray]:
  """One global batch of `num_rows` rows (fillers after the pairs), this process's share.

  `num_rows` must divide by process_count * local_devices * accum. Each process
  takes a contiguous block of rows; within it row r goes to device
  r // (accum * micro), micro-step (r // micro) % accum.
  """
  per_process = num_rows // process_count
  micro = per_process // (local_devices * accum)
  if micro * local_devices * accum * process_count != num_rows:
    raise ValueError(f"num_rows={num_rows} is not divisible by process_count*local_devices*"
                     f"accum_steps={process_count * local_devices * accum}")
  lo, hi = process_index * per_process, (process_index + 1) * per_process
  mine = indices[lo:hi]
  batch = {}
  for key, ids, offsets in (("inputs", split.src_ids, split.src_offsets),
                            ("targets", split.tgt_ids, split.tgt_offsets)):
    rows = _pad_rows(ids, offsets, mine, per_process, length)
    batch[key] = rows.reshape(local_devices, accum, micro, length)
  return batch


# --- Evaluation batches ----------------------------------------------------------------

def eval_batches(split: RaggedPairs, buckets: Sequence[int], tokens_per_batch: int,
                 max_len: int, num_devices: int, process_index: int = 0,
                 process_count: int = 1, name: str = "dev") -> Iterator[dict[str, np.ndarray]]:
  """The whole split as {"inputs", "targets"} int32 [num_devices, batch, length].

  Same buckets as training but nothing dropped; pairs longer than the last bucket
  go to buckets of up to `max_len` (truncated beyond it, with a warning).
  """
  src_len, tgt_len = np.diff(split.src_offsets), np.diff(split.tgt_offsets)
  longest = int(max(src_len.max(initial=0), tgt_len.max(initial=0)))
  buckets = list(buckets)
  if longest > buckets[-1]:
    buckets += [b for b in BUCKET_LENGTHS if buckets[-1] < b < max_len]
    buckets.append(max_len)
    if longest > max_len:
      log.warning("%s has pairs of %d tokens; evaluating them truncated to max_len=%d",
                  name, longest, max_len)
  lengths = np.minimum(np.maximum(src_len, tgt_len), buckets[-1])
  index = np.searchsorted(np.asarray(buckets), lengths, side="left")
  for b, length in enumerate(buckets):
    members = np.flatnonzero(index == b)
    rows = rows_per_batch(tokens_per_batch, length)
    num_rows = padded_rows(tokens_per_batch, length, num_devices * process_count)
    for start in range(0, len(members), rows):
      batch = layout_batch(split, members[start:start + rows], num_rows, length,
                           num_devices, 1, process_index, process_count)
      yield {k: v[:, 0] for k, v in batch.items()}


# --- The training iterator -----------------------------------------------------------

class BatchIterator:
  """Infinite, seeded, resumable iterator over training batches.

  State is {"epoch", "index"} (the next batch to yield): a resumed iterator
  yields exactly what an uninterrupted one would have. A background thread keeps
  `prefetch` batches ready; it stops when the iterator is closed or collected.
  """

  def __init__(self, split: RaggedPairs, bucket_index: np.ndarray, buckets: Sequence[int],
               tokens_per_batch: int, seed: int, local_devices: int, accum: int,
               process_index: int = 0, process_count: int = 1, prefetch: int = 2,
               pack_lengths: Optional[Sequence[int]] = None):
    if not 0 <= process_index < process_count:
      raise ValueError(f"process_index={process_index} must be in [0, {process_count})")
    if len(split) == 0:
      raise ValueError("the training split is empty (all pairs dropped?); check the data "
                       "and max_source_length/max_target_length")
    self._args = dict(split=split, bucket_index=bucket_index, buckets=list(buckets),
                      tokens_per_batch=tokens_per_batch, seed=seed,
                      local_devices=local_devices, accum=accum, process_index=process_index,
                      process_count=process_count,
                      pack_lengths=list(pack_lengths) if pack_lengths else None)
    self.divisor = local_devices * accum * process_count
    # Each bucket's batches have a fixed row count, so their shapes are fixed too.
    lengths = (pack_lengths or
               [length for b, length in enumerate(buckets) if np.any(bucket_index == b)])
    self.batch_shapes = {
        length: (local_devices, accum,
                 padded_rows(tokens_per_batch, length, self.divisor) // self.divisor, length)
        for length in lengths}
    self._prefetch = prefetch
    self._state = {"epoch": 0, "index": 0}
    self._thread: Optional[threading.Thread] = None
    self._stop: Optional[threading.Event] = None
    self._queue: Optional[queue.Queue] = None

  def get_state(self) -> dict:
    return dict(self._state)

  def set_state(self, state: dict) -> None:
    self._stop_thread()
    self._state = {"epoch": int(state["epoch"]), "index": int(state["index"])}

  def __iter__(self) -> "BatchIterator":
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    if self._prefetch <= 0:
      batch, self._state = _make_batch(self._args, self._state)
      return batch
    if self._thread is None:
      self._start_thread()
    item = self._queue.get()
    if isinstance(item, BaseException):
      self._stop_thread()
      raise item
    batch, self._state = item
    return batch

  def _start_thread(self) -> None:
    self._stop = threading.Event()
    self._queue = queue.Queue(maxsize=self._prefetch)
    # The thread gets the arguments, not `self`, so it never keeps the iterator alive.
    self._thread = threading.Thread(
        target=_produce, args=(self._args, dict(self._state), self._queue, self._stop),
        daemon=True, name="batch-prefetch")
    self._thread.start()

  def _stop_thread(self) -> None:
    if self._thread is None:
      return
    self._stop.set()
    while True:  # unblock a producer waiting on a full queue
      try:
        self._queue.get_nowait()
      except queue.Empty:
        break
    self._thread.join(timeout=10)
    self._thread = self._stop = self._queue = None

  def close(self) -> None:
    self._stop_thread()

  def __del__(self):
    try:
      self.close()
    except Exception:  # interpreter shutdown: nothing left to clean up
      pass


def _plan(args: dict, epoch: int) -> Plan:
  """Epoch `epoch`'s plan, remembered in `args` (one epoch at a time)."""
  cached = args.get("_plan")
  if cached is None or cached[0] != epoch:
    cached = (epoch, epoch_plan(args["bucket_index"], args["buckets"],
                                args["tokens_per_batch"], args["seed"], epoch))
    args["_plan"] = cached
  return cached[1]


def _packed_plan(args: dict, epoch: int) -> packing.EpochPlan:
  """Epoch `epoch`'s packed plan, remembered in `args` (built lazily, one epoch at a time)."""
  plan = args.get("_packed_plan")
  if plan is None or plan.epoch != epoch:
    split = args["split"]
    rows = {length: rows_per_batch(args["tokens_per_batch"], length)
            for length in args["pack_lengths"]}
    plan = packing.EpochPlan(np.diff(split.src_offsets), np.diff(split.tgt_offsets), rows,
                             args["seed"], epoch)
    args["_packed_plan"] = plan
  return plan


def _make_packed_batch(args: dict, state: dict) -> tuple[dict[str, np.ndarray], dict]:
  epoch, index = state["epoch"], state["index"]
  planned = _packed_plan(args, epoch).batch(index)
  if planned is None:  # past the epoch's end
    epoch, index = epoch + 1, 0
    planned = _packed_plan(args, epoch).batch(index)
  length, rows = planned
  devices, accum, count = args["local_devices"], args["accum"], args["process_count"]
  num_rows = padded_rows(args["tokens_per_batch"], length, devices * accum * count)
  batch = packing.layout_packed(args["split"], rows, num_rows, length, devices, accum,
                                args["process_index"], count)
  index += 1
  if _packed_plan(args, epoch).batch(index) is None:
    epoch, index = epoch + 1, 0
  return batch, {"epoch": epoch, "index": index}


def _make_batch(args: dict, state: dict) -> tuple[dict[str, np.ndarray], dict]:
  """The batch at `state` and the state after it."""
  if args["pack_lengths"]:
    return _make_packed_batch(args, state)
  epoch, index = state["epoch"], state["index"]
  plan = _plan(args, epoch)
  while index >= len(plan):
    epoch, index = epoch + 1, 0
    plan = _plan(args, epoch)
  b, indices = plan[index]
  length = args["buckets"][b]
  devices, accum, count = args["local_devices"], args["accum"], args["process_count"]
  num_rows = padded_rows(args["tokens_per_batch"], length, devices * accum * count)
  batch = layout_batch(args["split"], indices, num_rows, length, devices, accum,
                       args["process_index"], count)
  index += 1
  if index >= len(plan):
    epoch, index = epoch + 1, 0
  return batch, {"epoch": epoch, "index": index}


def _produce(args: dict, state: dict, out: queue.Queue, stop: threading.Event) -> None:
  def put(item) -> None:
    while not stop.is_set():
      try:
        out.put(item, timeout=0.1)
        return
      except queue.Full:
        continue

  try:
    while not stop.is_set():
      batch, state = _make_batch(args, state)
      put((batch, dict(state)))
  except BaseException as e:  # hand the error to the consumer instead of hanging it
    put(e)
