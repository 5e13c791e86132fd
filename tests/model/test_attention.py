"""model/attention.py: the masks against brute force, scaled dot-product attention against
NumPy, multi-head attention against NumPy, and one decoder position's attention over the
write-once caches against the full attention's row. Which kernel an attention runs is
kernels/choice.py's (tests/kernels/test_choice.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_reference import numpy_attention, token_ids
from t2t_jax.ids import NEG_INF
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import layers

def test_masks_match_brute_force():
  n, r = 7, 2
  causal = np.asarray(attention_lib.causal_mask(n))[0, 0]
  local = np.asarray(attention_lib.local_mask(n, r))[0, 0]
  for i in range(n):
    for j in range(n):
      assert causal[i, j] == (j <= i)
      assert local[i, j] == (abs(i - j) <= r)
  q_ids = jnp.array([[3, 4, 0]])
  kv_ids = jnp.array([[5, 0, 6, 0]])
  pad = np.asarray(attention_lib.padding_mask(q_ids, kv_ids))
  assert pad.shape == (1, 1, 3, 4)
  expected = np.outer([1, 1, 0], [1, 0, 1, 0]).astype(bool)
  np.testing.assert_array_equal(pad[0, 0], expected)
  bias = np.asarray(attention_lib.mask_to_bias(pad))
  assert np.all(np.isfinite(bias)) and set(np.unique(bias)) == {0.0, NEG_INF}
  with pytest.raises(ValueError, match="window"):
    attention_lib.local_mask(4, -1)


def test_segment_mask_matches_brute_force():
  segments = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]], np.int32)
  kv_segments = np.array([[1, 1, 2, 2, 2, 3, 3, 0], [1, 1, 1, 0, 0, 0, 0, 0]], np.int32)
  for causal in (False, True):
    mask = np.asarray(attention_lib.Mask(jnp.asarray(segments), jnp.asarray(kv_segments),
                                 causal=causal, packed=True).dense())
    assert mask.shape == (2, 1, 8, 8)
    for b, i, j in np.ndindex(2, 8, 8):
      want = segments[b, i] == kv_segments[b, j] != 0 and (not causal or j <= i)
      assert mask[b, 0, i, j] == want, (b, i, j, causal)
  # One sentence per row: the dense mask is the padding mask.
  ids = token_ids(np.random.default_rng(0), 2, 5, [5, 3])
  seg = layers.segment_ids(ids)
  np.testing.assert_array_equal(attention_lib.Mask(seg, seg).dense(), attention_lib.padding_mask(ids, ids))


_attention = jax.jit(attention_lib.scaled_dot_product_attention,
                     static_argnames=("dropout_rate", "deterministic", "dtype"))


def test_attention_matches_numpy_with_masks_and_unequal_depths():
  rng = np.random.default_rng(0)
  batch, q_len, kv_len, heads, d_k, d_v = 2, 5, 6, 3, 4, 7
  q = rng.normal(size=(batch, q_len, heads, d_k)).astype(np.float32)
  k = rng.normal(size=(batch, kv_len, heads, d_k)).astype(np.float32)
  v = rng.normal(size=(batch, kv_len, heads, d_v)).astype(np.float32)
  q_ids, kv_ids = token_ids(rng, batch, q_len, [5, 3]), token_ids(rng, batch, kv_len, [6, 2])
  mask = attention_lib.padding_mask(q_ids, kv_ids) & attention_lib.causal_mask(6)[:, :, :q_len, :kv_len]
  bias = attention_lib.mask_to_bias(mask)
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
  bias = attention_lib.mask_to_bias(attention_lib.padding_mask(ids[:, :2], ids))
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


def test_multi_head_attention_module_against_numpy():
  rng = np.random.default_rng(2)
  heads, d_k, d_v, d_model = 3, 4, 5, 6
  mha = attention_lib.MultiHeadAttention(num_heads=heads, d_k=d_k, d_v=d_v, d_model=d_model)
  xq = jnp.asarray(rng.normal(size=(2, 3, d_model)), jnp.float32)
  xkv = jnp.asarray(rng.normal(size=(2, 4, d_model)), jnp.float32)
  bias = attention_lib.mask_to_bias(attention_lib.padding_mask(token_ids(rng, 2, 3, [3, 3]),
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


def test_projection_biases_enter_as_x_w_plus_b_and_biases_lists_them():
  rng = np.random.default_rng(4)
  heads, d_k, d_v, d_model = 2, 4, 3, 6
  mha = attention_lib.MultiHeadAttention(num_heads=heads, d_k=d_k, d_v=d_v, d_model=d_model,
                                         use_bias=True)
  xq = jnp.asarray(rng.normal(size=(2, 3, d_model)), jnp.float32)
  xkv = jnp.asarray(rng.normal(size=(2, 4, d_model)), jnp.float32)
  params = jax.jit(mha.init)(jax.random.key(0), xq, xkv)["params"]
  params = jax.tree.map(lambda a: a + jnp.asarray(rng.normal(size=a.shape), a.dtype), params)
  p = jax.tree.map(np.asarray, params)
  proj = lambda x, n: np.einsum("bld,dhk->blhk", np.asarray(x), p[n]["kernel"]) + p[n]["bias"]
  ref, _ = numpy_attention(proj(xq, "query"), proj(xkv, "key"), proj(xkv, "value"), 0.0)
  ref = np.einsum("blhk,hkd->bld", ref, p["out"]["kernel"]) + p["out"]["bias"]
  np.testing.assert_allclose(mha.apply({"params": params}, xq, xkv), ref, atol=1e-4)
  b = attention_lib.MultiHeadAttention.biases(params)
  assert [b[n].shape for n in ("query", "key", "value", "out")] == [(8,), (8,), (6,), (6,)]
  np.testing.assert_array_equal(b["value"], p["value"]["bias"].reshape(-1))
  plain = attention_lib.MultiHeadAttention(num_heads=heads, d_k=d_k, d_v=d_v, d_model=d_model)
  assert attention_lib.MultiHeadAttention.biases(
      jax.jit(plain.init)(jax.random.key(0), xq, xkv)["params"]) is None


def test_record_position_follows_the_worked_example():
  # The module docstring's example: one sentence, r = 2, length 3.
  stored_in, holds = attention_lib.record_position(jnp.zeros((2, 3), jnp.int32), 0, batch=1)
  np.testing.assert_array_equal(stored_in[:, 0], [0, 1])
  stored_in = stored_in[jnp.array([0, 0])]          # both rows extend row 0's hypothesis
  stored_in, holds = attention_lib.record_position(stored_in, 1, batch=1)
  np.testing.assert_array_equal(stored_in[:, :2], [[0, 0], [0, 1]])
  assert holds.shape == (1, 2, 2, 3) and holds.dtype == jnp.bool_
  # Row 1 reads position 0 from cache row 0 and position 1 from its own.
  assert holds[0, 1, 0, 0] and holds[0, 1, 1, 1]
  assert not holds[0, 1, 1, 0] and not holds[0, 1, 0, 1]
  np.testing.assert_array_equal(holds[0, 0, :, :2], [[True, True], [False, False]])
  np.testing.assert_array_equal(holds.sum(axis=2), 1)  # one cache row per query row and position


def test_self_attention_of_one_position_equals_the_attention_over_its_own_history():
  rng = np.random.default_rng(0)
  batch, r, heads, d_k, d_v, length, position = 2, 3, 2, 4, 5, 6, 3
  rows = batch * r
  keys = rng.normal(size=(rows, heads, d_k, length)).astype(np.float32)
  values = rng.normal(size=(rows, heads, length, d_v)).astype(np.float32)
  q = rng.normal(size=(rows, 1, heads, d_k)).astype(np.float32)
  # A search's history: which of its sentence's rows wrote each earlier position.
  stored_in = jnp.asarray(rng.integers(0, r, (rows, length)), jnp.int32)
  stored_in, holds = attention_lib.record_position(stored_in, position, batch)
  bias = attention_lib.mask_to_bias(jnp.arange(length) <= position)[None, None, None, :]
  got = attention_lib.self_attention(attention_lib.scaled_queries(jnp.asarray(q), jnp.float32),
                                      jnp.asarray(keys), jnp.asarray(values), holds, bias,
                                      jnp.float32)
  assert got.shape == (rows, 1, heads, d_v)
  # The reference gathers each row's own keys/values [rows, length, heads, d] first.
  writer = (np.arange(rows) // r * r)[:, None] + np.asarray(stored_in)  # [rows, length]
  assert np.all(writer[:, position] == np.arange(rows))
  at = np.arange(length)
  own_keys = keys[writer, :, :, at[None]]                        # [rows, length, heads, d_k]
  own_values = values[writer, :, at[None], :]                    # [rows, length, heads, d_v]
  want, _ = numpy_attention(q, own_keys, own_values, np.asarray(bias))
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_cross_attention_of_one_position_equals_the_full_attention_row():
  rng = np.random.default_rng(1)
  batch, r, heads, d_k, d_v, src = 2, 2, 2, 4, 3, 5
  rows = batch * r
  keys = rng.normal(size=(batch, heads, src, d_k)).astype(np.float32)
  values = rng.normal(size=(batch, heads, src, d_v)).astype(np.float32)
  q = rng.normal(size=(rows, 1, heads, d_k)).astype(np.float32)
  source = jnp.array([[4, 5, 6, 0, 0], [7, 8, 9, 3, 2]])
  bias = attention_lib.mask_to_bias(source != 0)[:, None, None, :]             # [batch, 1, 1, src]
  got = attention_lib.cross_attention(attention_lib.scaled_queries(jnp.asarray(q), jnp.float32),
                                       jnp.asarray(keys), jnp.asarray(values), bias, jnp.float32)
  assert got.shape == (rows, 1, heads, d_v)
  # Every row of a sentence reads that sentence's keys/values.
  per_row = lambda x: np.repeat(x, r, axis=0).transpose(0, 2, 1, 3)     # [rows, src, heads, d]
  want, probs = numpy_attention(q, per_row(keys), per_row(values),
                                np.repeat(np.asarray(bias), r, axis=0))
  np.testing.assert_allclose(got, want, atol=1e-5)
  assert np.all(probs[:r, :, :, 3:] < 1e-30)                           # padding gets no weight
