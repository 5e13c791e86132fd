"""Multi-head attention (section 3.2.2) as one Linen module that owns its weights.

Every use of the projections lives here: the full-sequence `__call__`
(`kernels.ops.attention`), incremental decoding (`init_self_cache`,
`step_self`, `cross_cache`, `step_cross`, over `step_attention`'s pure functions)
and `weights`, the layout exporters read. A new bias or projection touches this
class only.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from t2t_jax.kernels import masks
from t2t_jax.kernels import ops
from t2t_jax.model import decode_cache
from t2t_jax.model import layers
from t2t_jax.model import step_attention

Array = jax.Array


class MultiHeadAttention(nn.Module):
  """Multi-head attention (section 3.2.2) with independent d_k and d_v.

  Projections d_model -> heads*d_k (queries, keys), d_model -> heads*d_v
  (values) and heads*d_v -> d_model (W^O). No biases: the paper's equations
  have none here (the FFN's do). Every use of the projections lives in this
  class: `__call__` (a whole sequence), `project_kv`, the incremental decoding
  methods (`init_self_cache`, `step_self`, `cross_cache`, `step_cross`) and
  `weights` (the projections as matrices, for export), so a bias or another
  projection changes this class only.

  `implementation` is the config's `attention_impl`, which `kernels.ops` turns
  into the kernel that runs (a fused one, or the reference where the attention
  maps are collected: `intermediates` mutable); an attention that cannot be
  built is an error naming the layer.
  """
  num_heads: int
  d_k: int
  d_v: int
  d_model: int
  dropout_rate: float = 0.0          # on the attention probabilities
  dtype: Any = jnp.float32
  kernel_init: Callable = layers.default_kernel_init
  implementation: str = "fused"      # configs.TransformerConfig.attention_impl
  int8: bool = False                 # projections by `layers.Int8Dense` (decoding only)

  def setup(self):
    dense = lambda features, axis=-1: nn.DenseGeneral(
        features, axis=axis, use_bias=False, dtype=self.dtype, param_dtype=jnp.float32,
        kernel_init=self.kernel_init)
    if self.int8:
      dense = lambda features, axis=-1: layers.Int8Dense(
          features, inputs=1 if axis == -1 else len(axis), use_bias=False)
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
               bias: Union[Array, masks.Mask, None] = None, deterministic: bool = True,
               kv: Optional[tuple[Array, Array]] = None) -> Array:
    """[batch, q_length, d_model] -> [batch, q_length, d_model].

    Keys and values come from `inputs_kv` (default: `inputs_q`, self-attention)
    unless already projected ones are given in `kv`. `bias` is a `masks.Mask` or an
    additive bias broadcastable to [batch, heads, q_length, kv_length].
    """
    q = self.query(inputs_q)                                           # [batch, q, heads, d_k]
    if kv is None:
      kv = self.project_kv(inputs_q if inputs_kv is None else inputs_kv)
    k, v = kv
    dropout = not deterministic and self.dropout_rate > 0.0
    try:
      out, probs = ops.attention(                                      # [batch, q, heads, d_v]
          q, k, v, bias, implementation=self.implementation, dtype=self.dtype,
          dropout_rate=self.dropout_rate,
          dropout_rng=self.make_rng("dropout") if dropout else None,
          probabilities=self.is_mutable_collection("intermediates"))
    except ValueError as e:
      raise ValueError(f"attention layer {self._where()}: {e}") from e
    if probs is not None:
      self.sow("intermediates", "attention_weights", probs)
    return self.out(out)

  # ---------------------------------------------------------------- one position at a time
  # The write-once caches: layouts and why, model/step_attention.py.

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

  def init_self_cache(self, batch: int, length: int) -> dict[str, decode_cache.Unordered]:
    """Zero self-attention keys [batch, heads, d_k, length] and values [batch, heads, length, d_v].

    Both `Unordered`: the write-once caches (model/step_attention.py).
    """
    zeros = lambda *shape: jnp.zeros((batch, self.num_heads) + shape, self.dtype)
    return {"key": decode_cache.Unordered(zeros(self.d_k, length), axis=3),
            "value": decode_cache.Unordered(zeros(length, self.d_v), axis=2)}

  def step_self(self, y: Array, cache: dict[str, decode_cache.Unordered], position: Array,
                holds: Array, bias: Array) -> tuple[Array, dict[str, decode_cache.Unordered]]:
    """Self-attention of one position y [rows, 1, d_model] -> [rows, 1, d_model], new cache.

    Writes the position's keys/values at `position` of `cache` (`init_self_cache`'s
    layout, tiled to rows); `holds` [batch, r, r, length] says which of its sentence's
    r rows holds each row's key/value at each position (`step_attention.record_position`);
    bias [1, 1, 1, length] masks the positions not yet (or no longer) visible.
    """
    # One [d_model, 2 d_k + d_v] product costs less than three; XLA hoists the
    # concatenation out of the decoding loop.
    if self.int8:
      params = self.variables["params"]
      qkv = ops.int8_dense(y, [params[name]["kernel"] for name in ("query", "key", "value")])
    else:
      w = self.weights(self.variables["params"])
      kernel = jnp.concatenate([w["query"], w["key"], w["value"]], axis=1)
      qkv = jnp.dot(y.astype(self.dtype), kernel.astype(self.dtype))  # [rows, 1, (2 d_k + d_v) h]
    width = self.num_heads * self.d_k
    q, k, v = (part.reshape(*y.shape[:2], self.num_heads, -1)        # [rows, 1, heads, d]
               for part in jnp.split(qkv, [width, 2 * width], axis=-1))
    keys, values = cache["key"].value, cache["value"].value
    keys = lax.dynamic_update_slice(keys, k.transpose(0, 2, 3, 1).astype(keys.dtype),
                                    (0, 0, 0, position))               # [rows, heads, d_k, length]
    values = lax.dynamic_update_slice(values, v.transpose(0, 2, 1, 3).astype(values.dtype),
                                      (0, 0, position, 0))             # [rows, heads, length, d_v]
    out = step_attention.self_attention(step_attention.scaled_queries(q, self.dtype), keys,
                                        values, holds, bias, self.dtype)
    return self.out(out), {"key": cache["key"].replace(value=keys),
                           "value": cache["value"].replace(value=values)}

  def cross_cache(self, inputs_kv: Array) -> dict[str, Array]:
    """Keys [batch, heads, kv_length, d_k] and values [.., d_v] of `inputs_kv`, for `step_cross`."""
    by_head = lambda x: x.transpose(0, 2, 1, 3)                       # [batch, heads, length, d]
    k, v = self.project_kv(inputs_kv)
    return {"key": by_head(k), "value": by_head(v)}

  def step_cross(self, y: Array, cache: dict[str, Array], bias: Array) -> Array:
    """Attention of y [rows, 1, d_model] over `cross_cache`'s [batch, ...] -> [rows, 1, d_model].

    Each sentence's r = rows // batch rows share its keys/values; bias [batch, 1, 1, kv_length].
    """
    q = step_attention.scaled_queries(self.query(y), self.dtype)      # [rows, heads, d_k]
    return self.out(step_attention.cross_attention(q, cache["key"], cache["value"], bias,
                                                   self.dtype))
