"""Batch decoding over members: an ensemble of copies is the model; samples are seeded per sentence."""

import dataclasses

import jax
import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.decoding import generate
from t2t_jax.ids import EOS_ID
from t2t_jax.model import transformer as model

TINY = configs.get_config("demo", vocab_size=24, num_layers=2, d_model=32, d_ff=64, num_heads=4,
                          max_len=32, max_decode_extra=6, beam_size=3)


@pytest.fixture(scope="module")
def member():
  params = model.init_params(TINY, jax.random.key(1))
  # Peaked distributions (logits x4 through the shared embedding): outputs longer than EOS.
  params["embedding"]["embedding"] = 4.0 * np.asarray(params["embedding"]["embedding"])
  return generate.Member(TINY, params)


def _inputs(seed, lengths, width=8):
  rng = np.random.default_rng(seed)
  inputs = np.zeros((len(lengths), width), np.int32)
  for row, n in enumerate(lengths):
    inputs[row, :n + 1] = [*rng.integers(3, TINY.vocab_size, n), EOS_ID]
  return inputs


def test_two_identical_members_search_like_one(member):
  # One member takes decode.translate_batch; an ensemble the generic beam search.
  inputs = _inputs(0, [7, 3, 0, 5])
  search = generate.Search.from_config(TINY, n_best=2)
  tokens, scores = generate.decode_batch([member], inputs, search)
  assert tokens.shape[:2] == scores.shape == (4, 2)
  assert (tokens[:, 0] != 0).sum(1).max() > 2  # the model says more than EOS
  pair_tokens, pair_scores = generate.decode_batch([member, member], inputs, search)
  np.testing.assert_array_equal(pair_tokens, tokens)
  np.testing.assert_allclose(pair_scores, scores, rtol=1e-5)


def test_samples_are_sorted_reproducible_and_independent_of_the_batch(member):
  inputs = _inputs(1, [6, 2, 5, 4])
  search = generate.Search.from_config(TINY, sample=True, n_best=3, seed=5)
  tokens, scores = generate.decode_batch([member], inputs, search, ids=[10, 11, 12, 13])
  assert tokens.shape[:2] == scores.shape == (4, 3)
  assert np.all(np.diff(scores, axis=1) <= 0)
  assert len({tuple(t) for t in tokens.reshape(12, -1)}) > 4  # samples, not copies
  order = [2, 0, 3, 1]
  moved, moved_scores = generate.decode_batch([member], inputs[order], search,
                                              ids=[12, 10, 13, 11])
  np.testing.assert_array_equal(moved, tokens[order])
  np.testing.assert_allclose(moved_scores, scores[order], rtol=1e-6)
  other, _ = generate.decode_batch([member], inputs, dataclasses.replace(search, seed=6),
                                  ids=[10, 11, 12, 13])
  assert not np.array_equal(other, tokens)


def test_top_1_samples_are_the_greedy_output(member):
  inputs = _inputs(2, [5, 3])
  greedy, _ = generate.decode_batch([member], inputs,
                                    generate.Search.from_config(TINY, beam_size=1, alpha=0.0))
  samples, _ = generate.decode_batch(
      [member], inputs, generate.Search.from_config(TINY, sample=True, top_k=1, n_best=2))
  np.testing.assert_array_equal(samples, np.repeat(greedy, 2, axis=1))


def test_bad_settings_raise_with_what_to_do():
  with pytest.raises(ValueError, match="n_best=5 must be <= beam_size=4"):
    generate.Search(n_best=5)
  generate.Search(n_best=5, sample=True)  # samples are not limited by the beam
  with pytest.raises(ValueError, match="temperature=0"):
    generate.Search(sample=True, temperature=0)
  with pytest.raises(ValueError, match="n_best=0"):
    generate.Search(n_best=0)
