"""model/attention.py: the multi-head attention module against NumPy; when it runs the fused
path."""

import jax
import jax.numpy as jnp
import numpy as np

from attention_reference import numpy_attention, token_ids
from t2t_jax.kernels import masks
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import layers


def test_multi_head_attention_module_against_numpy():
  rng = np.random.default_rng(2)
  heads, d_k, d_v, d_model = 3, 4, 5, 6
  mha = attention_lib.MultiHeadAttention(num_heads=heads, d_k=d_k, d_v=d_v, d_model=d_model)
  xq = jnp.asarray(rng.normal(size=(2, 3, d_model)), jnp.float32)
  xkv = jnp.asarray(rng.normal(size=(2, 4, d_model)), jnp.float32)
  bias = masks.mask_to_bias(masks.padding_mask(token_ids(rng, 2, 3, [3, 3]),
                                               token_ids(rng, 2, 4, [4, 2])))
  params = jax.jit(mha.init)(jax.random.key(0), xq, xkv, bias)["params"]
  assert params["query"]["kernel"].shape == (d_model, heads, d_k)
  assert params["value"]["kernel"].shape == (d_model, heads, d_v)
  assert params["out"]["kernel"].shape == (heads, d_v, d_model)
  out, state = jax.jit(lambda p: mha.apply({"params": p}, xq, xkv, bias,
                                          mutable=["intermediates"]))(params)
  p = jax.tree.map(np.asarray, params)
  proj = lambda x, w: np.einsum("bld,dhk->blhk", np.asarray(x), w)
  ref, ref_probs = numpy_attention(proj(xq, p["query"]["kernel"]), proj(xkv, p["key"]["kernel"]),
                                   proj(xkv, p["value"]["kernel"]), np.asarray(bias))
  ref = np.einsum("blhk,hkd->bld", ref, p["out"]["kernel"])
  np.testing.assert_allclose(out, ref, atol=1e-5)
  (weights,) = state["intermediates"]["attention_weights"]
  np.testing.assert_allclose(weights, ref_probs, atol=1e-6)
  # Pre-projected keys/values (the decoding path) give the same output.
  def via_kv(p):
    kv = mha.apply({"params": p}, xkv, method=attention_lib.MultiHeadAttention.project_kv)
    return mha.apply({"params": p}, xq, bias=bias, kv=kv)
  out_kv = jax.jit(via_kv)(params)
  np.testing.assert_allclose(out_kv, out, atol=1e-6)


def test_module_uses_the_fused_path_only_where_it_applies():
  rng = np.random.default_rng(9)
  x = jnp.asarray(rng.normal(size=(2, 6, 8)), jnp.float32)
  seg = layers.segment_ids(token_ids(rng, 2, 6, [6, 4]))
  mask = masks.Mask(seg, seg, causal=True)
  make = lambda impl, **kw: attention_lib.MultiHeadAttention(num_heads=2, d_k=4, d_v=4, d_model=8,
                                                      implementation=impl, **kw)
  params = jax.jit(make("reference").init)(jax.random.key(0), x, bias=mask)["params"]
  apply = lambda impl, **kw: jax.jit(lambda p: make(impl, **kw).apply(
      {"params": p}, x, bias=mask, mutable=["intermediates"]))(params)
  (ref, ref_state), (fused, fused_state) = apply("reference"), apply("fused")
  real = np.asarray(seg) != 0
  np.testing.assert_allclose(np.asarray(fused)[real], np.asarray(ref)[real], atol=1e-5)
  # Collecting attention maps needs the probabilities: the reference path runs and sows them.
  assert "attention_weights" in fused_state["intermediates"]
  np.testing.assert_allclose(fused, ref, atol=1e-6)
  # Without the intermediates collection the fused path runs: nothing sown, padded rows differ.
  plain = jax.jit(lambda p: make("fused").apply({"params": p}, x, bias=mask))(params)
  np.testing.assert_allclose(np.asarray(plain)[real], np.asarray(ref)[real], atol=1e-5)
  assert not np.allclose(np.asarray(plain)[~real], np.asarray(ref)[~real])
