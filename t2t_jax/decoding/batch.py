"""Source ids -> output ids with trained models: the batch driver every decoding caller uses.

    search = Search.from_config(cfg, n_best=4)                # or sample=True, top_k=10, seed=1
    tokens, scores = decode_batch(members, inputs, search)    # [batch, n, L], [batch, n]
    tokens, scores = translate_batch(cfg, params, inputs)     # one model, the config's beam
    ids = decode_ids(cfg, params, list_of_id_lists)           # sorted, batched, input order

The searches (decoding/beam_search.py, decoding/sampling.py) know no model; here
the models' step functions are bound (one model, or an ensemble:
decoding/ensemble.py), a batch is checked and each sentence's maximum output
length set, the compiled programs run, and many sentences are sorted into
batches (`by_length`, which inference/streaming.py uses too).

The compiled programs take the models' `configs.ModelConfig` (`cfg.model`) and
the search settings as static arguments, never the run config: changing a
training field (eval_every_steps, ...) compiles no decoding program again.
Scores are best first: beam search's length-penalised log-probabilities, or for
samples the model's log-probability of the sample.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax import configs
from t2t_jax.data.buckets import BUCKET_LENGTHS, bucket_length
from t2t_jax.decoding import beam_search
from t2t_jax.decoding import ensemble
from t2t_jax.decoding import in_flight as in_flight_lib
from t2t_jax.decoding import sampling
from t2t_jax.ids import EOS_ID, PAD_ID
from t2t_jax.model import transformer

Array = jax.Array
Result = TypeVar("Result")


@dataclasses.dataclass(frozen=True)
class Search:
  """How each sentence is decoded, and into how many outputs (`n_best`).

  Beam search (the default) returns its `n_best` best hypotheses (n_best <=
  beam_size). With `sample=True`, `n_best` independent samples are drawn per
  sentence instead (temperature, top_k: `sampling.sample`); the j-th sample of
  the sentence with id i uses the key fold_in(fold_in(key(seed), i), j), so it
  does not depend on the batch it was decoded in. Each output has at most
  ceil(max_len_a x (source length + EOS)) + max_decode_extra tokens
  (`output_limits`) and, unless it reaches that limit first, at least `min_len`
  before its EOS (`beam_search.MIN_LEN`: no empty translation).
  """
  beam_size: int = 4
  alpha: float = 0.6
  n_best: int = 1
  max_decode_extra: int = 50
  max_len_a: float = 1.0
  min_len: int = beam_search.MIN_LEN
  sample: bool = False
  temperature: float = 1.0
  top_k: int = 0
  seed: int = 0

  def __post_init__(self):
    if self.n_best < 1:
      raise ValueError(f"n_best={self.n_best} must be >= 1")
    if not self.sample and self.n_best > self.beam_size:
      raise ValueError(f"n_best={self.n_best} must be <= beam_size={self.beam_size}: beam "
                       "search keeps beam_size hypotheses; raise the beam size")
    if (self.beam_size < 1 or self.alpha < 0 or self.max_decode_extra < 0 or self.max_len_a < 0
        or self.min_len < 0):
      raise ValueError(f"beam_size={self.beam_size} must be >= 1, alpha={self.alpha}, "
                       f"max_len_a={self.max_len_a}, max_decode_extra="
                       f"{self.max_decode_extra} and min_len={self.min_len} >= 0")
    if self.sample and (not self.temperature > 0 or self.top_k < 0):
      raise ValueError(f"temperature={self.temperature} must be > 0 and top_k={self.top_k} "
                       ">= 0 (0: the whole vocabulary)")

  @classmethod
  def from_config(cls, cfg: configs.TransformerConfig, **overrides: Any) -> "Search":
    """The config's beam_size, alpha and max_decode_extra, then `overrides` (None: keep)."""
    fields = dict(beam_size=cfg.beam_size, alpha=cfg.alpha, max_decode_extra=cfg.max_decode_extra)
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**fields)


def max_positions(members: Sequence[ensemble.Member]) -> int:
  """Positions every member supports: the shortest max_len."""
  return min(m.cfg.max_len for m in members)


def output_limits(inputs: np.ndarray, max_decode_extra: int, max_len_a: float,
                  positions: int) -> tuple[int, np.ndarray]:
  """The static output length of a batch [batch, width] and each sentence's limit [batch].

  A sentence of n ids (EOS included) may produce ceil(max_len_a * n) +
  max_decode_extra tokens (EOS included; fairseq's --max-len-a/--max-len-b),
  at most `positions`; an all-padding (filler) row, as in training batches, one.
  """
  limit = lambda n: np.ceil(max_len_a * n).astype(np.int64) + max_decode_extra
  max_len = int(min(max(limit(np.asarray(inputs.shape[1])), 1), positions))
  lengths = (inputs != PAD_ID).sum(axis=1)
  return max_len, np.where(lengths == 0, 1, np.clip(limit(lengths), 1, max_len)).astype(np.int32)


def _limits(inputs: Any, search: Search, positions: int) -> tuple[np.ndarray, int, np.ndarray]:
  """The checked batch [batch, src] int32, its output length, each sentence's maximum [batch]."""
  inputs = np.asarray(inputs, np.int32)
  if inputs.ndim != 2:
    raise ValueError(f"inputs must be [batch, length] ids, got shape {inputs.shape}")
  if inputs.shape[1] > positions:
    raise ValueError(f"inputs have length {inputs.shape[1]} > max_len={positions}; "
                     "truncate the sources first")
  max_len, max_lens = output_limits(inputs, search.max_decode_extra, search.max_len_a, positions)
  return inputs, max_len, max_lens


# --------------------------------------------------------- the uncached reference


def uncached_decoder(cfg: configs.ModelConfig, params: Any, inputs: Array,
                     max_len: int) -> tuple[Any, beam_search.StepFn]:
  """A (cache, step_fn) pair that reruns the whole decoder on the prefix every step.

  The encoder runs once (as with the cache); each step then applies the
  teacher-forced `Transformer.decode` to all `max_len` positions and reads one.
  It exists to check that the incremental cache changes nothing (same tokens)
  and to measure what it saves.
  """
  batch = inputs.shape[0]
  encoded = transformer.Transformer(cfg).apply({"params": params}, inputs,
                                               method=transformer.Transformer.encode)
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
  logits = transformer.Transformer(cfg).apply(
      {"params": params}, state["encoded"], state["inputs"], targets,
      method=transformer.Transformer.decode)                           # [rows, max_len, vocab]
  next_logits = jax.lax.dynamic_index_in_dim(logits, position, axis=1, keepdims=False)
  return next_logits, {**state, "prefix": prefix}


# ------------------------------------------------------------ compiled programs


def _members(models: tuple, params: tuple) -> list[ensemble.Member]:
  return [ensemble.Member(m, p) for m, p in zip(models, params)]


def _decoder(models: tuple, params: tuple, inputs: Array, max_len: int,
             cached: bool) -> tuple[Any, beam_search.StepFn]:
  if cached:
    return ensemble.init_decoder(_members(models, params), inputs, max_len)
  return uncached_decoder(models[0], params[0], inputs, max_len)


def _step_fn(models: tuple, params: tuple, cached: bool) -> beam_search.StepFn:
  if cached:
    return ensemble.step_function(_members(models, params))
  return functools.partial(_uncached_step, models[0], params[0])


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
def _start(params: tuple, inputs, max_lens, *, models: tuple, beam_size, alpha, max_len, until,
           n_best, min_len, cached) -> beam_search.BeamState:
  """The encoders, then the search's first chunk: positions below `until`."""
  cache, step_fn = _decoder(models, params, inputs, max_len, cached)
  state = beam_search.beam_start(cache, beam_size=beam_size, max_len=max_len, max_lens=max_lens)
  return beam_search.beam_run(step_fn, state, until=until, alpha=alpha, n_best=n_best,
                              min_len=min_len)


@functools.partial(jax.jit, static_argnames=("models", "alpha", "until", "n_best", "min_len",
                                             "cached"))
def _run(params: tuple, state, *, models: tuple, alpha, until, n_best, min_len,
         cached) -> beam_search.BeamState:
  return beam_search.beam_run(_step_fn(models, params, cached), state, until=until, alpha=alpha,
                              n_best=n_best, min_len=min_len)


def _beam_decode(params: tuple, inputs: Array, max_lens: Array, *, models: tuple,
                 beam_size: int, alpha: float, max_len: int, n_best: int, min_len: int,
                 cached: bool, every_chunk: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """`beam_search` in chunks of growing cache length (`chunk_lengths`), each a program of its own.

  Stops after the chunk where every sentence has stopped, so the programs for
  longer caches are neither run nor compiled for batches that never need them
  (`every_chunk`: calls them all anyway, each returning at once once every
  sentence has stopped: compile_beam_programs). `models`: each member's
  `ModelConfig`, `params` theirs.
  """
  chunks = chunk_lengths(max_len)
  settings = dict(models=models, alpha=alpha, n_best=n_best, min_len=min_len, cached=cached)
  state = _start(params, inputs, max_lens, beam_size=beam_size, max_len=max_len,
                 until=chunks[0], **settings)
  for until in chunks[1:]:    # each chunk runs to its end unless every sentence stopped
    if not every_chunk and np.asarray(state.sentence_done).all():
      break
    state = _run(params, state, until=until, **settings)
  return np.asarray(state.done_seqs)[:, :n_best], np.asarray(state.done_score)[:, :n_best]


def compile_beam_programs(members: Sequence[ensemble.Member], rows: int, width: int,
                          search: Search) -> int:
  """Compiles (or reads from the compilation cache) every program that beam search over a
  batch [rows, width] with `search` may run, decoding almost nothing; returns how many.

  The rows are filler (all padding), which stop after their first token, and
  each later chunk's program (`chunk_lengths`) is then called on that stopped
  state, so it compiles but steps no further. The programs are the ones
  `decode_batch` calls for any batch of that shape: the output length and chunks
  depend only on the width (`output_limits`), never on the ids.
  """
  if search.sample:
    raise ValueError("compile_beam_programs compiles beam search; sampling has one program, "
                     "compiled by its first batch")
  members = tuple(members)
  ensemble.check_compatible(members)
  inputs, max_len, max_lens = _limits(np.full((rows, width), PAD_ID, np.int32), search,
                                      max_positions(members))
  _beam_decode(tuple(m.params for m in members), jnp.asarray(inputs), jnp.asarray(max_lens),
               models=tuple(m.cfg.model for m in members), beam_size=search.beam_size,
               alpha=float(search.alpha), max_len=max_len, n_best=search.n_best,
               min_len=search.min_len, cached=True, every_chunk=True)
  return len(chunk_lengths(max_len))


@functools.partial(jax.jit, static_argnames=("models", "n", "temperature", "top_k", "max_len",
                                             "min_len"))
def _sample(params: tuple, inputs: Array, max_lens: Array, keys: Array, *, models: tuple,
            n: int, temperature: float, top_k: int, max_len: int, min_len: int):
  batch = inputs.shape[0]
  cache, step_fn = ensemble.init_decoder(_members(models, params),
                                         jnp.repeat(inputs, n, axis=0), max_len)
  tokens, scores = sampling.sample(step_fn, cache, keys.reshape(batch * n),
                                   max_len=max_len, max_lens=jnp.repeat(max_lens, n),
                                   temperature=temperature, top_k=top_k, min_len=min_len)
  tokens, scores = tokens.reshape(batch, n, max_len), scores.reshape(batch, n)
  order = jnp.argsort(-scores, axis=1, stable=True)                   # best first
  return (jnp.take_along_axis(tokens, order[..., None], axis=1),
          jnp.take_along_axis(scores, order, axis=1))


# ------------------------------------------------------------------ one batch


def decode_batch(members: Sequence[ensemble.Member], inputs: Any, search: Search,
                 ids: Optional[Sequence[int]] = None, *,
                 cached: bool = True) -> tuple[np.ndarray, np.ndarray]:
  """`search.n_best` outputs for each row of `inputs` [batch, src] (EOS-terminated, 0-padded).

  `members`: one model or an ensemble. `ids` [batch] name the sentences for
  sampling's keys (default 0..batch-1); an all-padding (filler) row stops after
  one token. Beam search runs in chunks (`chunk_lengths`), each a program of its
  own. `cached=False`: one model's beam search reruns the whole decoder every
  step (`uncached_decoder`), the reference the cache is tested against. Returns
  NumPy tokens [batch, n, L] int32 (0 after EOS, L = the longest source + the
  extra, within every model's max_len) and scores [batch, n] float32, best first.
  """
  members = tuple(members)
  ensemble.check_compatible(members)
  inputs, max_len, max_lens = _limits(inputs, search, max_positions(members))
  if not cached and (search.sample or len(members) > 1):
    raise ValueError("cached=False (the uncached reference) decodes one model with beam search")
  models = tuple(m.cfg.model for m in members)
  params = tuple(m.params for m in members)
  if not search.sample:
    return _beam_decode(params, jnp.asarray(inputs), jnp.asarray(max_lens), models=models,
                        beam_size=search.beam_size, alpha=float(search.alpha), max_len=max_len,
                        n_best=search.n_best, min_len=search.min_len, cached=cached)
  ids = np.arange(len(inputs)) if ids is None else np.asarray(ids)
  keys = sampling.row_keys(jax.random.key(search.seed), ids)           # [batch]
  keys = jax.vmap(lambda k: sampling.row_keys(k, np.arange(search.n_best)))(keys)
  out = _sample(params, inputs, max_lens, keys, models=models, n=search.n_best,
                temperature=float(search.temperature), top_k=search.top_k, max_len=max_len,
                min_len=search.min_len)
  return np.asarray(out[0]), np.asarray(out[1])


def translate_batch(cfg: configs.TransformerConfig, params: Any, inputs: Any, *,
                    beam_size: Optional[int] = None, alpha: Optional[float] = None,
                    max_decode_extra: Optional[int] = None, max_len_a: Optional[float] = None,
                    min_len: Optional[int] = None, n_best: int = 1,
                    cached: bool = True) -> tuple[np.ndarray, np.ndarray]:
  """One model's beam search over source ids [batch, length] (EOS-terminated, 0-padded).

  `decode_batch` with the config's settings (beam 4, alpha 0.6, input length +
  50) unless given. Returns tokens [batch, n_best, max_len] and scores [batch, n_best].
  """
  search = Search.from_config(cfg, beam_size=beam_size, alpha=alpha,
                              max_decode_extra=max_decode_extra, max_len_a=max_len_a,
                              min_len=min_len, n_best=n_best)
  return decode_batch([ensemble.Member(cfg, params)], inputs, search, cached=cached)


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


# ------------------------------------------------------------------ many batches


def by_length(decode: Callable[[list[int]], Sequence[Result]], lengths: Sequence[int], *,
              batch_size: int, in_flight: int = in_flight_lib.DEFAULT,
              indices: Optional[Iterable[int]] = None) -> dict[int, Result]:
  """`decode(batch)` over batches of up to `batch_size` sentences of similar length.

  The sentences `indices` (default: all of `lengths`) are sorted by length, so
  that a batch pads little and its shape comes from few buckets
  (`source_rows`), and cut into batches of indices; `in_flight` batches decode
  at once (decoding/in_flight.py), the costliest first. `decode` returns one
  result per index of its batch. Returns {index: result}.
  """
  order = sorted(range(len(lengths)) if indices is None else indices, key=lambda i: lengths[i])
  batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
  cost = lambda batch: len(batch) * lengths[batch[-1]]  # sentences x longest source
  results = {}
  for batch, outputs in zip(batches, in_flight_lib.ordered_map(decode, batches, in_flight, cost)):
    results.update(zip(batch, outputs))
  return results


def decode_ids(cfg: configs.TransformerConfig, params: Any, sources: Sequence[Sequence[int]], *,
               batch_size: Optional[int] = None, in_flight: int = in_flight_lib.DEFAULT,
               **search: Any) -> list[list[int]]:
  """Translates id sequences (without EOS) to id sequences (without EOS), in input order.

  One model's beam search over `by_length` batches of `batch_size` (default
  cfg.decode_batch_size) sentences; batch shapes are rounded up to a few buckets
  (`source_rows`) so that a test set compiles a handful of programs. `search`:
  beam settings for `Search.from_config` (beam_size, alpha, max_decode_extra, min_len).
  """
  batch_size = cfg.decode_batch_size if batch_size is None else batch_size
  too_long = [i for i, s in enumerate(sources) if len(s) + 1 > cfg.max_len]
  if too_long:
    raise ValueError(f"source {too_long[0]} has {len(sources[too_long[0]])} ids; at most "
                     f"cfg.max_len - 1 = {cfg.max_len - 1} fit with EOS: truncate it first")
  members, settings = [ensemble.Member(cfg, params)], Search.from_config(cfg, **search)

  def best(batch: list[int]) -> list[list[int]]:
    inputs = source_rows([sources[i] for i in batch], batch_size, cfg.max_len)
    tokens, _ = decode_batch(members, inputs, settings)
    return [strip_eos(row) for row in tokens[:, 0]]

  found = by_length(best, [len(s) for s in sources], batch_size=batch_size, in_flight=in_flight)
  return [found[i] for i in range(len(sources))]
