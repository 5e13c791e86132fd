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

from typing import Any

import flax.struct


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
