"""A decoding step's logits in either layout: [rows, vocab], or `VocabMajor` [vocab, rows].

The output projection (section 3.4) has two kernels: `projection`, the reference
y . E^T [..., vocab], and `vocab_major_projection`, E . y^T [vocab, rows]. On
XLA CPU the second runs faster for a beam's few rows, as long as nothing
transposes its result (docs/benchmarks.md): one model's searches ask for it
(`ops.logits_layout`) and read it in place through `t2t_jax.decoding.next_token`.
`row_major` reads either back as [rows, vocab]. The model calls
`ops.project_logits`, which runs the one asked for.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

Array = jax.Array

# The finite stand-in for log 0: a masked attention logit's bias and an impossible
# token's log-probability. exp(-1e9 - max) underflows to exactly 0 in float32,
# and sums of it (masks added together, scores of impossible hypotheses) stay
# finite, so no softmax, sum or division of it makes NaN.
NEG_INF = -1e9

LAYOUTS = ("row_major", "vocab_major")


@flax.struct.dataclass
class VocabMajor:
  """Logits [vocab, rows] (rows last), as a step function may return them."""
  logits: Array


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


def row_major(logits: Logits) -> Array:
  """The logits [rows, vocab], whichever layout the step function gave."""
  return logits.logits.T if isinstance(logits, VocabMajor) else logits
