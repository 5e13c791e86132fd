"""Beam search over any incremental step function (section 6.1), whole; no model in sight.

The search is written against a step function

  step_fn(cache, tokens [rows], position) -> (logits [rows, vocab], cache)

(or `VocabMajor` logits [vocab, rows], kernels/logits.py, which `best_tokens` reads in place),
whose cache is a pytree with a leading `rows` dim on every leaf: the model's
`decode_step` with its config and params bound, an ensemble's
(decoding/batch_decoder.py), the uncached reference (decoding/uncached.py), or a
toy function in the tests. This module imports no model: decoding/batch_decoder.py binds
one and runs the search over a batch of sentences. Beams are rows
`batch * beam_size`; the cache's per-row parts are tiled to beams once and
reordered by parent after every step, its per-sentence parts are shared by the
beams, and its position buffers may grow in chunks (decode_cache.py says which
part is which; `tile`, `take_rows` and `resize` here do it).

Reading order: the next token (`next_log_probs`, `best_tokens`), `greedy_search` (the
reference), beam search (`_beam_step`: extensions, finished hypotheses, the length
penalty, the cache reordered to the parents), then the cache between steps.

Scores are the GNMT length-penalised log-probabilities the paper ranks by:
log P(Y) / lp(Y) with lp(Y) = ((5 + |Y|) / 6)^alpha, |Y| counting the generated
tokens including EOS. A hypothesis that reaches its sentence's maximum length
without EOS is finished there and scored the same way. Padding (id 0) is never
generated.

Which hypotheses finish: of the `2 * beam_size` best extensions, those ending in
EOS that rank within the best `beam_size` (as in fairseq); the beam stays
`beam_size` wide with the best extensions not ending in EOS. EOS is not an
extension before `min_len` tokens (default 1: no empty translation, as fairseq
and CTranslate2 decode by default; the paper does not say; 0 allows it, as
tensor2tensor does); its probability stays in the others' normaliser. With one beam this
is greedy decoding whenever alpha = 0: `greedy_search`, the plain loop that
beam search of one beam (and top-1 sampling) is tested against.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp

from t2t_jax.ids import EOS_ID, NEG_INF, PAD_ID
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.kernels.logits import Logits, VocabMajor, row_major
from t2t_jax import decode_cache

Array = jax.Array
StepFn = Callable[[Any, Array, Array], tuple[Logits, Any]]


# Tokens before EOS may end a hypothesis: 1 forbids the empty translation, which a
# search without a length penalty otherwise returns for some long sentences.
MIN_LEN = 1


def _check_min_len(min_len: int) -> None:
  if min_len < 0:
    raise ValueError(f"min_len={min_len} must be >= 0 (0 allows an empty translation)")


def _forbid_eos(log_probs: Array, tokens: Array, step: Array, min_len: int, eos_id: int) -> Array:
  """`log_probs` with EOS's entries at NEG_INF while fewer than `min_len` tokens are out.

  `tokens`: the ids `log_probs` belong to (same shape), or None when the last axis
  is the vocabulary. The others keep their log-probabilities (no renormalisation,
  as fairseq and transformers' min_length).
  """
  if not min_len:
    return log_probs
  is_eos = (tokens == eos_id) if tokens is not None else (jnp.arange(log_probs.shape[-1]) == eos_id)
  return jnp.where(is_eos & (step < min_len), NEG_INF, log_probs)


def length_penalty(length: Array, alpha: float) -> Array:
  """GNMT length penalty ((5 + length) / 6)^alpha, float32."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def _batch_size(cache: Any) -> int:
  leaves = jax.tree.leaves(cache)
  if not leaves:
    raise ValueError("the decoding cache has no arrays; the batch size comes from their leading dim")
  return leaves[0].shape[0]


def sentence_limits(max_len: int, max_lens: Optional[Array], batch: int) -> Array:
  """Each sentence's maximum output length [batch] int32: `max_lens` clipped to 1..max_len,
  or max_len for all when None."""
  if max_lens is None:
    return jnp.full((batch,), max_len, jnp.int32)
  return jnp.clip(jnp.asarray(max_lens, jnp.int32), 1, max_len)


def _previous_tokens(seqs: Array, step: Array) -> Array:
  """Token generated at position step - 1 (0 at step 0); `seqs` [..., max_len]."""
  prev = jax.lax.dynamic_index_in_dim(seqs, jnp.maximum(step - 1, 0), axis=-1, keepdims=False)
  return jnp.where(step == 0, PAD_ID, prev)


# -------------------------------------------------------------------- the next token


def next_log_probs(logits: Logits) -> Array:
  """log_softmax [rows, vocab] float32 with padding (never generated) at NEG_INF."""
  out = jax.nn.log_softmax(row_major(logits).astype(jnp.float32), axis=-1)
  return out.at[:, PAD_ID].set(NEG_INF)


def best_tokens(logits: Logits, n: int) -> tuple[Array, Array]:
  """Each row's n most probable next tokens: log-probabilities [rows, n] float32 and ids [rows, n].

  Best first, ties to the lower id, as `jax.lax.top_k(next_log_probs(logits), n)`.
  The normaliser is computed over the whole vocabulary (padding included, as
  `next_log_probs` does) but only the n picked logits are normalised. Padding is
  never picked ahead of a real token; picked anyway (n above the real tokens),
  it scores NEG_INF.
  """
  if isinstance(logits, VocabMajor):   # [vocab, rows], read in place (kernels/logits.py)
    x = logits.logits.astype(jnp.float32)
    values, tokens = logits_lib.chosen_best_columns(x, min(n, x.shape[0]), PAD_ID)
  else:
    x = logits.astype(jnp.float32)                                      # [rows, vocab]
    top = jnp.max(x, axis=1)                                            # [rows]
    normaliser = jnp.log(jnp.sum(jnp.exp(x - top[:, None]), axis=1))
    # -inf only ever meets the subtractions below, never another infinity.
    values, tokens = logits_lib.chosen_top_k(x.at[:, PAD_ID].set(-jnp.inf), min(n, x.shape[1]))
    values = (values - top[:, None]) - normaliser[:, None]
  return jnp.where(tokens == PAD_ID, NEG_INF, values), tokens


# ------------------------------------------------------------------------ greedy


def greedy_search(step_fn: StepFn, cache: Any, *, max_len: int,
                  max_lens: Optional[Array] = None, eos_id: int = EOS_ID,
                  min_len: int = MIN_LEN) -> tuple[Array, Array]:
  """Most probable next token at each step, until EOS or the sentence's maximum length.

  The reference that `beam_search` with one beam and alpha 0 is tested against
  (tests/decoding/test_beam_search.py), and top-1 sampling too
  (tests/inference/test_sampling.py); decoding itself runs beam search (beam_size=1
  is greedy). `max_len` is the static output length; `max_lens` [batch] optional per-sentence
  maxima (<= max_len). Returns tokens [batch, max_len] (0 after EOS) and the
  summed log-probabilities [batch] float32 (no length penalty).
  """
  batch = _batch_size(cache)
  greedy = lambda log_probs, step: jnp.argmax(log_probs, axis=-1)
  return token_by_token(step_fn, cache, greedy, max_len=max_len,
                        limits=sentence_limits(max_len, max_lens, batch), eos_id=eos_id,
                        min_len=min_len)


def token_by_token(step_fn: StepFn, cache: Any, choose: Callable[[Array, Array], Array], *,
                   max_len: int, limits: Array, eos_id: int = EOS_ID,
                   min_len: int = MIN_LEN) -> tuple[Array, Array]:
  """One output per row, each token picked by `choose(log_probs [rows, vocab], step)`.

  The loop greedy search and sampling share: a row stops at EOS or at its
  limit (`limits` [rows], <= the static `max_len`); the loop ends when every
  row has. `choose` never sees EOS before `min_len` tokens. Returns tokens [rows, max_len] (0 after EOS) and the model's summed
  log-probabilities of the chosen tokens [rows] float32.
  """
  _check_min_len(min_len)
  batch = limits.shape[0]

  def cond(state):
    step, _, _, done, _ = state
    return (step < max_len) & ~jnp.all(done)

  def body(state):
    step, seqs, log_prob, done, cache = state
    logits, cache = step_fn(cache, _previous_tokens(seqs, step), step)
    log_probs = next_log_probs(logits)                            # [rows, vocab]
    allowed = _forbid_eos(log_probs, None, step, min_len, eos_id)
    token = choose(allowed, step).astype(jnp.int32)                           # [rows]
    token_log_prob = jnp.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]
    token = jnp.where(done, PAD_ID, token)
    log_prob = log_prob + jnp.where(done, 0.0, token_log_prob)
    seqs = jax.lax.dynamic_update_index_in_dim(seqs, token, step, axis=1)
    done = done | (token == eos_id) | (step + 1 >= limits)
    return step + 1, seqs, log_prob, done, cache

  state = (jnp.int32(0), jnp.zeros((batch, max_len), jnp.int32), jnp.zeros((batch,), jnp.float32),
           jnp.zeros((batch,), bool), cache)
  _, seqs, log_prob, _, _ = jax.lax.while_loop(cond, body, state)
  return seqs, log_prob


# --------------------------------------------------------------------------- beam


class BeamState(NamedTuple):
  """The search between steps; `beam_search` runs it from `beam_start` to the end."""
  step: Array          # [] position of the token generated next
  limits: Array        # [batch] int32 each sentence's maximum length (<= max_len)
  alive_seqs: Array    # [batch, beam, max_len]
  alive_log_prob: Array  # [batch, beam] float32
  alive_ok: Array      # [batch, beam] bool: holds a hypothesis still being extended
  cache: Any           # per-row leaves [batch * beam, ...] (decode_cache.py)
  done_seqs: Array     # [batch, beam, max_len], best first
  done_score: Array    # [batch, beam] float32, length-penalised
  done_ok: Array       # [batch, beam] bool
  sentence_done: Array  # [batch] bool


def _gather_beams(x: Array, beam_index: Array) -> Array:
  """x [batch, beam, ...] -> x[b, beam_index[b, k], ...]; beam_index [batch, k]."""
  index = beam_index.reshape(beam_index.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, index, axis=1, mode="clip")


def _top_extensions(beam_best: Array, beam_token: Array, s: BeamState,
                    n: int) -> tuple[Array, Array, Array]:
  """The n best (log-prob, beam, token) extensions per sentence, best first.

  beam_best, beam_token [batch, beam, m]: each beam's best min(n, vocab) next
  tokens and their log-probabilities (`best_tokens`). The second stage takes
  the best n of those: every extension in a sentence's best n is within its own
  beam's best n. Same result as one top-n over beam x vocab, ties included (both
  prefer the lower beam, then the lower token).
  """
  batch, beams, m = beam_best.shape
  candidates = jnp.where(s.alive_ok[..., None], s.alive_log_prob[..., None] + beam_best, NEG_INF)
  top_log_prob, top_index = jax.lax.top_k(candidates.reshape(batch, beams * m), n)  # [batch, n]
  top_beam = top_index // m
  top_token = jnp.take_along_axis(beam_token.reshape(batch, beams * m), top_index, axis=1)
  return top_log_prob, top_beam, top_token


def _beam_step(step_fn: StepFn, s: BeamState, *, alpha: float, eos_id: int, n_best: int,
               min_len: int, shared: bool, first: bool = False) -> BeamState:
  """One position for every beam; `first`: the cache still has one row per sentence.

  Before the first step only beam 0 holds a hypothesis (the empty one), so the
  first step runs the model on one row per sentence and its reordering of the
  cache to the chosen parents also tiles it to the beams.
  """
  batch, k, _ = s.alive_seqs.shape
  r = 1 if first else k                                                     # cache rows per sentence
  tokens = _previous_tokens(s.alive_seqs[:, :r], s.step).reshape(batch * r)
  logits, cache = step_fn(s.cache, tokens, s.step)
  # Each beam has one EOS extension, so the best 2k hold at least k that go on.
  beam_best, beam_token = (jnp.broadcast_to(x.reshape(batch, r, -1), (batch, k, x.shape[-1]))
                           for x in best_tokens(logits, 2 * k))    # [batch, k, 2k]
  beam_best = _forbid_eos(beam_best, beam_token, s.step, min_len, eos_id)
  top_log_prob, top_beam, top_token = _top_extensions(beam_best, beam_token, s, 2 * k)
  top_ok = _gather_beams(s.alive_ok, top_beam) & (top_token != PAD_ID)
  top_seqs = jax.lax.dynamic_update_index_in_dim(
      _gather_beams(s.alive_seqs, top_beam), top_token, s.step, axis=2)       # [batch, 2k, max_len]

  # Finished now: EOS within the best k, or anything within the best k at the limit.
  length = s.step + 1
  at_limit = (length >= s.limits)[:, None]                                   # [batch, 1]
  in_top_k = jnp.arange(2 * k) < k
  finishing = top_ok & in_top_k & ((top_token == eos_id) | at_limit)
  new_score = jnp.where(finishing, top_log_prob / length_penalty(length, alpha), NEG_INF)
  pool_score = jnp.concatenate([jnp.where(s.done_ok, s.done_score, NEG_INF), new_score], 1)
  pool_ok = jnp.concatenate([s.done_ok, finishing], 1)
  pool_seqs = jnp.concatenate([s.done_seqs, top_seqs], 1)
  done_score, keep = jax.lax.top_k(pool_score, k)
  done_ok = _gather_beams(pool_ok, keep)
  done_seqs = _gather_beams(pool_seqs, keep)

  # Still alive: the best k extensions that do not end in EOS.
  goes_on = top_token != eos_id
  alive_log_prob, pick = jax.lax.top_k(jnp.where(goes_on, top_log_prob, 2 * NEG_INF), k)
  alive_ok = _gather_beams(top_ok & goes_on, pick) & ~at_limit
  alive_seqs = _gather_beams(top_seqs, pick)
  parents = jnp.arange(batch)[:, None] * k + _gather_beams(top_beam, pick)   # [batch, k] rows
  if first:  # every parent is its sentence's one row: tiling is the reordering
    cache = tile(cache, k, shared=shared)
  else:
    cache = take_rows(cache, parents.reshape(-1), shared=shared)

  # With alpha >= 0 a live hypothesis can at best reach its current log-probability
  # over lp(its sentence's maximum): log-probabilities only fall and lp only grows.
  best_alive = (jnp.max(jnp.where(alive_ok, alive_log_prob, NEG_INF), axis=1)
                / length_penalty(s.limits, alpha))
  beaten = done_ok[:, n_best - 1] & (done_score[:, n_best - 1] >= best_alive)
  sentence_done = s.sentence_done | beaten | ~jnp.any(alive_ok, axis=1)
  alive_ok = alive_ok & ~sentence_done[:, None]
  return BeamState(length, s.limits, alive_seqs, alive_log_prob, alive_ok, cache,
                   done_seqs, done_score, done_ok, sentence_done)


def _check_settings(alpha: float, beam_size: int, n_best: int) -> None:
  if alpha < 0:
    raise ValueError(f"alpha={alpha} must be >= 0: the early-stopping bound assumes a "
                     "length penalty that grows with length")
  if not 1 <= n_best <= beam_size:
    raise ValueError(f"n_best={n_best} must be between 1 and beam_size={beam_size}")


def beam_start(cache: Any, *, beam_size: int, max_len: int, max_lens: Optional[Array] = None,
               shared: bool = True) -> BeamState:
  """The state before the first step: one empty hypothesis per sentence.

  `cache` leaves have leading dim `batch` and stay so until the first step
  (`beam_run`), which tiles the per-row parts to the beams (decode_cache.py:
  PerSentence parts stay per sentence unless `shared=False`, the reference
  path that tiles them too).
  """
  batch = _batch_size(cache)
  k = beam_size
  first_beam = jnp.arange(k) == 0
  return BeamState(
      step=jnp.int32(0),
      limits=sentence_limits(max_len, max_lens, batch),
      alive_seqs=jnp.zeros((batch, k, max_len), jnp.int32),
      # Only beam 0 holds the empty prefix, so the first step does not pick k copies.
      alive_log_prob=jnp.where(first_beam, 0.0, NEG_INF)[None].repeat(batch, 0),
      alive_ok=first_beam[None].repeat(batch, 0),
      cache=cache,
      done_seqs=jnp.zeros((batch, k, max_len), jnp.int32),
      done_score=jnp.full((batch, k), NEG_INF, jnp.float32),
      done_ok=jnp.zeros((batch, k), bool),
      sentence_done=jnp.zeros((batch,), bool))


def _before_first_step(state: BeamState, shared: bool) -> bool:
  """Whether the cache still has one row per sentence (a `beam_start` state), not one per beam."""
  batch, k, _ = state.alive_seqs.shape
  rows = cache_rows(state.cache, shared=shared)
  return k > 1 and rows == batch


def beam_run(step_fn: StepFn, state: BeamState, *, until: int, alpha: float = 0.6,
             eos_id: int = EOS_ID, n_best: int = 1, min_len: int = MIN_LEN,
             shared: bool = True) -> BeamState:
  """Steps until position `until` (exclusive) or until every sentence has stopped.

  The cache's Positions buffers are resized to `until` first (decode_cache.py),
  so a search can run in chunks whose self-attention covers the filled prefix
  rather than the whole output length; `until` must not fall below the state's
  step (a shorter buffer would lose keys/values already written).
  """
  _check_settings(alpha, state.alive_seqs.shape[1], n_best)
  _check_min_len(min_len)
  until = min(until, state.alive_seqs.shape[2])
  if position_length(state.cache) is not None:
    state = state._replace(cache=resize(state.cache, until))
  step = functools.partial(_beam_step, step_fn, alpha=alpha, eos_id=eos_id, n_best=n_best,
                           min_len=min_len, shared=shared)
  if _before_first_step(state, shared):
    state = step(state, first=True)
  return jax.lax.while_loop(
      lambda s: (s.step < until) & ~jnp.all(s.sentence_done), step, state)


def beam_search(step_fn: StepFn, cache: Any, *, beam_size: int = 4, alpha: float = 0.6,
                max_len: int, max_lens: Optional[Array] = None, eos_id: int = EOS_ID,
                n_best: int = 1, min_len: int = MIN_LEN, chunks: Optional[Sequence[int]] = None,
                shared: bool = True) -> tuple[Array, Array]:
  """Length-penalised beam search with early stopping per sentence.

  `cache` has leading dim `batch` on every leaf (one row per sentence); its
  per-row parts are tiled to `beam_size` rows per sentence here and reordered
  after every step, its PerSentence parts are shared by the beams as they are
  (decode_cache.py; `shared=False` tiles and reorders them too: the reference).
  `max_len` is the static output length; `max_lens` [batch] optional
  per-sentence maxima (<= max_len), e.g. input length + 50. A sentence stops
  once no live hypothesis can beat its `n_best`-th finished one; the loop ends
  when every sentence has stopped. `min_len`: tokens a hypothesis has before EOS
  may end it (`MIN_LEN`, no empty output). `chunks`: increasing positions at which the
  Positions buffers grow (default: one chunk of max_len, the buffers as given);
  each chunk is one more copy of the step in the compiled program.

  Returns tokens [batch, n_best, max_len] int32 (0 after EOS) and scores
  [batch, n_best] float32, best first; a slot without any hypothesis (only
  possible with a vocabulary smaller than the beam) scores NEG_INF.
  """
  _check_settings(alpha, beam_size, n_best)
  chunks = list(chunks or ())
  if any(b <= a for a, b in zip([0] + chunks, chunks)):
    raise ValueError(f"chunks={chunks} must be increasing positive positions")
  state = beam_start(cache, beam_size=beam_size, max_len=max_len, max_lens=max_lens,
                     shared=shared)
  for until in [*(c for c in chunks if c < max_len), max_len]:
    state = beam_run(step_fn, state, until=until, alpha=alpha, eos_id=eos_id, n_best=n_best,
                     min_len=min_len, shared=shared)
  return state.done_seqs[:, :n_best], state.done_score[:, :n_best]


# ------------------------------------------------------------ the cache between steps
# decode_cache.py's wrappers say what a search may do with each part of a cache.


_POSITIONS = (decode_cache.Positions, decode_cache.Unordered)


def _is_wrapper(x: Any) -> bool:
  return isinstance(x, (decode_cache.PerSentence, decode_cache.Positions, decode_cache.Unordered))


def map_rows(fn: Callable[[Array], Array], cache: Any, *, shared: bool = True,
             unordered: bool = True) -> Any:
  """Applies `fn` to every per-row leaf (Positions included); PerSentence parts pass as they are.

  With `shared=False` PerSentence parts count as per row too (the reference
  path that tiles and reorders everything); with `unordered=False` Unordered
  parts pass as they are.
  """
  def visit(x):
    if ((isinstance(x, decode_cache.PerSentence) and shared)
        or (isinstance(x, decode_cache.Unordered) and not unordered)):
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


def cache_rows(cache: Any, *, shared: bool = True) -> int | None:
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
