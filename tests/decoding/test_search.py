"""Search settings refuse what cannot run, and the output length rule is a x source + b."""

import numpy as np
import pytest

from t2t_jax.decoding import search


def test_bad_settings_raise_with_what_to_do():
  with pytest.raises(ValueError, match="n_best=5 must be <= beam_size=4"):
    search.Search(n_best=5)
  search.Search(n_best=5, sample=True)  # samples are not limited by the beam
  with pytest.raises(ValueError, match="temperature=0"):
    search.Search(sample=True, temperature=0)
  with pytest.raises(ValueError, match="n_best=0"):
    search.Search(n_best=0)


def test_output_limits_are_a_times_the_source_plus_b():
  inputs = np.array([[5, 6, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0], [4, 4, 4, 4, 1]])
  lengths = np.array([3, 1, 0, 5])
  max_len, limits = search.output_limits(inputs, 50, 1.0, 512)
  assert max_len == 55 and list(limits) == [53, 51, 1, 55]       # ours: length + extra
  max_len, limits = search.output_limits(inputs, 2, 1.5, 512)      # fairseq's a * n + b
  assert max_len == 10 and list(limits) == list(np.where(lengths, np.ceil(1.5 * lengths) + 2, 1))
  max_len, limits = search.output_limits(inputs, 200, 0.0, 64)     # capped by the model
  assert max_len == 64 and list(limits) == [64, 64, 1, 64]


def test_a_batch_longer_than_the_model_or_not_2d_is_refused():
  with pytest.raises(ValueError, match="truncate the sources first"):
    search.checked_limits(np.ones((2, 40), np.int32), search.Search(), positions=32)
  with pytest.raises(ValueError, match=r"\[batch, length\]"):
    search.checked_limits(np.ones((8,), np.int32), search.Search(), positions=32)
