"""Next-token log-probabilities from a decoding step's logits, in either layout.

A step function (decoding/beam_search.py) returns logits [rows, vocab], or `VocabMajor` logits
[vocab, rows] (kernels/logits.py says why); `best` reduces and picks along the
vocabulary axis in place, so nothing transposes them. Either layout gives the
same tokens and log-probabilities, up to the rounding of the product.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from t2t_jax.ids import FILLER, PAD_ID
from t2t_jax.kernels import choice
from t2t_jax.ids import NEG_INF
from t2t_jax.kernels.logits import Logits, VocabMajor, row_major

Array = jax.Array


def log_probs(logits: Logits) -> Array:
  """log_softmax [rows, vocab] float32 with padding (never generated) at NEG_INF."""
  out = jax.nn.log_softmax(row_major(logits).astype(jnp.float32), axis=-1)
  return out.at[:, PAD_ID].set(NEG_INF)


def best(logits: Logits, n: int) -> tuple[Array, Array]:
  """Each row's n most probable next tokens: log-probabilities [rows, n] float32 and ids [rows, n].

  Best first, ties to the lower id, as `jax.lax.top_k(log_probs(logits), n)`.
  The normaliser is computed over the whole vocabulary (padding included, as
  `log_probs` does) but only the n picked logits are normalised. Padding is
  never picked ahead of a real token; picked anyway (n above the real tokens),
  it scores NEG_INF. A shortlist's logits (`VocabMajor` with ids) are normalised
  over its listed ids and picked among them; its FILLER rows count as padding.
  """
  vocab_major = isinstance(logits, VocabMajor)
  x = (logits.logits if vocab_major else logits).astype(jnp.float32)
  ids = logits.ids if vocab_major else None
  axis = 0 if vocab_major else 1
  if ids is not None:
    x = jnp.where((ids == FILLER)[:, None], -jnp.inf, x)              # [size, rows]
  top = jnp.max(x, axis=axis)                                           # [rows]
  normaliser = jnp.log(jnp.sum(jnp.exp(x - jnp.expand_dims(top, axis)), axis=axis))
  # -inf only ever meets the subtractions below, never another infinity.
  if ids is not None:
    x = jnp.where((ids == PAD_ID)[:, None], -jnp.inf, x)
  else:
    x = x.at[(PAD_ID, slice(None)) if vocab_major else (slice(None), PAD_ID)].set(-jnp.inf)
  values, tokens = (choice.top_k_columns if vocab_major else choice.top_k)(x, min(n, x.shape[axis]))
  values = (values - top[:, None]) - normaliser[:, None]
  if ids is not None:                                  # shortlist positions -> vocabulary ids
    tokens = jnp.maximum(jnp.take(ids, tokens), PAD_ID)
  return jnp.where(tokens == PAD_ID, NEG_INF, values), tokens
