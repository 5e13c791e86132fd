"""A decoding step's logits in either layout: [rows, vocab], or `VocabMajor` [vocab, rows].

The model's `decode_step` may return its output projection as E . y^T (E the
[vocab, d_model] embedding, y the rows' decoder states): on XLA CPU that product
runs faster for a beam's few rows than y . E^T, as long as nothing transposes
its result. The searches read either layout through `t2t_jax.decoding.next_token`.
"""

from __future__ import annotations

import flax.struct
import jax

Array = jax.Array


@flax.struct.dataclass
class VocabMajor:
  """Logits [vocab, rows] (rows last), as a step function may return them."""
  logits: Array


Logits = Array | VocabMajor


def row_major(logits: Logits) -> Array:
  """The logits [rows, vocab], whichever layout the step function gave."""
  return logits.logits.T if isinstance(logits, VocabMajor) else logits
