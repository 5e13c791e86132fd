"""inference/long_inputs.py: a line too long for the model is split and joined, cropped, refused."""

import dataclasses
from typing import Optional

import pytest

from t2t_jax.inference import long_inputs


@dataclasses.dataclass(frozen=True)
class Hyp:
  text: str
  score: float
  alignment: Optional[list] = None


@dataclasses.dataclass(frozen=True)
class Tr:
  index: int
  hypotheses: list


def _fits(limit):
  return lambda text: len(text) <= limit


def _parts(text, limit):
  return [text[a:b] for a, b in long_inputs.split_spans(text, _fits(limit))]


def test_splits_at_the_strongest_boundaries_into_parts_that_fit():
  text = "The dog sleeps. The cat, which is old, eats!  A bird sings; it flies away."
  assert _parts(text, len(text)) == [text]
  assert _parts(text, 45) == ["The dog sleeps. The cat, which is old, eats!",
                              "A bird sings; it flies away."]
  assert _parts(text, 30) == ["The dog sleeps.", "The cat, which is old, eats!",
                              "A bird sings; it flies away."]
  assert _parts(text, 20) == ["The dog sleeps.", "The cat,", "which is old, eats!",
                              "A bird sings;", "it flies away."]
  words = "one two three four five six"
  assert _parts(words, 9) == ["one two", "three", "four five", "six"]
  assert _parts("abcdefghij", 4) == ["abcd", "efgh", "ij"]   # no space: between characters
  assert _parts("日本語です。とても長い文。", 7) == ["日本語です。", "とても長い文。"]
  for limit in (5, 8, 13, 40):
    parts = _parts(text, limit)
    assert all(len(p) <= limit for p in parts)
    assert "".join(parts).replace(" ", "") == text.replace(" ", "")
  assert long_inputs.split_spans("   ", _fits(2)) == []


def test_policies_split_crop_or_fail():
  warnings = []
  fitted = long_inputs.LongInputs("split", len, 25, warnings.append)
  long = "The dog sleeps. The old cat eats a fish."
  assert fitted.parts([(0, "short"), (1, long), (2, "")]) == [
      (0, "short"), (1, "The dog sleeps."), (1, "The old cat eats a fish."), (2, "")]
  assert len(warnings) == 1 and "line 2 has 40 pieces" in warnings[0]
  assert long_inputs.LongInputs("crop", len, 25).parts([(4, long)]) == [(4, long)]
  with pytest.raises(ValueError, match="line 5 has 40 pieces, more than the model's 25"):
    long_inputs.LongInputs("fail", len, 25).parts([(3, "short"), (4, long)])
  with pytest.raises(ValueError, match="choose one of split, crop, fail"):
    long_inputs.LongInputs("cut", len, 25)


def test_split_lines_are_joined_with_shifted_alignments():
  fitted = long_inputs.LongInputs("split", len, 12, lambda _: None)
  line = "aa bb. cc dd ee."   # parts "aa bb." and "cc dd ee.": source words 0-1 and 2-4
  assert fitted.parts([(0, "x"), (1, line)]) == [(0, "x"), (1, "aa bb."), (1, "cc dd ee.")]
  translations = [
      Tr(0, [Hyp("X", -1.0, [(0, 0)])]),
      Tr(1, [Hyp("A B", -1.0, [(0, 1), (1, 0)]), Hyp("B", -2.0, [(1, 0)])]),
      Tr(1, [Hyp("C D", -0.5, [(2, 1)]), Hyp("", -3.0, [])]),
  ]
  out = list(fitted.join(translations))
  assert [t.index for t in out] == [0, 1]
  assert out[0] == translations[0]
  best, second = out[1].hypotheses
  assert (best.text, best.score, best.alignment) == ("A B C D", -1.5, [(0, 1), (1, 0), (4, 3)])
  assert (second.text, second.score, second.alignment) == ("B", -5.0, [(1, 0)])
  # A word cut between two parts (no space to split at) is one source word.
  fitted = long_inputs.LongInputs("split", len, 4, lambda _: None)
  assert fitted.parts([(0, "ab abcdef")]) == [(0, "ab"), (0, "abcd"), (0, "ef")]
  joined = list(fitted.join([Tr(0, [Hyp("x", 0.0, [(0, 0)])]), Tr(0, [Hyp("y", 0.0, [(0, 0)])]),
                             Tr(0, [Hyp("z", 0.0, [(0, 0)])])]))
  assert joined[0].hypotheses[0].alignment == [(0, 0), (1, 1), (1, 2)]
