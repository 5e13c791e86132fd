"""One batch of source ids -> outputs: the models bound to the searches, as compiled programs.

    tokens, scores = decode_batch(members, inputs, search)   # [batch, n, L], [batch, n]
    compile_beam_programs(members, rows, width, search)      # a server's warm-up

The searches (decoding/beam_search.py, decoding/sampling.py) know no model; here
the models' step functions are bound (one model, or an ensemble:
decoding/ensemble.py), a batch is checked and each sentence's maximum output
length set (decoding/search.py), and the compiled programs run.

The programs take the models' `configs.ModelConfig` (`cfg.model`) and the
search settings as static arguments, never the run config: changing a training
field (eval_every_steps, ...) compiles no decoding program again. Scores are
best first: beam search's length-penalised log-probabilities, or for samples
the model's log-probability of the sample.
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.data import shortlist as shortlist_lib
from t2t_jax.data.buckets import BUCKET_LENGTHS
from t2t_jax.decoding import beam_search
from t2t_jax.decoding import ensemble
from t2t_jax.decoding import sampling
from t2t_jax.decoding import search as search_lib
from t2t_jax.decoding import uncached
from t2t_jax.ids import PAD_ID
from t2t_jax.runtime import stored_programs

Array = jax.Array


def _members(models: tuple, params: tuple) -> list[ensemble.Member]:
  return [ensemble.Member(m, p) for m, p in zip(models, params)]


def _decoder(models: tuple, params: tuple, inputs: Array, max_len: int, cached: bool,
             shortlist: Optional[Array] = None) -> tuple[Any, beam_search.StepFn]:
  if cached:
    return ensemble.init_decoder(_members(models, params), inputs, max_len, shortlist)
  return uncached.uncached_decoder(models[0], params[0], inputs, max_len)


def _step_fn(models: tuple, params: tuple, cached: bool,
             shortlist: Optional[Array] = None) -> beam_search.StepFn:
  if cached:
    return ensemble.step_function(_members(models, params), shortlist)
  return functools.partial(uncached.uncached_step, models[0], params[0])


def chunk_lengths(max_len: int) -> list[int]:
  """Where the beam search grows the self-attention cache: 32, 64, 128, ... then max_len.

  Each chunk after the first is one more compiled program per batch shape,
  compiled when a batch first decodes that far; doubling keeps them few while
  the buffer stays within twice the filled prefix. The first covers most
  sentences of a usual test set, so their batches compile one program, as
  without chunks.
  """
  lengths = [n for n in BUCKET_LENGTHS if n >= 32 and n & (n - 1) == 0 and n < max_len]
  return lengths + [max_len]


@functools.partial(jax.jit, static_argnames=("models", "beam_size", "alpha", "max_len", "until",
                                             "n_best", "min_len", "cached"))
def _start(params: tuple, inputs, max_lens, shortlist, *, models: tuple, beam_size, alpha,
           max_len, until, n_best, min_len, cached) -> beam_search.BeamState:
  """The encoders, then the search's first chunk: positions below `until`."""
  cache, step_fn = _decoder(models, params, inputs, max_len, cached, shortlist)
  state = beam_search.beam_start(cache, beam_size=beam_size, max_len=max_len, max_lens=max_lens)
  return beam_search.beam_run(step_fn, state, until=until, alpha=alpha, n_best=n_best,
                              min_len=min_len)


@functools.partial(jax.jit, static_argnames=("models", "alpha", "until", "n_best", "min_len",
                                             "cached"))
def _run(params: tuple, state, shortlist, *, models: tuple, alpha, until, n_best, min_len,
         cached) -> beam_search.BeamState:
  return beam_search.beam_run(_step_fn(models, params, cached, shortlist), state, until=until,
                              alpha=alpha, n_best=n_best, min_len=min_len)


def _call(store: Optional[stored_programs.Store], fn, *args: Any, **static: Any):
  """`fn(*args, **static)`, through the stored programs when given (runtime/stored_programs.py)."""
  return fn(*args, **static) if store is None else store.call(fn, *args, **static)


def _beam_decode(params: tuple, inputs: Array, max_lens: Array, *, models: tuple,
                 beam_size: int, alpha: float, max_len: int, n_best: int, min_len: int,
                 cached: bool, every_chunk: bool = False,
                 store: Optional[stored_programs.Store] = None,
                 shortlist: Optional[Array] = None) -> tuple[np.ndarray, np.ndarray]:
  """`beam_search` in chunks of growing cache length (`chunk_lengths`), each a program of its own.

  Stops after the chunk where every sentence has stopped, so the programs for
  longer caches are neither run nor compiled for batches that never need them
  (`every_chunk`: calls them all anyway, each returning at once once every
  sentence has stopped: compile_beam_programs). `models`: each member's
  `ModelConfig`, `params` theirs. `store`: where compiled programs are kept.
  `shortlist` [size]: the batch's candidate ids (`shortlist.Shortlist.batch_ids`) or None.
  """
  chunks = chunk_lengths(max_len)
  settings = dict(models=models, alpha=alpha, n_best=n_best, min_len=min_len, cached=cached)
  state = _call(store, _start, params, inputs, max_lens, shortlist, beam_size=beam_size,
                max_len=max_len, until=chunks[0], **settings)
  for until in chunks[1:]:    # each chunk runs to its end unless every sentence stopped
    if not every_chunk and np.asarray(state.sentence_done).all():
      break
    state = _call(store, _run, params, state, shortlist, until=until, **settings)
  return np.asarray(state.done_seqs)[:, :n_best], np.asarray(state.done_score)[:, :n_best]


def compile_beam_programs(members: Sequence[ensemble.Member], rows: int, width: int,
                          search: search_lib.Search,
                          store: Optional[stored_programs.Store] = None) -> int:
  """Compiles (or reads from the compilation cache) every program that beam search over a
  batch [rows, width] with `search` may run, decoding almost nothing; returns how many.

  The rows are filler (all padding), which stop after their first token, and
  each later chunk's program (`chunk_lengths`) is then called on that stopped
  state, so it compiles but steps no further. The programs are the ones
  `decode_batch` calls for any batch of that shape: the output length and chunks
  depend only on the width (`search.output_limits`), never on the ids. `store`:
  loaded from and stored there (runtime/stored_programs.py).
  """
  if search.sample:
    raise ValueError("compile_beam_programs compiles beam search; sampling has one program, "
                     "compiled by its first batch")
  members = tuple(members)
  ensemble.check_compatible(members)
  inputs, max_len, max_lens = search_lib.checked_limits(
      np.full((rows, width), PAD_ID, np.int32), search, search_lib.max_positions(members))
  _beam_decode(tuple(m.params for m in members), *jax.device_put((inputs, max_lens)),
               models=tuple(m.cfg for m in members), beam_size=search.beam_size,
               alpha=float(search.alpha), max_len=max_len, n_best=search.n_best,
               min_len=search.min_len, cached=True, every_chunk=True, store=store)
  return len(chunk_lengths(max_len))


@functools.partial(jax.jit, static_argnames=("models", "n", "temperature", "top_k", "max_len",
                                             "min_len"))
def _sample(params: tuple, inputs: Array, max_lens: Array, keys: Array, shortlist, *,
            models: tuple, n: int, temperature: float, top_k: int, max_len: int, min_len: int):
  batch = inputs.shape[0]
  cache, step_fn = ensemble.init_decoder(_members(models, params),
                                         jnp.repeat(inputs, n, axis=0), max_len, shortlist)
  tokens, scores = sampling.sample(step_fn, cache, keys.reshape(batch * n),
                                   max_len=max_len, max_lens=jnp.repeat(max_lens, n),
                                   temperature=temperature, top_k=top_k, min_len=min_len)
  tokens, scores = tokens.reshape(batch, n, max_len), scores.reshape(batch, n)
  order = jnp.argsort(-scores, axis=1, stable=True)                   # best first
  return (jnp.take_along_axis(tokens, order[..., None], axis=1),
          jnp.take_along_axis(scores, order, axis=1))


def decode_batch(members: Sequence[ensemble.Member], inputs: Any, search: search_lib.Search,
                 ids: Optional[Sequence[int]] = None, *, cached: bool = True,
                 store: Optional[stored_programs.Store] = None,
                 shortlist: Optional[shortlist_lib.Shortlist] = None
                 ) -> tuple[np.ndarray, np.ndarray]:
  """`search.n_best` outputs for each row of `inputs` [batch, src] (EOS-terminated, 0-padded).

  `members`: one model or an ensemble. `ids` [batch] name the sentences for
  sampling's keys (default 0..batch-1); an all-padding (filler) row stops after
  one token. Beam search runs in chunks (`chunk_lengths`), each a program of its
  own. `cached=False`: one model's beam search reruns the whole decoder every
  step (decoding/uncached.py), the reference the cache is tested against. Returns
  NumPy tokens [batch, n, L] int32 (0 after EOS, L = the longest source + the
  extra, within every model's max_len) and scores [batch, n] float32, best first.
  `store`: compiled programs loaded from there, and what is compiled stored
  (runtime/stored_programs.py). `shortlist`: a lexical shortlist (data/shortlist.py):
  the outputs are picked among the batch's candidates only, normalised over them.
  """
  members = tuple(members)
  ensemble.check_compatible(members)
  inputs, max_len, max_lens = search_lib.checked_limits(inputs, search,
                                                        search_lib.max_positions(members))
  if not cached and (search.sample or len(members) > 1):
    raise ValueError("cached=False (the uncached reference) decodes one model with beam search")
  if not cached and shortlist is not None:
    raise ValueError("cached=False (the uncached reference) decodes the whole vocabulary; "
                     "drop the shortlist")
  candidates = None if shortlist is None else jax.device_put(shortlist.batch_ids(inputs))
  models = tuple(m.cfg for m in members)
  params = tuple(m.params for m in members)
  if not search.sample:
    # device_put, not jnp.asarray: that compiles a copy program per shape.
    return _beam_decode(params, *jax.device_put((inputs, max_lens)), models=models,
                        beam_size=search.beam_size, alpha=float(search.alpha), max_len=max_len,
                        n_best=search.n_best, min_len=search.min_len, cached=cached, store=store,
                        shortlist=candidates)
  ids = np.arange(len(inputs)) if ids is None else np.asarray(ids)
  keys = sampling.row_keys(jax.random.key(search.seed), ids)           # [batch]
  keys = jax.vmap(lambda k: sampling.row_keys(k, np.arange(search.n_best)))(keys)
  out = _call(store, _sample, params, inputs, max_lens, keys, candidates, models=models,
              n=search.n_best,
              temperature=float(search.temperature), top_k=search.top_k, max_len=max_len,
              min_len=search.min_len)
  return np.asarray(out[0]), np.asarray(out[1])
