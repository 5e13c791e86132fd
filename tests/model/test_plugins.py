"""model/plugins.py: every job the model runs goes through what is handed in, and the default
is the model's own references."""

import collections

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax import configs
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import layers
from t2t_jax.model import plugins as plugins_lib
from t2t_jax.model import transformer

CFG = configs.get_config("demo", vocab_size=23, num_layers=2, d_model=16, d_ff=32, num_heads=2,
                         d_k=8, d_v=6, max_len=16, dropout_rate=0.1).model
RNG = np.random.default_rng(0)
INPUTS = jnp.asarray(RNG.integers(3, 23, (2, 5)), jnp.int32)
TARGETS = jnp.asarray(RNG.integers(3, 23, (2, 4)), jnp.int32)


def _counting():
  """Plug-ins that run the references and count their calls."""
  calls = collections.Counter()

  def attention_fn(*args, **kwargs):
    calls["attention_fn"] += 1
    return attention_lib.dot_product_attention(*args, **kwargs)

  def dropout_fn(x, key, rate):
    calls["dropout_fn"] += 1
    return layers.dropout(x, key, rate)

  def dense(features, **kwargs):
    calls["dense"] += 1
    return layers.dense(features, **kwargs)

  def fused_dense(x, params, dtype):
    calls["fused_dense"] += 1
    return layers.fused_dense(x, params, dtype)

  return plugins_lib.Plugins(attention_fn, dropout_fn, dense, fused_dense), calls


def test_the_defaults_are_the_model_s_references():
  plugins = plugins_lib.Plugins()
  assert plugins.attention_fn is attention_lib.dot_product_attention
  assert plugins.dropout_fn is layers.dropout
  assert (plugins.dense, plugins.fused_dense) == (layers.dense, layers.fused_dense)
  assert transformer.Transformer(CFG).plugins == plugins


def test_every_attention_dropout_and_projection_runs_the_plug_ins():
  n = CFG.num_layers
  params = transformer.init_params(CFG, jax.random.key(0))
  plugins, calls = _counting()
  want = transformer.Transformer(CFG).apply({"params": params}, INPUTS, TARGETS, train=True,
                                           rngs={"dropout": jax.random.key(1)})
  got = transformer.Transformer(CFG, plugins).apply({"params": params}, INPUTS, TARGETS,
                                                     train=True, rngs={"dropout": jax.random.key(1)})
  np.testing.assert_array_equal(got, want)
  # Attentions: the encoder's N, the decoder's 2N. Projections: four per attention, two per
  # feed-forward. Dropout: both embeddings, and each of the 2N + 3N sub-layers' outputs.
  assert calls == {"attention_fn": 3 * n, "dense": 4 * 3 * n + 2 * 2 * n,
                   "dropout_fn": 2 + 2 * n + 3 * n}, calls
  # Cached decoding: each decoder layer's queries, keys and values as one fused product.
  calls.clear()
  cache = transformer.init_cache(CFG, params, INPUTS, 4, plugins)
  assert calls["attention_fn"] == n                                   # the encoder's
  calls.clear()
  features, _ = transformer.decode_features(CFG, params, cache, TARGETS[:, 0], 0, plugins)
  assert calls["fused_dense"] == n and calls["attention_fn"] == 0 and calls["dropout_fn"] == 0
  kernel, bias = transformer.output_weights(CFG, params)
  assert bias is None and kernel is params["embedding"]["embedding"]
  logits, _ = transformer.decode_step(CFG, params, cache, TARGETS[:, 0], 0)
  np.testing.assert_allclose(features @ kernel.T, logits, atol=1e-5)


def test_a_plug_in_changes_what_the_model_computes():
  params = transformer.init_params(CFG, jax.random.key(0))
  plain = transformer.Transformer(CFG).apply({"params": params}, INPUTS, TARGETS)
  half = lambda *args, **kwargs: jax.tree.map(
      lambda x: None if x is None else x * 0.5,
      attention_lib.dot_product_attention(*args, **kwargs), is_leaf=lambda x: x is None)
  halved = transformer.Transformer(CFG, plugins_lib.Plugins(attention_fn=half)).apply(
      {"params": params}, INPUTS, TARGETS)
  assert np.abs(np.asarray(halved) - np.asarray(plain)).max() > 1e-3
