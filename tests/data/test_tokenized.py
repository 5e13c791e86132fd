"""data/tokenized.py: pairs to ragged ids (what is dropped and counted), and the token cache's
round trip and its checks (the cache remade by a run: tests/data/test_dataset.py)."""

import numpy as np
import pytest

from t2t_jax.data import tokenized
from t2t_jax.ids import EOS_ID

PAIRS = [("a b", "x"), ("", "leer"), ("c d e", "y z w"), ("d e f g", "v"), ("h", " ")]


class WordIds:
  """A tokenizer stand-in: one id per word (its length + 3), then EOS, on either side."""

  def encode_batch(self, texts):
    return [[len(w) + 3 for w in t.split()] + [EOS_ID] for t in texts]

  encode_target_batch = encode_batch


class TargetSide(WordIds):
  """Targets cut by a model of their own (an imported model's): one id per character."""

  def encode_target_batch(self, texts):
    return [[ord(c) for c in t if c != " "] + [EOS_ID] for t in texts]


def _rows(ids, offsets):
  return [list(ids[offsets[i]:offsets[i + 1]]) for i in range(len(offsets) - 1)]


def test_pairs_become_ragged_ids_with_eos_in_order():
  split, counts = tokenized.tokenize_pairs(WordIds(), PAIRS)
  assert len(split) == 5 and counts == {"pairs": 5, "empty": 0, "too_long": 0, "kept": 5}
  assert _rows(split.src_ids, split.src_offsets) == [[4, 4, EOS_ID], [EOS_ID], [4, 4, 4, EOS_ID],
                                                     [4, 4, 4, 4, EOS_ID], [4, EOS_ID]]
  assert list(split.tgt_lengths) == [2, 2, 4, 2, 1]


def test_targets_are_cut_by_the_target_sides_model():
  split, _ = tokenized.tokenize_pairs(TargetSide(), [("a b", "xy z")])
  assert _rows(split.src_ids, split.src_offsets) == [[4, 4, EOS_ID]]
  assert _rows(split.tgt_ids, split.tgt_offsets) == [[ord("x"), ord("y"), ord("z"), EOS_ID]]


@pytest.mark.parametrize("chunk", [1, 2, 100_000])
def test_limits_drop_empty_and_long_pairs_and_count_them(chunk):
  split, counts = tokenized.tokenize_pairs(WordIds(), PAIRS, max_source_length=4,
                                           max_target_length=4, chunk=chunk)
  # ("", ..) and (.., " ") are empty; "d e f g" is 5 tokens with EOS, over the limit of 4;
  # "c d e" and "y z w" are 4, at the limit: kept.
  assert counts == {"pairs": 5, "empty": 2, "too_long": 1, "kept": 2}
  assert _rows(split.src_ids, split.src_offsets) == [[4, 4, EOS_ID], [4, 4, 4, EOS_ID]]
  assert _rows(split.tgt_ids, split.tgt_offsets) == [[4, EOS_ID], [4, 4, 4, EOS_ID]]


def test_cache_round_trip_and_its_checks(tmp_path):
  split, counts = tokenized.tokenize_pairs(WordIds(), PAIRS)
  path = str(tmp_path / "tokens.npz")
  tokenized.save_cache(path, dict.fromkeys(tokenized.SPLITS, split), counts)
  splits, back = tokenized.load_cache(path, vocab_size=8)
  assert back == counts and set(splits) == set(tokenized.SPLITS)
  np.testing.assert_array_equal(splits["dev"].tgt_offsets, split.tgt_offsets)
  with pytest.raises(ValueError, match="the train ids are outside the vocabulary"):
    tokenized.load_cache(path, vocab_size=7)  # "leer": id 7
  (tmp_path / "tokens.npz").write_bytes(b"not a zip")
  with pytest.raises(ValueError, match="BadZipFile|pickled"):
    tokenized.load_cache(path)
