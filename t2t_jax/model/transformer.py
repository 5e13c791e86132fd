"""The Transformer (section 3): encoder, decoder, shared embeddings, incremental decoding.

    params = init_params(cfg, key)  # cfg: configs.ModelConfig, a run config's `.model`
    logits = Transformer(cfg).apply({"params": params}, inputs, targets, train=False)
    cache = init_cache(cfg, params, inputs, max_decode_len)
    logits, cache = decode_step(cfg, params, cache, tokens, position)  # [rows, vocab]
    features, cache = decode_features(cfg, params, cache, tokens, position)  # [rows, d_model]
    kernel, bias = output_weights(cfg, params)   # logits = features . kernel^T + bias

The encoder and decoder stacks are model/encoder_decoder.py's; this module
embeds the tokens, runs the stacks and projects the logits. Token 0 is
padding; the decoder input is the target shifted right with 0 in front. The
full forward pass and `decode_step` run the same layer modules with the same
parameters (`DecoderLayer._block`); decoding swaps each attention's full-sequence
call for its one-position methods (`MultiHeadAttention.step_self`, `.step_cross`),
which read the write-once caches (model/attention.py). The decoder's final features and
the output projection are separate calls (`decode_features`, `output_weights`), so that a
search may project them its own way (onto some rows of the vocabulary, in another layout
or with other products: decoding/batch_decoder.py). Each function takes the `plugins`
to run (model/plugins.py; default the references); training and decoding hand in
`kernels.choice.plugins(cfg)`. Initialisation choices are explained in docs/model.md.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from t2t_jax.configs import ModelConfig
from t2t_jax.ids import PAD_ID
from t2t_jax.model import attention as attention_lib
from t2t_jax import decode_cache
from t2t_jax.model import encoder_decoder
from t2t_jax.model import layers
from t2t_jax.model import plugins as plugins_lib

Array = jax.Array
Cache = dict[str, Any]

# The config's `embeddings`: the parameter each role (the source embedding, the target
# embedding, the pre-softmax projection) reads; roles naming one parameter share its matrix.
EMBEDDING_PARAMS: dict[str, dict[str, str]] = {
    "shared": dict(source="embedding", target="embedding", output="embedding"),     # section 3.4
    "shared_inputs": dict(source="embedding", target="embedding", output="output_embedding"),
    "tied_output": dict(source="source_embedding", target="target_embedding",
                        output="target_embedding"),
    "separate": dict(source="source_embedding", target="target_embedding",
                     output="output_embedding"),
}


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


def _segments_and_positions(ids: Array, segments: Optional[Array]) -> tuple[Array, Array]:
  """Segment ids [batch, length] and positions ([length] unpacked, [batch, length] packed)."""
  if segments is None:
    return layers.segment_ids(ids), jnp.arange(ids.shape[1])
  return segments, layers.segment_positions(segments)


class Transformer(nn.Module):
  """Encoder-decoder Transformer. `__call__(inputs, targets, train)` -> logits float32.

  Other entry points (use with `apply(..., method=...)`): `encode`, `decode`, `features`,
  `init_cache`, `decode_features`, `decode_step`, `output_weights`. `config` is a
  `ModelConfig` (a run config's `.model`), so a module never depends on a training or data
  field; `plugins` the forms its jobs run in (model/plugins.py; default the references).
  """
  config: ModelConfig
  plugins: plugins_lib.Plugins = plugins_lib.Plugins()

  def __post_init__(self):
    if not isinstance(self.config, ModelConfig):
      raise TypeError(f"the model takes a configs.ModelConfig, not a {type(self.config).__name__}: "
                      "pass cfg.model")
    super().__post_init__()

  def setup(self):
    cfg = self.config
    # std d_model^-0.5: after the sqrt(d_model) scale the input embeddings have unit
    # variance, and as the output projection x . E^T of a layer-normed x has unit
    # variance too (docs/model.md).
    # Looked up in the table's own dtype, then cast to the compute dtype (`_embed`).
    embed = lambda rows: nn.Embed(
        rows, cfg.d_model, dtype=None, param_dtype=jnp.float32,
        embedding_init=nn.initializers.normal(stddev=cfg.d_model ** -0.5))
    names = EMBEDDING_PARAMS[cfg.embeddings]
    for name in dict.fromkeys(names.values()):   # each matrix once, in the roles' order
      # The source's rows are its vocabulary; the target embedding's and the output's, the
      # target side's (the same unless `target_vocab_size`).
      setattr(self, name, embed(cfg.vocab_size if name == names["source"] else cfg.target_vocab))
    if cfg.positional_encoding == "learned":
      # std sqrt(1/2): the per-element variance of the sinusoids it replaces.
      init = nn.initializers.normal(stddev=math.sqrt(0.5))
      self.source_positions = self.param("source_positions", init, (cfg.max_len, cfg.d_model))
      self.target_positions = self.param("target_positions", init, (cfg.max_len, cfg.d_model))
    if cfg.output_bias:   # not the paper's: Marian's final_logits_bias
      self.output_bias = self.param("output_bias", nn.initializers.zeros, (cfg.target_vocab,))
    self.encoder = encoder_decoder.Encoder(cfg, self.plugins)
    self.decoder = encoder_decoder.Decoder(cfg, self.plugins)
    self.dropout = encoder_decoder.dropout(cfg, self.plugins)

  # -------------------------------------------------------------- building blocks

  def _embedding(self, role: str) -> nn.Embed:
    """The matrix `role` ("source", "target" or "output") reads (`EMBEDDING_PARAMS`)."""
    return getattr(self, EMBEDDING_PARAMS[self.config.embeddings][role])

  def _check_length(self, length: int, what: str) -> None:
    cfg = self.config
    table = ("learned positional table" if cfg.positional_encoding == "learned" else
             "halves position table" if cfg.position_layout == "halves" else None)
    if table is not None and length > cfg.max_len:
      raise ValueError(f"{what} length {length} exceeds max_len={cfg.max_len} of the {table}; "
                       "raise --config.max_len or truncate the inputs")

  def _embed(self, ids: Array, positions: Array, role: str, deterministic: bool) -> Array:
    """ids [batch, length] at integer `positions` ([length] or [batch, length]) -> [batch, length, d_model]."""
    cfg = self.config
    x = self._embedding(role)(ids).astype(encoder_decoder.compute_dtype(cfg))
    x = x * math.sqrt(cfg.d_model)                                     # stays in compute dtype
    if cfg.positional_encoding == "learned":
      table = self.source_positions if role == "source" else self.target_positions
      pe = jnp.take(table, positions, axis=0)
    else:
      pe = layers.sinusoidal_encoding(positions, cfg.d_model,          # [(batch,) length, d_model]
                                      cfg.position_layout, cfg.max_len)
    if pe.ndim == 2:
      pe = pe[None]
    x = (x + pe.astype(x.dtype)).astype(encoder_decoder.compute_dtype(cfg))
    return self.dropout(x, deterministic=deterministic)

  def output_weights(self) -> tuple[Array, Optional[Array]]:
    """The output projection's weights (section 3.4): the pre-softmax kernel [target vocab,
    d_model] (the shared embedding by default) and, with `output_bias`, the bias [target
    vocab] (else None)."""
    bias = self.output_bias if self.config.output_bias else None
    return self._embedding("output").embedding, bias

  def _logits(self, y: Array) -> Array:
    """[..., d_model] -> [..., vocab] float32: y E^T (pre-softmax, section 3.4), + b with
    `output_bias`; operands in y's dtype, accumulated and returned in float32."""
    kernel, bias = self.output_weights()
    logits = jnp.einsum("...d,vd->...v", y, kernel.astype(y.dtype),
                        preferred_element_type=jnp.float32)
    return logits if bias is None else logits + bias

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
    mask = attention_lib.Mask(segments, segments, window=self.config.attention_window,
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
    self_mask = attention_lib.Mask(tgt_segments, tgt_segments, causal=True,
                            window=self.config.attention_window, packed=packed)
    cross_mask = attention_lib.Mask(tgt_segments, src_segments, packed=packed)
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

  def decoder_features(self, inputs: Array, targets: Array, train: bool = False,
                       inputs_segments: Optional[Array] = None,
                       targets_segments: Optional[Array] = None) -> Array:
    """`__call__` stopped before the output projection: the decoder's last layer [batch,
    tgt_len, d_model] (compute dtype), which `output_weights` projects onto the vocabulary."""
    encoded = self.encode(inputs, train, inputs_segments)
    return self.decode_hidden(encoded, inputs, targets, train, inputs_segments, targets_segments)

  def features(self, inputs: Array, targets: Array, train: bool = False,
               inputs_segments: Optional[Array] = None,
               targets_segments: Optional[Array] = None) -> tuple[Array, Array]:
    """`__call__` stopped before the output projection, for `output_metrics` (train/step.py).

    Returns the decoder's last layer [batch, tgt_len, d_model] (compute dtype) and
    the pre-softmax weights [vocab, d_model] float32; logits = features @ weights.T.
    With `output_bias` both get one more column, 1 and the bias: [..., d_model + 1]
    and [vocab, d_model + 1], so that the same product adds the bias.
    """
    hidden = self.decoder_features(inputs, targets, train, inputs_segments, targets_segments)
    kernel, bias = self.output_weights()
    if bias is not None:
      hidden = jnp.concatenate([hidden, jnp.ones_like(hidden[..., :1])], axis=-1)
      kernel = jnp.concatenate([kernel, bias[:, None]], axis=-1)
    return hidden, kernel

  # ---------------------------------------------------------- incremental decoding

  def init_cache(self, inputs: Array, max_decode_len: int) -> Cache:
    """Runs the encoder once; pre-computes each decoder layer's cross-attention keys/values."""
    self._check_length(max_decode_len, "decode")
    self_caches, cross = self.decoder.init_cache(self.encode(inputs, train=False), max_decode_len)
    # The write-once caches (model/attention.py): "stored_in" records where
    # each hypothesis' self-attention keys/values are.
    return {"sentence": decode_cache.PerSentence({"source_ids": inputs, "cross": cross}),
            "self": self_caches,
            "stored_in": decode_cache.Positions(
                jnp.zeros((inputs.shape[0], max_decode_len), jnp.int32))}

  def decode_features(self, cache: Cache, tokens: Array,
                      position: Array) -> tuple[Array, Cache]:
    """tokens [rows] at scalar `position` -> the decoder's last layer [rows, d_model] (compute
    dtype) for the next token, and the cache (`decode_features` below)."""
    sentence = cache["sentence"].value
    max_decode_len = cache["stored_in"].value.shape[1]
    stored_in, holds = attention_lib.record_position(
        cache["stored_in"].value, position, sentence["source_ids"].shape[0])
    y = self._embed(tokens[:, None], jnp.reshape(position, (1,)), "target", deterministic=True)
    keys = jnp.arange(max_decode_len)
    allowed = keys <= position                                         # [max_decode_len]
    if self.config.attention_window is not None:
      allowed = allowed & (position - keys <= self.config.attention_window)
    self_bias = attention_lib.mask_to_bias(allowed)[None, None, None, :]      # [1, 1, 1, max_len]
    cross_bias = attention_lib.mask_to_bias(sentence["source_ids"] != PAD_ID)[:, None, None, :]
    y, self_caches = self.decoder.step(y, cache["self"], sentence["cross"], position, holds,
                                       self_bias, cross_bias)
    return y[:, 0], {**cache, "self": self_caches,
                     "stored_in": cache["stored_in"].replace(value=stored_in)}

  def decode_step(self, cache: Cache, tokens: Array, position: Array) -> tuple[Array, Cache]:
    """tokens [rows] at scalar `position` -> next-token logits [rows, vocab], cache."""
    features, cache = self.decode_features(cache, tokens, position)
    return self._logits(features), cache


# ----------------------------------------------------------------- functional API


def init_params(cfg: ModelConfig, key: Array,
                plugins: plugins_lib.Plugins = plugins_lib.Plugins()) -> dict[str, Any]:
  """A plain dict of float32 parameters (of `plugins`' layers: another tree where a `dense`
  makes other parameters). Shapes only: `jax.eval_shape(partial(init_params, cfg), key)`."""
  ids = jnp.ones((1, 1), jnp.int32)
  init = jax.jit(functools.partial(Transformer(cfg, plugins).init, train=False))
  return flax.core.unfreeze(init({"params": key}, ids, ids)["params"])


def init_cache(cfg: ModelConfig, params: Any, inputs: Array, max_decode_len: int,
               plugins: plugins_lib.Plugins = plugins_lib.Plugins()) -> Cache:
  """Decoding state for `inputs` [batch, src_len], leaves with leading dimension batch.

  {"sentence": PerSentence({"source_ids", "cross": [per layer {"key", "value"}]}),
   "self": [per layer {"key": Unordered([batch, heads, d_k, length], axis=3),
                       "value": Unordered([batch, heads, length, d_v], axis=2)}],
   "stored_in": Positions([batch, max_decode_len] int32, axis=1)}, cross-attention
  keys/values [batch, heads, src_len, d] (decode_cache.py says what the wrappers allow;
  model/attention.py why the caches are laid out so).
  `max_decode_len` (static) bounds the positions `decode_step` may write.
  """
  return Transformer(cfg, plugins).apply({"params": params}, inputs, max_decode_len,
                                         method=Transformer.init_cache)


def decode_features(cfg: ModelConfig, params: Any, cache: Cache, tokens: Array, position: Array,
                    plugins: plugins_lib.Plugins = plugins_lib.Plugins()) -> tuple[Array, Cache]:
  """One decoder position: the decoder's last layer [rows, d_model] (compute dtype) from
  which the logits for output token `position` are projected (`output_weights`).

  `tokens` [rows] is the decoder input at `position`: the previous output token,
  0 at position 0. rows may be any multiple r of the cache's batch (rows
  b*r .. b*r+r-1 translate sentence b) when the "self" part has rows rows, e.g.
  `decode_cache.tile(cache, r)`. `position` is a scalar int (may be traced)
  below the "self" buffer's length; larger values are clamped by
  `dynamic_update_slice`, not reported.
  """
  return Transformer(cfg, plugins).apply({"params": params}, cache, tokens,
                                         jnp.asarray(position, jnp.int32),
                                         method=Transformer.decode_features)


def decode_step(cfg: ModelConfig, params: Any, cache: Cache, tokens: Array, position: Array,
                plugins: plugins_lib.Plugins = plugins_lib.Plugins()) -> tuple[Array, Cache]:
  """One decoder position: logits [rows, vocab] float32 for output token `position`:
  `decode_features` projected by `output_weights` (y E^T + b). Arguments as there."""
  return Transformer(cfg, plugins).apply({"params": params}, cache, tokens,
                                         jnp.asarray(position, jnp.int32),
                                         method=Transformer.decode_step)


def output_weights(cfg: ModelConfig, params: Any) -> tuple[Array, Optional[Array]]:
  """The output projection's kernel [vocab, d_model] (the pre-softmax weights: the shared
  embedding by default) and bias [vocab] (None without `output_bias`): logits =
  features . kernel^T + bias for `decode_features`' features."""
  return Transformer(cfg).apply({"params": params}, method=Transformer.output_weights)


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
