"""An exact top-k that is faster than `jax.lax.top_k` (the reference) on wide rows: beam search's
vocabulary.

XLA CPU sorts each row of a top-k on one thread: over a 37000-word vocabulary
that is most of a step's search (docs/benchmarks.md, "Decoding"). Here the row is cut
into blocks; the n best elements lie in the n blocks with the best maxima
(each of them is at most its block's maximum, which then ranks among the n
best too; on ties the lower block, whose elements have lower indices, comes
first as the lower index does), so only those blocks' elements, kept in index
order, go through the exact top-k.

The searches call `choice.top_k` and `choice.top_k_columns`, which choose by the
platform the program is compiled for (kernels/choice.py): on a TPU `jax.lax.top_k`
itself, elsewhere the blocked one.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
Array = jax.Array


def _block(size: int, n: int) -> int:
  """Block length: about sqrt(size / n), so that both stages' top-k are short."""
  return max(8, 1 << round(math.log2(math.sqrt(size / max(n, 1)))))


def blocked_top_k(x: Array, n: int) -> tuple[Array, Array]:
  """`jax.lax.top_k` over the last axis (same values, same indices, ties included), faster on wide rows."""
  *lead, size = x.shape
  block = _block(size, n)
  blocks = -(-size // block)
  if blocks <= n:
    return tuple(jax.lax.top_k(x, n))
  pad = [(0, 0)] * len(lead) + [(0, blocks * block - size)]
  x = jnp.pad(x, pad, constant_values=-jnp.inf).reshape(*lead, blocks, block)
  _, chosen = jax.lax.top_k(jnp.max(x, axis=-1), n)                   # [..., n] blocks
  chosen = jnp.sort(chosen, axis=-1)                                  # index order
  candidates = jnp.take_along_axis(x, chosen[..., None], axis=-2)     # [..., n, block]
  return _finish(candidates, chosen, block)


def blocked_top_k_columns(x: Array, n: int) -> tuple[Array, Array]:
  """`jax.lax.top_k(x.T, n)` for x [size, columns]: the top n of each column, read in place.

  For a column-major product (the decoder's vocabulary-major logits, decoding/next_token.py):
  the block maxima reduce over the leading axis, so x itself is never transposed;
  only the chosen blocks are gathered. Returns values, indices [columns, n].
  """
  size, columns = x.shape
  block = _block(size, n)
  blocks = -(-size // block)
  if blocks <= n:
    return tuple(jax.lax.top_k(x.T, n))
  x = jnp.pad(x, [(0, blocks * block - size), (0, 0)], constant_values=-jnp.inf)
  x = x.reshape(blocks, block, columns)
  _, chosen = jax.lax.top_k(jnp.max(x, axis=1).T, n)                  # [columns, n] blocks
  chosen = jnp.sort(chosen, axis=-1)
  candidates = x[chosen, :, jnp.arange(columns)[:, None]]             # [columns, n, block]
  return _finish(candidates, chosen, block)


def _finish(candidates: Array, chosen: Array, block: int) -> tuple[Array, Array]:
  """The exact top n of the chosen blocks' elements [..., n, block], as indices into the row."""
  *lead, n, _ = candidates.shape
  values, at = jax.lax.top_k(candidates.reshape(*lead, n * block), n)
  index = jnp.take_along_axis(chosen, at // block, axis=-1) * block + at % block
  return values, index
