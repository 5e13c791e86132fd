"""The output layer's kernels for the searches: the projection onto the vocabulary in either
layout, onto a shortlist's rows, and top-k over it. (Training's output layer fused with its
loss is beside the train step, in train/step.py.)

Decoding. A step's logits come in either layout: [rows, vocab], or `VocabMajor` [vocab,
rows]. The output projection (section 3.4) has two kernels: `projection`, the reference
y . E^T [..., vocab], and `vocab_major_projection`, E . y^T [vocab, rows]. On
XLA CPU the second runs faster for a beam's few rows, as long as nothing
transposes its result (docs/benchmarks.md): one model's searches ask for it
(`choice.logits_layout`) and read it in place (`decoding.beam_search.best_tokens`).
`row_major` reads either back as [rows, vocab]. A search projects the model's features
(`model.transformer.decode_features`) with an `OutputLayer`: `project_logits` over the
model's pre-softmax kernel, or a quantized model's products over its own copy of it
(kernels/choice.py picks it).

A lexical shortlist (inference/shortlist.py) projects onto a batch's listed rows of
the weights only (`listed_rows`): logits [size, rows] (or [rows, size]) for the
vocabulary ids `ids` [size], ascending, with `FILLER` (-1) rows after them padding
the size to a bucket, which score -inf so that they add nothing to a normaliser
(`listed_logits`). A search reads them as a vocabulary of `size` entries, its tokens
positions in `ids` (decoding/batch_decoder.py maps them to ids and back).

Top-k. XLA CPU sorts each row of a top-k on one thread: over a 37000-word
vocabulary that is most of a step's search (docs/benchmarks.md, "Decoding"). In
`blocked_top_k` the row is cut into blocks; the n best elements lie in the n blocks
with the best maxima (each of them is at most its block's maximum, which then ranks
among the n best too; on ties the lower block, whose elements have lower indices,
comes first as the lower index does), so only those blocks' elements, kept in index
order, go through the exact top-k. The searches call `chosen_top_k` and
`chosen_best_columns` (the vocabulary-major logits' best log-probabilities, read in
place: `blocked_best_columns`), which choose by the platform the program is compiled
for: on a TPU the reference, elsewhere the blocked one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from t2t_jax.ids import FILLER

Array = jax.Array

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


def listed_rows(kernel: Any, ids: Array) -> Any:
  """The pre-softmax weights' rows [size, ...] of the shortlist `ids` [size] (FILLER: zeros),
  of every array of `kernel` (an array [vocab, d_model], or a product's form of it whose
  arrays all have the vocabulary first, as an int8 kernel's values and scales)."""
  return jax.tree.map(lambda w: jnp.take(w, ids, axis=0, mode="fill", fill_value=0), kernel)


def listed_logits(logits: Logits, ids: Array) -> Logits:
  """A shortlist's logits (either layout, over `ids` [size]) with its FILLER ids' at -inf."""
  if isinstance(logits, VocabMajor):
    return VocabMajor(jnp.where((ids == FILLER)[:, None], -jnp.inf, logits.logits))
  return jnp.where(ids == FILLER, -jnp.inf, logits)


def row_major(logits: Logits) -> Array:
  """The logits [rows, vocab], whichever layout the step function gave."""
  return logits.logits.T if isinstance(logits, VocabMajor) else logits


def add_bias(logits: Logits, bias: Array, ids: Optional[Array] = None) -> Logits:
  """`logits` in either layout plus a bias [vocab] per vocabulary id (a model's
  `output_bias`); a shortlist's (`ids` [size]) rows get their ids' biases, its FILLER
  rows none."""
  if ids is not None:
    bias = jnp.where(ids == FILLER, 0.0, jnp.take(bias, ids, mode="clip"))
  if not isinstance(logits, VocabMajor):
    return logits + bias
  return logits.replace(logits=logits.logits + bias[:, None])


def project_logits(hidden: Array, kernel: Array, layout: str = "row_major") -> Logits:
  """The output projection of hidden [..., d_model] by the pre-softmax weights [vocab, d_model].

  "row_major": logits [..., vocab] (`projection`); "vocab_major" (hidden [rows, d_model]
  only): `VocabMajor` [vocab, rows]. Operands in hidden's dtype, logits float32.
  """
  if layout not in LAYOUTS:
    raise ValueError(f"logits layout {layout!r} is not one of {LAYOUTS}")
  if layout == "vocab_major":
    return vocab_major_projection(hidden, kernel)
  return projection(hidden, kernel)


def _model_kernel(params: Any, kernel: Array) -> Array:
  del params
  return kernel


@dataclasses.dataclass(frozen=True)
class OutputLayer:
  """How a search projects the decoder's features onto the vocabulary.

  `kernel(params, model_kernel)`: the weights `project` reads, from the model's params and
  its pre-softmax kernel [vocab, d_model] (`transformer.output_weights`): that kernel, or a
  product's form of it kept in the params. `project(hidden [rows, d_model], kernel, layout)
  -> Logits` (`project_logits`'s contract). The bias, if any, is added after (`add_bias`).
  """
  project: Callable[[Array, Any, str], Logits] = project_logits
  kernel: Callable[[Any, Array], Any] = _model_kernel


# ------------------------------------------------------------------------------ top-k


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


def best_columns(x: Array, n: int, skip: int) -> tuple[Array, Array]:
  """The reference: each column of logits x [size, columns] as log-probabilities (the
  normaliser over the whole column), and the top n of them other than row `skip`, which is
  picked last and then at -inf: values, indices [columns, n], as
  `jax.lax.top_k(log_softmax(x, axis=0).at[skip].set(-inf).T, n)`."""
  top = jnp.max(x, axis=0)                                             # [columns]
  normaliser = jnp.log(jnp.sum(jnp.exp(x - top), axis=0))
  values, index = jax.lax.top_k(x.at[skip].set(-jnp.inf).T, n)
  return (values - top[:, None]) - normaliser[:, None], index


def blocked_best_columns(x: Array, n: int, skip: int) -> tuple[Array, Array]:
  """`best_columns` reading x [size, columns] twice and writing nothing of its size.

  The reference's search writes x again (row `skip` at -inf) and reads it three times
  (the maximum, the normaliser, the top n), and a blocked top-k would pad it to whole
  blocks: at a 37000-word vocabulary and 64 rows each is 9.5 MB, a few ms a step on a CPU.
  Here the whole blocks' maxima are one read of x in place (the last, partial block and
  `skip`'s block, without `skip`, are read apart: small), the column's maximum is theirs
  and `skip`'s, the normaliser is the second read, and only the n chosen blocks are
  gathered, `skip` masked there. Same values and
  indices as `best_columns`, ties included.
  """
  size, columns = x.shape
  block = _block(size, n)
  whole = size // block                                                # whole blocks
  if -(-size // block) <= n or not 0 <= skip < size:
    return best_columns(x, n, skip)
  # A window, not a reshape: that would need a slice of the whole blocks, which XLA CPU copies.
  maxima = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (block, 1), (block, 1),
                                 "VALID")                              # [whole, columns]
  if whole * block < size:                                             # the partial last block
    maxima = jnp.concatenate([maxima, jnp.max(x[whole * block:], axis=0)[None]])
  start = skip // block * block
  rows = np.arange(start, min(start + block, size))                   # skip's block
  others = jnp.max(jnp.where((rows == skip)[:, None], -jnp.inf, x[rows[0]:rows[-1] + 1]), axis=0)
  maxima = maxima.at[start // block].set(others)                      # skip left out
  top = jnp.maximum(jnp.max(maxima, axis=0), x[skip])                  # [columns]
  normaliser = jnp.log(jnp.sum(jnp.exp(x - top), axis=0))
  _, chosen = jax.lax.top_k(maxima.T, n)                              # [columns, n] blocks
  chosen = jnp.sort(chosen, axis=-1)                                  # index order
  index = chosen[..., None] * block + jnp.arange(block)               # [columns, n, block]
  candidates = x.at[index, jnp.arange(columns)[:, None, None]].get(mode="fill",
                                                                   fill_value=-jnp.inf)
  candidates = jnp.where(index == skip, -jnp.inf, candidates)
  values, index = _finish(candidates, chosen, block)
  return (values - top[:, None]) - normaliser[:, None], index


def _finish(candidates: Array, chosen: Array, block: int) -> tuple[Array, Array]:
  """The exact top n of the chosen blocks' elements [..., n, block], as indices into the row."""
  *lead, n, _ = candidates.shape
  values, at = jax.lax.top_k(candidates.reshape(*lead, n * block), n)
  index = jnp.take_along_axis(chosen, at // block, axis=-1) * block + at % block
  return values, index


# ------------------------------------------------------- top-k, chosen by the platform
# Chosen inside the program by the platform it is compiled for (`lax.platform_dependent`),
# so a program built here for a TPU gets the TPU's choice: `jax.lax.top_k` itself, which
# XLA's TPU cost model predicts faster than the blocked one over 256 x 37000
# (docs/benchmarks.md, "compiler predictions"); elsewhere the blocked ones.


def chosen_top_k(x: Array, n: int) -> tuple[Array, Array]:
  """`jax.lax.top_k(x, n)`: itself on a TPU, `blocked_top_k` elsewhere."""
  return lax.platform_dependent(x, tpu=lambda x: tuple(jax.lax.top_k(x, n)),
                                default=lambda x: blocked_top_k(x, n))


def chosen_best_columns(x: Array, n: int, skip: int) -> tuple[Array, Array]:
  """`best_columns(x, n, skip)` for logits x [size, columns] (each column's n best
  log-probabilities, row `skip` left out of the picking): itself on a TPU,
  `blocked_best_columns` elsewhere."""
  return lax.platform_dependent(x, tpu=lambda x: best_columns(x, n, skip),
                                default=lambda x: blocked_best_columns(x, n, skip))
