"""What decodes behind the server: our JAX search or the work directory's CTranslate2 export.

    engine = JaxEngine(inference.Translator("runs/demo"), batch_size=16)
    engine = CTranslate2Engine.from_workdir("runs/demo", batch_size=16)   # exports on first use
    engine.warm_up(30, Settings(beam_size=4))         # compiles the batch shapes (JAX)
    engine.translate(["a line", ...], Settings(beam_size=4, n_best=2))   # [streaming.Translation]

Both take text lines and give one `streaming.Translation` per line, in order,
so that the batcher, limits, metrics and page in front of them are one. The JAX
engine is `Translator.translate_stream` itself: a line's output is the one
`t2t-translate` gives. CTranslate2 ranks hypotheses with its own length penalty
(log P / |Y|^alpha, docs/export.md): it returns our translations where alpha is
0, and its scores are its own. Word alignments come from our model's
cross-attention in both (CTranslate2's output teacher-forced through it).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import pathlib
import threading
from typing import Any, Optional, Sequence

import jax
import numpy as np

from t2t_jax import configs
from t2t_jax import inference
from t2t_jax.inference import alignment
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import sentence_batches
from t2t_jax.export import ctranslate2 as ctranslate2_lib
from t2t_jax.export import exported_search
from t2t_jax.export import loading
from t2t_jax.ids import EOS_ID, bucket_length
from t2t_jax.inference import streaming
from t2t_jax.evaluation import text as text_lib
from t2t_jax.inference import visualize
from t2t_jax.serve import heap
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

# Where `--engine ctranslate2` keeps the work directory's export.
CTRANSLATE2_DIR = "ctranslate2"
# The batch shapes the JAX engine compiles: row counts (with the batch size) and source
# widths (with the widest one the warm-up needs); a batch pads up into the cheapest one
# compiled. docs/benchmarks.md ("Serving") measures what each costs and saves.
ROWS = (1, 8)
WIDTHS = (16, 32, 64, 128)
# Lines per batch on a CPU unless --max_batch says otherwise: each batch decodes until its
# longest output ends, so small batches of lines of similar length (the batcher's) serve
# the most sentences/s there (docs/benchmarks.md, "Serving"; JAX on a GPU or
# TPU keeps the config's decode_batch_size, not measured).
CPU_MAX_BATCH = {"jax": 8, "ctranslate2": 32}
# A shape's cost, (rows + ROW_OVERHEAD) x (width + WIDTH_OVERHEAD): every row, filler
# or not, is decoded at every step, so a batch's time grows about in proportion to its
# rows, and less than in proportion to its width (docs/benchmarks.md, "Serving").
ROW_OVERHEAD = 3
WIDTH_OVERHEAD = 120


@dataclasses.dataclass(frozen=True)
class Settings:
  """How a request's lines are decoded; only lines with equal settings share a batch."""
  beam_size: int
  n_best: int = 1
  alignments: bool = False


def _search(engine: "JaxEngine | CTranslate2Engine", settings: Settings) -> batch_decoder.Search:
  # The checks of the command line (n_best <= beam_size, ...), with their messages.
  return batch_decoder.Search.from_config(engine.cfg, beam_size=settings.beam_size,
                                       n_best=settings.n_best, max_len_a=engine.max_len_a)


def _count_pieces(engine: "Engine", text: str) -> int:
  """Pieces of an output (without EOS): the target tokens the metrics count."""
  return len(engine.tokenizer.encode_target(text)) - 1 if text.strip() else 0


def _source_tokens(engine: "Engine", line: str) -> int:
  """A line's pieces and EOS: its share of a batch's token budget (the batcher's)."""
  return len(engine.tokenizer.encode(line))


class JaxEngine:
  """Our beam search (`Translator.translate_stream`), one batch of lines per call.

  Once `warm_up` has compiled shapes for a request's settings, its batches are
  padded into the cheapest compiled shape that holds them (never compiling on a
  request's time); settings never warmed up compile their shapes on first use.
  """

  name = "jax"

  def __init__(self, translator: inference.Translator, batch_size: int, max_len_a: float = 1.0,
               rows: Optional[Sequence[int]] = None):
    """`max_len_a`: outputs have at most ceil(max_len_a x (source + EOS)) + max_decode_extra
    tokens (`batch_decoder.output_limits`), as with t2t-translate's --max_len_a. `rows`: the row
    counts the warm-up compiles (default `ROWS` and batch_size)."""
    self.translator, self.cfg, self.tokenizer = translator, translator.cfg, translator.tokenizer
    if translator.shortlist is not None:
      # Each batch shape's lists take one size, so that the warm-up compiles its programs.
      translator.shortlist = translator.shortlist.by_shapes()
    self.batch_size, self.max_len_a = batch_size, max_len_a
    self.rows = sorted({min(r, batch_size) for r in (ROWS if rows is None else rows)}
                       | {batch_size})
    self.positions = batch_decoder.max_positions(translator.members)
    self._compiled: dict[Settings, set[tuple[int, int]]] = {}   # shapes whose programs are
    self._compiled_lock = threading.Lock()                      # all compiled, per settings

  @staticmethod
  def default_max_batch(cfg: configs.TransformerConfig) -> int:
    """Lines per batch unless told (`CPU_MAX_BATCH` on a CPU, else the config's)."""
    return CPU_MAX_BATCH["jax"] if jax.default_backend() == "cpu" else cfg.decode_batch_size

  def check(self, settings: Settings) -> None:
    """ValueError naming the setting the model cannot decode with."""
    _search(self, settings)

  count_pieces = _count_pieces
  source_tokens = _source_tokens

  def translate(self, lines: Sequence[str], settings: Settings) -> list[streaming.Translation]:
    # One batch per call (the batcher sends at most batch_size lines); the batcher's
    # workers keep several batches in flight, as `in_flight` does for t2t-translate.
    with self._compiled_lock:
      compiled = sorted(self._compiled.get(settings, ()))
    # Every row count is compiled at the widest width first (`shapes`), so that the most
    # rows compiled hold any batch of the lines warmed up for.
    rows = max((r for r, _ in compiled), default=self.batch_size)
    shape = functools.partial(self._padded, compiled) if compiled else None
    return list(self.translator.translate_stream(
        lines, n_best=settings.n_best, alignments=settings.alignments,
        beam_size=settings.beam_size, max_len_a=self.max_len_a, batch_size=rows,
        window=max(len(lines), 1), in_flight=1, shape=shape))

  def _padded(self, compiled: list[tuple[int, int]],
              sources: Sequence[Sequence[int]]) -> np.ndarray:
    """The rows of `sources` in the cheapest compiled shape that holds them; the shape
    `sentence_batches.source_rows` makes when none does (a line longer than the warm-up's)."""
    inputs = sentence_batches.source_rows(sources, self.batch_size, self.positions)
    fits = [(r, w) for r, w in compiled if r >= len(sources) and w >= inputs.shape[1]]
    if not fits:
      return inputs
    rows, width = min(fits, key=lambda shape: (
        (shape[0] + ROW_OVERHEAD) * (shape[1] + WIDTH_OVERHEAD), shape))
    padded = np.zeros((rows, width), inputs.dtype)
    padded[:len(sources), :inputs.shape[1]] = inputs[:len(sources)]
    return padded

  def shapes(self, max_pieces: int) -> list[tuple[int, int]]:
    """The (rows, width) batch shapes the warm-up compiles for lines of at most `max_pieces`
    pieces, in order: one row at the widest width first (any line then decodes), then
    every row count at the widest width before its narrower ones (so that any batch of
    that many lines decodes), the largest first."""
    if max_pieces < 1:
      return []
    widest = min(bucket_length(min(max_pieces, self.positions - 1) + 1), self.positions)
    widths = [widest] + sorted((w for w in WIDTHS if w < widest), reverse=True)
    rows = [1] + sorted(set(self.rows) - {1}, reverse=True)
    return [(r, widest) for r in rows] + [(r, w) for r in sorted(rows, reverse=True)
                                          for w in widths[1:]]

  def warm_up(self, max_pieces: int, settings: Settings, count: Optional[int] = None,
              skip: int = 0, stop: Optional[threading.Event] = None) -> int:
    """Compiles (or reads from the compilation cache) the programs of `shapes(max_pieces)`
    [skip:skip + count] (default: all) with `settings`; returns how many programs. Once
    `stop` is set, no further shape.

    Every chunk of the search (`batch_decoder.chunk_lengths`) of each shape, so that no
    request pays a compilation; each program runs for a step at most
    (`batch_decoder.compile_beam_programs`), or is loaded from the translator's stored
    programs (inference/stored_programs.py). With a shortlist, the programs over the one list
    size each shape's batches take (`Shortlist.shape_size`). Requests use each shape as soon
    as it is done.
    """
    search = _search(self, settings)
    shapes = self.shapes(max_pieces)
    made = 0
    for shape in shapes[skip:None if count is None else skip + count]:
      if stop is not None and stop.is_set():
        break
      made += batch_decoder.compile_beam_programs(self.translator.members, *shape, search,
                                                  self.translator.programs,
                                                  self.translator.shortlist)
      with self._compiled_lock:
        self._compiled.setdefault(settings, set()).add(shape)
      heap.release()   # the compiler's peak, freed but held by the C heap
    return made


def _export_is_current(workdir: pathlib.Path, model_bin: pathlib.Path) -> bool:
  # A new checkpoint (or average) adds an entry to its folder, which updates the folder's time.
  if not model_bin.is_file():
    return False
  folders = [workdir / name for name in ("checkpoints", "averaged") if (workdir / name).is_dir()]
  return all(folder.stat().st_mtime <= model_bin.stat().st_mtime for folder in folders)


class CTranslate2Engine:
  """A CTranslate2 model directory exported from the work directory, fed our pieces."""

  name = "ctranslate2"

  def __init__(self, model_dir: str | os.PathLike, translator: inference.Translator,
               batch_size: int, threads: int = 0, max_len_a: float = 1.0, workers: int = 3):
    """`max_len_a`: as for `JaxEngine`; each line's max_decoding_length is our limit.
    `workers`: batches translated at once (the batcher's workers), each by a replica of
    its own with `threads` // `workers` threads (`threads` 0: every core)."""
    ctranslate2 = loading.require("ctranslate2")
    self.translator, self.cfg, self.tokenizer = translator, translator.cfg, translator.tokenizer
    self.batch_size, self.max_len_a = batch_size, max_len_a
    # One replica per batch in flight, one thread each, translates more batches than one
    # replica with every thread, and steadily, and it needs no lock (measured on a 2-core
    # CPU: docs/benchmarks.md, "Serving", CTranslate2's threads).
    threads = threads or os.cpu_count() or 1
    self.model = ctranslate2.Translator(str(model_dir), device="cpu", compute_type="float32",
                                        inter_threads=workers,
                                        intra_threads=max(1, threads // workers))
    self.tokens = json.loads((pathlib.Path(model_dir) / "shared_vocabulary.json").read_text())
    self.ids = {token: i for i, token in enumerate(self.tokens)}
    config = json.loads((pathlib.Path(model_dir) / "config.json").read_text())
    # An export that adds the source EOS itself takes the pieces without it.
    self.append_eos = not config.get("add_source_eos", False)

  @classmethod
  def from_workdir(cls, workdir: str | os.PathLike, translator: inference.Translator,
                   batch_size: int, threads: int = 0, average: bool = True,
                   max_len_a: float = 1.0, workers: int = 3) -> "CTranslate2Engine":
    """The export in WORKDIR/ctranslate2, written by export/ctranslate2.py when absent
    or older than the work directory's checkpoints.

    Servers starting together on one work directory take turns (a lock beside the export):
    one writes it while the others wait, so none loads a half-written export.
    """
    model_dir = pathlib.Path(workdir) / CTRANSLATE2_DIR
    with workdir_lib.file_lock(model_dir.with_name(CTRANSLATE2_DIR + ".lock"),
                               f"exporting {workdir} to CTranslate2"):
      if not _export_is_current(pathlib.Path(workdir), model_dir / "model.bin"):
        log.info("exporting %s to CTranslate2 in %s", workdir, model_dir)
        ctranslate2_lib.export_ctranslate2(workdir, model_dir, average=average, force=True)
      return cls(model_dir, translator, batch_size, threads, max_len_a, workers)

  @staticmethod
  def default_max_batch(cfg: configs.TransformerConfig) -> int:
    """Lines per batch unless told (it decodes on the CPU)."""
    del cfg
    return CPU_MAX_BATCH["ctranslate2"]

  def check(self, settings: Settings) -> None:
    _search(self, settings)

  count_pieces = _count_pieces
  source_tokens = _source_tokens

  def translate(self, lines: Sequence[str], settings: Settings) -> list[streaming.Translation]:
    search = _search(self, settings)
    limit = batch_decoder.max_positions(self.translator.members) - 1
    words = alignment.encode_words if settings.alignments else None
    encoded = [text_lib.encode_line(self.tokenizer, line, limit, k + 1, words=words)
               for k, line in enumerate(lines)]
    hypotheses = [[streaming.Hypothesis("", 0.0, [] if settings.alignments else None)]
                  for _ in lines]
    todo = [k for k, (ids, _) in enumerate(encoded) if ids]
    sources = [[*encoded[k][0], EOS_ID] for k in todo]
    limits = exported_search.output_limits(self.cfg, sources, search.max_decode_extra,
                                   search.max_len_a)
    longest = max(limits, default=1)
    found = self._decode(sources, [longest] * len(sources), search)
    # CTranslate2 takes one length limit per call: a line that reached a shorter limit of
    # its own under the batch's longest is decoded again under its own, so that it is cut
    # where ours is.
    again = [g for g, (ids, _) in enumerate(h[0] for h in found)
             if len(ids) + 1 >= limits[g] < longest]
    if again:
      for g, hyps in zip(again, self._decode([sources[g] for g in again],
                                             [limits[g] for g in again], search)):
        found[g] = hyps
    outputs = {todo[g]: hyps for g, hyps in enumerate(found)}
    for k, found in outputs.items():
      if settings.alignments:
        hypotheses[k] = self._aligned(encoded[k], found)
      else:
        hypotheses[k] = [streaming.Hypothesis(text_lib.ids_to_text(self.tokenizer, ids), score)
                         for ids, score in found]
    return [streaming.Translation(k, h) for k, h in enumerate(hypotheses)]

  def _decode(self, sources: list[list[int]], limits: list[int], search: batch_decoder.Search
              ) -> list[list[tuple[list[int], float]]]:
    """Each source's hypotheses (ids, score) under its limit: one translate_batch per limit
    (`exported_search.batches`), all the sources at once when they share it."""
    found: list[list[tuple[list[int], float]]] = [[] for _ in sources]
    for max_length, group in exported_search.batches(limits, len(sources)):
      pieces = [[self.tokens[t] for t in sources[g][:-1]] + (["</s>"] if self.append_eos else [])
                for g in group]
      results = self.model.translate_batch(
          pieces, beam_size=search.beam_size, num_hypotheses=search.n_best,
          length_penalty=search.alpha, max_decoding_length=max_length,
          min_decoding_length=search.min_len, return_scores=True,
          max_batch_size=self.batch_size)
      for g, result in zip(group, results):
        found[g] = [([self.ids[p] for p in hyp], float(score))
                    for hyp, score in zip(result.hypotheses, result.scores)]
    return found

  def _aligned(self, source: tuple[list[int], Optional[list[int]]],
               found: list[tuple[list[int], float]]) -> list[streaming.Hypothesis]:
    texts = [streaming.ids_to_text_and_words(self.tokenizer, ids) for ids, _ in found]
    pairs = alignment.align(self.translator.members, [source[0]] * len(found),
                            [source[1]] * len(found), [ids for ids, _ in found],
                            [words for _, words in texts])
    return [streaming.Hypothesis(text, score, p)
            for (text, _), (_, score), p in zip(texts, found, pairs)]

  def warm_up(self, max_pieces: int, settings: Settings, count: Optional[int] = None,
              skip: int = 0, stop: Optional[threading.Event] = None) -> int:
    del max_pieces, settings, count, skip, stop   # CTranslate2 compiles nothing
    return 0


Engine = JaxEngine | CTranslate2Engine


def attention(translator: inference.Translator, source: str, target: str, *, layer: int,
              head: Optional[int]) -> dict[str, Any]:
  """One decoder layer's cross-attention [target pieces + EOS, source pieces + EOS] of our
  model for (source, target), the pieces' labels and words, and the word alignment."""
  cfg = translator.cfg
  limit = batch_decoder.max_positions(translator.members) - 1
  source_ids, source_words = text_lib.encode_line(translator.tokenizer, source, limit, 1,
                                                  words=alignment.encode_words)
  target_ids, target_words = text_lib.encode_line(translator.tokenizer, target, limit, 1,
                                                  words=alignment.encode_words, target=True)
  if not source_ids or not target_ids:
    raise ValueError("source and target must both have words")
  inputs = sentence_batches.source_rows([source_ids], 1, cfg.max_len)
  targets = sentence_batches.source_rows([target_ids], 1, cfg.max_len)
  weights = alignment.cross_attention(cfg.model, translator.params, inputs, targets, layer=layer,
                                      head=head)[0]       # [tgt, src]
  weights = weights[:len(target_ids) + 1, :len(source_ids) + 1]
  pairs = alignment.hard_alignment(weights, source_words, target_words)
  label = lambda ids: visualize.token_labels(translator.tokenizer, [*ids, EOS_ID])
  return {"source_pieces": label(source_ids), "target_pieces": label(target_ids),
          "source_words": source_words, "target_words": target_words,
          "weights": np.round(weights.astype(float), 4).tolist(),
          "alignment": [list(p) for p in pairs]}
