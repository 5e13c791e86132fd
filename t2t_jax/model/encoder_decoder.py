"""The encoder and decoder stacks (section 3.1): N post-norm layers each, one position at a time too.

Every sub-layer is `LayerNorm(x + Dropout(Sublayer(x)))`. `DecoderLayer.__call__`
(a whole target) and `DecoderLayer.step` (one position against the caches) run
the same `_block` with the attentions as arguments; model/transformer.py
embeds the tokens and projects the logits around these stacks. Each layer builds its
attentions, feed-forward and dropout with what its `plugins` hand in (model/plugins.py).
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from t2t_jax.configs import ModelConfig
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import layers
from t2t_jax.model import plugins as plugins_lib

Array = jax.Array
Cache = dict[str, Any]


def compute_dtype(cfg: ModelConfig) -> Any:
  """The dtype of activations and products (parameters stay float32)."""
  return jnp.dtype(cfg.dtype)


def _layer_norm(cfg: ModelConfig) -> nn.LayerNorm:
  # float32 statistics and output whatever the compute dtype.
  return nn.LayerNorm(epsilon=cfg.layer_norm_epsilon, dtype=jnp.float32,
                      param_dtype=jnp.float32)


def _attention(cfg: ModelConfig, plugins: plugins_lib.Plugins) -> attention_lib.MultiHeadAttention:
  return attention_lib.MultiHeadAttention(
      num_heads=cfg.num_heads, d_k=cfg.key_depth, d_v=cfg.value_depth, d_model=cfg.d_model,
      dropout_rate=cfg.attention_dropout_rate, dtype=compute_dtype(cfg),
      use_bias=cfg.attention_bias, attention_fn=plugins.attention_fn, dense=plugins.dense,
      fused_dense=plugins.fused_dense)


def _feed_forward(cfg: ModelConfig, plugins: plugins_lib.Plugins) -> layers.FeedForward:
  return layers.FeedForward(cfg.d_model, cfg.d_ff, dtype=compute_dtype(cfg),
                            activation=cfg.activation, dense=plugins.dense)


def dropout(cfg: ModelConfig, plugins: plugins_lib.Plugins) -> layers.Dropout:
  """The dropout every sub-layer output and the embeddings get."""
  return layers.Dropout(cfg.dropout_rate, dropout_fn=plugins.dropout_fn)


def _add_norm(x: Array, y: Array, norm: nn.LayerNorm, dropout: layers.Dropout,
              deterministic: bool) -> Array:
  """One sub-layer's output, LayerNorm(x + Dropout(y)), in x's dtype (post-norm)."""
  return norm(x + dropout(y, deterministic=deterministic)).astype(x.dtype)


class EncoderLayer(nn.Module):
  """Self-attention, then feed-forward; each wrapped as LayerNorm(x + Dropout(f(x)))."""
  config: ModelConfig
  plugins: plugins_lib.Plugins = plugins_lib.Plugins()

  def setup(self):
    cfg, plugins = self.config, self.plugins
    self.self_attention = _attention(cfg, plugins)
    self.ffn = _feed_forward(cfg, plugins)
    self.norm_attention = _layer_norm(cfg)
    self.norm_ffn = _layer_norm(cfg)
    self.dropout = dropout(cfg, plugins)

  def __call__(self, x: Array, bias: attention_lib.Mask, deterministic: bool) -> Array:
    """[batch, src_len, d_model] -> same; `bias`: the source self-attention mask."""
    x = _add_norm(x, self.self_attention(x, bias=bias, deterministic=deterministic),
                  self.norm_attention, self.dropout, deterministic)
    return _add_norm(x, self.ffn(x), self.norm_ffn, self.dropout, deterministic)


class DecoderLayer(nn.Module):
  """Masked self-attention, encoder-decoder attention, feed-forward (all post-norm)."""
  config: ModelConfig
  plugins: plugins_lib.Plugins = plugins_lib.Plugins()

  def setup(self):
    cfg, plugins = self.config, self.plugins
    self.self_attention = _attention(cfg, plugins)
    self.cross_attention = _attention(cfg, plugins)
    self.ffn = _feed_forward(cfg, plugins)
    self.norm_self = _layer_norm(cfg)
    self.norm_cross = _layer_norm(cfg)
    self.norm_ffn = _layer_norm(cfg)
    self.dropout = dropout(cfg, plugins)

  def _block(self, y: Array, self_attend: Callable[[Array], tuple[Array, Any]],
             cross_attend: Callable[[Array], Array], deterministic: bool) -> tuple[Array, Any]:
    """The layer, given its two attentions as functions of y; both paths run this.

    `self_attend(y) -> (output, state)` (the state is the new self-attention cache
    when decoding, None otherwise), `cross_attend(y) -> output`. Returns the
    layer's output and that state.
    """
    attended, state = self_attend(y)
    y = _add_norm(y, attended, self.norm_self, self.dropout, deterministic)
    y = _add_norm(y, cross_attend(y), self.norm_cross, self.dropout, deterministic)
    return _add_norm(y, self.ffn(y), self.norm_ffn, self.dropout, deterministic), state

  def __call__(self, y: Array, encoded: Array, self_bias: attention_lib.Mask,
               cross_bias: attention_lib.Mask, deterministic: bool) -> Array:
    """y [batch, tgt_len, d_model], encoded [batch, src_len, d_model] -> [batch, tgt_len, d_model]."""
    self_attend = lambda y: (self.self_attention(y, bias=self_bias, deterministic=deterministic),
                             None)
    cross_attend = lambda y: self.cross_attention(y, encoded, bias=cross_bias,
                                                  deterministic=deterministic)
    return self._block(y, self_attend, cross_attend, deterministic)[0]

  def step(self, y: Array, self_cache: Cache, cross_cache: Cache, position: Array, holds: Array,
           self_bias: Array, cross_bias: Array) -> tuple[Array, Cache]:
    """One position y [rows, 1, d_model] -> [rows, 1, d_model] and the new self-attention cache.

    `self_cache` and `cross_cache` are this layer's parts of `init_cache` (see
    `MultiHeadAttention.step_self` for `holds` and the biases); the self-attention
    cache gets this position's keys/values at `position`.
    """
    self_attend = lambda y: self.self_attention.step_self(y, self_cache, position, holds,
                                                          self_bias)
    cross_attend = lambda y: self.cross_attention.step_cross(y, cross_cache, cross_bias)
    return self._block(y, self_attend, cross_attend, deterministic=True)


class Encoder(nn.Module):
  """N encoder layers over embedded sources."""
  config: ModelConfig
  plugins: plugins_lib.Plugins = plugins_lib.Plugins()

  def setup(self):
    self.layers = [EncoderLayer(self.config, self.plugins) for _ in range(self.config.num_layers)]

  def __call__(self, x: Array, bias: attention_lib.Mask, deterministic: bool) -> Array:
    for layer in self.layers:
      x = layer(x, bias, deterministic)
    return x


class Decoder(nn.Module):
  """N decoder layers (`num_decoder_layers`: the encoder's N unless `decoder_layers`); `step`
  runs them for one position against per-layer caches."""
  config: ModelConfig
  plugins: plugins_lib.Plugins = plugins_lib.Plugins()

  def setup(self):
    self.layers = [DecoderLayer(self.config, self.plugins)
                   for _ in range(self.config.num_decoder_layers)]

  def __call__(self, y: Array, encoded: Array, self_bias: attention_lib.Mask,
               cross_bias: attention_lib.Mask, deterministic: bool) -> Array:
    for layer in self.layers:
      y = layer(y, encoded, self_bias, cross_bias, deterministic)
    return y

  def init_cache(self, encoded: Array, max_decode_len: int) -> tuple[list[Cache], list[Cache]]:
    """Per layer: the empty self-attention cache and the cross-attention keys/values of `encoded`."""
    batch = encoded.shape[0]
    return ([layer.self_attention.init_self_cache(batch, max_decode_len) for layer in self.layers],
            [layer.cross_attention.cross_cache(encoded) for layer in self.layers])

  def step(self, y: Array, self_caches: list[Cache], cross_caches: list[Cache], position: Array,
           holds: Array, self_bias: Array, cross_bias: Array) -> tuple[Array, list[Cache]]:
    new_caches = []
    for layer, self_cache, cross_cache in zip(self.layers, self_caches, cross_caches):
      y, self_cache = layer.step(y, self_cache, cross_cache, position, holds, self_bias,
                                 cross_bias)
      new_caches.append(self_cache)
    return y, new_caches
