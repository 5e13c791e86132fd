"""The decoding cache contract: which parts a search may share, reorder and resize.

A step function `step_fn(cache, tokens [rows], position) -> (logits, cache)`
keeps its state in a cache pytree. A search runs several rows per sentence
(beams, samples): `rows = batch * r`, the r rows of sentence b being b*r .. b*r+r-1.
Two wrappers tell the search what it may do with a part of the cache:

  PerSentence(x)     leaves [batch, ...], the same for every row of a sentence
                     (source ids, cross-attention keys/values): never tiled to the
                     rows, never reordered. The step function finds the rows per
                     sentence as rows // batch.
  Positions(x, axis) leaves [rows, ...] whose axis `axis` is the decoded position,
                     written at index `position` by the step function: the search
                     may hand the step function a shorter buffer (any length above
                     the position) and pad it with zeros as decoding goes on.
  Unordered(x, axis) Positions buffers that the search tiles and resizes but never
                     reorders: row i keeps what the hypothesis in row i wrote at
                     each position (the write-once caches, model/attention.py).

Every other leaf is per row: tiled when the search multiplies the rows and
reordered when it picks new rows. A cache without wrappers is all per row. The
wrappers nest in any pytree (a list of caches for an ensemble works as is).
"""

from __future__ import annotations

from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp

Array = jax.Array


@flax.struct.dataclass
class PerSentence:
  value: Any


@flax.struct.dataclass
class Positions:
  value: Any
  axis: int = flax.struct.field(pytree_node=False, default=1)


@flax.struct.dataclass
class Unordered:
  value: Any
  axis: int = flax.struct.field(pytree_node=False, default=1)


_POSITIONS = (Positions, Unordered)


def _is_wrapper(x: Any) -> bool:
  return isinstance(x, (PerSentence, Positions, Unordered))


def map_rows(fn: Callable[[Array], Array], cache: Any, *, shared: bool = True,
             unordered: bool = True) -> Any:
  """Applies `fn` to every per-row leaf (Positions included); PerSentence parts pass as they are.

  With `shared=False` PerSentence parts count as per row too (the reference
  path that tiles and reorders everything); with `unordered=False` Unordered
  parts pass as they are.
  """
  def visit(x):
    if (isinstance(x, PerSentence) and shared) or (isinstance(x, Unordered) and not unordered):
      return x
    if _is_wrapper(x):
      return x.replace(value=jax.tree.map(fn, x.value))
    return fn(x)
  return jax.tree.map(visit, cache, is_leaf=_is_wrapper)


def tile(cache: Any, r: int, *, shared: bool = True) -> Any:
  """Every per-row leaf [batch, ...] -> [batch * r, ...], each row repeated r times."""
  return map_rows(lambda x: jnp.repeat(x, r, axis=0), cache, shared=shared)


def take_rows(cache: Any, rows: Array, *, shared: bool = True) -> Any:
  """Per-row leaves reordered to `rows` [new_rows] int32 indices.

  Unordered parts stay as they are: their rows are where the reordered records
  point. With `shared=False` (the reference) they are reordered too: every
  PerSentence part then has a row per row, so a step function sees one row per
  sentence, which only ever reads its own row.
  """
  # mode="clip" clamps the few indices instead of masking every gathered element
  # ("fill", the default): the searches only pass rows that exist.
  return map_rows(lambda x: jnp.take(x, rows, axis=0, mode="clip"), cache, shared=shared,
                  unordered=not shared)


def rows(cache: Any, *, shared: bool = True) -> int | None:
  """The leading dim of the per-row leaves (None without any); they must agree."""
  found = set()
  map_rows(lambda x: found.add(x.shape[0]) or x, cache, shared=shared)
  if len(found) > 1:
    raise ValueError(f"the cache's per-row leaves have different leading dims {sorted(found)}")
  return found.pop() if found else None


def position_length(cache: Any) -> int | None:
  """The buffer length of the Positions and Unordered parts (None without any); they must agree."""
  lengths = {leaf.shape[node.axis]
             for node in jax.tree.leaves(cache, is_leaf=_is_wrapper) if isinstance(node, _POSITIONS)
             for leaf in jax.tree.leaves(node.value)}
  if len(lengths) > 1:
    raise ValueError(f"the cache's Positions buffers have different lengths {sorted(lengths)}")
  return lengths.pop() if lengths else None


def resize(cache: Any, length: int) -> Any:
  """Positions and Unordered buffers cut or zero-padded to `length` along their position axis."""
  def fit(axis, x):
    if x.shape[axis] >= length:
      return jax.lax.slice_in_dim(x, 0, length, axis=axis)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, length - x.shape[axis])
    return jnp.pad(x, pad)

  def visit(x):
    if isinstance(x, _POSITIONS):
      return x.replace(value=jax.tree.map(lambda leaf: fit(x.axis, leaf), x.value))
    return x
  return jax.tree.map(visit, cache, is_leaf=_is_wrapper)
