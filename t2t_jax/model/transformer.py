"""The Transformer (section 3): encoder, decoder, shared embeddings, incremental decoding.

    params = init_params(cfg, key)  # cfg: configs.ModelConfig (a TransformerConfig: its .model)
    logits = Transformer(cfg).apply({"params": params}, inputs, targets, train=False)
    cache = init_cache(cfg, params, inputs, max_decode_len)
    logits, cache = decode_step(cfg, params, cache, tokens, position)  # [rows, vocab]

Every sub-layer is post-norm, `LayerNorm(x + Dropout(Sublayer(x)))`. Token 0 is
padding; the decoder input is the target shifted right with 0 in front. The
full forward pass and `decode_step` run the same layer modules with the same
parameters (`DecoderLayer._block`); decoding swaps each attention's full-sequence
call for its one-position methods (`MultiHeadAttention.step_self`, `.step_cross`),
which read the caches.
Initialisation choices are explained in docs/model.md.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from t2t_jax.configs import ModelConfig
from t2t_jax.configs import TransformerConfig
from t2t_jax.ids import PAD_ID
from t2t_jax.model import decode_cache
from t2t_jax.model import dropout as dropout_lib
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import layers
from t2t_jax.model import logits as logits_lib

Array = jax.Array
Cache = dict[str, Any]


def shift_right(targets: Array, segments: Optional[Array] = None) -> Array:
  """[batch, length] -> [batch, length]: [t0, t1, ...] becomes [0, t0, t1, ...].

  With `segments` (packed rows), every sentence's first position gets 0 too,
  not the previous sentence's last token.
  """
  shifted = jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]
  if segments is None:
    return shifted
  same = segments == jnp.pad(segments, ((0, 0), (1, 0)))[:, :-1]
  return jnp.where(same, shifted, 0)


def _dtype(cfg: ModelConfig) -> Any:
  return jnp.dtype(cfg.dtype)


LAYER_NORM_EPSILON = 1e-6  # as tensor2tensor


def _layer_norm() -> nn.LayerNorm:
  # float32 statistics and output whatever the compute dtype.
  return nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=jnp.float32, param_dtype=jnp.float32)


def _segments_and_positions(ids: Array, segments: Optional[Array]) -> tuple[Array, Array]:
  """Segment ids [batch, length] and positions ([length] unpacked, [batch, length] packed)."""
  if segments is None:
    return layers.segment_ids(ids), jnp.arange(ids.shape[1])
  return segments, layers.segment_positions(segments)


def _attention(cfg: ModelConfig) -> attention_lib.MultiHeadAttention:
  return attention_lib.MultiHeadAttention(
      num_heads=cfg.num_heads, d_k=cfg.key_depth, d_v=cfg.value_depth, d_model=cfg.d_model,
      dropout_rate=cfg.attention_dropout_rate, dtype=_dtype(cfg),
      implementation=cfg.attention_impl)


def _dropout(cfg: ModelConfig) -> dropout_lib.Dropout:
  return dropout_lib.Dropout(cfg.dropout_rate, generator=cfg.dropout_generator)


def _add_norm(x: Array, y: Array, norm: nn.LayerNorm, dropout: dropout_lib.Dropout,
              deterministic: bool) -> Array:
  """One sub-layer's output, LayerNorm(x + Dropout(y)), in x's dtype (post-norm)."""
  return norm(x + dropout(y, deterministic=deterministic)).astype(x.dtype)


class EncoderLayer(nn.Module):
  """Self-attention, then feed-forward; each wrapped as LayerNorm(x + Dropout(f(x)))."""
  config: ModelConfig

  def setup(self):
    cfg = self.config
    self.self_attention = _attention(cfg)
    self.ffn = layers.FeedForward(cfg.d_model, cfg.d_ff, dtype=_dtype(cfg))
    self.norm_attention = _layer_norm()
    self.norm_ffn = _layer_norm()
    self.dropout = _dropout(cfg)

  def __call__(self, x: Array, bias: layers.Mask, deterministic: bool) -> Array:
    """[batch, src_len, d_model] -> same; `bias`: the source self-attention mask."""
    x = _add_norm(x, self.self_attention(x, bias=bias, deterministic=deterministic),
                  self.norm_attention, self.dropout, deterministic)
    return _add_norm(x, self.ffn(x), self.norm_ffn, self.dropout, deterministic)


class DecoderLayer(nn.Module):
  """Masked self-attention, encoder-decoder attention, feed-forward (all post-norm)."""
  config: ModelConfig

  def setup(self):
    cfg = self.config
    self.self_attention = _attention(cfg)
    self.cross_attention = _attention(cfg)
    self.ffn = layers.FeedForward(cfg.d_model, cfg.d_ff, dtype=_dtype(cfg))
    self.norm_self = _layer_norm()
    self.norm_cross = _layer_norm()
    self.norm_ffn = _layer_norm()
    self.dropout = _dropout(cfg)

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

  def __call__(self, y: Array, encoded: Array, self_bias: layers.Mask,
               cross_bias: layers.Mask, deterministic: bool) -> Array:
    """y [batch, tgt_len, d_model], encoded [batch, src_len, d_model] -> [batch, tgt_len, d_model]."""
    self_attend = lambda y: (self.self_attention(y, bias=self_bias, deterministic=deterministic),
                             None)
    cross_attend = lambda y: self.cross_attention(y, encoded, bias=cross_bias,
                                                  deterministic=deterministic)
    return self._block(y, self_attend, cross_attend, deterministic)[0]

  def step(self, y: Array, self_cache: Cache, cross_cache: Cache, position: Array, reads: Array,
           self_bias: Array, cross_bias: Array) -> tuple[Array, Cache]:
    """One position y [rows, 1, d_model] -> [rows, 1, d_model] and the new self-attention cache.

    `self_cache` and `cross_cache` are this layer's parts of `init_cache` (see
    `MultiHeadAttention.step_self` for `reads` and the biases); the self-attention
    cache gets this position's keys/values at `position`.
    """
    self_attend = lambda y: self.self_attention.step_self(y, self_cache, position, reads,
                                                          self_bias)
    cross_attend = lambda y: self.cross_attention.step_cross(y, cross_cache, cross_bias)
    return self._block(y, self_attend, cross_attend, deterministic=True)


class Encoder(nn.Module):
  """N encoder layers over embedded sources."""
  config: ModelConfig

  def setup(self):
    self.layers = [EncoderLayer(self.config) for _ in range(self.config.num_layers)]

  def __call__(self, x: Array, bias: layers.Mask, deterministic: bool) -> Array:
    for layer in self.layers:
      x = layer(x, bias, deterministic)
    return x


class Decoder(nn.Module):
  """N decoder layers; `step` runs them for one position against per-layer caches."""
  config: ModelConfig

  def setup(self):
    self.layers = [DecoderLayer(self.config) for _ in range(self.config.num_layers)]

  def __call__(self, y: Array, encoded: Array, self_bias: layers.Mask,
               cross_bias: layers.Mask, deterministic: bool) -> Array:
    for layer in self.layers:
      y = layer(y, encoded, self_bias, cross_bias, deterministic)
    return y

  def init_cache(self, encoded: Array, max_decode_len: int) -> tuple[list[Cache], list[Cache]]:
    """Per layer: the empty self-attention cache and the cross-attention keys/values of `encoded`."""
    batch = encoded.shape[0]
    return ([layer.self_attention.init_self_cache(batch, max_decode_len) for layer in self.layers],
            [layer.cross_attention.cross_cache(encoded) for layer in self.layers])

  def step(self, y: Array, self_caches: list[Cache], cross_caches: list[Cache], position: Array,
           reads: Array, self_bias: Array, cross_bias: Array) -> tuple[Array, list[Cache]]:
    new_caches = []
    for layer, self_cache, cross_cache in zip(self.layers, self_caches, cross_caches):
      y, self_cache = layer.step(y, self_cache, cross_cache, position, reads, self_bias,
                                 cross_bias)
      new_caches.append(self_cache)
    return y, new_caches


class Transformer(nn.Module):
  """Encoder-decoder Transformer. `__call__(inputs, targets, train)` -> logits float32.

  Other entry points (use with `apply(..., method=...)`): `encode`, `decode`,
  `init_cache`, `decode_step`. `config` is a `ModelConfig`; a whole run config
  (`TransformerConfig`) is cut down to its `.model` on construction, so a module
  never depends on a training or data field.
  """
  config: ModelConfig

  def __post_init__(self):
    object.__setattr__(self, "config", self.config.model)
    super().__post_init__()

  def setup(self):
    cfg = self.config
    # std d_model^-0.5: after the sqrt(d_model) scale the input embeddings have unit
    # variance, and as the output projection x . E^T of a layer-normed x has unit
    # variance too (docs/model.md).
    embed = lambda: nn.Embed(
        cfg.vocab_size, cfg.d_model, dtype=_dtype(cfg), param_dtype=jnp.float32,
        embedding_init=nn.initializers.normal(stddev=cfg.d_model ** -0.5))
    if cfg.share_embeddings:
      self.embedding = embed()
    else:
      self.source_embedding = embed()
      self.target_embedding = embed()
      self.output_embedding = embed()
    if cfg.positional_encoding == "learned":
      # std sqrt(1/2): the per-element variance of the sinusoids it replaces.
      init = nn.initializers.normal(stddev=math.sqrt(0.5))
      self.source_positions = self.param("source_positions", init, (cfg.max_len, cfg.d_model))
      self.target_positions = self.param("target_positions", init, (cfg.max_len, cfg.d_model))
    self.encoder = Encoder(cfg)
    self.decoder = Decoder(cfg)
    self.dropout = _dropout(cfg)

  # -------------------------------------------------------------- building blocks

  def _embedding(self, role: str) -> nn.Embed:
    return self.embedding if self.config.share_embeddings else getattr(self, f"{role}_embedding")

  def _check_length(self, length: int, what: str) -> None:
    if self.config.positional_encoding == "learned" and length > self.config.max_len:
      raise ValueError(
          f"{what} length {length} exceeds max_len={self.config.max_len} of the learned "
          "positional table; raise --config.max_len or truncate the inputs")

  def _embed(self, ids: Array, positions: Array, role: str, deterministic: bool) -> Array:
    """ids [batch, length] at integer `positions` ([length] or [batch, length]) -> [batch, length, d_model]."""
    cfg = self.config
    x = self._embedding(role)(ids) * math.sqrt(cfg.d_model)            # stays in compute dtype
    if cfg.positional_encoding == "learned":
      table = self.source_positions if role == "source" else self.target_positions
      pe = jnp.take(table, positions, axis=0)
    else:
      pe = layers.sinusoidal_encoding(positions, cfg.d_model)          # [(batch,) length, d_model]
    if pe.ndim == 2:
      pe = pe[None]
    x = (x + pe.astype(x.dtype)).astype(_dtype(cfg))
    return self.dropout(x, deterministic=deterministic)

  def _output_kernel(self) -> Array:
    """[vocab, d_model] float32: the pre-softmax weights (the shared embedding by default)."""
    return self._embedding("output").embedding

  def _logits(self, y: Array) -> Array:
    """[batch, length, d_model] -> [batch, length, vocab] float32 (pre-softmax, section 3.4).

    Operands in the compute dtype, accumulated and returned in float32.
    """
    kernel = self._output_kernel().astype(y.dtype)
    return jnp.einsum("bld,vd->blv", y, kernel, preferred_element_type=jnp.float32)

  # ------------------------------------------------------------------ forward pass

  def encode(self, inputs: Array, train: bool = False,
             inputs_segments: Optional[Array] = None) -> Array:
    """inputs [batch, src_len] -> encoded [batch, src_len, d_model] (compute dtype).

    `inputs_segments` [batch, src_len] (packed rows: 1, 2, ... per sentence, 0 on
    padding) keeps attention within each sentence and restarts its positions.
    """
    length = inputs.shape[1]
    self._check_length(length, "source")
    segments, positions = _segments_and_positions(inputs, inputs_segments)
    mask = layers.Mask(segments, segments, window=self.config.attention_window,
                       packed=inputs_segments is not None)
    x = self._embed(inputs, positions, "source", deterministic=not train)
    return self.encoder(x, mask, deterministic=not train)

  def decode(self, encoded: Array, inputs: Array, targets: Array, train: bool = False,
             inputs_segments: Optional[Array] = None,
             targets_segments: Optional[Array] = None) -> Array:
    """Teacher-forced decoder: logits [batch, tgt_len, vocab] float32 for every position."""
    return self._logits(self.decode_hidden(encoded, inputs, targets, train, inputs_segments,
                                           targets_segments))

  def decode_hidden(self, encoded: Array, inputs: Array, targets: Array, train: bool = False,
                    inputs_segments: Optional[Array] = None,
                    targets_segments: Optional[Array] = None) -> Array:
    """The decoder's last layer [batch, tgt_len, d_model], before the output projection."""
    length = targets.shape[1]
    self._check_length(length, "target")
    if (inputs_segments is None) != (targets_segments is None):
      raise ValueError("pass both inputs_segments and targets_segments, or neither")
    packed = targets_segments is not None
    src_segments, _ = _segments_and_positions(inputs, inputs_segments)
    tgt_segments, positions = _segments_and_positions(targets, targets_segments)
    # Key j is masked where targets[j] is padding; for real positions that never
    # hides anything the causal mask allows (padding only trails), so this equals
    # `decode_step`, which only has the causal mask.
    self_mask = layers.Mask(tgt_segments, tgt_segments, causal=True,
                            window=self.config.attention_window, packed=packed)
    cross_mask = layers.Mask(tgt_segments, src_segments, packed=packed)
    y = self._embed(shift_right(targets, targets_segments), positions, "target",
                    deterministic=not train)
    return self.decoder(y, encoded, self_mask, cross_mask, deterministic=not train)

  def __call__(self, inputs: Array, targets: Array, train: bool = False,
               inputs_segments: Optional[Array] = None,
               targets_segments: Optional[Array] = None) -> Array:
    """inputs [batch, src_len], targets [batch, tgt_len] -> logits [batch, tgt_len, vocab] float32.

    Packed rows (several sentence pairs per row) pass both segment arrays: the
    k-th source sentence of a row is translated by its k-th target sentence.
    """
    encoded = self.encode(inputs, train, inputs_segments)
    return self.decode(encoded, inputs, targets, train, inputs_segments, targets_segments)

  def features(self, inputs: Array, targets: Array, train: bool = False,
               inputs_segments: Optional[Array] = None,
               targets_segments: Optional[Array] = None) -> tuple[Array, Array]:
    """`__call__` stopped before the output projection, for `loss.output_metrics`.

    Returns the decoder's last layer [batch, tgt_len, d_model] (compute dtype) and
    the pre-softmax weights [vocab, d_model] float32; logits = features @ weights.T.
    """
    encoded = self.encode(inputs, train, inputs_segments)
    hidden = self.decode_hidden(encoded, inputs, targets, train, inputs_segments,
                                targets_segments)
    return hidden, self._output_kernel()

  # ---------------------------------------------------------- incremental decoding

  def init_cache(self, inputs: Array, max_decode_len: int) -> Cache:
    """Runs the encoder once; pre-computes each decoder layer's cross-attention keys/values."""
    self._check_length(max_decode_len, "decode")
    self_caches, cross = self.decoder.init_cache(self.encode(inputs, train=False), max_decode_len)
    # writers[row, position]: which of its sentence's rows wrote the keys/values the
    # hypothesis now in `row` has at `position` (the search reorders it, not them).
    return {"sentence": decode_cache.PerSentence({"source_ids": inputs, "cross": cross}),
            "self": self_caches,
            "writers": decode_cache.Positions(
                jnp.zeros((inputs.shape[0], max_decode_len), jnp.int32))}

  def decode_step(self, cache: Cache, tokens: Array, position: Array,
                  vocab_major: bool = False) -> tuple[logits_lib.Logits, Cache]:
    """tokens [rows] at scalar `position` -> next-token logits [rows, vocab] float32, cache.

    `vocab_major`: the logits as `logits_lib.VocabMajor` [vocab, rows] instead, from
    the output projection E . y^T, faster for a beam's rows (t2t_jax/decoding/next_token.py).
    """
    sentence = cache["sentence"].value
    max_decode_len = cache["writers"].value.shape[1]
    rows, batch = tokens.shape[0], sentence["source_ids"].shape[0]
    r = rows // batch                                                  # rows per sentence
    own = jnp.arange(rows, dtype=jnp.int32) % r
    writers = lax.dynamic_update_index_in_dim(cache["writers"].value, own, position, axis=1)
    reads = (writers.reshape(batch, r, 1, max_decode_len)
             == jnp.arange(r, dtype=jnp.int32)[None, None, :, None])  # [batch, q, j, length]
    y = self._embed(tokens[:, None], jnp.reshape(position, (1,)), "target", deterministic=True)
    keys = jnp.arange(max_decode_len)
    allowed = keys <= position                                         # [max_decode_len]
    if self.config.attention_window is not None:
      allowed = allowed & (position - keys <= self.config.attention_window)
    self_bias = layers.mask_to_bias(allowed)[None, None, None, :]      # [1, 1, 1, max_len]
    cross_bias = layers.mask_to_bias(sentence["source_ids"] != PAD_ID)[:, None, None, :]
    y, self_caches = self.decoder.step(y, cache["self"], sentence["cross"], position, reads,
                                       self_bias, cross_bias)
    if vocab_major:
      kernel = self._output_kernel().astype(y.dtype)
      logits = logits_lib.VocabMajor(jnp.einsum("vd,rd->vr", kernel, y[:, 0],
                                                preferred_element_type=jnp.float32))
    else:
      logits = self._logits(y)[:, 0]
    return logits, {**cache, "self": self_caches,
                    "writers": cache["writers"].replace(value=writers)}


# ----------------------------------------------------------------- functional API


# The functions below take a `ModelConfig`; a `TransformerConfig` works too (its
# `.model` is used), so callers holding a run config need not convert it.
ConfigLike = ModelConfig | TransformerConfig


def init_params(cfg: ConfigLike, key: Array) -> dict[str, Any]:
  """A plain dict of float32 parameters. Shapes only: `jax.eval_shape(partial(init_params, cfg), key)`."""
  cfg = cfg.model
  ids = jnp.ones((1, 1), jnp.int32)
  init = jax.jit(functools.partial(Transformer(cfg).init, train=False))
  return flax.core.unfreeze(init({"params": key}, ids, ids)["params"])


def init_cache(cfg: ConfigLike, params: Any, inputs: Array, max_decode_len: int) -> Cache:
  """Decoding state for `inputs` [batch, src_len], leaves with leading dimension batch.

  {"sentence": PerSentence({"source_ids", "cross": [per layer {"key", "value"}]}),
   "self": [per layer {"key": Unordered([batch, heads, d_k, length], axis=3),
                       "value": Unordered([batch, heads, length, d_v], axis=2)}],
   "writers": Positions([batch, max_decode_len] int32, axis=1)}, cross-attention
  keys/values [batch, heads, src_len, d] (model/decode_cache.py says what the wrappers allow).
  `max_decode_len` (static) bounds the positions `decode_step` may write.
  """
  return Transformer(cfg).apply({"params": params}, inputs, max_decode_len,
                                method=Transformer.init_cache)


def decode_step(cfg: ConfigLike, params: Any, cache: Cache, tokens: Array,
                position: Array, vocab_major: bool = False) -> tuple[logits_lib.Logits, Cache]:
  """One decoder position: logits [rows, vocab] float32 for output token `position`.

  `tokens` [rows] is the decoder input at `position`: the previous output token,
  0 at position 0. rows may be any multiple r of the cache's batch (rows
  b*r .. b*r+r-1 translate sentence b) when the "self" part has rows rows, e.g.
  `decode_cache.tile(cache, r)`. `position` is a scalar int (may be traced)
  below the "self" buffer's length; larger values are clamped by
  `dynamic_update_slice`, not reported. `vocab_major`: the logits as
  `logits_lib.VocabMajor` [vocab, rows], which the searches read faster.
  """
  return Transformer(cfg).apply({"params": params}, cache, tokens, jnp.asarray(position, jnp.int32),
                                vocab_major, method=Transformer.decode_step)


def attention_weights(params: Any) -> dict[str, list[dict[str, dict[str, Array]]]]:
  """Every attention's projections as plain matrices (`MultiHeadAttention.weights`), by place.

  {"encoder": [per layer {"self_attention": W}], "decoder": [per layer
  {"self_attention": W, "cross_attention": W}]}, each W {"query": [d_model,
  heads*d_k], "key": [d_model, heads*d_k], "value": [d_model, heads*d_v], "out":
  [heads*d_v, d_model]} (heads major in the projected axis; y = x @ W). For
  exporters: they read the layout here instead of the parameter tree's.
  """
  def stack(name):
    layers_ = params[name]
    return [{attention: attention_lib.MultiHeadAttention.weights(sub)
             for attention, sub in layers_[f"layers_{i}"].items() if "query" in sub}
            for i in range(sum(key.startswith("layers_") for key in layers_))]
  return {"encoder": stack("encoder"), "decoder": stack("decoder")}
