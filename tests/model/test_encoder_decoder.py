"""model/encoder_decoder.py: each layer is post-norm LayerNorm(x + Sublayer(x)) in the paper's
order (against NumPy), and the decoder's one-position step gives its full-target output."""

import jax
import jax.numpy as jnp
import numpy as np

from attention_reference import numpy_attention, token_ids
from t2t_jax import configs
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import encoder_decoder
from t2t_jax.model import layers

# d_k != d_v: the reference attention runs, and a swapped projection cannot go unnoticed.
CFG = configs.get_config("demo", vocab_size=23, num_layers=2, d_model=16, d_ff=32, num_heads=2,
                         d_k=8, d_v=6, max_len=16).model
RNG = np.random.default_rng(0)
SOURCE = layers.segment_ids(token_ids(RNG, 2, 4, [4, 2]))               # [batch, src_len]
TARGET = layers.segment_ids(token_ids(RNG, 2, 5, [5, 3]))               # [batch, tgt_len]
X = jnp.asarray(RNG.normal(size=(2, 4, 16)), jnp.float32)
Y = jnp.asarray(RNG.normal(size=(2, 5, 16)), jnp.float32)


def _init(module, *args):
  """Parameters with every value moved off its initial one (LayerNorm scale 1, biases 0)."""
  params = jax.jit(lambda key: module.init(key, *args))(jax.random.key(0))["params"]
  leaves, tree = jax.tree.flatten(params)
  noise = [jnp.asarray(RNG.normal(scale=0.3, size=x.shape), jnp.float32) for x in leaves]
  return jax.tree.unflatten(tree, [x + n for x, n in zip(leaves, noise)])


def _norm(x, p):
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + configs.LAYER_NORM_EPSILON) * p["scale"] + p["bias"]


def _attention(x, kv, p, mask):
  proj = lambda x, name: np.einsum("bld,dhk->blhk", x, p[name]["kernel"])
  out, _ = numpy_attention(proj(x, "query"), proj(kv, "key"), proj(kv, "value"),
                           np.asarray(attention_lib.mask_to_bias(mask.dense())))
  return np.einsum("blhk,hkd->bld", out, p["out"]["kernel"])


def _ffn(x, p):
  hidden = np.maximum(0, x @ p["wi"]["kernel"] + p["wi"]["bias"])
  return hidden @ p["wo"]["kernel"] + p["wo"]["bias"]


def test_encoder_layer_is_post_norm_self_attention_then_feed_forward():
  mask = attention_lib.Mask(SOURCE, SOURCE)
  layer = encoder_decoder.EncoderLayer(CFG)
  params = _init(layer, X, mask, True)
  got = np.asarray(jax.jit(lambda p: layer.apply({"params": p}, X, mask, True))(params))
  p, x = jax.tree.map(np.asarray, params), np.asarray(X, np.float64)
  x = _norm(x + _attention(x, x, p["self_attention"], mask), p["norm_attention"])
  want = _norm(x + _ffn(x, p["ffn"]), p["norm_ffn"])
  real = np.asarray(SOURCE) != 0
  np.testing.assert_allclose(got[real], want[real], atol=1e-4)


def test_decoder_layer_is_post_norm_self_then_cross_attention_then_feed_forward():
  self_mask, cross_mask = attention_lib.Mask(TARGET, TARGET, causal=True), attention_lib.Mask(TARGET, SOURCE)
  layer = encoder_decoder.DecoderLayer(CFG)
  params = _init(layer, Y, X, self_mask, cross_mask, True)
  got = np.asarray(jax.jit(lambda p: layer.apply({"params": p}, Y, X, self_mask, cross_mask,
                                                 True))(params))
  p, y, x = jax.tree.map(np.asarray, params), np.asarray(Y, np.float64), np.asarray(X, np.float64)
  y = _norm(y + _attention(y, y, p["self_attention"], self_mask), p["norm_self"])
  y = _norm(y + _attention(y, x, p["cross_attention"], cross_mask), p["norm_cross"])
  want = _norm(y + _ffn(y, p["ffn"]), p["norm_ffn"])
  real = np.asarray(TARGET) != 0
  np.testing.assert_allclose(got[real], want[real], atol=1e-4)


def test_decoder_steps_give_the_full_target_output():
  decoder = encoder_decoder.Decoder(CFG)
  self_mask, cross_mask = attention_lib.Mask(TARGET, TARGET, causal=True), attention_lib.Mask(TARGET, SOURCE)
  params = _init(decoder, Y, X, self_mask, cross_mask, True)
  full = np.asarray(jax.jit(lambda p: decoder.apply({"params": p}, Y, X, self_mask, cross_mask,
                                                    True))(params))
  length = Y.shape[1] + 1                       # a spare, unwritten slot stays masked
  caches = decoder.apply({"params": params}, X, length, method=encoder_decoder.Decoder.init_cache)
  cross_bias = attention_lib.mask_to_bias(SOURCE != 0)[:, None, None, :]

  @jax.jit
  def step(self_caches, stored_in, position):
    stored_in, holds = attention_lib.record_position(stored_in, position, batch=2)
    self_bias = attention_lib.mask_to_bias(jnp.arange(length) <= position)[None, None, None, :]
    out, self_caches = decoder.apply({"params": params}, Y[:, position][:, None], self_caches,
                                     caches[1], position, holds, self_bias, cross_bias,
                                     method=encoder_decoder.Decoder.step)
    return out[:, 0], self_caches, stored_in

  self_caches, stored_in = caches[0], jnp.zeros((2, length), jnp.int32)
  for position in range(Y.shape[1]):
    out, self_caches, stored_in = step(self_caches, stored_in, position)
    real = np.asarray(TARGET[:, position]) != 0
    np.testing.assert_allclose(np.asarray(out)[real], full[real, position], atol=1e-5,
                               err_msg=f"position {position}")
