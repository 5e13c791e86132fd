"""quantization/int8.py: int8 products against the float32 one, within the quantisation's rounding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.ids import FILLER
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.quantization import int8

# Agreement with the reference to a tight bound: CI also runs these compiled as the commands are.
pytestmark = pytest.mark.exact


def _operands(rng, rows=5, d_in=24, d_out=7):
  x = jnp.asarray(rng.normal(size=(rows, d_in)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(d_out, d_in)), jnp.float32)
  return x, w


def _bound(x, kernel):
  """|x . w^ - x^ . w^| per output: each activation is off by at most half its row's step
  (absmax / 127), so the sum is off by at most (step / 2) sum_i |w^_i| (w^ the dequantised
  weights, which both sides use), plus float32 rounding."""
  step = np.abs(np.asarray(x)).max(axis=-1, keepdims=True) / int8.LEVELS    # [rows, 1]
  weights = np.abs(np.asarray(int8.dequantize(kernel)))                    # [out, in]
  return step / 2 * weights.sum(axis=1) + 1e-5 * (1 + np.abs(np.asarray(x)) @ weights.T)


def test_round_trip_is_within_half_a_step_per_channel():
  _, w = _operands(np.random.default_rng(0))
  kernel = int8.quantize(w)
  assert kernel.values.dtype == jnp.int8 and kernel.scale.shape == (7,)
  step = np.abs(np.asarray(w)).max(axis=1) / int8.LEVELS                    # one per output row
  error = np.abs(np.asarray(int8.dequantize(kernel)) - np.asarray(w))
  assert (error <= step[:, None] / 2 * (1 + 1e-6)).all()
  # Each row's absolute maximum is a full-scale value, exactly representable.
  assert (np.abs(np.asarray(kernel.values)).max(axis=1) == int8.LEVELS).all()


def test_an_all_zero_channel_or_row_gives_zeros_not_nan():
  x, w = _operands(np.random.default_rng(1))
  w = w.at[2].set(0.0)
  x = x.at[3].set(0.0)
  kernel = int8.quantize(w)
  assert np.isfinite(np.asarray(kernel.scale)).all() and float(kernel.scale[2]) > 0
  assert (np.asarray(kernel.values[2]) == 0).all()
  values, scale = int8.quantize_rows(x)
  assert np.isfinite(np.asarray(scale)).all() and (np.asarray(values[3]) == 0).all()
  product = np.asarray(int8.int8_product(x, kernel))
  assert np.isfinite(product).all()
  assert (product[:, 2] == 0).all() and (product[3] == 0).all()


def test_int8_product_is_the_reference_within_the_activations_rounding():
  x, w = _operands(np.random.default_rng(2))
  kernel = int8.quantize(w)
  got = np.asarray(int8.int8_product(x, kernel))
  want = np.asarray(int8.reference_product(x, kernel))
  assert got.dtype == np.float32 and got.shape == (5, 7)
  assert (np.abs(got - want) <= _bound(x, kernel)).all()
  # And the reference is the float32 product within the weights' rounding.
  weight_step = np.asarray(kernel.scale)[None, :]
  float_bound = weight_step / 2 * np.abs(np.asarray(x)).sum(axis=1, keepdims=True) + 1e-4
  assert (np.abs(want - np.asarray(x @ w.T)) <= float_bound).all()


def test_vocab_major_is_the_row_major_product_transposed():
  x, w = _operands(np.random.default_rng(3), rows=4, d_out=11)
  kernel = int8.quantize(w)
  major = int8.project_logits(x, kernel, "vocab_major")
  rows = int8.project_logits(x, kernel)
  assert isinstance(major, logits_lib.VocabMajor) and major.logits.shape == (11, 4)
  np.testing.assert_allclose(major.logits.T, rows, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(rows, int8.int8_product(x, kernel), rtol=0, atol=0)


def test_concatenated_kernels_multiply_as_each_one():
  x, w = _operands(np.random.default_rng(4))
  a, b = int8.quantize(w[:3]), int8.quantize(w[3:])
  both = int8.int8_dense(x, [a, b])
  np.testing.assert_allclose(both, jnp.concatenate([int8.int8_product(x, a),
                                                    int8.int8_product(x, b)], axis=-1))


def test_leading_axes_are_rows():
  x, w = _operands(np.random.default_rng(5), rows=6)
  kernel = int8.quantize(w)
  np.testing.assert_allclose(int8.int8_dense(x.reshape(2, 3, -1), kernel).reshape(6, -1),
                             int8.int8_product(x, kernel))


def test_a_shortlist_multiplies_only_its_rows():
  x, w = _operands(np.random.default_rng(6), rows=4, d_out=11)
  kernel = int8.quantize(w)
  ids = jnp.asarray([1, 4, 7, 99], jnp.int32)                            # 99: out of range
  listed = logits_lib.listed_logits(
      int8.project_logits(x, logits_lib.listed_rows(kernel, ids), "vocab_major"), ids)
  full = np.asarray(int8.int8_product(x, kernel))
  assert listed.logits.shape == (4, 4)
  np.testing.assert_allclose(np.asarray(listed.logits[:3]).T, full[:, [1, 4, 7]], rtol=1e-6)
  assert (np.asarray(listed.logits[3]) == 0).all()                  # out of range: a zero row
  filler = jnp.asarray([1, 4, 7, FILLER], jnp.int32)
  rows = np.asarray(logits_lib.listed_logits(
      int8.project_logits(x, logits_lib.listed_rows(kernel, filler)), filler))   # [rows, size]
  np.testing.assert_allclose(rows[:, :3], full[:, [1, 4, 7]], rtol=1e-6)
  assert (rows[:, 3] == -np.inf).all()


def test_the_plug_ins_fused_projection_is_the_dense_layers_side_by_side():
  rng = np.random.default_rng(7)
  x = jnp.asarray(rng.normal(size=(3, 1, 16)), jnp.float32)
  layers = [int8.dense((2, depth), use_bias=False) for depth in (4, 4, 3)]
  params = [{"kernel": int8.quantize(jnp.asarray(rng.normal(size=(2 * depth, 16)), jnp.float32))}
            for depth in (4, 4, 3)]
  apart = [np.asarray(layer.apply({"params": p}, x)).reshape(3, 1, -1)
           for layer, p in zip(layers, params)]
  # Each layer quantises x's rows alike, so one product gives exactly the three.
  np.testing.assert_array_equal(int8.fused_dense(x, params, jnp.float32),
                                np.concatenate(apart, axis=-1))
  shapes = jax.eval_shape(layers[0].init, jax.random.key(0), x)["params"]
  assert shapes["kernel"].values.shape == (8, 16) and "bias" not in shapes
