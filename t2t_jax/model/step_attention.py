"""Attention of one decoder position against the decoding caches, as they are stored.

Pure functions over arrays; `attention.MultiHeadAttention.step_self` and `.step_cross`
project with the module's own weights and call these. They read the caches in
the layouts the search keeps them in (keys depth-before-positions, self-attention
rows never reordered, cross-attention keys/values once per sentence; see
model/decode_cache.py), so that no decoding step transposes or gathers a cache.
Each gives what `layers.scaled_dot_product_attention` gives over the same
history (tests/model/test_transformer.py compares the cached decoder with the
full forward pass).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array


def scaled_queries(q: Array, dtype: Any) -> Array:
  """Queries [rows, 1, heads, d_k] -> q / sqrt(d_k) [rows, heads, d_k], as the reference scales them."""
  return (q[:, 0] / math.sqrt(q.shape[-1])).astype(dtype)


def self_attention(q: Array, keys: Array, values: Array, reads: Array, bias: Array,
                   dtype: Any) -> Array:
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
  Returns [rows, 1, heads, d_v] in `dtype`, before the output projection.
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
  weights = jnp.where(reads, probs[:, None], 0.0).astype(dtype)
  out = jnp.einsum("nhqk,nhkd->nhqd", weights.reshape(rows, heads, r, length),
                   values.astype(dtype))                               # [rows, heads, q, d_v]
  out = jnp.sum(out.reshape(batch, r, heads, r, depth), axis=1)        # [batch, heads, q, d_v]
  return out.transpose(0, 2, 1, 3).reshape(rows, 1, heads, depth)


def cross_attention(q: Array, keys: Array, values: Array, bias: Array, dtype: Any) -> Array:
  """Encoder-decoder attention of one position.

  q [rows, heads, d_k] scaled queries, rows = batch * r; keys/values [batch, heads,
  src_len, d] shared by the sentence's r rows; bias [batch, 1, 1, src_len].
  Returns [rows, 1, heads, d_v] in `dtype`, before the output projection.
  """
  batch, heads, _, depth = values.shape
  rows = q.shape[0]
  q = q.reshape(batch, -1, heads, keys.shape[-1])                      # [batch, r, heads, d_k]
  logits = jnp.einsum("bqhd,bhkd->bhqk", q, keys.astype(q.dtype)).astype(jnp.float32)
  probs = jax.nn.softmax(logits + bias.astype(jnp.float32), axis=-1)
  # Heads-first output, then a transpose of this small result: asked for [batch, q,
  # heads, d] directly, XLA CPU computes the product transposed, 3x slower here.
  out = jnp.einsum("bhqk,bhkd->bhqd", probs.astype(dtype), values.astype(dtype))
  return out.transpose(0, 2, 1, 3).reshape(rows, 1, heads, depth)
