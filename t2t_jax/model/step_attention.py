"""Decoder attention of one position against the decoding caches, as they are stored.

`model.DecoderLayer.step` runs these instead of `MultiHeadAttention.__call__`:
they use the same modules' parameters but read the caches in the layouts the
search keeps them in (keys depth-before-positions, self-attention rows never
reordered, cross-attention keys/values once per sentence; see model/decode_cache.py),
so that no decoding step transposes or gathers a cache. Each gives what
`layers.scaled_dot_product_attention` gives over the same history (tests/test_decode.py
compares the cached search with the uncached decoder).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from t2t_jax.model import layers

Array = jax.Array


def project_qkv(attention: layers.MultiHeadAttention, y: Array) -> tuple[Array, Array, Array]:
  """y [rows, 1, d_model] -> the module's queries, keys, values [rows, 1, heads, d] in one product.

  The three kernels are concatenated in the step (XLA hoists that out of the
  decoding loop); one [d_model, 2 d_k + d_v] product costs less than three.
  """
  kernels = [m.variables["params"]["kernel"] for m in (attention.query, attention.key,
                                                       attention.value)]
  widths = [k.shape[1] * k.shape[2] for k in kernels]
  kernel = jnp.concatenate([k.reshape(k.shape[0], -1) for k in kernels], axis=1)
  qkv = jnp.dot(y.astype(attention.dtype), kernel.astype(attention.dtype))  # [rows, 1, sum(widths)]
  parts = jnp.split(qkv, [widths[0], widths[0] + widths[1]], axis=-1)
  return tuple(p.reshape(*y.shape[:2], *k.shape[1:]) for p, k in zip(parts, kernels))


def scaled_queries(attention: layers.MultiHeadAttention, q: Array) -> Array:
  """Queries [rows, 1, heads, d_k] -> q / sqrt(d_k) [rows, heads, d_k], as the reference scales them."""
  return (q[:, 0] / math.sqrt(q.shape[-1])).astype(attention.dtype)


def self_attention_step(attention: layers.MultiHeadAttention, q: Array, keys: Array,
                         values: Array, reads: Array, bias: Array) -> Array:
  """Decoder self-attention of one position over unreordered caches.

  q [rows, heads, d_k] scaled queries; keys [rows, heads, d_k, length] (so that the logits are a
  plain product, 2x faster on XLA CPU than against [.., length, d_k]) and values
  [rows, heads, length, d_v], where row b*r+j holds
  what the hypothesis in row j of sentence b wrote at each position; reads
  [batch, r, r, length] bool (query row, cache row, position), exactly one cache
  row per query row and position; bias [1, 1, 1, length]. Every query of a
  sentence meets every cache row of it (r times the products of one row, which
  are small), then keeps the logit of the row it reads: the same logits and
  softmax as `scaled_dot_product_attention` over the query's own history.
  Returns [rows, 1, d_model].
  """
  batch, r, _, length = reads.shape
  rows, heads, _, depth = values.shape
  q = q.reshape(batch, 1, r, heads, -1)                                # [batch, 1, q, heads, d_k]
  q = jnp.broadcast_to(q, (batch, r, r, heads, q.shape[-1])).reshape(rows, r, heads, -1)
  logits = jnp.einsum("nqhd,nhdk->nhqk", q, keys.astype(q.dtype)).astype(jnp.float32)
  logits = logits.reshape(batch, r, heads, r, length)                  # [batch, j, heads, q, length]
  reads = reads.transpose(0, 2, 1, 3)[:, :, None]                      # [batch, j, 1, q, length]
  logits = jnp.sum(jnp.where(reads, logits, 0.0), axis=1)              # [batch, heads, q, length]
  probs = jax.nn.softmax(logits + bias.astype(jnp.float32), axis=-1)
  weights = jnp.where(reads, probs[:, None], 0.0).astype(attention.dtype)
  out = jnp.einsum("nhqk,nhkd->nhqd", weights.reshape(rows, heads, r, length),
                   values.astype(attention.dtype))                     # [rows, heads, q, d_v]
  out = jnp.sum(out.reshape(batch, r, heads, r, depth), axis=1)        # [batch, heads, q, d_v]
  return attention.out(out.transpose(0, 2, 1, 3).reshape(rows, 1, heads, depth))


def cross_attention_step(attention: layers.MultiHeadAttention, y: Array, keys: Array,
                          values: Array, bias: Array) -> Array:
  """Encoder-decoder attention of one position: y [rows, 1, d_model], keys/values
  [batch, heads, src_len, d] shared by the sentence's rows, bias [batch, 1, 1, src_len]."""
  batch, heads, _, depth = values.shape
  q = scaled_queries(attention, attention.query(y)).reshape(batch, -1, heads, keys.shape[-1])
  logits = jnp.einsum("bqhd,bhkd->bhqk", q, keys.astype(q.dtype)).astype(jnp.float32)
  probs = jax.nn.softmax(logits + bias.astype(jnp.float32), axis=-1)
  # Heads-first output, then a transpose of this small result: asked for [batch, q,
  # heads, d] directly, XLA CPU computes the product transposed, 3x slower here.
  out = jnp.einsum("bhqk,bhkd->bhqd", probs.astype(attention.dtype),
                   values.astype(attention.dtype))                     # [batch, heads, q, d_v]
  return attention.out(out.transpose(0, 2, 1, 3).reshape(y.shape[0], 1, heads, depth))
