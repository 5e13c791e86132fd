"""kernels/attention.py: the reference against NumPy, and the fused kernels (attention_core,
its recomputing twin, jax.nn's) against the reference, gradients included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_reference import numpy_attention, token_ids
from t2t_jax.kernels import attention as attention_lib
from t2t_jax.kernels import masks
from t2t_jax.model import layers

# Compiled once per signature: cheaper than op-by-op dispatch on a busy 2-core box.
_attention = jax.jit(attention_lib.scaled_dot_product_attention,
                     static_argnames=("dropout_rate", "deterministic", "dtype"))


def test_attention_matches_numpy_with_masks_and_unequal_depths():
  rng = np.random.default_rng(0)
  batch, q_len, kv_len, heads, d_k, d_v = 2, 5, 6, 3, 4, 7
  q = rng.normal(size=(batch, q_len, heads, d_k)).astype(np.float32)
  k = rng.normal(size=(batch, kv_len, heads, d_k)).astype(np.float32)
  v = rng.normal(size=(batch, kv_len, heads, d_v)).astype(np.float32)
  q_ids, kv_ids = token_ids(rng, batch, q_len, [5, 3]), token_ids(rng, batch, kv_len, [6, 2])
  mask = masks.padding_mask(q_ids, kv_ids) & masks.causal_mask(6)[:, :, :q_len, :kv_len]
  bias = masks.mask_to_bias(mask)
  out, probs = _attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), bias)
  ref_out, ref_probs = numpy_attention(q, k, v, np.asarray(bias))
  assert out.shape == (batch, q_len, heads, d_v) and probs.dtype == jnp.float32
  # Rows with nothing to attend to (padded queries) are checked separately: in
  # float64 the reference still sees the logits under the -1e9 bias.
  allowed = np.broadcast_to(np.asarray(mask), probs.shape)
  live = allowed.any(-1)                                             # [batch, heads, q]
  assert 0 < live.mean() < 1
  np.testing.assert_allclose(np.asarray(probs)[live], ref_probs[live], atol=1e-6)
  np.testing.assert_allclose(np.asarray(out).transpose(0, 2, 1, 3)[live],
                             ref_out.transpose(0, 2, 1, 3)[live], atol=1e-5)
  np.testing.assert_allclose(np.asarray(probs)[~live], 1 / kv_len, rtol=1e-6)
  # Masked keys get exactly zero weight on rows with something to attend to.
  assert np.all(np.asarray(probs)[~allowed & live[..., None]] == 0.0)


def test_fully_masked_rows_are_uniform_not_nan():
  q = jnp.ones((1, 2, 1, 4))
  kv = jnp.arange(12.0).reshape(1, 3, 1, 4)
  ids = jnp.zeros((1, 3), jnp.int32)
  bias = masks.mask_to_bias(masks.padding_mask(ids[:, :2], ids))
  out, probs = _attention(q, kv, kv, bias)
  assert np.all(np.isfinite(out))
  np.testing.assert_allclose(probs, 1 / 3, rtol=1e-6)
  # Adding two biases (e.g. padding + causal) must stay finite as well.
  _, probs2 = _attention(q, kv, kv, bias + bias)
  np.testing.assert_allclose(probs2, 1 / 3, rtol=1e-6)


def test_attention_dropout_scales_kept_weights_and_is_off_when_deterministic():
  rng = np.random.default_rng(1)
  q, k = (jnp.asarray(rng.normal(size=(2, 4, 2, 8)), jnp.float32) for _ in range(2))
  v = jnp.eye(4)[None, :, None, :].repeat(2, 0).repeat(2, 2)   # out == dropped weights
  key = jax.random.key(0, impl="rbg")   # threefry's bernoulli takes seconds to compile on CPU
  det, probs = _attention(q, k, v, dropout_rng=key, dropout_rate=0.5)
  np.testing.assert_allclose(det, jnp.transpose(probs, (0, 2, 1, 3)), atol=1e-6)
  out, _ = _attention(q, k, v, dropout_rng=key, dropout_rate=0.5, deterministic=False)
  weights = np.asarray(jnp.transpose(out, (0, 2, 1, 3)))       # [batch, heads, q, kv]
  dropped = weights == 0
  assert 0 < dropped.mean() < 1
  np.testing.assert_allclose(weights[~dropped], 2 * np.asarray(probs)[~dropped], rtol=1e-5)
  with pytest.raises(ValueError, match="dropout_rng"):
    attention_lib.scaled_dot_product_attention(q, k, v, dropout_rate=0.5, deterministic=False)


def test_attention_rejects_wrong_ranks():
  x = jnp.ones((2, 3, 4))
  with pytest.raises(AssertionError, match="rank-4"):
    attention_lib.scaled_dot_product_attention(x, x, x)


def _qkv(rng, batch, q_len, kv_len, heads=2, depth=8):
  make = lambda n: jnp.asarray(rng.normal(size=(batch, n, heads, depth)), jnp.float32)
  return make(q_len), make(kv_len), make(kv_len)


@pytest.mark.parametrize("implementation", ["core", "core_recompute", "xla"],
                         ids=["attention_core", "attention_core_recompute", "jax.nn"])
@pytest.mark.parametrize("packed,causal", [(False, False), (False, True), (True, False),
                                           (True, True)])
def test_fused_attention_equals_the_reference_on_real_rows(packed, causal, implementation):
  rng = np.random.default_rng(7)
  length = 8
  q, k, v = _qkv(rng, 3, length, length)
  if packed:
    segments = jnp.array([[1, 1, 1, 2, 2, 2, 2, 0], [1, 2, 3, 4, 0, 0, 0, 0],
                          [1, 1, 1, 1, 1, 1, 1, 1]], jnp.int32)
  else:
    segments = layers.segment_ids(token_ids(rng, 3, length, [8, 5, 1]))
  mask = masks.Mask(segments, segments, causal=causal, packed=packed)
  want, _ = _attention(q, k, v, masks.mask_to_bias(mask.dense()))
  got = jax.jit(attention_lib.fused_attention, static_argnames=("implementation",))(
      q, k, v, mask, implementation=implementation)
  real = np.asarray(segments) != 0                                    # [batch, q]
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=1e-5)


@pytest.mark.parametrize("recompute", [False, True], ids=["saved_probs", "recomputed_probs"])
@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 3e-2)])
def test_attention_core_gradients_equal_autodiff_of_the_reference(dtype, tol, recompute):
  """The hand-written backward pass against autodiff through the written-out softmax,
  with packed, causal rows and a fully masked (padding) query row; with `recompute`
  (the TPU's "core_recompute") it keeps no probabilities and computes them again."""
  rng = np.random.default_rng(11)
  q, k, v = _qkv(rng, 2, 8, 8)
  segments = jnp.array([[1, 1, 1, 2, 2, 2, 2, 0], [1, 1, 2, 2, 2, 2, 2, 2]], jnp.int32)
  bias = masks.mask_to_bias(masks.Mask(segments, segments, causal=True, packed=True).dense())
  weights = jnp.asarray(rng.normal(size=q.shape), jnp.float32)   # a loss that mixes outputs
  heads_first = lambda x: x.transpose(0, 2, 1, 3)

  def core_loss(q, k, v):
    out = attention_lib.attention_core(*(heads_first(x / s).astype(dtype) for x, s in
                                  ((q, np.sqrt(q.shape[-1])), (k, 1.0), (v, 1.0))), bias,
                                recompute)
    return jnp.sum(heads_first(out).astype(jnp.float32) * weights)

  def reference_loss(q, k, v):
    out, _ = attention_lib.scaled_dot_product_attention(q, k, v, bias, dtype=dtype)
    return jnp.sum(out.astype(jnp.float32) * weights)

  got = jax.jit(jax.grad(core_loss, argnums=(0, 1, 2)))(q, k, v)
  want = jax.jit(jax.grad(reference_loss, argnums=(0, 1, 2)))(q, k, v)
  # What the backward pass keeps of the [batch, heads, q, kv] probabilities (depth 4, so
  # that only they have that shape).
  narrow = [heads_first(x)[..., :4].astype(dtype) for x in (q, k, v)]
  _, backward = jax.vjp(lambda *x: attention_lib.attention_core(*x, bias, recompute), *narrow)
  kept = [x.dtype for x in jax.tree.leaves(backward) if x.shape == (2, 2, 8, 8)]
  assert kept == ([] if recompute else [jnp.float32])
  for g, w in zip(got, want):
    assert g.dtype == w.dtype == jnp.float32
    scale = float(jnp.max(jnp.abs(w)))
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=tol * scale, rtol=tol)


def test_fused_cross_attention_with_different_lengths():
  rng = np.random.default_rng(8)
  q, k, v = _qkv(rng, 2, 5, 7)
  q_seg = layers.segment_ids(token_ids(rng, 2, 5, [5, 2]))
  kv_seg = layers.segment_ids(token_ids(rng, 2, 7, [3, 7]))
  mask = masks.Mask(q_seg, kv_seg)
  want, _ = _attention(q, k, v, masks.mask_to_bias(mask.dense()))
  got = jax.jit(attention_lib.fused_attention)(q, k, v, mask)
  real = np.asarray(q_seg) != 0
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=1e-5)
  with pytest.raises(ValueError, match="d_k == d_v"):
    attention_lib.fused_attention(q, k, v[..., :4], mask)
  with pytest.raises(ValueError, match="window"):
    attention_lib.fused_attention(q, k, v, masks.Mask(q_seg, kv_seg, window=1))
