"""Text lines in, translations out, as the lines arrive and in bounded memory.

    for t in stream(members, tokenizer, lines, search=Search.from_config(cfg)):
      print(t.text)                        # or t.hypotheses: text, score, alignment each

`Translator.translate_stream` (inference/translator.py) is the way to call it;
`stream` is that method's engine, which takes loaded models and search settings.

`lines` is any iterable (a file, stdin, a generator): up to `window` lines are
read, sorted by length into batches of `batch_size`, decoded (`decoding/batch_decoder.py`:
beam search or sampling, one model or an ensemble) and yielded in input order
before the next window is read, so a million-line file needs the memory of one
window. With `grouped=True`, `lines` holds groups of lines that arrived
together (`textio.iter_arrived`: a terminal, a pipe) and each group is a
window of its own, decoded as soon as it is read. Every input line gives one
`Translation`: a blank line gives one empty hypothesis (score 0) without
decoding, and a line longer than the models' max_len positions is split, cropped
or refused (`long_inputs`, inference/long_inputs.py).

Output formats (`format_line`, `format_nbest`), documented in README:
  1-best:  translation                      [TAB alignment]
  n-best:  index TAB hypothesis TAB score   [TAB alignment]   n lines per input line
index is the 0-based input line number (as in fairseq and Marian n-best lists);
score is beam search's length-penalised log-probability (for samples the
model's log-probability of the sample), with 4 decimals; alignment is
"i-j i-j ..." (source word i, output word j; `inference/alignment.py`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from t2t_jax.inference import shortlist as shortlist_lib
from t2t_jax.data import vocab
from t2t_jax.inference import alignment
from t2t_jax.decoding import batch_decoder
from t2t_jax.inference import sampling
from t2t_jax.decoding import sentence_batches
from t2t_jax.ids import strip_eos
from t2t_jax.inference import long_inputs as long_inputs_lib
from t2t_jax.evaluation import text as text_lib
from t2t_jax.inference import stored_programs

log = logging.getLogger(__name__)

# A batch's sources (ids without EOS) -> its EOS-terminated id rows [rows, width].
Shape = Callable[[Sequence[Sequence[int]]], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Hypothesis:
  """One output for a line: its text, score, and word alignment pairs when asked for."""
  text: str
  score: float
  alignment: Optional[list[tuple[int, int]]] = None


@dataclasses.dataclass(frozen=True)
class Translation:
  """The outputs for input line `index` (0-based), best first."""
  index: int
  hypotheses: list[Hypothesis]

  @property
  def text(self) -> str:
    return self.hypotheses[0].text


@dataclasses.dataclass(frozen=True)
class Alignments:
  """Which attention gives word alignments: a decoder layer (negative: from the end), a head
  (None: their mean)."""
  layer: int = -1
  head: Optional[int] = None


# ------------------------------------------------------------------ ids and text


def ids_to_text_and_words(tokenizer: vocab.Tokenizer,
                          ids: Sequence[int]) -> tuple[str, list[int]]:
  """`text.ids_to_text`, and the word of `text.split()` each id belongs to."""
  out, words = alignment.decode_words(tokenizer, text_lib.known_ids(tokenizer, ids))
  return text_lib.one_line(out), words


# ------------------------------------------------------------------ the stream


def _translate_batch(members: Sequence[batch_decoder.Member], tokenizer: vocab.Tokenizer,
                     indices: Sequence[int], sources: Sequence[list[int]],
                     words: Sequence[Optional[list[int]]], search: batch_decoder.Search,
                     batch_size: int, aligned: Optional[Alignments],
                     shape: Optional[Shape],
                     store: Optional[stored_programs.Store],
                     shortlist: Optional[shortlist_lib.Shortlist]) -> list[list[Hypothesis]]:
  inputs = (shape(sources) if shape is not None
            else sentence_batches.source_rows(sources, batch_size,
                                              batch_decoder.max_positions(members)))
  ids = np.zeros(len(inputs), np.int64)
  ids[:len(indices)] = indices
  if search.sample:
    tokens, scores = sampling.decode_batch(members, inputs, search, ids, store=store,
                                           shortlist=shortlist)
  else:
    tokens, scores = batch_decoder.decode_batch(members, inputs, search, store=store,
                                                shortlist=shortlist)
  outputs = [[strip_eos(tokens[b, n]) for n in range(tokens.shape[1])]
             for b in range(len(sources))]
  if aligned is None:
    return [[Hypothesis(text_lib.ids_to_text(tokenizer, out), float(scores[b, n]))
             for n, out in enumerate(row)] for b, row in enumerate(outputs)]
  texts = [[ids_to_text_and_words(tokenizer, out) for out in row] for row in outputs]
  flat = [(b, n) for b in range(len(sources)) for n in range(len(outputs[b]))]
  # The members' cross-attention averaged, as fairseq's ensembles align.
  pairs = alignment.align(
      members, [sources[b] for b, _ in flat], [words[b] for b, _ in flat],
      [outputs[b][n] for b, n in flat], [texts[b][n][1] for b, n in flat],
      layer=aligned.layer, head=aligned.head)
  found = dict(zip(flat, pairs))
  return [[Hypothesis(texts[b][n][0], float(scores[b, n]), found[b, n])
           for n in range(len(outputs[b]))] for b in range(len(sources))]


def _translate_window(members, tokenizer, numbered: Sequence[tuple[int, str]], *,
                      search: batch_decoder.Search, batch_size: int, aligned: Optional[Alignments],
                      in_flight: int, warn: Callable[[str], None],
                      shape: Optional[Shape],
                      store: Optional[stored_programs.Store],
                      shortlist: Optional[shortlist_lib.Shortlist]) -> list[Translation]:
  limit = batch_decoder.max_positions(members) - 1
  indices, lines = [index for index, _ in numbered], [line for _, line in numbered]
  words = alignment.encode_words if aligned is not None else None
  encoded = [text_lib.encode_line(tokenizer, line, limit, indices[k] + 1, warn, words)
             for k, line in enumerate(lines)]
  translate = lambda chunk: _translate_batch(
      members, tokenizer, [indices[k] for k in chunk], [encoded[k][0] for k in chunk],
      [encoded[k][1] for k in chunk], search, batch_size, aligned, shape, store, shortlist)
  lengths = [len(ids) for ids, _ in encoded]
  found = sentence_batches.by_length(translate, lengths, batch_size=batch_size,
                                     in_flight=in_flight,
                                     indices=[k for k, n in enumerate(lengths) if n])
  blank = Hypothesis("", 0.0, None if aligned is None else [])
  return [Translation(indices[k], found[k] if k in found else [blank]) for k in range(len(lines))]


def stream(members: Sequence[batch_decoder.Member], tokenizer: vocab.Tokenizer,
           lines: Iterable[str], *, search: batch_decoder.Search,
           batch_size: int = 64, window: Optional[int] = None,
           alignments: Optional[Alignments] = None,
           in_flight: int = sentence_batches.IN_FLIGHT,
           long_inputs: str = long_inputs_lib.DEFAULT, grouped: bool = False,
           warn: Callable[[str], None] = log.warning,
           shape: Optional[Shape] = None,
           store: Optional[stored_programs.Store] = None,
           shortlist: Optional[shortlist_lib.Shortlist] = None) -> Iterator[Translation]:
  """One `Translation` per line of `lines`, in input order, `window` lines at a time.

  `window` (default 16 batches) bounds the lines held in memory; larger windows
  sort into fuller batches. `grouped`: `lines` holds lists of lines, each
  decoded as soon as it is read (a list longer than `window` in windows).
  `in_flight` batches of a window decode at once (`sentence_batches.ordered_map`).
  `alignments` adds word alignments to every hypothesis. `long_inputs`: "split",
  "crop" or "fail" for a line longer than the models' limit (long_inputs.py).
  Settings are checked here; lines are read as the iterator is. `shape(sources)`
  makes a batch's id rows (default `sentence_batches.source_rows`): a server
  pads into the shapes it has compiled.
  `store`: compiled decoding programs kept there (inference/stored_programs.py).
  `shortlist`: outputs picked among each batch's candidates (inference/shortlist.py).
  """
  members = tuple(members)
  if batch_size < 1:
    raise ValueError(f"batch_size={batch_size} must be >= 1")
  window = 16 * batch_size if window is None else window
  if window < 1:
    raise ValueError(f"window={window} must be >= 1")
  if in_flight < 1:
    raise ValueError(f"in_flight={in_flight} must be >= 1 (1: one batch at a time)")
  for member in members:
    if alignments is not None:
      alignment.check_layer_and_head(member.cfg, alignments.layer, alignments.head)
  pieces = lambda line: text_lib.source_pieces(tokenizer, line)
  fitted = long_inputs_lib.LongInputs(long_inputs, pieces,
                                      batch_decoder.max_positions(members) - 1, warn)
  groups = lines if grouped else _windows(iter(lines), window)
  return fitted.join(_translate_groups(
      members, tokenizer, groups, window=window, fitted=fitted, search=search,
      batch_size=batch_size, aligned=alignments, in_flight=in_flight, warn=warn, shape=shape,
      store=store, shortlist=shortlist))


def _windows(lines: Iterator[str], window: int) -> Iterator[list[str]]:
  while chunk := list(itertools.islice(lines, window)):
    yield chunk


def _translate_groups(members, tokenizer, groups: Iterable[Sequence[str]], *, window: int,
                      fitted: long_inputs_lib.LongInputs,
                      **settings: Any) -> Iterator[Translation]:
  first = 0
  for group in groups:
    for start in range(0, len(group), window):
      numbered = list(enumerate(group[start:start + window], first + start))
      yield from _translate_window(members, tokenizer, fitted.parts(numbered), **settings)
    first += len(group)


# ------------------------------------------------------------------ formats


def _no_tab(text: str) -> str:
  # A tab would shift the columns; as a space it separates the same words.
  return text.replace("\t", " ")


def format_line(translation: Translation, alignments: bool = False) -> str:
  """The 1-best line: the translation, then TAB and its alignment when asked for."""
  best = translation.hypotheses[0]
  if not alignments:
    return best.text
  return f"{_no_tab(best.text)}\t{alignment.format_pairs(best.alignment or [])}"


def format_nbest(translation: Translation, alignments: bool = False) -> list[str]:
  """n-best lines: index TAB hypothesis TAB score [TAB alignment], best first."""
  lines = []
  for hyp in translation.hypotheses:
    fields = [str(translation.index), _no_tab(hyp.text), f"{hyp.score:.4f}"]
    if alignments:
      fields.append(alignment.format_pairs(hyp.alignment or []))
    lines.append("\t".join(fields))
  return lines

