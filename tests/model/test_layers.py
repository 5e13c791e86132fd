"""model/layers.py: positions, segments and the feed-forward layer against the paper's
formulas and NumPy."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import layers


@pytest.mark.parametrize("d_model", [8, 9])
def test_sinusoidal_positions_match_paper_formula(d_model):
  length = 50
  ref = np.zeros((length, d_model))
  for pos in range(length):
    for j in range(d_model):
      i2 = j - j % 2                         # the "2i" shared by dims 2i and 2i+1
      angle = pos / 10000 ** (i2 / d_model)
      ref[pos, j] = np.sin(angle) if j % 2 == 0 else np.cos(angle)
  table = layers.sinusoidal_positions(length, d_model)
  assert table.shape == (length, d_model) and table.dtype == jnp.float32
  np.testing.assert_allclose(table, ref, atol=2e-5)
  # A traced single position (as in incremental decoding) gives the same row.
  row = jax.jit(lambda p: layers.sinusoidal_encoding(p, d_model))(jnp.int32(37))
  np.testing.assert_allclose(row, table[37], atol=1e-6)


def _marian_halves(length, d_model):
  """transformers' MarianSinusoidalPositionalEmbedding.create_weight, written out: column j's
  angle pos / 10000^(2 (j // 2) / d) in float64, the sines of the even columns first, then
  the cosines of the odd ones, cast to float32 once."""
  angle = np.array([[pos / np.power(10000, 2 * (j // 2) / d_model) for j in range(d_model)]
                    for pos in range(length)])
  return np.concatenate([np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])], axis=1).astype(np.float32)


@pytest.mark.parametrize("d_model", [8, 9])
def test_halves_layout_is_marians_table_exactly(d_model):
  length = 512
  table = np.asarray(layers.sinusoidal_positions(length, d_model, "halves"))
  np.testing.assert_array_equal(table, _marian_halves(length, d_model))
  # The same functions as the paper's layout, the features in another order; the paper's
  # is computed in float32 in the graph, which drifts from float64's with the position.
  order = np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])
  interleaved = np.asarray(layers.sinusoidal_positions(length, d_model))[:, order]
  np.testing.assert_allclose(table[:8], interleaved[:8], atol=1e-6)
  assert 1e-6 < np.abs(table - interleaved).max() < 2e-4
  # A traced position (as in incremental decoding) reads its row; positions come from the
  # table's `length` rows.
  row = jax.jit(lambda p: layers.sinusoidal_encoding(p, d_model, "halves", length))(jnp.int32(337))
  np.testing.assert_array_equal(row, table[337])
  with pytest.raises(ValueError, match="pass its length"):
    layers.sinusoidal_encoding(jnp.arange(3), d_model, "halves")
  with pytest.raises(ValueError, match="position layout 'rotated'"):
    layers.sinusoidal_positions(length, d_model, "rotated")


def test_halves_layout_is_not_tensor2tensors_timing_signal():
  # tensor2tensor's get_timing_signal_1d also puts the sines first, but its frequencies
  # are 10000^(-i / (d/2 - 1)), i < d/2: the last sine has 1/10000, Marian's 10000^(-(d-2)/d).
  d_model, length = 16, 64
  i = np.arange(d_model // 2)
  angle = np.arange(length)[:, None] * 10000.0 ** (-i / (d_model // 2 - 1))
  t2t = np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
  table = np.asarray(layers.sinusoidal_positions(length, d_model, "halves"))
  np.testing.assert_allclose(table[:, [0, 8]], t2t[:, [0, 8]], atol=1e-6)   # frequency 1 alike
  assert np.abs(table - t2t).max() > 0.5


def test_halves_table_is_transformers_over_512_positions(extras):
  marian = extras["transformers"].models.marian.modeling_marian
  for d_model in (64, 512):
    theirs = marian.MarianSinusoidalPositionalEmbedding(512, d_model).create_weight().numpy()
    np.testing.assert_array_equal(np.asarray(layers.sinusoidal_positions(512, d_model, "halves")),
                                  theirs)


@pytest.mark.parametrize("activation, reference", [
    ("relu", lambda h: np.maximum(0, h)),
    ("swish", lambda h: h / (1 + np.exp(-h))),
    ("gelu", lambda h: 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2)))),
])
def test_feed_forward_against_numpy(activation, reference):
  rng = np.random.default_rng(3)
  ffn = layers.FeedForward(d_model=4, d_ff=6, activation=activation)
  x = jnp.asarray(rng.normal(size=(2, 3, 4)), jnp.float32)
  params = jax.jit(ffn.init)(jax.random.key(0), x)["params"]
  params = jax.tree.map(lambda a: a + 0.3, params)   # non-zero biases
  p = jax.tree.map(np.asarray, params)
  ref = reference(np.asarray(x) @ p["wi"]["kernel"] + p["wi"]["bias"]) @ p["wo"]["kernel"] \
      + p["wo"]["bias"]
  np.testing.assert_allclose(jax.jit(ffn.apply)({"params": params}, x), ref, atol=1e-5)


def test_segment_positions_restart_with_each_sentence():
  segments = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]], np.int32)
  positions = np.asarray(layers.segment_positions(jnp.asarray(segments)))
  np.testing.assert_array_equal(positions[0, :6], [0, 1, 2, 0, 1, 0])
  np.testing.assert_array_equal(positions[1], np.arange(8))
