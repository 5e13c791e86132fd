"""A decoding step's logits in either layout: [rows, vocab], or `VocabMajor` [vocab, rows].

The output projection (section 3.4) has two kernels: `projection`, the reference
y . E^T [..., vocab], and `vocab_major_projection`, E . y^T [vocab, rows]. On
XLA CPU the second runs faster for a beam's few rows, as long as nothing
transposes its result (docs/benchmarks.md): one model's searches ask for it
(`choice.logits_layout`) and read it in place (`decoding.beam_search.best`).
`row_major` reads either back as [rows, vocab]. The model calls `project_logits`,
which runs the one asked for.

A lexical shortlist (data/shortlist.py) projects onto a batch's listed rows of
the weights only (`shortlist_kernel`): `VocabMajor` logits [size, rows] whose
`ids` [size] name the vocabulary id of each row, ascending, with `FILLER` (-1)
rows after them padding the size to a bucket. The searches pick in that space
and read the ids back (decoding/beam_search.py); `row_major` scatters the listed
logits into a [rows, vocab] array whose other entries are NEG_INF.
"""

from __future__ import annotations

from typing import Optional

import flax.struct
import jax
import jax.numpy as jnp

from t2t_jax.ids import FILLER, NEG_INF

Array = jax.Array

LAYOUTS = ("row_major", "vocab_major")



@flax.struct.dataclass
class VocabMajor:
  """Logits [vocab, rows] (rows last), as a step function may return them.

  With a shortlist, logits [size, rows] for the vocabulary ids `ids` [size]
  (ascending, then FILLER rows) of a vocabulary of `vocab` ids.
  """
  logits: Array
  ids: Optional[Array] = None
  vocab: int = flax.struct.field(pytree_node=False, default=0)


Logits = Array | VocabMajor


def projection(hidden: Array, kernel: Array) -> Array:
  """The reference: hidden [..., d_model] by the pre-softmax weights [vocab, d_model] ->
  logits [..., vocab] float32, operands in hidden's dtype."""
  kernel = kernel.astype(hidden.dtype)
  return jnp.einsum("...d,vd->...v", hidden, kernel, preferred_element_type=jnp.float32)


def vocab_major_projection(hidden: Array, kernel: Array) -> VocabMajor:
  """`projection`'s logits transposed, hidden [rows, d_model] -> `VocabMajor` [vocab, rows]."""
  kernel = kernel.astype(hidden.dtype)
  return VocabMajor(jnp.einsum("vd,rd->vr", kernel, hidden, preferred_element_type=jnp.float32))


def shortlist_kernel(kernel: Array, ids: Array) -> Array:
  """The pre-softmax weights' rows [size, d_model] of the shortlist `ids` [size] (FILLER: zeros)."""
  return jnp.take(kernel, ids, axis=0, mode="fill", fill_value=0)


def row_major(logits: Logits) -> Array:
  """The logits [rows, vocab], whichever layout the step function gave; a shortlist's
  ids outside it at NEG_INF."""
  if not isinstance(logits, VocabMajor):
    return logits
  if logits.ids is None:
    return logits.logits.T
  rows = logits.logits.shape[1]
  at = jnp.where(logits.ids == FILLER, logits.vocab, logits.ids)      # filler: out of range
  full = jnp.full((rows, logits.vocab), NEG_INF, jnp.float32)
  return full.at[:, at].set(logits.logits.T.astype(jnp.float32), mode="drop")


def project_logits(hidden: Array, kernel: Array, layout: str = "row_major",
                   shortlist: Optional[Array] = None) -> Logits:
  """The output projection of hidden [..., d_model] by the pre-softmax weights [vocab, d_model].

  "row_major": logits [..., vocab] (`projection`); "vocab_major" (hidden [rows, d_model]
  only): `VocabMajor` [vocab, rows]. Operands in hidden's dtype, logits float32.
  `shortlist` [size] (hidden [rows, d_model] only): only those rows of the weights are
  multiplied (`shortlist_kernel`); "vocab_major" gives `VocabMajor` [size, rows] with the
  ids, "row_major" [rows, vocab] with the others at NEG_INF.
  """
  if layout not in LAYOUTS:
    raise ValueError(f"logits layout {layout!r} is not one of {LAYOUTS}")
  if shortlist is not None:
    listed = vocab_major_projection(hidden, shortlist_kernel(kernel, shortlist))
    listed = VocabMajor(listed.logits, shortlist, kernel.shape[0])
    return listed if layout == "vocab_major" else row_major(listed)
  if layout == "vocab_major":
    return vocab_major_projection(hidden, kernel)
  return projection(hidden, kernel)
