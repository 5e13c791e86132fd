"""Beam search and greedy decoding over any incremental `decode_step` (section 6.1).

The search is written against a step function

  step_fn(cache, tokens [rows], position) -> (logits [rows, vocab], cache)

(or logits `next_token.VocabMajor` [vocab, rows], which beam search reads faster),
whose cache is a pytree with a leading `rows` dim on every leaf: the model's
`decode_step` with `cfg` and `params` bound (`translate_batch`), the uncached
reference `uncached_decoder`, or a toy function in the tests. Beams are rows
`batch * beam_size`; the cache's per-row parts are tiled to beams once and
reordered by parent after every step, its per-sentence parts are shared by the
beams, and its position buffers may grow in chunks (model/decode_cache.py).

Scores are the GNMT length-penalised log-probabilities the paper ranks by:
log P(Y) / lp(Y) with lp(Y) = ((5 + |Y|) / 6)^alpha, |Y| counting the generated
tokens including EOS. A hypothesis that reaches its sentence's maximum length
without EOS is finished there and scored the same way. Padding (id 0) is never
generated.

Which hypotheses finish: of the `2 * beam_size` best extensions, those ending in
EOS that rank within the best `beam_size` (as in fairseq); the beam stays
`beam_size` wide with the best extensions not ending in EOS. With one beam this
is greedy decoding whenever alpha = 0.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax import configs
from t2t_jax.data.buckets import BUCKET_LENGTHS, bucket_length
from t2t_jax.decoding import in_flight as in_flight_lib
from t2t_jax.decoding import next_token
from t2t_jax.ids import EOS_ID, PAD_ID
from t2t_jax.model import decode_cache
from t2t_jax.model import transformer as model

Array = jax.Array
StepFn = Callable[[Any, Array, Array], tuple[next_token.Logits, Any]]

NEG_INF = next_token.NEG_INF


def length_penalty(length: Array, alpha: float) -> Array:
  """GNMT length penalty ((5 + length) / 6)^alpha, float32."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def _batch_size(cache: Any) -> int:
  leaves = jax.tree.leaves(cache)
  if not leaves:
    raise ValueError("the decoding cache has no arrays; the batch size comes from their leading dim")
  return leaves[0].shape[0]


def _sentence_max_lens(max_len: int, max_lens: Optional[Array], batch: int) -> Array:
  if max_lens is None:
    return jnp.full((batch,), max_len, jnp.int32)
  return jnp.clip(jnp.asarray(max_lens, jnp.int32), 1, max_len)


def _previous_tokens(seqs: Array, step: Array) -> Array:
  """Token generated at position step - 1 (0 at step 0); `seqs` [..., max_len]."""
  prev = jax.lax.dynamic_index_in_dim(seqs, jnp.maximum(step - 1, 0), axis=-1, keepdims=False)
  return jnp.where(step == 0, PAD_ID, prev)


# ------------------------------------------------------------------------ greedy


def greedy_search(step_fn: StepFn, cache: Any, *, max_len: int,
                  max_lens: Optional[Array] = None, eos_id: int = EOS_ID) -> tuple[Array, Array]:
  """Most probable next token at each step, until EOS or the sentence's maximum length.

  `max_len` is the static output length; `max_lens` [batch] optional per-sentence
  maxima (<= max_len). Returns tokens [batch, max_len] (0 after EOS) and the
  summed log-probabilities [batch] float32 (no length penalty).
  """
  batch = _batch_size(cache)
  greedy = lambda log_probs, step: jnp.argmax(log_probs, axis=-1)
  return token_by_token(step_fn, cache, greedy, max_len=max_len,
                        limits=_sentence_max_lens(max_len, max_lens, batch), eos_id=eos_id)


def token_by_token(step_fn: StepFn, cache: Any, choose: Callable[[Array, Array], Array], *,
                   max_len: int, limits: Array, eos_id: int = EOS_ID) -> tuple[Array, Array]:
  """One output per row, each token picked by `choose(log_probs [rows, vocab], step)`.

  The loop greedy search and sampling share: a row stops at EOS or at its
  limit (`limits` [rows], <= the static `max_len`); the loop ends when every
  row has. Returns tokens [rows, max_len] (0 after EOS) and the model's summed
  log-probabilities of the chosen tokens [rows] float32.
  """
  batch = limits.shape[0]

  def cond(state):
    step, _, _, done, _ = state
    return (step < max_len) & ~jnp.all(done)

  def body(state):
    step, seqs, log_prob, done, cache = state
    logits, cache = step_fn(cache, _previous_tokens(seqs, step), step)
    log_probs = next_token.log_probs(logits)                            # [rows, vocab]
    token = choose(log_probs, step).astype(jnp.int32)                         # [rows]
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
  cache: Any           # per-row leaves [batch * beam, ...] (model/decode_cache.py)
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
  tokens and their log-probabilities (`next_token.best`). The second stage takes
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
               shared: bool, first: bool = False) -> BeamState:
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
                           for x in next_token.best(logits, 2 * k))    # [batch, k, 2k]
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
    cache = decode_cache.tile(cache, k, shared=shared)
  else:
    cache = decode_cache.take_rows(cache, parents.reshape(-1), shared=shared)

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
  (`beam_run`), which tiles the per-row parts to the beams (model/decode_cache.py:
  PerSentence parts stay per sentence unless `shared=False`, the reference
  path that tiles them too).
  """
  batch = _batch_size(cache)
  k = beam_size
  first_beam = jnp.arange(k) == 0
  return BeamState(
      step=jnp.int32(0),
      limits=_sentence_max_lens(max_len, max_lens, batch),
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
  rows = decode_cache.rows(state.cache, shared=shared)
  return k > 1 and rows == batch


def beam_run(step_fn: StepFn, state: BeamState, *, until: int, alpha: float = 0.6,
             eos_id: int = EOS_ID, n_best: int = 1, shared: bool = True,
             stop_at_live: int = 0) -> BeamState:
  """Steps until position `until` (exclusive) or until every sentence has stopped.

  The cache's Positions buffers are resized to `until` first (model/decode_cache.py),
  so a search can run in chunks whose self-attention covers the filled prefix
  rather than the whole output length; `until` must not fall below the state's
  step (a shorter buffer would lose keys/values already written).
  `stop_at_live`: also stop once at most this many sentences are still being
  decoded, so that the caller can `narrow` the batch to them.
  """
  _check_settings(alpha, state.alive_seqs.shape[1], n_best)
  until = min(until, state.alive_seqs.shape[2])
  if decode_cache.position_length(state.cache) is not None:
    state = state._replace(cache=decode_cache.resize(state.cache, until))
  step = functools.partial(_beam_step, step_fn, alpha=alpha, eos_id=eos_id, n_best=n_best,
                           shared=shared)
  if _before_first_step(state, shared):
    state = step(state, first=True)
  return jax.lax.while_loop(
      lambda s: (s.step < until) & (jnp.sum(~s.sentence_done) > stop_at_live), step, state)


def narrow(state: BeamState, sentences: Array) -> BeamState:
  """The search of `sentences` [new_batch] int32 alone (indices of the batch's sentences).

  Each keeps its hypotheses and cache rows (decode_cache.take_sentences), so the
  search goes on as it would have in the whole batch: dropping stopped sentences
  saves their share of every later step.
  """
  batch = state.limits.shape[0]
  r = decode_cache.rows(state.cache) // batch                    # 1 before the first step
  take = lambda x: jnp.take(x, sentences, axis=0, mode="clip")
  per_sentence = {name: take(getattr(state, name)) for name in BeamState._fields
                  if name not in ("step", "cache")}
  return state._replace(cache=decode_cache.take_sentences(state.cache, sentences, r),
                        **per_sentence)


def beam_search(step_fn: StepFn, cache: Any, *, beam_size: int = 4, alpha: float = 0.6,
                max_len: int, max_lens: Optional[Array] = None, eos_id: int = EOS_ID,
                n_best: int = 1, chunks: Optional[Sequence[int]] = None,
                shared: bool = True) -> tuple[Array, Array]:
  """Length-penalised beam search with early stopping per sentence.

  `cache` has leading dim `batch` on every leaf (one row per sentence); its
  per-row parts are tiled to `beam_size` rows per sentence here and reordered
  after every step, its PerSentence parts are shared by the beams as they are
  (model/decode_cache.py; `shared=False` tiles and reorders them too: the reference).
  `max_len` is the static output length; `max_lens` [batch] optional
  per-sentence maxima (<= max_len), e.g. input length + 50. A sentence stops
  once no live hypothesis can beat its `n_best`-th finished one; the loop ends
  when every sentence has stopped. `chunks`: increasing positions at which the
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
                     shared=shared)
  return state.done_seqs[:, :n_best], state.done_score[:, :n_best]


# ------------------------------------------------------------------- with the model


def uncached_decoder(cfg: configs.TransformerConfig, params: Any, inputs: Array,
                     max_len: int) -> tuple[Any, StepFn]:
  """A (cache, step_fn) pair that reruns the whole decoder on the prefix every step.

  The encoder runs once (as with the cache); each step then applies the
  teacher-forced `Transformer.decode` to all `max_len` positions and reads one.
  It exists to check that the incremental cache changes nothing (same tokens)
  and to measure what it saves.
  """
  batch = inputs.shape[0]
  encoded = model.Transformer(cfg).apply({"params": params}, inputs,
                                         method=model.Transformer.encode)
  state = {"inputs": inputs, "prefix": jnp.zeros((batch, max_len), jnp.int32), "encoded": encoded}
  return state, functools.partial(_uncached_step, cfg, params)


def _uncached_step(cfg, params, state, tokens, position):
  # `tokens` is the output at position - 1 (the model shifts targets right itself).
  written = jax.lax.dynamic_update_index_in_dim(
      state["prefix"], tokens, jnp.maximum(position - 1, 0), axis=1)
  prefix = jnp.where(position == 0, state["prefix"], written)
  # The teacher-forced decoder hides target positions holding padding; any
  # non-zero id at `position` keeps the query real (its value is never read).
  targets = jax.lax.dynamic_update_index_in_dim(
      prefix, jnp.full_like(tokens, EOS_ID), position, axis=1)
  logits = model.Transformer(cfg).apply(
      {"params": params}, state["encoded"], state["inputs"], targets,
      method=model.Transformer.decode)                                 # [rows, max_len, vocab]
  next_logits = jax.lax.dynamic_index_in_dim(logits, position, axis=1, keepdims=False)
  return next_logits, {**state, "prefix": prefix}


def _step_fn(cfg: configs.TransformerConfig, params: Any, cached: bool) -> StepFn:
  if cached:
    return functools.partial(model.decode_step, cfg, params, vocab_major=True)
  return functools.partial(_uncached_step, cfg, params)


def chunk_lengths(max_len: int) -> list[int]:
  """Where `translate_batch` grows the self-attention cache: 32, 64, 128, ... then max_len.

  Each chunk after the first is one more compiled program per batch shape,
  compiled when a batch first decodes that far; doubling keeps them few while
  the buffer stays within twice the filled prefix. The first covers most
  sentences of a usual test set, so their batches compile one program, as
  without chunks.
  """
  lengths = [n for n in BUCKET_LENGTHS if n >= 32 and n & (n - 1) == 0 and n < max_len]
  return lengths + [max_len]


@functools.partial(jax.jit, static_argnames=("cfg", "beam_size", "alpha", "max_len", "until",
                                             "n_best", "cached", "stop_at_live"))
def _start(params, inputs, max_lens, *, cfg, beam_size, alpha, max_len, until, n_best,
           cached, stop_at_live) -> BeamState:
  """The encoder, then the search's first chunk: positions below `until`."""
  if cached:
    cache = decode_cache.resize(model.init_cache(cfg, params, inputs, max_len), until)
  else:
    cache, _ = uncached_decoder(cfg, params, inputs, max_len)
  state = beam_start(cache, beam_size=beam_size, max_len=max_len, max_lens=max_lens)
  return beam_run(_step_fn(cfg, params, cached), state, until=until, alpha=alpha, n_best=n_best,
                  stop_at_live=stop_at_live)


@functools.partial(jax.jit, static_argnames=("cfg", "alpha", "until", "n_best", "cached",
                                             "stop_at_live"))
def _run(params, state, *, cfg, alpha, until, n_best, cached, stop_at_live) -> BeamState:
  return beam_run(_step_fn(cfg, params, cached), state, until=until, alpha=alpha, n_best=n_best,
                  stop_at_live=stop_at_live)


_narrow = jax.jit(narrow)

# Sentences below which a batch is not narrowed further: a smaller batch saves
# little per step, and each batch size is one more program to compile.
MIN_NARROWED = 8


def _narrowed_size(batch: int, live: int) -> int:
  """The batch size a search of `batch` sentences goes on with when `live` of them are left."""
  while batch // 2 >= max(live, MIN_NARROWED):
    batch //= 2
  return batch


def _narrow_at(batch: int) -> int:
  """How few live sentences make a search of `batch` narrow (`stop_at_live`); 0: never."""
  return batch // 2 if batch // 2 >= MIN_NARROWED else 0


def _beam_decode(params: Any, inputs: Array, max_lens: Array, *, cfg: configs.TransformerConfig,
                 beam_size: int, alpha: float, max_len: int, n_best: int, cached: bool,
                 narrow_batch: bool) -> tuple[Array, Array]:
  """`beam_search` in chunks of growing cache length, each chunk a program of its own.

  Stops after the chunk where every sentence has stopped, so the programs for
  longer caches are neither run nor compiled for batches that never need them.
  `narrow_batch`: whenever at most half of the batch is still being decoded, the
  search goes on with those sentences alone, in a batch half as large (or
  smaller, down to MIN_NARROWED sentences). The translations are the same and
  the stopped sentences cost no more steps; each narrower batch is one more
  program to compile.
  """
  chunks = chunk_lengths(max_len)
  settings = dict(cfg=cfg, alpha=alpha, n_best=n_best, cached=cached)
  batch = inputs.shape[0]
  tokens = np.zeros((batch, n_best, max_len), np.int32)
  scores = np.zeros((batch, n_best), np.float32)
  rows = np.arange(batch)                          # the input row of each sentence searched

  def record(state: BeamState, which: np.ndarray) -> None:
    tokens[rows[which]] = np.asarray(state.done_seqs)[which, :n_best]
    scores[rows[which]] = np.asarray(state.done_score)[which, :n_best]

  narrow_at = _narrow_at if narrow_batch else (lambda size: 0)
  state = _start(params, inputs, max_lens, beam_size=beam_size, max_len=max_len,
                 until=chunks[0], stop_at_live=narrow_at(batch), **settings)
  while True:
    done = np.asarray(state.sentence_done)
    if done.all():
      break
    live = np.flatnonzero(~done)
    size = _narrowed_size(len(rows), len(live)) if narrow_batch else len(rows)
    if size < len(rows):  # go on with the live sentences, filled up with stopped ones
      keep = np.concatenate([live, np.flatnonzero(done)[:size - len(live)]])
      record(state, np.setdiff1d(np.arange(len(rows)), keep))
      state, rows = _narrow(state, jnp.asarray(keep, jnp.int32)), rows[keep]
    until = next(c for c in chunks if c > int(state.step))
    state = _run(params, state, until=until, stop_at_live=narrow_at(len(rows)), **settings)
  record(state, np.arange(len(rows)))
  return tokens, scores


def translate_batch(cfg: configs.TransformerConfig, params: Any, inputs: Array, *,
                    beam_size: Optional[int] = None, alpha: Optional[float] = None,
                    max_decode_extra: Optional[int] = None, n_best: int = 1,
                    cached: bool = True, narrow_batch: bool = False) -> tuple[Array, Array]:
  """Beam search for one batch of source ids [batch, length] (EOS-terminated, 0-padded).

  Settings default to the config's (beam 4, alpha 0.6, input length + 50). Each
  sentence may produce up to its own length (EOS included) + max_decode_extra
  tokens, capped by the model's cfg.max_len positions. Returns NumPy tokens
  [batch, n_best, max_len] and scores [batch, n_best] as `beam_search`; an
  all-padding (filler) row stops after one token. The search runs in chunks
  (`chunk_lengths`), each a program of its own. `narrow_batch`: go on with
  fewer sentences once half of them have stopped (`_beam_decode`): 1.1x faster
  on the demo test set once compiled, but each narrower batch is a program more
  to compile, which a single pass over a test set pays several times over
  (docs/benchmarks.md), hence off by default.
  """
  inputs = np.asarray(inputs, np.int32)
  if inputs.ndim != 2:
    raise ValueError(f"inputs must be [batch, length] ids, got shape {inputs.shape}")
  if inputs.shape[1] > cfg.max_len:
    raise ValueError(f"inputs have length {inputs.shape[1]} > cfg.max_len={cfg.max_len}; "
                     "truncate the sources first")
  extra = cfg.max_decode_extra if max_decode_extra is None else max_decode_extra
  max_len = min(inputs.shape[1] + extra, cfg.max_len)
  lengths = (inputs != PAD_ID).sum(axis=1)
  # An all-padding row is a filler (as in training batches): stop it after one token.
  max_lens = np.where(lengths == 0, 1, np.minimum(lengths + extra, max_len)).astype(np.int32)
  return _beam_decode(
      params, jnp.asarray(inputs), jnp.asarray(max_lens), cfg=cfg,
      beam_size=cfg.beam_size if beam_size is None else beam_size,
      alpha=float(cfg.alpha if alpha is None else alpha), max_len=max_len, n_best=n_best,
      cached=cached, narrow_batch=narrow_batch)


def strip_eos(tokens: Sequence[int]) -> list[int]:
  """The ids before the first EOS (or padding)."""
  out = []
  for token in tokens:
    if token in (EOS_ID, PAD_ID):
      break
    out.append(int(token))
  return out


def source_rows(sources: Sequence[Sequence[int]], batch_size: int, max_len: int) -> np.ndarray:
  """EOS-terminated id rows [rows, width] int32 of a decoding batch, padded with PAD.

  width: the bucket (data/buckets.py) of the longest source with EOS, at most
  max_len; rows: a power of two, at most batch_size. Each shape is a program
  to compile, so they come from short series; the width follows the sources
  closely because the encoder and every step's cross-attention pay for it.
  """
  width = min(bucket_length(max(len(s) for s in sources) + 1), max_len)
  inputs = np.zeros((min(batch_size, 1 << (len(sources) - 1).bit_length()), width), np.int32)
  for row, ids in enumerate(sources):
    inputs[row, :len(ids) + 1] = [*ids, EOS_ID]
  return inputs


def decode_ids(cfg: configs.TransformerConfig, params: Any, sources: Sequence[Sequence[int]], *,
               batch_size: Optional[int] = None, cached: bool = True,
               in_flight: int = in_flight_lib.DEFAULT, **search: Any) -> list[list[int]]:
  """Translates id sequences (without EOS) to id sequences (without EOS), in input order.

  Sentences are sorted by length and decoded `batch_size` at a time (default
  cfg.decode_batch_size), `in_flight` batches at once (decoding/in_flight.py); batch
  shapes are rounded up to a few buckets so that a test set compiles a handful
  of programs. `search` goes to `translate_batch` (beam_size, alpha,
  max_decode_extra, narrow_batch).
  """
  batch_size = cfg.decode_batch_size if batch_size is None else batch_size
  too_long = [i for i, s in enumerate(sources) if len(s) + 1 > cfg.max_len]
  if too_long:
    raise ValueError(f"source {too_long[0]} has {len(sources[too_long[0]])} ids; at most "
                     f"cfg.max_len - 1 = {cfg.max_len - 1} fit with EOS: truncate it first")
  order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
  chunks = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]

  def best(chunk: list[int]) -> np.ndarray:
    inputs = source_rows([sources[i] for i in chunk], batch_size, cfg.max_len)
    tokens, _ = translate_batch(cfg, params, inputs, cached=cached, **search)
    return np.asarray(tokens[:, 0])

  results: list[list[int]] = [[] for _ in sources]
  cost = lambda chunk: len(chunk) * len(sources[chunk[-1]])  # sentences x longest source
  for chunk, tokens in zip(chunks, in_flight_lib.ordered_map(best, chunks, in_flight, cost)):
    for row, i in enumerate(chunk):
      results[i] = strip_eos(tokens[row])
  return results
