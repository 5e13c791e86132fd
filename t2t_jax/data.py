"""Text pairs -> cached token ids -> length buckets -> device batches; resumable.

`prepare(cfg, workdir)` builds (or reloads) the vocabulary and the pre-tokenised
splits and returns a `Dataset`. Its `train_iterator` yields numpy batches

    {"inputs", "targets"}: int32 [local_devices, accum_steps, micro_batch, length]

where WHICH pairs form a global batch depends only on the config and the epoch,
never on the device count: the device count only decides how many all-zero
filler rows are appended and how the rows are cut up. Pairs are grouped by
length into a fixed list of buckets, so the set of shapes (and of compilations)
is small and known in advance.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import queue
import threading
import time
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from t2t_jax.datasets import demo
from t2t_jax.buckets import BUCKET_LENGTHS, bucket_lengths
from t2t_jax import textio
from t2t_jax import vocab as vocab_lib

log = logging.getLogger(__name__)

_CACHE_VERSION = 1
Pairs = list[tuple[str, str]]


# --- Reading text ----------------------------------------------------------------

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


@dataclasses.dataclass
class _Source:
  """Where each split's text comes from; `signature` keys the token cache."""
  train: Callable[[], Pairs]
  dev: Callable[[], Pairs]
  test: Callable[[], Pairs]
  signature: dict


def _resolve_source(cfg, workdir: str) -> _Source:
  if cfg.dataset == "demo":
    directory = os.path.join(workdir, "data", "demo")
    paths = demo.corpus_paths(directory)
    if paths is None:
      start = time.time()
      paths = demo.write_corpus(directory, seed=cfg.seed)
      log.info("Wrote the demo corpus to %s in %.1f s", directory, time.time() - start)
    specs = {split: ",".join(p) for split, p in paths.items()}
  elif cfg.dataset == "text":
    specs = {"train": cfg.train_files, "dev": cfg.dev_files, "test": cfg.test_files}
    missing = [f"{split}_files" for split, spec in specs.items() if not spec]
    if missing:
      raise ValueError(f"dataset='text' needs config.{', config.'.join(missing)} "
                       "('src_path,tgt_path' or a .tsv path)")
  else:
    from t2t_jax import wmt  # imports TensorFlow; only needed here
    return _Source(
        train=lambda: wmt.load_pairs(cfg, "train"), dev=lambda: wmt.load_pairs(cfg, "dev"),
        test=lambda: wmt.load_pairs(cfg, "test"),
        signature={"tfds": cfg.dataset, "data_dir": wmt.resolve_data_dir(cfg),
                   "source": cfg.source_lang, "target": cfg.target_lang})
  return _Source(
      train=lambda: read_pairs(specs["train"]), dev=lambda: read_pairs(specs["dev"]),
      test=lambda: read_pairs(specs["test"]),
      signature={split: _file_signature(spec) for split, spec in specs.items()})


# --- Token ids: ragged arrays (concatenated ids + offsets) -----------------------

@dataclasses.dataclass
class TokenizedSplit:
  """Ragged token ids: sequence i is `src_ids[src_offsets[i]:src_offsets[i + 1]]`."""
  src_ids: np.ndarray
  src_offsets: np.ndarray
  tgt_ids: np.ndarray
  tgt_offsets: np.ndarray

  def __len__(self) -> int:
    return len(self.src_offsets) - 1

  @property
  def src_lengths(self) -> np.ndarray:
    return np.diff(self.src_offsets)

  @property
  def tgt_lengths(self) -> np.ndarray:
    return np.diff(self.tgt_offsets)


def _ragged(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
  lengths = np.fromiter((len(r) for r in rows), np.int64, count=len(rows))
  flat = np.fromiter((i for r in rows for i in r), np.int32, count=int(lengths.sum()))
  return flat, lengths


def _join(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
  """Concatenated ids and offsets from chunks of (ids, lengths)."""
  ids = np.concatenate([p[0] for p in parts] or [np.zeros(0, np.int32)])
  lengths = np.concatenate([p[1] for p in parts] or [np.zeros(0, np.int64)])
  offsets = np.zeros(len(lengths) + 1, np.int64)
  np.cumsum(lengths, out=offsets[1:])
  return ids, offsets


def tokenize_pairs(tokenizer: vocab_lib.Tokenizer, pairs: Pairs, max_source_length: int = 0,
                   max_target_length: int = 0,
                   chunk: int = 100_000) -> tuple[TokenizedSplit, dict]:
  """Token ids of `pairs` (EOS included).

  With length limits (training data), pairs with an empty side or more than the
  limit of tokens (EOS counted) on a side are dropped; returns the split and
  counts of what was dropped. Works in chunks so that only NumPy arrays, not
  Python lists of ints, accumulate (4.5M WMT pairs).
  """
  filtering = max_source_length > 0
  src_parts, tgt_parts = [], []
  counts = {"pairs": len(pairs), "empty": 0, "too_long": 0}
  for start in range(0, len(pairs), chunk):
    part = pairs[start:start + chunk]
    src = tokenizer.encode_batch([p[0] for p in part])
    tgt = tokenizer.encode_batch([p[1] for p in part])
    if filtering:
      keep_src, keep_tgt = [], []
      for (s_text, t_text), s, t in zip(part, src, tgt):
        if len(s) == 1 or len(t) == 1 or not s_text.strip() or not t_text.strip():
          counts["empty"] += 1
        elif len(s) > max_source_length or len(t) > max_target_length:
          counts["too_long"] += 1
        else:
          keep_src.append(s)
          keep_tgt.append(t)
      src, tgt = keep_src, keep_tgt
    src_parts.append(_ragged(src))
    tgt_parts.append(_ragged(tgt))
  split = TokenizedSplit(*_join(src_parts), *_join(tgt_parts))
  counts["kept"] = len(split)
  return split, counts


def _save_cache(path: str, splits: dict[str, TokenizedSplit], counts: dict) -> None:
  arrays = {}
  for name, split in splits.items():
    for field in dataclasses.fields(TokenizedSplit):
      arrays[f"{name}/{field.name}"] = getattr(split, field.name)
  arrays["counts"] = np.frombuffer(json.dumps(counts).encode(), np.uint8)
  tmp = f"{path}.tmp{os.getpid()}.npz"
  np.savez(tmp, **arrays)
  os.replace(tmp, path)


def _load_cache(path: str) -> tuple[dict[str, TokenizedSplit], dict]:
  with np.load(path) as z:
    splits = {}
    for name in ("train", "dev", "test"):
      splits[name] = TokenizedSplit(*(z[f"{name}/{f.name}"]
                                      for f in dataclasses.fields(TokenizedSplit)))
    counts = json.loads(z["counts"].tobytes().decode())
  return splits, counts


# --- Bucketing and the batch plan ------------------------------------------------

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
  return max(1, tokens_per_batch // bucket_length)


def accum_steps(cfg, num_global_devices: int) -> int:
  """Micro-steps per update, so one device sees at most max_tokens_per_device per step."""
  return max(1, math.ceil(cfg.tokens_per_batch /
                          (num_global_devices * cfg.max_tokens_per_device)))


def epoch_plan(bucket_index: np.ndarray, buckets: Sequence[int], tokens_per_batch: int,
               seed: int, epoch: int) -> list[tuple[int, np.ndarray]]:
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


def _round_up(x: int, multiple: int) -> int:
  return -(-x // multiple) * multiple


def layout_batch(split: TokenizedSplit, indices: np.ndarray, num_rows: int, length: int,
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


# --- The training iterator ---------------------------------------------------------

class BatchIterator:
  """Infinite, seeded, resumable iterator over training batches.

  State is {"epoch", "index"} (the next batch to yield): a resumed iterator
  yields exactly what an uninterrupted one would have. A background thread keeps
  `prefetch` batches ready; it stops when the iterator is closed or collected.
  """

  def __init__(self, split: TokenizedSplit, bucket_index: np.ndarray, buckets: Sequence[int],
               tokens_per_batch: int, seed: int, local_devices: int, accum: int,
               process_index: int = 0, process_count: int = 1, prefetch: int = 2):
    if not 0 <= process_index < process_count:
      raise ValueError(f"process_index={process_index} must be in [0, {process_count})")
    if len(split) == 0:
      raise ValueError("the training split is empty (all pairs dropped?); check the data "
                       "and max_source_length/max_target_length")
    self._args = dict(split=split, bucket_index=bucket_index, buckets=list(buckets),
                      tokens_per_batch=tokens_per_batch, seed=seed,
                      local_devices=local_devices, accum=accum, process_index=process_index,
                      process_count=process_count)
    self.divisor = local_devices * accum * process_count
    # The padded row count of each bucket's batches: fixed, so shapes are too.
    self.batch_shapes = {
        length: (local_devices, accum,
                 _round_up(rows_per_batch(tokens_per_batch, length), self.divisor)
                 // self.divisor, length)
        for b, length in enumerate(buckets) if np.any(bucket_index == b)}
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


def _plan(args: dict, epoch: int) -> list[tuple[int, np.ndarray]]:
  """Epoch `epoch`'s plan, remembered in `args` (one epoch at a time)."""
  cached = args.get("_plan")
  if cached is None or cached[0] != epoch:
    cached = (epoch, epoch_plan(args["bucket_index"], args["buckets"],
                                args["tokens_per_batch"], args["seed"], epoch))
    args["_plan"] = cached
  return cached[1]


def _make_batch(args: dict, state: dict) -> tuple[dict[str, np.ndarray], dict]:
  """The batch at `state` and the state after it."""
  epoch, index = state["epoch"], state["index"]
  plan = _plan(args, epoch)
  while index >= len(plan):
    epoch, index = epoch + 1, 0
    plan = _plan(args, epoch)
  b, indices = plan[index]
  length = args["buckets"][b]
  divisor = args["local_devices"] * args["accum"] * args["process_count"]
  num_rows = _round_up(rows_per_batch(args["tokens_per_batch"], length), divisor)
  batch = layout_batch(args["split"], indices, num_rows, length, args["local_devices"],
                       args["accum"], args["process_index"], args["process_count"])
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


# --- The dataset -------------------------------------------------------------------

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
    self.bucket_index = assign_buckets(self.train.src_lengths, self.train.tgt_lengths,
                                       self.buckets)
    self.stats = self._batch_stats()

  def _batch_stats(self) -> dict:
    """Padding efficiency and real tokens per batch over epoch 0's plan."""
    src_len, tgt_len = self.train.src_lengths, self.train.tgt_lengths
    plan = epoch_plan(self.bucket_index, self.buckets, self.cfg.tokens_per_batch,
                      self.cfg.seed, 0)
    src_real = np.array([src_len[ix].sum() for _, ix in plan])
    tgt_real = np.array([tgt_len[ix].sum() for _, ix in plan])
    padded = np.array([rows_per_batch(self.cfg.tokens_per_batch, self.buckets[b])
                       * self.buckets[b] for b, _ in plan])
    shapes = sorted({(rows_per_batch(self.cfg.tokens_per_batch, self.buckets[b]),
                      self.buckets[b]) for b, _ in plan}, key=lambda s: s[1])
    return {
        "train_pairs": len(self.train), "dev_pairs": len(self.dev),
        "test_pairs": len(self.test), "batches_per_epoch": len(plan),
        "padding_efficiency_source": float(src_real.sum() / padded.sum()),
        "padding_efficiency_target": float(tgt_real.sum() / padded.sum()),
        "source_tokens_per_batch": _summary(src_real),
        "target_tokens_per_batch": _summary(tgt_real),
        "batch_shapes": [list(s) for s in shapes],  # [global rows, length], before fillers
    }

  def log_stats(self) -> None:
    s = self.stats
    log.info("Data: %d train pairs (%d empty and %d over-long dropped), %d dev, %d test",
             s["train_pairs"], self.counts.get("empty", 0), self.counts.get("too_long", 0),
             s["dev_pairs"], s["test_pairs"])
    log.info("Batches: %d per epoch; shapes [rows, length] %s", s["batches_per_epoch"],
             s["batch_shapes"])
    log.info("Padding efficiency (real / padded tokens): source %.3f, target %.3f",
             s["padding_efficiency_source"], s["padding_efficiency_target"])
    log.info("Real tokens per batch: source %s, target %s", s["source_tokens_per_batch"],
             s["target_tokens_per_batch"])

  def train_iterator(self, num_devices: int, accum_steps: int = 1, process_index: int = 0,
                     process_count: int = 1, prefetch: int = 2) -> BatchIterator:
    """Batches for `num_devices` local devices (of num_devices * process_count in all)."""
    return BatchIterator(self.train, self.bucket_index, self.buckets,
                         self.cfg.tokens_per_batch, self.cfg.seed, num_devices, accum_steps,
                         process_index, process_count, prefetch)

  def dev_batches(self, num_devices: int, process_index: int = 0, process_count: int = 1,
                  split: str = "dev") -> Iterator[dict[str, np.ndarray]]:
    """The whole split as {"inputs", "targets"} int32 [num_devices, batch, length].

    Same buckets as training but nothing dropped; pairs longer than the last bucket
    go to buckets of cfg.max_len (truncated beyond it, with a warning).
    """
    data = self.dev if split == "dev" else self.test
    longest = int(max(data.src_lengths.max(initial=0), data.tgt_lengths.max(initial=0)))
    buckets = list(self.buckets)
    if longest > buckets[-1]:
      buckets += [b for b in BUCKET_LENGTHS if buckets[-1] < b < self.cfg.max_len]
      buckets.append(self.cfg.max_len)
      if longest > self.cfg.max_len:
        log.warning("%s has pairs of %d tokens; evaluating them truncated to max_len=%d",
                    split, longest, self.cfg.max_len)
    lengths = np.minimum(np.maximum(data.src_lengths, data.tgt_lengths), buckets[-1])
    index = np.searchsorted(np.asarray(buckets), lengths, side="left")
    divisor = num_devices * process_count
    for b, length in enumerate(buckets):
      members = np.flatnonzero(index == b)
      rows = rows_per_batch(self.cfg.tokens_per_batch, length)
      # Every batch of a bucket gets the same number of rows, so the eval step
      # compiles once per bucket, not once per leftover size.
      num_rows = _round_up(rows, divisor)
      for start in range(0, len(members), rows):
        chunk = members[start:start + rows]
        batch = layout_batch(data, chunk, num_rows, length, num_devices, 1, process_index,
                             process_count)
        yield {k: v[:, 0] for k, v in batch.items()}

  def dev_sources(self) -> list[str]:
    return [p[0] for p in self._dev_pairs]

  def dev_references(self) -> list[str]:
    return [p[1] for p in self._dev_pairs]

  def test_sources(self) -> list[str]:
    return [p[0] for p in self._test_pairs]

  def test_references(self) -> list[str]:
    return [p[1] for p in self._test_pairs]


def _summary(values: np.ndarray) -> dict:
  return {"mean": float(values.mean()), "min": int(values.min()), "max": int(values.max())}


def _cache_key(tokenizer: vocab_lib.Tokenizer, source: _Source, cfg) -> str:
  h = hashlib.sha256()
  with open(tokenizer.model_path, "rb") as f:
    h.update(f.read())
  h.update(json.dumps({"version": _CACHE_VERSION, "source": source.signature,
                       "max_source_length": cfg.max_source_length,
                       "max_target_length": cfg.max_target_length},
                      sort_keys=True).encode())
  return h.hexdigest()[:16]


def prepare(cfg, workdir: str) -> Dataset:
  """Vocabulary (cached), token ids (cached), raw dev/test text, and batching stats."""
  source = _resolve_source(cfg, workdir)
  train_pairs: Optional[Pairs] = None

  def load_train() -> Pairs:
    nonlocal train_pairs
    if train_pairs is None:
      train_pairs = source.train()
    return train_pairs

  tokenizer = vocab_lib.build_or_load(cfg.vocab_size, os.path.join(workdir, "vocab"),
                                      load_train, cfg.vocab_type,
                                      cfg.vocab_sample_sentences, cfg.seed)
  dev_pairs, test_pairs = source.dev(), source.test()
  cache_path = os.path.join(workdir, "data", f"tokens-{_cache_key(tokenizer, source, cfg)}.npz")
  if os.path.exists(cache_path):
    splits, counts = _load_cache(cache_path)
    log.info("Loaded token ids from %s", cache_path)
  else:
    start = time.time()
    pairs = load_train()
    train, counts = tokenize_pairs(tokenizer, pairs, cfg.max_source_length,
                                   cfg.max_target_length)
    dev, _ = tokenize_pairs(tokenizer, dev_pairs)
    test, _ = tokenize_pairs(tokenizer, test_pairs)
    seconds = time.time() - start
    counts["seconds"] = seconds
    counts["pairs_per_second"] = (len(pairs) + len(dev_pairs) + len(test_pairs)) / seconds
    splits = {"train": train, "dev": dev, "test": test}
    os.makedirs(os.path.dirname(cache_path), exist_ok=True)
    _save_cache(cache_path, splits, counts)
    log.info("Tokenised %d pairs in %.1f s (%.0f pairs/s); cached in %s",
             len(pairs) + len(dev_pairs) + len(test_pairs), seconds,
             counts["pairs_per_second"], cache_path)
  if counts["empty"] or counts["too_long"]:
    log.info("Dropped from training: %d pairs with an empty side, %d longer than %d/%d "
             "tokens", counts["empty"], counts["too_long"], cfg.max_source_length,
             cfg.max_target_length)
  ds = Dataset(cfg, tokenizer, splits, dev_pairs, test_pairs, counts)
  ds.log_stats()
  return ds
