"""Ensembles: several models decoded together as one step function.

`ensemble_step(step_fns)` turns the models' step functions into one with the
contract of `beam_search.beam_search`, `beam_search.greedy_search` and `sampling.sample`:

  step_fn(caches, tokens [rows], position) -> (log_probs [rows, vocab], caches)

`caches` is the tuple of the models' own caches (each with leading dim `rows`,
so the searches tile and reorder them like one model's cache). At every step
the next-token distributions are averaged in probability space, as fairseq's
ensembles do: log((1/M) sum_m p_m(y | prefix)), an ordinary normalised
distribution (Marian instead sums weighted log-probabilities, a product of
experts). Models may differ in size and depth; they must share the vocabulary.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp

from t2t_jax import configs
from t2t_jax.decoding.beam_search import StepFn
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.kernels import choice
from t2t_jax.model import transformer

Array = jax.Array


class Member(NamedTuple):
  """One model of an ensemble: its `ModelConfig` (a run config's `.model`) and parameters."""
  cfg: configs.ModelConfig
  params: Any


def ensemble_step(step_fns: Sequence[StepFn]) -> StepFn:
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
  """Raises ValueError unless every member has the same vocabulary size."""
  sizes = [m.cfg.vocab_size for m in members]
  if len(set(sizes)) > 1:
    raise ValueError(f"the ensemble's models have vocab_size {sizes}: they must share one "
                     "vocabulary")


def step_function(members: Sequence[Member], shortlist: Optional[Array] = None) -> StepFn:
  """The members' `decode_step`s as one step function: one model's own, or the ensemble's;
  `shortlist` [size]: the ids their output projections are restricted to
  (`transformer.decode_step`)."""
  check_compatible(members)
  layout = choice.logits_layout(len(members))
  steps = [functools.partial(transformer.decode_step, m.cfg, m.params, logits_layout=layout,
                             shortlist=shortlist)
           for m in members]
  return steps[0] if len(members) == 1 else ensemble_step(steps)


def init_decoder(members: Sequence[Member], inputs: Array, max_len: int,
                 shortlist: Optional[Array] = None) -> tuple[Any, StepFn]:
  """(cache, step_fn) for `inputs` [batch, src]: one model's own, or the ensemble's.

  Each model runs its encoder once and keeps its own incremental cache of
  `max_len` positions. One member gives exactly that model's cache and
  `decode_step` (no averaging), so a one-model ensemble is the model.
  `shortlist`: as for `step_function`.
  """
  step_fn = step_function(members, shortlist)
  caches = tuple(transformer.init_cache(m.cfg, m.params, inputs, max_len) for m in members)
  return (caches[0] if len(members) == 1 else caches), step_fn
