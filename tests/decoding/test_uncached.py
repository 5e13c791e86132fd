"""The uncached reference decoder gives the cached search's tokens and scores."""

import numpy as np

import tiny
from formats import check_well_formed
from t2t_jax.decoding import ensemble
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import search


def test_cached_and_uncached_decoding_agree():
  inputs = tiny.rows(tiny.sources(0, [7, 3, 0, 5]))
  members = [ensemble.Member(tiny.TINY.model, tiny.params())]
  settings = search.Search.from_config(tiny.TINY)
  cached, cached_scores = batch_decoder.decode_batch(members, inputs, settings)
  uncached, uncached_scores = batch_decoder.decode_batch(members, inputs, settings, cached=False)
  np.testing.assert_array_equal(cached, uncached)
  np.testing.assert_allclose(cached_scores, uncached_scores, rtol=1e-4)
  # Input length (EOS included) + max_decode_extra bounds each sentence.
  check_well_formed(cached, (inputs != 0).sum(1) + tiny.TINY.max_decode_extra)
  assert cached.shape == (4, 1, 8 + tiny.TINY.max_decode_extra)
