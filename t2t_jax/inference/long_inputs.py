"""What happens to a line longer than the model's limit: split it, crop it, or fail.

    fitted = LongInputs("split", pieces=lambda text: len(sp.encode(text)), limit=127)
    parts = fitted.parts([(0, line), (1, other)])    # (index, text): several per long line
    for t in fitted.join(translations_of(parts)):    # one Translation per line again
      ...

A model has `max_len` positions; a source uses one per piece and one for EOS,
so `limit` = max_len - 1 pieces fit. The policies (`t2t-translate --long_inputs`):
  split (the default)  the line is cut at sentence-like boundaries (after . ! ? ; :
                       and their CJK forms, then after commas and dashes, then
                       between words, then between characters) into the fewest
                       parts, in order, each of which fits; the parts are
                       translated in one batch with the other lines and their
                       translations joined with a space. The k-th hypothesis
                       of the line joins its parts' k-th; its score is the sum
                       of theirs, its alignment theirs with the word positions
                       shifted. Nothing is lost; a warning names the line.
  crop                 the line's first `limit` pieces are translated, with a
                       warning naming the line (`text.encode_line`).
  fail                 a ValueError naming the line, before its window is translated.
Pure Python: the piece count is a function the caller passes.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any, Callable, Iterable, Iterator, Sequence

log = logging.getLogger(__name__)

POLICIES = ("split", "crop", "fail")
DEFAULT = "split"

Span = tuple[int, int]

# Where a part may start, strongest first: after the end of a sentence (with
# closing quotes and brackets), after a clause (comma, dash), between words.
# The last resort, between any two characters, is `_cut_characters`.
_BOUNDARIES = (
    re.compile(r"(?<=[.!?…;:])[\"'”’»)\]]*\s+|(?<=[。！？；])\s*"),
    re.compile(r"(?<=[,，、،])\s*|\s+[-–—]+\s+"),
    re.compile(r"\s+"),
)


def check_policy(policy: str) -> None:
  if policy not in POLICIES:
    raise ValueError(f"long_inputs={policy!r}: choose one of {', '.join(POLICIES)}")


def _strip(text: str, start: int, end: int) -> Span:
  while start < end and text[start].isspace():
    start += 1
  while end > start and text[end - 1].isspace():
    end -= 1
  return start, end


def _cut_characters(text: str, start: int, end: int, fits: Callable[[str], bool]) -> list[Span]:
  spans = []
  while start < end:
    low, high = start + 1, end       # the longest prefix that fits (one character always does)
    while low < high:
      middle = (low + high + 1) // 2
      low, high = (middle, high) if fits(text[start:middle]) else (low, middle - 1)
    spans.append(_strip(text, start, low))
    start = _strip(text, low, end)[0]
  return [span for span in spans if span[0] < span[1]]


def _split(text: str, start: int, end: int, fits: Callable[[str], bool], level: int) -> list[Span]:
  if fits(text[start:end]):
    return [(start, end)]
  if level == len(_BOUNDARIES):
    return _cut_characters(text, start, end, fits)
  cuts = [m.end() for m in _BOUNDARIES[level].finditer(text, start, end) if start < m.end() < end]
  segments = [_strip(text, a, b) for a, b in zip([start, *cuts], [*cuts, end])]
  spans: list[Span] = []
  joinable = False                   # whether the last span may take the next segment
  for a, b in (s for s in segments if s[0] < s[1]):
    if joinable and fits(text[spans[-1][0]:b]):
      spans[-1] = (spans[-1][0], b)
    elif fits(text[a:b]):
      spans.append((a, b))
      joinable = True
    else:
      spans.extend(_split(text, a, b, fits, level + 1))
      joinable = False
  return spans


def split_spans(text: str, fits: Callable[[str], bool]) -> list[Span]:
  """(start, end) character spans of `text`, in order, each fitting; few and at strong boundaries.

  Consecutive sentences share a part while they fit (the model sees as much
  context as it can); whitespace between parts is left out.
  """
  start, end = _strip(text, 0, len(text))
  return _split(text, start, end, fits, 0) if start < end else []


def _words_before(text: str, position: int) -> int:
  """Whitespace words of `text` that end before `position` (a word cut at `position` is not)."""
  words = len(text[:position].split())
  return words - 1 if 0 < position < len(text) and not text[position - 1].isspace() else words


@dataclasses.dataclass
class LongInputs:
  """One policy applied to a stream of numbered lines, and the joining of split lines.

  `pieces(text)`: how many source pieces `text` makes (without EOS); `limit`:
  how many fit. `parts` remembers each split line until `join` has joined it.
  """
  policy: str
  pieces: Callable[[str], int]
  limit: int
  warn: Callable[[str], None] = log.warning
  _offsets: dict[int, list[int]] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    check_policy(self.policy)

  def parts(self, lines: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """(index, text) of the lines, a long line's parts in its place under its index."""
    out = []
    for index, line in lines:
      if self.policy == "crop" or not line.strip():
        out.append((index, line))
        continue
      count = self.pieces(line)
      if count <= self.limit:
        out.append((index, line))
      elif self.policy == "fail":
        raise ValueError(f"line {index + 1} has {count} pieces, more than the model's "
                         f"{self.limit}: shorten it, or translate with --long_inputs split "
                         "(or crop)")
      else:
        spans = split_spans(line, lambda text: self.pieces(text) <= self.limit)
        self.warn(f"line {index + 1} has {count} pieces, more than the model's {self.limit}: "
                  f"translated in {len(spans)} parts, joined")
        self._offsets[index] = [_words_before(line, a) for a, _ in spans]
        out.extend((index, line[a:b]) for a, b in spans)
    return out

  def join(self, translations: Iterable[Any]) -> Iterator[Any]:
    """The translations of `parts`' output, a split line's parts joined into one."""
    translations = iter(translations)
    for t in translations:
      offsets = self._offsets.pop(t.index, None)
      if offsets is None:
        yield t
        continue
      rest = [next(translations) for _ in offsets[1:]]
      yield dataclasses.replace(t, hypotheses=join_hypotheses(
          [p.hypotheses for p in [t, *rest]], offsets))


def join_hypotheses(parts: Sequence[Sequence[Any]], source_offsets: Sequence[int]) -> list[Any]:
  """The k-th hypothesis of each part joined: texts with a space, scores summed, and
  alignment pairs shifted by the words of the parts before (source and output)."""
  joined = []
  for hyps in zip(*parts):
    texts = [h.text for h in hyps]
    pairs = None
    if all(h.alignment is not None for h in hyps):
      pairs, output_offset = [], 0
      for h, source_offset in zip(hyps, source_offsets):
        pairs += [(i + source_offset, j + output_offset) for i, j in h.alignment]
        output_offset += len(h.text.split())
    joined.append(dataclasses.replace(
        hyps[0], text=" ".join(t for t in texts if t), score=sum(h.score for h in hyps),
        alignment=pairs))
  return joined
