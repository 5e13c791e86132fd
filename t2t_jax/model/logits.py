"""A decoding step's logits in either layout: [rows, vocab], or `VocabMajor` [vocab, rows].

The one home of the layout: `project` computes a step's output projection in
the layout asked for, `row_major` reads either back as [rows, vocab]. On XLA
CPU the product E . y^T (E the [vocab, d_model] embedding, y the rows' decoder
states) runs faster for a beam's few rows than y . E^T, as long as nothing
transposes its result (docs/benchmarks.md): one model's searches ask for
"vocab_major" and read it in place through `t2t_jax.decoding.next_token`.
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


def project(hidden: Array, kernel: Array, layout: str = "row_major") -> Logits:
  """The output projection of hidden [..., d_model] by the pre-softmax weights [vocab, d_model].

  "row_major": logits [..., vocab]; "vocab_major" (hidden [rows, d_model] only):
  `VocabMajor` [vocab, rows]. Operands in hidden's dtype, logits float32.
  """
  if layout not in LAYOUTS:
    raise ValueError(f"logits layout {layout!r} is not one of {LAYOUTS}")
  kernel = kernel.astype(hidden.dtype)
  if layout == "vocab_major":
    return VocabMajor(jnp.einsum("vd,rd->vr", kernel, hidden, preferred_element_type=jnp.float32))
  return jnp.einsum("...d,vd->...v", hidden, kernel, preferred_element_type=jnp.float32)


def row_major(logits: Logits) -> Array:
  """The logits [rows, vocab], whichever layout the step function gave."""
  return logits.logits.T if isinstance(logits, VocabMajor) else logits
