"""Ensembles: one model is the model, two identical models are one, two different ones average
probabilities; beam search runs over the ensemble's caches like one model's."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.decoding import beam_search
from t2t_jax.decoding import ensemble
from t2t_jax.ids import EOS_ID
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.model import transformer

SMALL = configs.get_config("demo", vocab_size=24, num_layers=2, d_model=32, d_ff=64, num_heads=4,
                           max_len=32)
# Another shape, the same vocabulary: members need not match otherwise.
OTHER = SMALL.replace(num_layers=1, d_model=16, d_ff=32, num_heads=2)


@pytest.fixture(scope="module")
def members():
  return [ensemble.Member(SMALL.model, transformer.init_params(SMALL.model, jax.random.key(0))),
          ensemble.Member(OTHER.model, transformer.init_params(OTHER.model, jax.random.key(1)))]


def _inputs():
  rng = np.random.default_rng(0)
  inputs = np.zeros((3, 8), np.int32)
  for row, n in enumerate((6, 2, 4)):
    inputs[row, :n + 1] = [*rng.integers(3, 24, n), EOS_ID]
  return jnp.asarray(inputs)


def _log_probs(members, inputs, prefix):
  """Log-probabilities [steps, rows, vocab] of the ensemble after each token of `prefix`.

  Not jitted: a few eager steps of tiny models cost less than compiling them.
  """
  cache, step_fn = ensemble.init_decoder(members, inputs, 8)
  out = []
  previous = jnp.zeros(inputs.shape[0], jnp.int32)
  for position in range(prefix.shape[1]):
    logits, cache = step_fn(cache, previous, jnp.int32(position))
    out.append(jax.nn.log_softmax(logits_lib.row_major(logits)))
    previous = prefix[:, position]
  return np.asarray(jnp.stack(out), np.float64)


def test_ensembles_average_the_models_probabilities(members):
  inputs = _inputs()
  prefix = jnp.asarray(np.random.default_rng(1).integers(2, 24, (3, 2)), jnp.int32)
  first, second = (_log_probs([m], inputs, prefix) for m in members)
  both = _log_probs(members, inputs, prefix)
  np.testing.assert_allclose(np.exp(both), (np.exp(first) + np.exp(second)) / 2, atol=1e-6)
  np.testing.assert_allclose(np.exp(both).sum(-1), 1.0, atol=1e-5)
  twice = _log_probs([members[0], members[0]], inputs, prefix)
  np.testing.assert_allclose(twice, first, atol=1e-5)


def test_one_model_is_the_model_and_two_identical_models_search_like_one(members):
  inputs = _inputs()
  cache, step_fn = ensemble.init_decoder(members[:1], inputs, 10)
  assert isinstance(step_fn, functools.partial) and step_fn.func is transformer.decode_step
  search = functools.partial(beam_search.beam_search, beam_size=3, alpha=0.6, max_len=10, n_best=2)
  one_tokens, one_scores = search(step_fn, cache)
  pair_cache, pair_step = ensemble.init_decoder(members[:1] * 2, inputs, 10)
  pair_tokens, pair_scores = search(pair_step, pair_cache)
  np.testing.assert_array_equal(pair_tokens, one_tokens)
  np.testing.assert_allclose(pair_scores, one_scores, rtol=1e-5)


def test_members_must_share_the_vocabulary(members):
  bigger = SMALL.replace(vocab_size=32)
  odd = ensemble.Member(bigger.model, members[0].params)  # checked before any parameter is read
  with pytest.raises(ValueError, match=r"vocab_size \[24, 32\]"):
    ensemble.init_decoder([members[0], odd], _inputs(), 8)

  def step(width):
    return lambda cache, tokens, position: (jnp.zeros((tokens.shape[0], width)), cache)

  with pytest.raises(ValueError, match="different vocabulary sizes"):
    ensemble.ensemble_step([step(4), step(5)])(((), ()), jnp.zeros(2, jnp.int32), 0)
  with pytest.raises(ValueError, match="at least one model"):
    ensemble.ensemble_step([])
