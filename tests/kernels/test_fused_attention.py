"""kernels/fused_attention.py: the fused kernels (attention_core, its recomputing twin, jax.nn's)
against the reference, gradients included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_reference import token_ids
from t2t_jax.kernels import fused_attention
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import layers

# Agreement with the reference to a tight bound: CI also runs these compiled as the commands are.
pytestmark = pytest.mark.exact

_attention = jax.jit(attention_lib.scaled_dot_product_attention,
                     static_argnames=("dropout_rate", "deterministic", "dtype"))


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
  mask = attention_lib.Mask(segments, segments, causal=causal, packed=packed)
  want, _ = _attention(q, k, v, attention_lib.mask_to_bias(mask.dense()))
  got = jax.jit(fused_attention.fused_attention, static_argnames=("implementation",))(
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
  bias = attention_lib.mask_to_bias(attention_lib.Mask(segments, segments, causal=True, packed=True).dense())
  weights = jnp.asarray(rng.normal(size=q.shape), jnp.float32)   # a loss that mixes outputs
  heads_first = lambda x: x.transpose(0, 2, 1, 3)

  def core_loss(q, k, v):
    out = fused_attention.attention_core(*(heads_first(x / s).astype(dtype) for x, s in
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
  _, backward = jax.vjp(lambda *x: fused_attention.attention_core(*x, bias, recompute), *narrow)
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
  mask = attention_lib.Mask(q_seg, kv_seg)
  want, _ = _attention(q, k, v, attention_lib.mask_to_bias(mask.dense()))
  got = jax.jit(fused_attention.fused_attention)(q, k, v, mask)
  real = np.asarray(q_seg) != 0
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=1e-5)
  with pytest.raises(ValueError, match="d_k == d_v"):
    fused_attention.fused_attention(q, k, v[..., :4], mask)
  with pytest.raises(ValueError, match="window"):
    fused_attention.fused_attention(q, k, v, attention_lib.Mask(q_seg, kv_seg, window=1))
