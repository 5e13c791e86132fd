"""Word alignments: pieces -> words on a real SentencePiece model, argmax on hand-made
attention, and the model's cross-attention read in batches as `visualize` reads it alone."""

import jax
import numpy as np
import pytest

import formats
from t2t_jax import configs
from t2t_jax.corpora import demo
from t2t_jax.data import vocab
from t2t_jax.inference import alignment
from t2t_jax.ids import EOS_ID
from t2t_jax.inference import visualize
from t2t_jax.model import transformer

TEXTS = [
    "yesterday the old man saw the small dog .",
    "  two   spaces\tand a tab ",
    "the dog 🐶🎉 barked at Krankenhausbesucher",
    "日本語 text, עברית and Ελληνικά",
    "a",
    "",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  pairs = demo.generate(300, seed=0, max_words=12)
  return vocab.build_or_load(96, str(tmp_path_factory.mktemp("vocab")), lambda: pairs)


def _check_words(text, pieces, words):
  """Each word's pieces' surfaces, in order, spell it; words run 0, 1, 2, ... without gaps."""
  assert len(pieces) == len(words)
  split = text.split()
  if not split:
    assert all(w == -1 for w in words)
    return
  assert words == sorted(words) and set(words) == set(range(len(split)))
  for w, word in enumerate(split):
    spelt = "".join(p for p, pw in zip(pieces, words) if pw == w).strip()
    assert spelt == word, (w, word, spelt)


@pytest.mark.parametrize("text", TEXTS)
def test_source_pieces_map_to_the_whitespace_words_of_the_line(tokenizer, text):
  ids, words = alignment.encode_words(tokenizer, text)
  assert ids == tokenizer.encode(text)[:-1]
  proto = tokenizer.sp.encode(text, return_type="proto")
  pieces = [p.surface for p in proto.pieces]
  _check_words(text, pieces, words)


@pytest.mark.parametrize("text", TEXTS)
def test_output_pieces_map_to_the_whitespace_words_of_the_decoded_text(tokenizer, text):
  ids = tokenizer.encode(text)[:-1]
  decoded, words = alignment.decode_words(tokenizer, ids)
  assert decoded == tokenizer.decode(ids)
  # No ids have no pieces (asked of sentencepiece 0.2.2, decode's proto raises a TypeError).
  pieces = [p.surface for p in tokenizer.sp.decode(ids, return_type="proto").pieces] if ids else []
  _check_words(decoded, pieces, words)


def test_word_of_pieces_by_hand():
  # "▁the ▁hou se ▁ <unk> ." over "the house 🐶." (byte offsets; the emoji is 4 bytes)
  text = "the house 🐶."
  spans = [(0, 3), (3, 7), (7, 9), (9, 10), (10, 14), (14, 15)]
  assert alignment.word_of_pieces(text, spans) == [0, 1, 1, 2, 2, 2]
  # A lone "▁" at the end belongs to the last word; no words at all gives -1.
  assert alignment.word_of_pieces("ab ", [(0, 2), (2, 3)]) == [0, 0]
  assert alignment.word_of_pieces("  ", [(0, 1)]) == [-1]


def test_hard_alignment_takes_the_argmax_source_piece_and_dedupes_words():
  source_words = [0, 0, 1, 2]        # "▁Kranken haus ▁is ▁big" -> 3 words
  target_words = [0, 1, 1, 2]        # "▁the ▁hosp ital ▁is" -> 3 words
  attention = np.array([
      # source pieces ..., EOS column (ignored even where it is largest)
      [0.6, 0.1, 0.1, 0.0, 0.2],
      [0.1, 0.2, 0.0, 0.0, 0.7],    # argmax among real pieces: piece 1 (word 0)
      [0.3, 0.1, 0.0, 0.1, 0.5],    # piece 0 (word 0): duplicate pair (0, 1)
      [0.0, 0.1, 0.5, 0.4, 0.0],    # piece 2 (word 1)
      [0.0, 0.0, 0.0, 0.0, 1.0],    # the EOS row is ignored
  ])
  pairs = alignment.hard_alignment(attention, source_words, target_words)
  assert pairs == [(0, 0), (0, 1), (1, 2)]
  assert alignment.format_pairs(pairs) == "0-0 0-1 1-2"
  assert formats.parse_pairs("0-0 0-1 1-2") == pairs
  assert alignment.hard_alignment(attention, [], target_words) == []
  assert alignment.hard_alignment(attention, source_words, []) == []
  with pytest.raises(ValueError, match="does not cover"):
    alignment.hard_alignment(attention[:2], source_words, target_words)
  with pytest.raises(ValueError, match="not an alignment pair"):
    formats.parse_pairs("0-0 1:2")


# ------------------------------------------------------------------ tiny model

TINY = configs.get_config("demo", vocab_size=24, num_layers=2, d_model=32, d_ff=64, num_heads=4,
                          max_len=32)


@pytest.fixture(scope="module")
def tiny_params():
  return transformer.init_params(TINY.model, jax.random.key(3))


def test_batched_cross_attention_equals_the_one_sentence_maps(tiny_params):
  rng = np.random.default_rng(0)
  sources = [list(rng.integers(3, 24, n)) for n in (5, 2, 7)]
  outputs = [list(rng.integers(3, 24, n)) for n in (4, 6, 0)]
  inputs = alignment._padded(sources, 4, TINY.max_len)  # pylint: disable=protected-access
  targets = alignment._padded(outputs, 4, TINY.max_len)  # pylint: disable=protected-access
  mean = alignment.cross_attention(TINY.model, tiny_params, inputs, targets, layer=0)
  head = alignment.cross_attention(TINY.model, tiny_params, inputs, targets, layer=-1, head=1)
  assert mean.shape == head.shape == (4, targets.shape[1], inputs.shape[1])
  for b, (src, out) in enumerate(zip(sources, outputs)):
    alone = visualize.attention_maps(TINY, tiny_params, [*src, EOS_ID],
                                     [*out, EOS_ID])["encoder_decoder"]
    rows, columns = len(out) + 1, len(src) + 1
    np.testing.assert_allclose(mean[b, :rows, :columns], alone[0].mean(0), atol=1e-5)
    np.testing.assert_allclose(head[b, :rows, :columns], alone[-1][1], atol=1e-5)
    np.testing.assert_allclose(mean[b, :rows, columns:], 0.0, atol=1e-6)  # padding
  with pytest.raises(ValueError, match="layer=2 does not exist"):
    alignment.cross_attention(TINY.model, tiny_params, inputs, targets, layer=2)
  with pytest.raises(ValueError, match="head=4 does not exist"):
    alignment.cross_attention(TINY.model, tiny_params, inputs, targets, head=4)


def test_align_gives_pairs_within_both_sentences(tiny_params):
  rng = np.random.default_rng(1)
  sources = [list(rng.integers(3, 24, n)) for n in (6, 3, 1)]
  outputs = [list(rng.integers(3, 24, n)) for n in (5, 0, 2)]
  # Two pieces per word on the source side, one per word on the target side.
  source_words = [[p // 2 for p in range(len(s))] for s in sources]
  output_words = [list(range(len(o))) for o in outputs]
  aligned = alignment.align([(TINY.model, tiny_params)], sources, source_words, outputs,
                            output_words)
  assert len(aligned) == 3 and aligned[1] == []
  for pairs, src_words, out_words in zip(aligned, source_words, output_words):
    assert pairs == sorted(set(pairs))
    assert {j for _, j in pairs} == set(out_words)  # every target word is aligned
    assert all(i in src_words for i, _ in pairs)
