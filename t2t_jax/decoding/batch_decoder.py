"""One batch of source ids -> outputs: the search settings, the models bound to the beam search
through one step function, and the compiled programs that run it.

    search = Search.from_config(cfg, n_best=4)               # the settings of a batch
    tokens, scores = decode_batch([Member(cfg.model, params)], inputs, search)
    compile_beam_programs(members, rows, width, search)      # a server's warm-up

The search (decoding/beam_search.py) knows no model; here a model is bound to it
(`init_decoder`: one model, or an ensemble whose step function averages the members'
probabilities): its `decode_features` with the kernels its config chooses
(kernels/choice.py), projected onto the vocabulary by its output layer (`model_step`:
vocabulary-major for one model, onto a shortlist's rows where one is given), a batch is
checked and each sentence's maximum output length set (`output_limits`), and the compiled
programs run. Sampling's program is
inference/sampling.py's, the uncached reference's decoding/uncached.py's.

The programs take the models' `configs.ModelConfig` (`cfg.model`) and the search
settings as static arguments, never the run config: changing a training field
(eval_every_steps, ...) compiles no decoding program again. Scores are best first:
beam search's length-penalised log-probabilities.

Ensembles average the members' next-token distributions in probability space, as
fairseq's do: log((1/M) sum_m p_m(y | prefix)), an ordinary normalised distribution
(Marian instead sums weighted log-probabilities, a product of experts). Models may
differ in size and depth; they must share the vocabulary. Each keeps its own cache,
and a tuple of caches is a cache, so the searches tile and reorder them like one.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax import configs
from t2t_jax.ids import BUCKET_LENGTHS
from t2t_jax.decoding import beam_search
from t2t_jax.ids import PAD_ID
from t2t_jax.kernels import choice
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.model import transformer

Array = jax.Array


# -------------------------------------------------------------------------- settings


@dataclasses.dataclass(frozen=True)
class Search:
  """How each sentence is decoded, and into how many outputs (`n_best`).

  Beam search (the default) returns its `n_best` best hypotheses (n_best <=
  beam_size). With `sample=True`, `n_best` independent samples are drawn per
  sentence instead (temperature, top_k: inference/sampling.py); the j-th sample of
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


def max_positions(members: Sequence["Member"]) -> int:
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


def checked_limits(inputs: Any, search: Search,
                   positions: int) -> tuple[np.ndarray, int, np.ndarray]:
  """The checked batch [batch, src] int32, its output length, each sentence's maximum [batch]."""
  inputs = np.asarray(inputs, np.int32)
  if inputs.ndim != 2:
    raise ValueError(f"inputs must be [batch, length] ids, got shape {inputs.shape}")
  if inputs.shape[1] > positions:
    raise ValueError(f"inputs have length {inputs.shape[1]} > max_len={positions}; "
                     "truncate the sources first")
  max_len, max_lens = output_limits(inputs, search.max_decode_extra, search.max_len_a, positions)
  return inputs, max_len, max_lens


# ------------------------------------------------------------ the models, one step function


class Member(NamedTuple):
  """One model of an ensemble: its `ModelConfig` (a run config's `.model`) and parameters."""
  cfg: configs.ModelConfig
  params: Any


def ensemble_step(step_fns: Sequence[beam_search.StepFn]) -> beam_search.StepFn:
  """One step function averaging the probabilities of `step_fns`, each with its own cache."""
  step_fns = tuple(step_fns)
  if not step_fns:
    raise ValueError("an ensemble needs at least one model")

  def step(caches: tuple[Any, ...], tokens: Array, position: Array) -> tuple[Array, tuple]:
    log_probs, new_caches = [], []
    for step_fn, cache in zip(step_fns, caches, strict=True):
      logits, cache = step_fn(cache, tokens, position)
      log_probs.append(jax.nn.log_softmax(logits_lib.row_major(logits).astype(jnp.float32),
                                          axis=-1))
      new_caches.append(cache)
    widths = {lp.shape[-1] for lp in log_probs}
    if len(widths) > 1:
      raise ValueError(f"the ensemble's models have different vocabulary sizes {sorted(widths)}")
    stacked = jnp.stack(log_probs)                                    # [models, rows, vocab]
    mean = jax.scipy.special.logsumexp(stacked, axis=0) - math.log(len(step_fns))
    return mean, tuple(new_caches)

  return step


def check_compatible(members: Sequence[Member]) -> None:
  """Raises ValueError unless every member has the same vocabulary sizes (source, target)."""
  sizes = [(m.cfg.vocab_size, m.cfg.target_vocab) for m in members]
  if len(set(sizes)) > 1:
    raise ValueError(f"the ensemble's models have vocabulary sizes (source, target) {sizes}: "
                     "they must share their vocabularies")


def output_projection(member: Member, layout: str = "row_major",
                      shortlist: Optional[Array] = None) -> Callable[[Array], logits_lib.Logits]:
  """The model's decoder features [..., d_model] -> logits, as a search projects them: by its
  output layer (`choice.output_layer`: its products, over its kernel) in `layout`
  ("vocab_major": features [rows, d_model] only), plus its output bias. `shortlist` [size]
  (`Shortlist.batch_ids`): onto those rows of the weights only (`logits.listed_rows`), logits
  [..., size] or [size, rows] with FILLER's at -inf (`logits.listed_logits`)."""
  cfg, params = member
  output = choice.output_layer(cfg)
  kernel, bias = transformer.output_weights(cfg, params)
  kernel = output.kernel(params, kernel)
  if shortlist is not None:
    kernel = logits_lib.listed_rows(kernel, shortlist)

  def project(features: Array) -> logits_lib.Logits:
    logits = output.project(features, kernel, layout)
    if shortlist is not None:
      logits = logits_lib.listed_logits(logits, shortlist)
    if bias is not None:
      logits = logits_lib.add_bias(logits, bias, shortlist)
    return logits

  return project


def model_step(member: Member, layout: str = "row_major",
               shortlist: Optional[Array] = None) -> beam_search.StepFn:
  """One model's step function: `transformer.decode_features` with the kernels its config
  chooses (`choice.plugins`), projected by `output_projection`."""
  cfg, params = member
  plugins = choice.plugins(cfg)
  project = output_projection(member, layout, shortlist)

  def step(cache: Any, tokens: Array, position: Array) -> tuple[logits_lib.Logits, Any]:
    features, cache = transformer.decode_features(cfg, params, cache, tokens, position, plugins)
    return project(features), cache

  return step


def teacher_forced_logits(member: Member, inputs: Array, targets: Array) -> Array:
  """Logits [batch, tgt_len, vocab] float32 of `targets` given `inputs` (shifted right inside),
  computed as the search computes each step's (`model_step`): the reference every cached
  step is held to, and what scoring a given translation reads."""
  cfg, params = member
  features = transformer.Transformer(cfg, choice.plugins(cfg)).apply(
      {"params": params}, inputs, targets, method=transformer.Transformer.decoder_features)
  return output_projection(member)(features)


def step_function(members: Sequence[Member], shortlist: Optional[Array] = None) -> beam_search.StepFn:
  """The members' step functions (`model_step`) as one: one model's own, or the ensemble's.

  `shortlist` [size]: a batch's candidate ids (`Shortlist.batch_ids`: ascending, padding
  and EOS first, then FILLER), the only rows of the output projections computed; the step
  function is then one over that list (`over_shortlist`).
  """
  check_compatible(members)
  layout = choice.logits_layout(len(members))
  steps = [model_step(m, layout, shortlist) for m in members]
  step = steps[0] if len(members) == 1 else ensemble_step(steps)
  return step if shortlist is None else over_shortlist(step, shortlist)


def over_shortlist(step_fn: beam_search.StepFn, ids: Array) -> beam_search.StepFn:
  """`step_fn` over a shortlist's ids [size] as a step function over a vocabulary of `size`.

  The search runs in the list's index space: its tokens are positions in `ids`, mapped to
  vocabulary ids before `step_fn` (`vocabulary_ids`), and the logits are the listed ids'
  (FILLER rows at -inf: `logits.listed_logits`). As `ids` starts with padding and EOS,
  positions 0 and 1 are padding and EOS, so the search needs no other rule: padding stays
  in the normaliser and is never picked, and a list of every id is the whole vocabulary.
  """
  def step(cache: Any, tokens: Array, position: Array) -> tuple[logits_lib.Logits, Any]:
    return step_fn(cache, vocabulary_ids(ids, tokens), position)
  return step


def vocabulary_ids(ids: Any, positions: Any) -> Any:
  """Positions in a shortlist's `ids` -> vocabulary ids, in NumPy or JAX as given; a FILLER
  position (picked only when fewer ids are listed than a search asks for) is padding."""
  xp = np if isinstance(positions, np.ndarray) else jnp
  return xp.maximum(xp.take(xp.asarray(ids), positions, mode="clip"), PAD_ID)


def init_decoder(members: Sequence[Member], inputs: Array, max_len: int,
                 shortlist: Optional[Array] = None) -> tuple[Any, beam_search.StepFn]:
  """(cache, step_fn) for `inputs` [batch, src]: one model's own, or the ensemble's.

  Each model runs its encoder once and keeps its own incremental cache of
  `max_len` positions. One member gives exactly that model's cache and
  `decode_step` (no averaging), so a one-model ensemble is the model.
  `shortlist`: as for `step_function`.
  """
  step_fn = step_function(members, shortlist)
  caches = tuple(transformer.init_cache(m.cfg, m.params, inputs, max_len, choice.plugins(m.cfg))
                 for m in members)
  return (caches[0] if len(members) == 1 else caches), step_fn


def _members(models: tuple, params: tuple) -> list[Member]:
  return [Member(m, p) for m, p in zip(models, params)]


# -------------------------------------------------------------------------- programs


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
                                             "n_best", "min_len"))
def _start(params: tuple, inputs, max_lens, shortlist, *, models: tuple, beam_size, alpha,
           max_len, until, n_best, min_len) -> beam_search.BeamState:
  """The encoders, then the search's first chunk: positions below `until`."""
  cache, step_fn = init_decoder(_members(models, params), inputs, max_len, shortlist)
  state = beam_search.beam_start(cache, beam_size=beam_size, max_len=max_len, max_lens=max_lens)
  return beam_search.beam_run(step_fn, state, until=until, alpha=alpha, n_best=n_best,
                              min_len=min_len)


@functools.partial(jax.jit, static_argnames=("models", "alpha", "until", "n_best", "min_len"))
def _run(params: tuple, state, shortlist, *, models: tuple, alpha, until, n_best,
         min_len) -> beam_search.BeamState:
  return beam_search.beam_run(step_function(_members(models, params), shortlist), state, until=until,
                              alpha=alpha, n_best=n_best, min_len=min_len)


def call(store: Any, fn, *args: Any, **static: Any):
  """`fn(*args, **static)`, through a store of compiled programs when given (its `call`:
  inference/stored_programs.py's `Store`)."""
  return fn(*args, **static) if store is None else store.call(fn, *args, **static)


def _beam_decode(params: tuple, inputs: Array, max_lens: Array, *, models: tuple,
                 beam_size: int, alpha: float, max_len: int, n_best: int, min_len: int,
                 every_chunk: bool = False, store: Any = None,
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
  settings = dict(models=models, alpha=alpha, n_best=n_best, min_len=min_len)
  state = call(store, _start, params, inputs, max_lens, shortlist, beam_size=beam_size,
                max_len=max_len, until=chunks[0], **settings)
  for until in chunks[1:]:    # each chunk runs to its end unless every sentence stopped
    if not every_chunk and np.asarray(state.sentence_done).all():
      break
    state = call(store, _run, params, state, shortlist, until=until, **settings)
  tokens = np.asarray(state.done_seqs)[:, :n_best]
  if shortlist is not None:   # positions in the list -> ids
    tokens = vocabulary_ids(np.asarray(shortlist), tokens)
  return tokens, np.asarray(state.done_score)[:, :n_best]


def compile_beam_programs(members: Sequence[Member], rows: int, width: int, search: Search,
                          store: Any = None, shortlist: Any = None) -> int:
  """Compiles (or reads from the compilation cache) every program that beam search over a
  batch [rows, width] with `search` may run, decoding almost nothing; returns how many.

  The rows are filler (all padding), which stop after their first token, and
  each later chunk's program (`chunk_lengths`) is then called on that stopped
  state, so it compiles but steps no further. The programs are the ones
  `decode_batch` calls for any batch of that shape: the output length and chunks
  depend only on the width (`search.output_limits`), never on the ids. `store`:
  loaded from and stored there (inference/stored_programs.py). `shortlist`: the programs over
  its lists of this batch's size, which with `by_shape` (inference/shortlist.py) is the size every
  batch of the shape takes.
  """
  if search.sample:
    raise ValueError("compile_beam_programs compiles beam search; sampling has one program, "
                     "compiled by its first batch")
  members = tuple(members)
  check_compatible(members)
  inputs, max_len, max_lens = checked_limits(
      np.full((rows, width), PAD_ID, np.int32), search, max_positions(members))
  candidates = None if shortlist is None else jax.device_put(shortlist.batch_ids(inputs))
  _beam_decode(tuple(m.params for m in members), *jax.device_put((inputs, max_lens)),
               models=tuple(m.cfg for m in members), beam_size=search.beam_size,
               alpha=float(search.alpha), max_len=max_len, n_best=search.n_best,
               min_len=search.min_len, every_chunk=True, store=store, shortlist=candidates)
  return len(chunk_lengths(max_len))


def decode_batch(members: Sequence[Member], inputs: Any, search: Search, *, store: Any = None,
                 shortlist: Any = None) -> tuple[np.ndarray, np.ndarray]:
  """Beam search's `search.n_best` outputs for each row of `inputs` [batch, src] (EOS-terminated,
  0-padded).

  `members`: one model or an ensemble; an all-padding (filler) row stops after one
  token. Beam search runs in chunks (`chunk_lengths`), each a program of its own.
  Returns NumPy tokens [batch, n, L] int32 (0 after EOS, L = the longest source + the
  extra, within every model's max_len) and scores [batch, n] float32, best first.
  `store`: compiled programs loaded from there, and what is compiled stored
  (inference/stored_programs.py's `Store`). `shortlist`: a lexical shortlist
  (inference/shortlist.py's `Shortlist`): the outputs are picked among the batch's
  candidates only (its `batch_ids(inputs)`), normalised over them (padding included, as
  over the whole vocabulary: a table listing every id gives the whole vocabulary's
  outputs and scores).
  """
  if search.sample:
    raise ValueError("decode_batch runs beam search; sampling is inference/sampling.py's "
                     "decode_batch")
  members = tuple(members)
  check_compatible(members)
  inputs, max_len, max_lens = checked_limits(inputs, search, max_positions(members))
  candidates = None if shortlist is None else jax.device_put(shortlist.batch_ids(inputs))
  # device_put, not jnp.asarray: that compiles a copy program per shape.
  return _beam_decode(tuple(m.params for m in members), *jax.device_put((inputs, max_lens)),
                      models=tuple(m.cfg for m in members), beam_size=search.beam_size,
                      alpha=float(search.alpha), max_len=max_len, n_best=search.n_best,
                      min_len=search.min_len, store=store, shortlist=candidates)
