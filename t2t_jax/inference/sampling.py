"""Sampling decoder over any incremental step function (e.g. for back-translation).

Same contract as `beam_search.beam_search` and `beam_search.greedy_search`:

  step_fn(cache, tokens [rows], position) -> (logits [rows, vocab], cache)

Each next token is drawn from the model's distribution with its logits divided
by `temperature`, restricted to the `top_k` most probable tokens when top_k > 0
(Edunov et al. 2018 sample with the whole vocabulary or top-10 for
back-translation). Padding (id 0) is never drawn. A sentence stops at EOS or
at its maximum length.

Randomness is explicit and per sentence: row b at output position t draws with
`fold_in(keys[b], t)`, so a sentence's sample depends on its own key only, not
on which batch or row it was decoded in. `row_keys(seed_key, ids)` makes such
keys from sentence ids. `decode_batch` draws `search.n_best` samples for each sentence
of a batch with the models bound as for beam search (decoding/batch_decoder.py).
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import beam_search
from t2t_jax.ids import EOS_ID

Array = jax.Array


def row_keys(key: Array, ids: Any) -> Array:
  """One key per sentence, `fold_in(key, id)`: ids [batch] int (e.g. line numbers)."""
  return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.asarray(ids, jnp.uint32))


def _check(keys: Array, temperature: float, top_k: int) -> None:
  if not jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key) or keys.ndim != 1:
    raise ValueError(f"keys must be typed PRNG keys [rows] (one per row, e.g. "
                     f"sampling.row_keys(jax.random.key(seed), ids)), got {keys.dtype}"
                     f"{list(keys.shape)}")
  if not temperature > 0:
    raise ValueError(f"temperature={temperature} must be > 0 (greedy search is the limit "
                     "at 0: use beam_size=1)")
  if top_k < 0:
    raise ValueError(f"top_k={top_k} must be >= 0 (0 samples from the whole vocabulary)")


def _draw(log_probs: Array, keys: Array, temperature: float, top_k: int) -> Array:
  """One token per row from log_probs [rows, vocab]; keys [rows]."""
  logits = log_probs / temperature
  if top_k and top_k < log_probs.shape[-1]:
    top_logits, top_tokens = jax.lax.top_k(logits, top_k)                     # [rows, k]
    choice = jax.vmap(jax.random.categorical)(keys, top_logits)               # [rows]
    return jnp.take_along_axis(top_tokens, choice[:, None], axis=-1)[:, 0]
  return jax.vmap(jax.random.categorical)(keys, logits)


def sample(step_fn: beam_search.StepFn, cache: Any, keys: Array, *, max_len: int,
           max_lens: Optional[Array] = None, temperature: float = 1.0, top_k: int = 0,
           eos_id: int = EOS_ID, min_len: int = beam_search.MIN_LEN) -> tuple[Array, Array]:
  """One sampled output per row (EOS not drawn before `min_len` tokens).

  `keys` [rows] typed PRNG keys, one per row; the cache holds `rows` rows (one
  per sentence, or several samples of a sentence as the step function
  arranges them). `max_len` is the static output length and `max_lens` [rows]
  optional per-row maxima (<= max_len). Returns tokens [rows, max_len] int32
  (0 after EOS) and the model's summed log-probabilities of them [rows] float32
  (at temperature 1 over the whole vocabulary: what the model thinks of the
  sample, comparable with beam search's scores before the length penalty).
  """
  _check(keys, temperature, top_k)
  batch = keys.shape[0]
  limits = beam_search.sentence_limits(max_len, max_lens, batch)

  def draw(log_probs, step):
    step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, step)
    return _draw(log_probs, step_keys, temperature, top_k)                     # [rows]

  return beam_search.token_by_token(step_fn, cache, draw, max_len=max_len, limits=limits,
                                    eos_id=eos_id, min_len=min_len)


@functools.partial(jax.jit, static_argnames=("models", "n", "temperature", "top_k", "max_len",
                                             "min_len"))
def _sample_batch(params: tuple, inputs: Array, max_lens: Array, keys: Array, shortlist, *,
                  models: tuple, n: int, temperature: float, top_k: int, max_len: int,
                  min_len: int):
  batch = inputs.shape[0]
  members = [batch_decoder.Member(m, p) for m, p in zip(models, params)]
  cache, step_fn = batch_decoder.init_decoder(members, jnp.repeat(inputs, n, axis=0), max_len,
                                              shortlist)
  tokens, scores = sample(step_fn, cache, keys.reshape(batch * n), max_len=max_len,
                          max_lens=jnp.repeat(max_lens, n), temperature=temperature,
                          top_k=top_k, min_len=min_len)
  if shortlist is not None:   # positions in the list -> ids
    tokens = batch_decoder.vocabulary_ids(shortlist, tokens)
  tokens, scores = tokens.reshape(batch, n, max_len), scores.reshape(batch, n)
  order = jnp.argsort(-scores, axis=1, stable=True)                   # best first
  return (jnp.take_along_axis(tokens, order[..., None], axis=1),
          jnp.take_along_axis(scores, order, axis=1))


def decode_batch(members: Sequence[batch_decoder.Member], inputs: Any,
                 search: batch_decoder.Search, ids: Optional[Sequence[int]] = None, *,
                 store: Any = None, shortlist: Any = None) -> tuple[np.ndarray, np.ndarray]:
  """`search.n_best` samples for each row of `inputs` [batch, src] (EOS-terminated, 0-padded),
  as `batch_decoder.decode_batch` gives beam search's outputs.

  `ids` [batch] name the sentences for the keys (default 0..batch-1): sample j of
  sentence i draws with fold_in(fold_in(key(search.seed), i), j), whatever batch it
  is in. Scores: the model's log-probability of each sample, best first. `store`,
  `shortlist`: as for `batch_decoder.decode_batch`.
  """
  if not search.sample:
    raise ValueError("sampling.decode_batch samples; beam search is batch_decoder.decode_batch")
  members = tuple(members)
  batch_decoder.check_compatible(members)
  inputs, max_len, max_lens = batch_decoder.checked_limits(
      inputs, search, batch_decoder.max_positions(members))
  candidates = None if shortlist is None else jax.device_put(shortlist.batch_ids(inputs))
  ids = np.arange(len(inputs)) if ids is None else np.asarray(ids)
  keys = row_keys(jax.random.key(search.seed), ids)                   # [batch]
  keys = jax.vmap(lambda k: row_keys(k, np.arange(search.n_best)))(keys)
  out = batch_decoder.call(store, _sample_batch, tuple(m.params for m in members), inputs,
                           max_lens, keys, candidates, models=tuple(m.cfg for m in members),
                           n=search.n_best, temperature=float(search.temperature),
                           top_k=search.top_k, max_len=max_len, min_len=search.min_len)
  return np.asarray(out[0]), np.asarray(out[1])
