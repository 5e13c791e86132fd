"""The uncached reference decoder gives the cached search's tokens and scores."""

import numpy as np

import tiny
from formats import check_well_formed
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import uncached


def test_cached_and_uncached_decoding_agree():
  inputs = tiny.rows(tiny.sources(0, [7, 3, 0, 5]))
  members = [batch_decoder.Member(tiny.TINY.model, tiny.params())]
  settings = batch_decoder.Search.from_config(tiny.TINY)
  cached, cached_scores = batch_decoder.decode_batch(members, inputs, settings)
  plain, plain_scores = uncached.decode_batch(members[0], inputs, settings)
  np.testing.assert_array_equal(cached, plain)
  np.testing.assert_allclose(cached_scores, plain_scores, rtol=1e-4)
  # Input length (EOS included) + max_decode_extra bounds each sentence.
  check_well_formed(cached, (inputs != 0).sum(1) + tiny.TINY.max_decode_extra)
  assert cached.shape == (4, 1, 8 + tiny.TINY.max_decode_extra)
