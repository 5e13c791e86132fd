"""Text pairs -> token ids as ragged arrays, cached on disk per vocabulary and source.

Each split is stored once as concatenated int32 ids plus offsets in
`<directory>/tokens-<key>.npz`; the key hashes the SentencePiece model, the
source's signature and the length limits, so a restart with the same key never
touches SentencePiece or the raw training text. A damaged cache is deleted and
made again, with a warning; processes sharing the directory make it once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
import zipfile
import zlib
from typing import Callable, Optional, Sequence

import numpy as np

from t2t_jax.data import vocab as vocab_lib
from t2t_jax.data.sources import Pairs
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

_CACHE_VERSION = 1
SPLITS = ("train", "dev", "test")


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
    tgt = tokenizer.encode_target_batch([p[1] for p in part])
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


def save_cache(path: str, splits: dict[str, TokenizedSplit], counts: dict) -> None:
  """Writes all splits and the drop counts to one .npz, atomically."""
  arrays = {}
  for name, split in splits.items():
    for field in dataclasses.fields(TokenizedSplit):
      arrays[f"{name}/{field.name}"] = getattr(split, field.name)
  arrays["counts"] = np.frombuffer(json.dumps(counts).encode(), np.uint8)
  tmp = f"{path}.tmp{os.getpid()}.npz"
  np.savez(tmp, **arrays)
  os.replace(tmp, path)


def load_cache(path: str, vocab_size: Optional[int] = None,
               target_vocab_size: Optional[int] = None) -> tuple[dict[str, TokenizedSplit], dict]:
  """The cached splits and counts; ValueError when the file is damaged.

  np.savez stores each array with a CRC-32, which zipfile checks on reading;
  the offsets and (given `vocab_size`) the id range are checked here, the targets' against
  `target_vocab_size` where the target side has a vocabulary of its own.
  """
  try:
    with np.load(path) as z:
      splits = {}
      for name in SPLITS:
        splits[name] = TokenizedSplit(*(z[f"{name}/{f.name}"]
                                        for f in dataclasses.fields(TokenizedSplit)))
      counts = json.loads(z["counts"].tobytes().decode())
  except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:
    raise ValueError(f"{type(e).__name__}: {e}") from None
  for name, split in splits.items():
    for ids, offsets, size in ((split.src_ids, split.src_offsets, vocab_size),
                               (split.tgt_ids, split.tgt_offsets, target_vocab_size or vocab_size)):
      if (len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(ids)
          or np.any(np.diff(offsets) < 0)):
        raise ValueError(f"the {name} offsets do not fit the ids")
      if size is not None and len(ids) and (ids.min() < 0 or ids.max() >= size):
        raise ValueError(f"the {name} ids are outside the vocabulary")
  if not isinstance(counts, dict):
    raise ValueError("the counts are not a JSON object")
  return splits, counts


def cache_key(model_path: str, signature: dict, max_source_length: int,
              max_target_length: int) -> str:
  """Hash of the SentencePiece model, the source's signature and the length limits."""
  h = hashlib.sha256()
  with open(model_path, "rb") as f:
    h.update(f.read())
  h.update(json.dumps({"version": _CACHE_VERSION, "source": signature,
                       "max_source_length": max_source_length,
                       "max_target_length": max_target_length},
                      sort_keys=True).encode())
  return h.hexdigest()[:16]


def load_or_tokenize(tokenizer: vocab_lib.Tokenizer, directory: str, signature: dict,
                     train: Callable[[], Pairs], dev: Pairs, test: Pairs,
                     max_source_length: int,
                     max_target_length: int) -> tuple[dict[str, TokenizedSplit], dict]:
  """The three splits' ids from the cache, else tokenised (train filtered) and cached.

  `train` is only called on a cache miss. Returns the splits and the training
  split's counts ("pairs", "empty", "too_long", "kept"; timings when tokenised).
  """
  key = cache_key(tokenizer.model_path, signature, max_source_length, max_target_length)
  path = os.path.join(directory, f"tokens-{key}.npz")

  def cached() -> Optional[tuple[dict[str, TokenizedSplit], dict]]:
    if not os.path.exists(path):
      return None
    try:
      loaded = load_cache(path, tokenizer.vocab_size, tokenizer.target_vocab_size)
    except ValueError as e:
      log.warning("The token cache %s is damaged (%s); tokenising again", path, e)
      os.remove(path)
      return None
    log.info("Loaded token ids from %s", path)
    return loaded

  loaded = cached()
  if loaded is not None:
    return loaded
  # Processes sharing the work directory tokenise once; the others wait, then load.
  with workdir_lib.file_lock(os.path.join(directory, ".locks", os.path.basename(path)),
                              f"tokenising into {path}"):
    loaded = cached()
    if loaded is not None:
      return loaded
    return _tokenize_and_save(tokenizer, path, train, dev, test, max_source_length,
                              max_target_length)


def _tokenize_and_save(tokenizer: vocab_lib.Tokenizer, path: str, train: Callable[[], Pairs],
                       dev: Pairs, test: Pairs, max_source_length: int,
                       max_target_length: int) -> tuple[dict[str, TokenizedSplit], dict]:
  start = time.time()
  train_pairs = train()
  train_split, counts = tokenize_pairs(tokenizer, train_pairs, max_source_length,
                                       max_target_length)
  splits = {"train": train_split, "dev": tokenize_pairs(tokenizer, dev)[0],
            "test": tokenize_pairs(tokenizer, test)[0]}
  seconds = time.time() - start
  total = len(train_pairs) + len(dev) + len(test)
  counts["seconds"] = seconds
  counts["pairs_per_second"] = total / seconds
  os.makedirs(os.path.dirname(path), exist_ok=True)
  save_cache(path, splits, counts)
  log.info("Tokenised %d pairs in %.1f s (%.0f pairs/s); cached in %s", total, seconds,
           counts["pairs_per_second"], path)
  return splits, counts
