"""A lexical shortlist: which target pieces a batch's source pieces may translate into.

    table = build(tokenizer, pairs, per_source=100, frequent=100)   # once, from training text
    save(table, path); table = load(path, tokenizer)                 # WORKDIR/vocab/shortlist.npz
    ids = table.batch_ids(inputs)          # [size]: a batch's candidates, ascending, then FILLER

As Marian's `--shortlist` (lex.s2t: the `first` most frequent target words and
the `best` translations of each source word) and CTranslate2's vocabulary map
(`vmap.txt`, `use_vmap`): a search restricted to a batch's candidates computes
the output projection over those rows only (decoding/batch_decoder.py). The
candidates of a batch are the `frequent` most frequent target pieces, EOS and
UNK (which CTranslate2 always adds too), and for each source piece in the batch
its `per_source` most associated target pieces (the frequent ones go on, by id, into pieces
the targets never use: `frequent` = the vocabulary size lists every id); and padding, which
is never
picked but stays in the normaliser as over the whole vocabulary (so a table
holding every piece decodes as the whole vocabulary does). Ascending, padding and
EOS come first: the search runs over a batch's list, and its positions 0 and 1
are padding and EOS as the ids are.

Association is counted once per sentence pair: c(s, t) the pairs holding source
piece s and target piece t, c(s) and c(t) the pairs holding each, and a source
piece's targets are ranked by the Dice coefficient 2 c(s, t) / (c(s) + c(t)),
ties to the lower id. Unlike c(s, t) alone, it does not rank every source
piece's targets by their frequency (those are in the frequent list anyway).
The counts are merged chunk by chunk as sorted (key, count) arrays, so memory
grows with the distinct co-occurring pairs, never with vocab^2.

Sizes are padded to `SIZES` (1, 1.5, 2, 3, 4, 6, ... x 256) with FILLER, so a
few programs compile; the table maps the source side's ids to the target side's (one
shared SentencePiece id space, or each side's own for separate vocabularies) and records
which model it was built with.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import os
import pathlib
import time
from typing import Iterable, Optional

import numpy as np

from t2t_jax.data import sources
from t2t_jax.data import vocab as vocab_lib
from t2t_jax.ids import EOS_ID, FILLER, PAD_ID, UNK_ID
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

FILE = pathlib.Path("vocab") / "shortlist.npz"   # in a work directory
BUILD = "t2t-shortlist --workdir {workdir} [--train SRC,TGT]"
PER_SOURCE = 100
FREQUENT = 100
# Always candidates: padding (never picked, in the normaliser), the end of a sentence and
# the unknown piece (CTranslate2's fixed ones).
ALWAYS = (PAD_ID, EOS_ID, UNK_ID)
SPECIAL = (PAD_ID, EOS_ID, UNK_ID)
_SMALLEST = 256
_CHUNK = 20_000


def sizes(vocab_size: int) -> list[int]:
  """The shortlist sizes a batch's candidates are padded to: 256, 384, 512, 768, ... then
  vocab_size (no larger)."""
  out, n = [], _SMALLEST
  while n < vocab_size:
    out += [n, n * 3 // 2]
    n *= 2
  return sorted({min(s, vocab_size) for s in out} | {vocab_size})


@dataclasses.dataclass(frozen=True)
class Shortlist:
  """per_source [source vocab, K] int32: each source id's candidates (target ids), best first
  (FILLER after); frequent [N] int32: the most frequent target ids, most frequent first.
  `by_shape`: every batch's list is padded to the size any batch of its shape fits
  (`shape_size`), so that each batch shape has one program, compiled ahead (a server's
  warm-up: `by_shapes`). `target_size`: the target side's vocabulary size where it has its
  own (None: the source's)."""
  per_source: np.ndarray
  frequent: np.ndarray
  spm_sha256: str = ""
  by_shape: bool = False
  target_size: Optional[int] = None

  @property
  def vocab_size(self) -> int:
    """The source side's ids."""
    return self.per_source.shape[0]

  @property
  def target_vocab_size(self) -> int:
    return self.vocab_size if self.target_size is None else self.target_size

  def candidates(self, inputs: np.ndarray) -> np.ndarray:
    """The sorted candidate ids [n] of a batch of source ids [batch, src] (any shape):
    padding and EOS first, then the others (`ALWAYS` included)."""
    sources = np.unique(np.asarray(inputs))
    sources = sources[(sources >= 0) & (sources < self.vocab_size)]
    listed = np.concatenate([self.per_source[sources].ravel(), self.frequent,
                             np.asarray(ALWAYS, np.int32)])
    listed = np.unique(listed)
    return listed[listed != FILLER].astype(np.int32)

  def batch_ids(self, inputs: np.ndarray) -> np.ndarray:
    """`candidates` padded with FILLER to the smallest of `sizes` that holds them (with
    `by_shape`: to `shape_size` of the batch's shape) [size] int32."""
    listed = self.candidates(inputs)
    least = self.shape_size(*np.shape(inputs)) if self.by_shape else len(listed)
    size = next(s for s in sizes(self.target_vocab_size) if s >= max(least, len(listed)))
    return np.concatenate([listed, np.full(size - len(listed), FILLER, np.int32)])

  def shape_size(self, rows: int, width: int) -> int:
    """The shortlist size that holds the candidates of any batch [rows, width] (EOS in
    every row): all of `ALWAYS` and the frequent ids, and the most entries a source id has
    for each of the batch's at most rows x (width - 1) source ids (those with entries)."""
    entries = (self.per_source != FILLER).sum(axis=1)
    sources = min(rows * max(width - 1, 0), int((entries > 0).sum()))
    bound = len(np.union1d(self.frequent, ALWAYS)) + sources * int(entries.max(initial=0))
    targets = self.target_vocab_size
    return next(s for s in sizes(targets) if s >= min(bound, targets))

  def by_shapes(self) -> "Shortlist":
    """This table with `by_shape` on."""
    return dataclasses.replace(self, by_shape=True)


# ------------------------------------------------------------------------ counting


def _sentence_sets(rows: list[list[int]], vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
  """Each row's distinct non-special ids: (sentence index, id) [n] each, by sentence then id."""
  lengths = np.fromiter(map(len, rows), np.int64, len(rows))
  ids = np.fromiter(itertools.chain.from_iterable(rows), np.int64, int(lengths.sum()))
  sentence = np.repeat(np.arange(len(rows)), lengths)
  keys = np.unique((sentence * vocab_size + ids)[~np.isin(ids, SPECIAL)])
  return keys // vocab_size, keys % vocab_size


def _pair_counts(src: list[list[int]], tgt: list[list[int]], source_size: int,
                 target_size: int) -> tuple[np.ndarray, np.ndarray]:
  """Sentence pairs holding each (source id, target id): sorted keys s * target_size + t [n],
  counts [n]."""
  s_sent, s_ids = _sentence_sets(src, source_size)
  t_sent, t_ids = _sentence_sets(tgt, target_size)
  t_per = np.bincount(t_sent, minlength=len(tgt))                     # targets per sentence
  t_start = np.concatenate([[0], np.cumsum(t_per)[:-1]])
  repeats = t_per[s_sent]                         # each source entry meets its pair's targets
  first = np.repeat(np.cumsum(repeats) - repeats, repeats)
  within = np.arange(int(repeats.sum())) - first
  targets = t_ids[np.repeat(t_start[s_sent], repeats) + within]
  return np.unique(np.repeat(s_ids, repeats) * target_size + targets, return_counts=True)


def _merge(a: tuple[np.ndarray, np.ndarray],
           b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
  keys, where = np.unique(np.concatenate([a[0], b[0]]), return_inverse=True)
  return keys, np.bincount(where, np.concatenate([a[1], b[1]]), len(keys)).astype(np.int64)


def _ranked(keys: np.ndarray, counts: np.ndarray, source_count: np.ndarray,
            target_count: np.ndarray, per_source: int) -> np.ndarray:
  """[source vocab, per_source] int32: each source id's targets by Dice, best first (FILLER
  after)."""
  src, tgt = keys // len(target_count), keys % len(target_count)
  dice = 2.0 * counts / (source_count[src] + target_count[tgt])
  order = np.lexsort((tgt, -dice, src))
  src, tgt = src[order], tgt[order]
  starts = np.searchsorted(src, src, side="left")
  rank = np.arange(len(src)) - starts
  keep = rank < per_source
  table = np.full((len(source_count), per_source), FILLER, np.int32)
  table[src[keep], rank[keep]] = tgt[keep]
  return table


def build(tokenizer: vocab_lib.Tokenizer, pairs: Iterable[tuple[str, str]], *,
          per_source: int = PER_SOURCE, frequent: int = FREQUENT,
          chunk: int = _CHUNK) -> Shortlist:
  """The shortlist of a parallel corpus of (source, target) text lines, `chunk` pairs at a time."""
  if per_source < 1 or frequent < 0:
    raise ValueError(f"per_source={per_source} must be >= 1 and frequent={frequent} >= 0")
  source_size, target_size = tokenizer.vocab_size, tokenizer.target_vocab_size
  source_count = np.zeros(source_size, np.int64)
  target_count = np.zeros(target_size, np.int64)
  tokens = np.zeros(target_size, np.int64)
  runs: list[tuple[np.ndarray, np.ndarray]] = []  # sizes shrink down the list: merges stay cheap
  pairs = iter(pairs)
  while batch := list(itertools.islice(pairs, chunk)):
    src = tokenizer.encode_batch([s for s, _ in batch])
    tgt = tokenizer.encode_target_batch([t for _, t in batch])
    source_count += np.bincount(_sentence_sets(src, source_size)[1], minlength=source_size)
    target_count += np.bincount(_sentence_sets(tgt, target_size)[1], minlength=target_size)
    tokens += np.bincount(np.fromiter(itertools.chain.from_iterable(tgt), np.int64),
                          minlength=target_size)
    runs.append(_pair_counts(src, tgt, source_size, target_size))
    while len(runs) > 1 and len(runs[-2][0]) <= 2 * len(runs[-1][0]):
      runs.append(_merge(runs.pop(), runs.pop()))
  keys, counts = (np.zeros(0, np.int64), np.zeros(0, np.int64))
  for run in runs:
    keys, counts = _merge((keys, counts), run)
  # Most frequent first, then the pieces the targets never use (by id), so that `frequent`
  # = the vocabulary size lists every id: the whole vocabulary's search exactly.
  by_frequency = np.lexsort((np.arange(target_size), -tokens))
  most = by_frequency[~np.isin(by_frequency, SPECIAL)][:frequent]
  return Shortlist(_ranked(keys, counts, source_count, target_count, per_source),
                   most.astype(np.int32), spm_sha256(tokenizer.model_path),
                   target_size=target_size if tokenizer.separate else None)


# ------------------------------------------------------------------------ storing


def spm_sha256(model_path: str | os.PathLike) -> str:
  """The SentencePiece model's digest, which a table records and `load` checks."""
  return hashlib.sha256(pathlib.Path(model_path).read_bytes()).hexdigest()


def save(table: Shortlist, path: str | os.PathLike) -> pathlib.Path:
  """Writes `table` as .npz (per_source, frequent, spm_sha256, and target_size where the target
  side has its own vocabulary), atomically."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + ".tmp.npz")
  own = {} if table.target_size is None else {"target_size": np.asarray(table.target_size)}
  np.savez(tmp, per_source=table.per_source, frequent=table.frequent,
           spm_sha256=np.asarray(table.spm_sha256), **own)
  os.replace(tmp, path)
  return path


def load(path: str | os.PathLike, tokenizer: Optional[vocab_lib.Tokenizer] = None) -> Shortlist:
  """The table at `path` (a work directory's `FILE`); FileNotFoundError (saying how to build
  one) when there is none,
  ValueError when it was built with another SentencePiece model than `tokenizer`'s."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"no shortlist at {path}: build one with "
                            + BUILD.format(workdir=path.parent.parent))
  with np.load(path) as f:
    table = Shortlist(f["per_source"].astype(np.int32), f["frequent"].astype(np.int32),
                      str(f["spm_sha256"]),
                      target_size=int(f["target_size"]) if "target_size" in f else None)
  if tokenizer is not None and table.spm_sha256 != spm_sha256(tokenizer.model_path):
    raise ValueError(f"{path} was built with another SentencePiece model than "
                     f"{tokenizer.model_path}: build it again with "
                     + BUILD.format(workdir=path.parent.parent))
  return table


def workdir_table(workdir: str | os.PathLike,
                  tokenizer: Optional[vocab_lib.Tokenizer] = None) -> Shortlist:
  """The shortlist of a work directory (`FILE`), checked against its tokenizer."""
  return load(pathlib.Path(workdir) / FILE, tokenizer)


def build_for_workdir(workdir: str | os.PathLike, train: Optional[str] = None, *,
                      per_source: int = PER_SOURCE, frequent: int = FREQUENT) -> pathlib.Path:
  """Builds and saves a work directory's table (`FILE`) with its SentencePiece model, from
  `train` ("src_path,tgt_path" or a .tsv, as `sources.read_pairs`) or the run's own training
  data; returns its path."""
  workdir = pathlib.Path(workdir)
  if not (workdir / "vocab" / "spm.model").is_file():
    raise FileNotFoundError(f"{workdir / 'vocab' / 'spm.model'} not found: "
                            f"{workdir_lib.TRAIN_FIRST}")
  tokenizer = vocab_lib.load(str(workdir / "vocab"))
  cfg = workdir_lib.load_config(workdir)
  if not train and cfg.dataset == "text" and not cfg.train_files:
    raise ValueError(f"{workdir} has no training text of its own (an imported model has none): "
                     "pass parallel text to count in, --train SRC,TGT")
  pairs = sources.read_pairs(train) if train else sources.get_source(cfg, str(workdir)).train()
  start = time.time()
  table = build(tokenizer, pairs, per_source=per_source, frequent=frequent)
  path = save(table, workdir / FILE)
  log.info("Wrote %s (%d pairs, %d per source, %d frequent) in %.1f s", path, len(pairs),
           per_source, len(table.frequent), time.time() - start)
  return path


def vocabulary_map(table: Shortlist, pieces: list[str]) -> str:
  """The table as CTranslate2's vocabulary map (vmap.txt): a line "piece TAB candidates" per
  source piece with candidates (space-separated pieces), and one with an empty key for the
  candidates of every batch (the frequent ones). One vocabulary: `pieces` name both sides."""
  if table.target_size is not None:
    raise ValueError("a vocabulary map names one vocabulary's pieces; this shortlist maps a "
                     "source vocabulary to a target vocabulary of its own")
  lines = ["\t" + " ".join(pieces[i] for i in table.frequent)]
  for source in range(table.vocab_size):
    listed = table.per_source[source]
    listed = listed[listed != FILLER]
    if len(listed) and source not in SPECIAL:
      lines.append(pieces[source] + "\t" + " ".join(pieces[i] for i in listed))
  return "".join(line + "\n" for line in lines)
