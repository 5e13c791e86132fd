"""Attention of one decoder position against the write-once caches (the decoding trick, here).

The write-once caches. A search decodes r rows per sentence (beams, samples;
rows = batch * r, rows b*r .. b*r+r-1 translate sentence b) and after each step
reorders them: a row's next hypothesis may extend another row's. The obvious
cache copies every layer's keys/values to follow (a gather of the whole cache
per step); these caches never move instead:
  - self-attention keys/values are written once, at the row that computed them
    and their position, and never reordered (`decode_cache.Unordered`); keys are
    stored [rows, heads, d_k, length], depth before positions, so that a query's
    logits are a plain product with no per-step transpose;
  - a small int32 record `stored_in` [rows, length], which the search does
    reorder (`decode_cache.Positions`), says which of its sentence's rows holds
    the key/value a hypothesis has at each position (`record_position`);
  - cross-attention keys/values [batch, heads, src_len, d] are kept once per
    sentence and shared by its r rows (`decode_cache.PerSentence`).
Worked example: one sentence, r = 2, length 3 (keys [2, heads, d_k, 3], stored_in
[2, 3], holds [1, 2, 2, 3]). Position 0: each row writes its
key/value in its own cache row, stored_in = [[0, ., .], [1, ., .]]. The search
keeps two extensions of row 0's hypothesis: it reorders stored_in to
[[0, ., .], [0, ., .]] and leaves the caches as they are. Position 1: each row
writes again in its own cache row, stored_in = [[0, 0, .], [0, 1, .]], so row
1's hypothesis reads position 0 from cache row 0 and position 1 from its own:
holds[0, q=1, j=0, 0] and holds[0, 1, 1, 1] are True. `self_attention` multiplies
each query [rows, heads, d_k] with every cache row of its sentence (r x r
products of one row each: [batch * r, heads, r, length] logits, small) and keeps
the logit of the row that holds each position: the same logits and softmax as
`kernels.attention.scaled_dot_product_attention` over the query's own history
(tests/model/test_transformer.py compares the cached decoder with the full
forward pass). `attention.MultiHeadAttention.step_self` and `.step_cross`
project with the module's own weights and call these pure functions.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array


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
  (`record_position`); bias [1, 1, 1, length]. Returns [rows, 1, heads, d_v] in
  `dtype`, before the output projection.
  """
  batch, r, _, length = holds.shape                                    # r rows per sentence
  rows, heads, _, depth = values.shape
  q = q.reshape(batch, 1, r, heads, -1)                                # [batch, 1, q, heads, d_k]
  q = jnp.broadcast_to(q, (batch, r, r, heads, q.shape[-1])).reshape(rows, r, heads, -1)
  logits = jnp.einsum("nqhd,nhdk->nhqk", q, keys.astype(q.dtype)).astype(jnp.float32)
  logits = logits.reshape(batch, r, heads, r, length)                  # [batch, j, heads, q, length]
  holds = holds.transpose(0, 2, 1, 3)[:, :, None]                      # [batch, j, 1, q, length]
  logits = jnp.sum(jnp.where(holds, logits, 0.0), axis=1)              # [batch, heads, q, length]
  probs = jax.nn.softmax(logits + bias.astype(jnp.float32), axis=-1)
  weights = jnp.where(holds, probs[:, None], 0.0).astype(dtype)
  out = jnp.einsum("nhqk,nhkd->nhqd", weights.reshape(rows, heads, r, length),
                   values.astype(dtype))                               # [rows, heads, q, d_v]
  out = jnp.sum(out.reshape(batch, r, heads, r, depth), axis=1)        # [batch, heads, q, d_v]
  return out.transpose(0, 2, 1, 3).reshape(rows, 1, heads, depth)


def cross_attention(q: Array, keys: Array, values: Array, bias: Array, dtype: Any) -> Array:
  """Encoder-decoder attention of one position against the sentence's shared keys/values.

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
  # heads, d] directly, XLA CPU computes the product transposed, which is slower
  # (docs/benchmarks.md, "Tried and dropped").
  out = jnp.einsum("bhqk,bhkd->bhqd", probs.astype(dtype), values.astype(dtype))
  return out.transpose(0, 2, 1, 3).reshape(rows, 1, heads, depth)
