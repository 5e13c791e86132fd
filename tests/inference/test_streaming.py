"""The streaming translator on a tiny random model: thousands of lines in bounded memory, one
output per input in input order, blank lines, n-best and alignment formats."""

import itertools

import jax
import numpy as np
import pytest

import formats
from t2t_jax import configs
from t2t_jax.corpora import demo
from t2t_jax.data import vocab
from t2t_jax.ids import EOS_ID
from t2t_jax.inference import streaming
from t2t_jax.model import transformer
from t2t_jax.decoding import batch_decoder

CFG = configs.get_config("demo", vocab_size=96, num_layers=1, d_model=16, d_ff=32, num_heads=2,
                         max_len=24, max_decode_extra=3, beam_size=2)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  pairs = demo.generate(300, seed=0, max_words=12)
  return vocab.build_or_load(96, str(tmp_path_factory.mktemp("vocab")), lambda: pairs)


@pytest.fixture(scope="module")
def members():
  params = transformer.init_params(CFG.model, jax.random.key(0))
  # Peaked distributions with EOS in the middle of the pack: real, varied outputs.
  embedding = 10.0 * np.asarray(params["embedding"]["embedding"])
  embedding[EOS_ID] = 0.0
  params["embedding"]["embedding"] = embedding
  return [batch_decoder.Member(CFG.model, params)]


def _distinct_lines(tokenizer, count):
  """Short lines: at most 7 pieces, so that every batch has one shape (one compilation)."""
  words = sorted({w for en, _ in demo.generate(200, seed=1, max_words=6)
                  for w in en.lower().split()})
  rng = np.random.default_rng(0)
  lines = set()
  while len(lines) < count:
    line = " ".join(rng.choice(words, rng.integers(1, 4)))
    if len(tokenizer.encode(line)) <= 8:
      lines.add(line)
  return sorted(lines)


def test_thousands_of_lines_stream_in_order_in_bounded_memory(members, tokenizer):
  distinct = _distinct_lines(tokenizer, 40) + [""]
  search = batch_decoder.Search.from_config(CFG)
  reference = {line: t.text for line, t in zip(distinct, streaming.stream(
      members, tokenizer, distinct, search=search, batch_size=64))}
  assert reference[""] == ""
  assert len(set(reference.values())) > 20  # outputs tell the lines apart

  rng = np.random.default_rng(1)
  lines = [distinct[i] for i in rng.integers(0, len(distinct), 3000)]
  read = []

  def source():
    for line in lines:
      read.append(line)
      yield line

  window = 192  # 3 batches of 64: one shape, one compilation for the whole test
  stream = streaming.stream(members, tokenizer, source(), search=search,
                                      batch_size=64, window=window)
  first = next(stream)
  assert len(read) == window  # nothing read beyond the first window
  outputs = [first, *stream]
  assert len(outputs) == len(lines)
  assert [t.index for t in outputs] == list(range(len(lines)))
  assert [t.text for t in outputs] == [reference[line] for line in lines]


def test_blank_and_long_lines(members, tokenizer):
  warnings = []
  long_line = " ".join(["the old man saw the small dog"] * 6)
  out = list(streaming.stream(
      members, tokenizer, ["", "  ", "the dog", long_line], warn=warnings.append,
      search=batch_decoder.Search.from_config(CFG), batch_size=4,
      alignments=streaming.Alignments()))
  assert [t.text for t in out[:2]] == ["", ""]
  assert out[0].hypotheses == [streaming.Hypothesis("", 0.0, [])]
  assert streaming.format_line(out[0], alignments=True) == "\t"
  assert len(warnings) == 1 and "line 4 has" in warnings[0]


def test_nbest_and_alignment_formats(members, tokenizer):
  lines = ["the dog sleeps", "", "yesterday the old man saw the small dog", "a house"]
  search = batch_decoder.Search.from_config(CFG, beam_size=3, n_best=3)
  out = list(streaming.stream(members, tokenizer, lines, search=search, batch_size=2,
                                        alignments=streaming.Alignments(layer=0)))
  one_best = list(streaming.stream(members, tokenizer, lines, search=search,
                                             batch_size=2))
  assert [t.text for t in out] == [t.text for t in one_best]
  rows = list(itertools.chain.from_iterable(streaming.format_nbest(t, alignments=True)
                                            for t in out))
  parsed = [formats.parse_nbest(row) for row in rows]
  assert [p[0] for p in parsed] == [0, 0, 0, 1, 2, 2, 2, 3, 3, 3]
  for t in out:
    scores = [h.score for h in t.hypotheses]
    assert scores == sorted(scores, reverse=True)
  for (index, text, score, pairs), hyp in zip(parsed, itertools.chain.from_iterable(
      t.hypotheses for t in out)):
    assert text == hyp.text and score == pytest.approx(hyp.score, abs=1e-4)
    assert pairs == hyp.alignment
    source_words, output_words = len(lines[index].split()), len(text.split())
    assert all(0 <= i < source_words and 0 <= j < output_words for i, j in pairs)
    assert {j for _, j in pairs} == set(range(output_words))  # every output word aligned
  assert parsed[3] == (1, "", 0.0, [])
  line = streaming.format_line(out[2], alignments=True)
  assert line.split("\t") == [out[2].text, " ".join(f"{i}-{j}" for i, j in out[2].hypotheses[0]
                                                    .alignment)]
  with pytest.raises(ValueError, match="not an n-best line"):
    formats.parse_nbest("just a translation")
