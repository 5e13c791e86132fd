"""Attention (section 3.2), whole: masks as biases, scaled dot-product attention, multi-head
attention, and the incremental decoding step's attention against the caches.

Shapes, named the same way everywhere:
  per head     [batch, length, heads, depth]
  attention    [batch, heads, q_length, kv_length]; masks and biases broadcast to it
  one position [rows, heads, depth]: rows = batch * r, r rows (beams) per sentence

Reading order: the masks (`causal_mask`, `padding_mask`, `local_mask`, `mask_to_bias`),
`scaled_dot_product_attention` (3.2.1, the reference every kernel is tested against),
`MultiHeadAttention` (3.2.2: the projections and every use of them), then one decoder
position's attention over the write-once caches (`record_position`, `self_attention`,
`cross_attention`). `MultiHeadAttention` runs `dot_product_attention` unless another
function of its signature is handed in (`attention_fn`, as Flax's
`nn.MultiHeadDotProductAttention` takes one): the fused kernels plug in so
(kernels/choice.py picks them, model/plugins.py says how), and so do its projections'
layers (`dense`, `fused_dense`).

The write-once caches. A search decodes r rows per sentence (beams, samples) and after
each step reorders them: a row's next hypothesis may extend another row's. The obvious
cache copies every layer's keys/values to follow (a gather of the whole cache per step);
these caches never move instead:
  - self-attention keys/values are written once, at the row that computed them and their
    position, and never reordered (`decode_cache.Unordered`); keys are stored [rows,
    heads, d_k, length], depth before positions, so a query's logits are a plain product;
  - a small int32 record `stored_in` [rows, length], which the search does reorder
    (`decode_cache.Positions`), says which of its sentence's rows holds the key/value a
    hypothesis has at each position (`record_position`);
  - cross-attention keys/values [batch, heads, src_len, d] are kept once per sentence and
    shared by its r rows (`decode_cache.PerSentence`).
Worked example: one sentence, r = 2, length 3 (keys [2, heads, d_k, 3], stored_in [2, 3],
holds [1, 2, 2, 3]). Position 0: each row writes its key/value in its own cache row,
stored_in = [[0, ., .], [1, ., .]]. The search keeps two extensions of row 0's
hypothesis: it reorders stored_in to [[0, ., .], [0, ., .]] and leaves the caches as they
are. Position 1: each row writes again in its own cache row, stored_in = [[0, 0, .],
[0, 1, .]], so row 1's hypothesis reads position 0 from cache row 0 and position 1 from
its own: holds[0, q=1, j=0, 0] and holds[0, 1, 1, 1] are True. `self_attention`
multiplies each query with every cache row of its sentence (r x r products of one row
each: small) and keeps the logit of the row that holds each position: the same logits
and softmax as `scaled_dot_product_attention` over the query's own history.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Union

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from jax import lax

from t2t_jax.ids import NEG_INF, PAD_ID
from t2t_jax import decode_cache
from t2t_jax.model import layers

Array = jax.Array


# ------------------------------------------------------------------------------ masks
# Booleans (True = may attend), turned into additive biases with a large but finite
# negative value, so that a row with nothing to attend to gets a uniform distribution
# instead of NaN.


def causal_mask(length: int) -> Array:
  """[1, 1, length, length] bool: query i may attend to keys j <= i."""
  idx = jnp.arange(length)
  return (idx[None, :] <= idx[:, None])[None, None]


def padding_mask(q_ids: Array, kv_ids: Array) -> Array:
  """[batch, 1, q_length, kv_length] bool: both the query and the key are real tokens (id != 0)."""
  if q_ids.ndim != 2 or kv_ids.ndim != 2:
    raise ValueError(f"padding_mask expects [batch, length] ids, got {q_ids.shape} and {kv_ids.shape}")
  return ((q_ids != PAD_ID)[:, :, None] & (kv_ids != PAD_ID)[:, None, :])[:, None]


def local_mask(length: int, window: int) -> Array:
  """[1, 1, length, length] bool: |i - j| <= window (restricted self-attention, Table 1).

  For the decoder, combine with `causal_mask` to get the r previous positions.
  """
  if window < 0:
    raise ValueError(f"window={window} must be >= 0")
  idx = jnp.arange(length)
  return (jnp.abs(idx[None, :] - idx[:, None]) <= window)[None, None]


def mask_to_bias(mask: Array, dtype: Any = jnp.float32) -> Array:
  """0 where `mask` is True, NEG_INF (ids.py) where it is False."""
  return jnp.where(mask, 0.0, NEG_INF).astype(dtype)


@flax.struct.dataclass
class Mask:
  """Which keys each query may attend to, in a form the fused kernels understand too.

  Query i may attend to key j when both belong to the same segment, the key is
  not padding (segment 0), and, if `causal`, j <= i; with `window`, also
  |i - j| <= window. Unpacked rows (`packed` False) hold one sentence each and
  their padding only trails, so the mask is just the two rows' lengths.
  """
  q_segments: Array                  # [batch, q_length] int32, 0 = padding
  kv_segments: Array                 # [batch, kv_length] int32, 0 = padding
  causal: bool = flax.struct.field(pytree_node=False, default=False)
  window: Optional[int] = flax.struct.field(pytree_node=False, default=None)
  packed: bool = flax.struct.field(pytree_node=False, default=False)

  def dense(self) -> Array:
    """[batch, 1, q_length, kv_length] bool, as the reference attention wants it."""
    q, kv = self.q_segments[:, :, None], self.kv_segments[:, None, :]
    mask = ((q == kv) & (kv != 0))[:, None]
    if self.causal:
      mask = mask & causal_mask(max(q.shape[1], kv.shape[2]))[:, :, :q.shape[1], :kv.shape[2]]
    if self.window is not None:
      mask = mask & local_mask(max(q.shape[1], kv.shape[2]), self.window)[
          :, :, :q.shape[1], :kv.shape[2]]
    return mask


# ------------------------------------------------------------ scaled dot-product attention


def scaled_dot_product_attention(
    q: Array, k: Array, v: Array, bias: Optional[Array] = None,
    dropout_rng: Optional[Array] = None, dropout_rate: float = 0.0,
    deterministic: bool = True, dtype: Any = None) -> tuple[Array, Array]:
  """softmax(Q K^T / sqrt(d_k) + bias) V, for every head at once (section 3.2.1).

  Args:
    q: [batch, q_length, heads, d_k] queries.
    k: [batch, kv_length, heads, d_k] keys.
    v: [batch, kv_length, heads, d_v] values.
    bias: additive, broadcastable to [batch, heads, q_length, kv_length]; use
      `mask_to_bias` for masks.
    dropout_rng: key for dropout on the probabilities; needed when
      `deterministic` is False and `dropout_rate` > 0.
    dtype: compute dtype of the two matrix products (default: q's dtype). The
      logits, bias and softmax are float32 regardless.

  Returns:
    output [batch, q_length, heads, d_v] in `dtype`, and the probabilities
    [batch, heads, q_length, kv_length] float32 (before dropout).
  """
  assert q.ndim == k.ndim == v.ndim == 4, f"rank-4 q, k, v expected: {q.shape} {k.shape} {v.shape}"
  assert q.shape[0] == k.shape[0] == v.shape[0], f"batch mismatch: {q.shape} {k.shape} {v.shape}"
  assert q.shape[2] == k.shape[2] == v.shape[2], f"heads mismatch: {q.shape} {k.shape} {v.shape}"
  assert q.shape[3] == k.shape[3], f"q and k depth differ: {q.shape} {k.shape}"
  assert k.shape[1] == v.shape[1], f"k and v lengths differ: {k.shape} {v.shape}"
  use_dropout = not deterministic and dropout_rate > 0.0
  if use_dropout and dropout_rng is None:
    raise ValueError("attention dropout needs dropout_rng (pass rngs={'dropout': key})")
  dtype = dtype or q.dtype
  q = (q / math.sqrt(q.shape[-1])).astype(dtype)
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k.astype(dtype)).astype(jnp.float32)
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  probs = jax.nn.softmax(logits, axis=-1)                              # [batch, heads, q, kv]
  weights = probs
  if use_dropout:
    keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, probs.shape)
    weights = jnp.where(keep, probs / (1.0 - dropout_rate), 0.0)
  out = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(dtype), v.astype(dtype))
  return out, probs


def dot_product_attention(q: Array, k: Array, v: Array, mask: Union[Mask, Array, None], *,
                          dtype: Any = None, dropout_rate: float = 0.0,
                          dropout_rng: Optional[Array] = None,
                          probabilities: bool = True) -> tuple[Array, Optional[Array]]:
  """`scaled_dot_product_attention` for a `Mask` or an additive bias (or None): the reference
  `attention_fn` of `MultiHeadAttention`.

  An `attention_fn` takes these arguments and returns the output [batch, q_length, heads,
  d_v] and the probabilities [batch, heads, q_length, kv_length] float32, or None where it
  keeps none (a fused kernel); `probabilities` says they are wanted (attention maps). This
  one always keeps them.
  """
  del probabilities  # the reference always returns them
  bias = mask_to_bias(mask.dense()) if isinstance(mask, Mask) else mask
  dropout = dropout_rng is not None and dropout_rate > 0.0
  return scaled_dot_product_attention(q, k, v, bias, dropout_rng=dropout_rng,
                                      dropout_rate=dropout_rate, deterministic=not dropout,
                                      dtype=dtype)


# ------------------------------------------------------------------ multi-head attention


class MultiHeadAttention(nn.Module):
  """Multi-head attention (section 3.2.2) with independent d_k and d_v.

  Projections d_model -> heads*d_k (queries, keys), d_model -> heads*d_v
  (values) and heads*d_v -> d_model (W^O). No biases: the paper's equations
  have none here (the FFN's do); `use_bias` (the config's `attention_bias`, as
  Marian's models have) adds one to each projection. Every use of the projections
  lives in this class: `__call__` (a whole sequence), `project_kv`, the incremental
  decoding methods (`init_self_cache`, `step_self`, `cross_cache`, `step_cross`) and
  `weights`, `biases` (the projections as matrices and vectors, for export).

  What plugs in (model/plugins.py): `attention_fn`, the attention of queries, keys and
  values (default `dot_product_attention`); `dense`, the factory of the four projections'
  layers (default `layers.dense`); `fused_dense`, decoding's query, key and value
  projections as one product over the parameters `dense` made (default
  `layers.fused_dense`). An attention that cannot be built is an error naming the layer.
  """
  num_heads: int
  d_k: int
  d_v: int
  d_model: int
  dropout_rate: float = 0.0          # on the attention probabilities
  dtype: Any = jnp.float32
  kernel_init: Callable = layers.default_kernel_init
  use_bias: bool = False             # configs.TransformerConfig.attention_bias
  attention_fn: Callable[..., tuple[Array, Optional[Array]]] = dot_product_attention
  dense: Callable[..., nn.Module] = layers.dense
  fused_dense: Callable[[Array, list, Any], Array] = layers.fused_dense

  def setup(self):
    dense = lambda features, axis=-1: self.dense(
        features, axis=axis, use_bias=self.use_bias, dtype=self.dtype,
        kernel_init=self.kernel_init)
    self.query = dense((self.num_heads, self.d_k))                    # [d_model, heads, d_k]
    self.key = dense((self.num_heads, self.d_k))
    self.value = dense((self.num_heads, self.d_v))
    self.out = dense(self.d_model, axis=(-2, -1))                      # [heads, d_v, d_model]

  def project_kv(self, inputs_kv: Array) -> tuple[Array, Array]:
    """[batch, kv_length, d_model] -> keys [.., heads, d_k], values [.., heads, d_v]."""
    return self.key(inputs_kv), self.value(inputs_kv)

  def _where(self) -> str:
    return "/".join(self.scope.path) if self.scope is not None else self.name or "?"

  def __call__(self, inputs_q: Array, inputs_kv: Optional[Array] = None,
               bias: Union[Array, Mask, None] = None, deterministic: bool = True,
               kv: Optional[tuple[Array, Array]] = None) -> Array:
    """[batch, q_length, d_model] -> [batch, q_length, d_model].

    Keys and values come from `inputs_kv` (default: `inputs_q`, self-attention)
    unless already projected ones are given in `kv`. `bias` is a `Mask` or an
    additive bias broadcastable to [batch, heads, q_length, kv_length].
    """
    q = self.query(inputs_q)                                           # [batch, q, heads, d_k]
    if kv is None:
      kv = self.project_kv(inputs_q if inputs_kv is None else inputs_kv)
    k, v = kv
    dropout = not deterministic and self.dropout_rate > 0.0
    try:
      out, probs = self.attention_fn(                                  # [batch, q, heads, d_v]
          q, k, v, bias, dtype=self.dtype, dropout_rate=self.dropout_rate,
          dropout_rng=self.make_rng("dropout") if dropout else None,
          probabilities=self.is_mutable_collection("intermediates"))
    except ValueError as e:
      raise ValueError(f"attention layer {self._where()}: {e}") from e
    if probs is not None:
      self.sow("intermediates", "attention_weights", probs)
    return self.out(out)

  @staticmethod
  def weights(params: Any) -> dict[str, Array]:
    """One attention's parameters as plain `x @ W` matrices, heads major in the projected axis.

    `params` is the module's parameter dict ({"query": {"kernel": ...}, ...}, e.g.
    `params["decoder"]["layers_0"]["cross_attention"]`). Returns {"query": [d_model,
    heads*d_k], "key": [d_model, heads*d_k], "value": [d_model, heads*d_v], "out":
    [heads*d_v, d_model]}: column h*d + i of a projection is depth i of head h, and
    row h*d_v + i of "out" reads it. The attention is
    concat_h(softmax(x W_q^h (x W_k^h)^T / sqrt(d_k)) x W_v^h) W_out.
    """
    project = lambda name: params[name]["kernel"].reshape(params[name]["kernel"].shape[0], -1)
    out = params["out"]["kernel"]                                      # [heads, d_v, d_model]
    return {"query": project("query"), "key": project("key"), "value": project("value"),
            "out": out.reshape(-1, out.shape[-1])}

  @staticmethod
  def biases(params: Any) -> Optional[dict[str, Array]]:
    """The projections' biases as vectors, the same keys and order as `weights`: {"query":
    [heads*d_k], "key": [heads*d_k], "value": [heads*d_v], "out": [d_model]}; None for an
    attention without them (the paper's)."""
    if "bias" not in params["query"]:
      return None
    return {name: params[name]["bias"].reshape(-1) for name in ("query", "key", "value", "out")}

  # ---------------------------------------------------------------- one position at a time

  def init_self_cache(self, batch: int, length: int) -> dict[str, decode_cache.Unordered]:
    """Zero self-attention keys [batch, heads, d_k, length] and values [batch, heads, length, d_v].

    Both `Unordered`: the write-once caches (module docstring).
    """
    zeros = lambda *shape: jnp.zeros((batch, self.num_heads) + shape, self.dtype)
    return {"key": decode_cache.Unordered(zeros(self.d_k, length), axis=3),
            "value": decode_cache.Unordered(zeros(length, self.d_v), axis=2)}

  def _qkv(self, y: Array) -> Array:
    """Queries, keys and values of y [rows, 1, d_model] side by side [rows, 1, (2 d_k + d_v) h].

    One [d_model, 2 d_k + d_v] product (`fused_dense`) costs less than three; XLA hoists
    the concatenation of the kernels out of the decoding loop.
    """
    names = ("query", "key", "value")
    params = self.variables["params"]
    qkv = self.fused_dense(y, [params[name] for name in names], self.dtype)
    if self.use_bias:
      b = self.biases(params)
      qkv = qkv + jnp.concatenate([b[name] for name in names]).astype(qkv.dtype)
    return qkv

  def step_self(self, y: Array, cache: dict[str, decode_cache.Unordered], position: Array,
                holds: Array, bias: Array) -> tuple[Array, dict[str, decode_cache.Unordered]]:
    """Self-attention of one position y [rows, 1, d_model] -> [rows, 1, d_model], new cache.

    Writes the position's keys/values at `position` of `cache` (`init_self_cache`'s
    layout, tiled to rows); `holds` [batch, r, r, length] says which of its sentence's
    r rows holds each row's key/value at each position (`record_position`);
    bias [1, 1, 1, length] masks the positions not yet (or no longer) visible.
    """
    qkv = self._qkv(y)
    width = self.num_heads * self.d_k
    q, k, v = (part.reshape(*y.shape[:2], self.num_heads, -1)        # [rows, 1, heads, d]
               for part in jnp.split(qkv, [width, 2 * width], axis=-1))
    keys, values = cache["key"].value, cache["value"].value
    keys = lax.dynamic_update_slice(keys, k.transpose(0, 2, 3, 1).astype(keys.dtype),
                                    (0, 0, 0, position))               # [rows, heads, d_k, length]
    values = lax.dynamic_update_slice(values, v.transpose(0, 2, 1, 3).astype(values.dtype),
                                      (0, 0, position, 0))             # [rows, heads, length, d_v]
    out = self_attention(scaled_queries(q, self.dtype), keys, values, holds, bias, self.dtype)
    return self.out(out), {"key": cache["key"].replace(value=keys),
                           "value": cache["value"].replace(value=values)}

  def cross_cache(self, inputs_kv: Array) -> dict[str, Array]:
    """Keys [batch, heads, kv_length, d_k] and values [.., d_v] of `inputs_kv`, for `step_cross`."""
    # [batch, heads, length, d]
    by_head = lambda x: x.transpose(0, 2, 1, 3).astype(self.dtype)
    k, v = self.project_kv(inputs_kv)
    return {"key": by_head(k), "value": by_head(v)}

  def step_cross(self, y: Array, cache: dict[str, Array], bias: Array) -> Array:
    """Attention of y [rows, 1, d_model] over `cross_cache`'s [batch, ...] -> [rows, 1, d_model].

    Each sentence's r = rows // batch rows share its keys/values; bias [batch, 1, 1, kv_length].
    """
    q = scaled_queries(self.query(y), self.dtype)                      # [rows, heads, d_k]
    return self.out(cross_attention(q, cache["key"], cache["value"], bias, self.dtype))


# ------------------------------------------------- one decoder position, the caches


def record_position(stored_in: Array, position: Array, batch: int) -> tuple[Array, Array]:
  """Marks every row as holding its own key/value at `position`.

  stored_in [rows, length] int32, rows = batch * r: the row of its sentence
  (0..r-1) holding each row's key/value at each position. Returns it updated and
  holds [batch, r (query row), r (cache row), length] bool, one True per query row
  and position, for `self_attention`.
  """
  rows, length = stored_in.shape
  per_sentence = rows // batch
  row_in_sentence = jnp.arange(rows, dtype=jnp.int32) % per_sentence
  stored_in = lax.dynamic_update_index_in_dim(stored_in, row_in_sentence, position, axis=1)
  holds = (stored_in.reshape(batch, per_sentence, 1, length)
           == jnp.arange(per_sentence, dtype=jnp.int32)[None, None, :, None])
  return stored_in, holds


def scaled_queries(q: Array, dtype: Any) -> Array:
  """Queries [rows, 1, heads, d_k] -> q / sqrt(d_k) [rows, heads, d_k], as the reference scales them."""
  return (q[:, 0] / math.sqrt(q.shape[-1])).astype(dtype)


def self_attention(q: Array, keys: Array, values: Array, holds: Array, bias: Array,
                   dtype: Any) -> Array:
  """Decoder self-attention of one position over the write-once caches (module docstring).

  q [rows, heads, d_k] scaled queries; keys [rows, heads, d_k, length] and values
  [rows, heads, length, d_v] as each row wrote them; holds [batch, r, r, length]
  (`record_position`); bias [1, 1, 1, length]. The products run in `dtype` and
  accumulate in float32. Returns [rows, 1, heads, d_v] float32, before the output
  projection.
  """
  batch, r, _, length = holds.shape                                    # r rows per sentence
  rows, heads, _, depth = values.shape
  q = q.reshape(batch, 1, r, heads, -1)                                # [batch, 1, q, heads, d_k]
  q = jnp.broadcast_to(q, (batch, r, r, heads, q.shape[-1])).reshape(rows, r, heads, -1)
  logits = jnp.einsum("nqhd,nhdk->nhqk", q, keys.astype(q.dtype),
                      preferred_element_type=jnp.float32)
  logits = logits.reshape(batch, r, heads, r, length)                  # [batch, j, heads, q, length]
  holds = holds.transpose(0, 2, 1, 3)[:, :, None]                      # [batch, j, 1, q, length]
  logits = jnp.sum(jnp.where(holds, logits, 0.0), axis=1)              # [batch, heads, q, length]
  probs = jax.nn.softmax(logits + bias.astype(jnp.float32), axis=-1)
  weights = jnp.where(holds, probs[:, None], 0.0).astype(dtype)
  out = jnp.einsum("nhqk,nhkd->nhqd", weights.reshape(rows, heads, r, length),   # [rows, heads,
                   values.astype(dtype), preferred_element_type=jnp.float32)   # q, d_v]
  out = jnp.sum(out.reshape(batch, r, heads, r, depth), axis=1)        # [batch, heads, q, d_v]
  return out.transpose(0, 2, 1, 3).reshape(rows, 1, heads, depth)


def cross_attention(q: Array, keys: Array, values: Array, bias: Array, dtype: Any) -> Array:
  """Encoder-decoder attention of one position against the sentence's shared keys/values.

  q [rows, heads, d_k] scaled queries, rows = batch * r; keys/values [batch, heads,
  src_len, d] shared by the sentence's r rows; bias [batch, 1, 1, src_len]. The products
  run in `dtype` and accumulate in float32. Returns [rows, 1, heads, d_v] float32, before
  the output projection.
  """
  batch, heads, _, depth = values.shape
  rows = q.shape[0]
  q = q.reshape(batch, -1, heads, keys.shape[-1])                      # [batch, r, heads, d_k]
  logits = jnp.einsum("bqhd,bhkd->bhqk", q, keys.astype(q.dtype),
                      preferred_element_type=jnp.float32)
  probs = jax.nn.softmax(logits + bias.astype(jnp.float32), axis=-1)
  # Heads-first output, then a transpose of this small result: asked for [batch, q,
  # heads, d] directly, XLA CPU computes the product transposed, which is slower.
  out = jnp.einsum("bhqk,bhkd->bhqd", probs.astype(dtype), values.astype(dtype),
                   preferred_element_type=jnp.float32)
  return out.transpose(0, 2, 1, 3).reshape(rows, 1, heads, depth)
