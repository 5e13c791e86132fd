"""The uncached reference decoder: the whole decoder rerun on the prefix at every step.

    cache, step_fn = uncached_decoder(cfg.model, params, inputs, max_len)
    tokens, scores = beam_search.beam_search(step_fn, cache, beam_size=4, max_len=max_len)

It exists to check that the incremental cache changes nothing (the same tokens:
`decode_batch` here against `batch_decoder.decode_batch`, tests/decoding/test_uncached.py)
and to measure what the cache saves (benchmarks/bench_decode.py --uncached).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax import configs
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import beam_search
from t2t_jax.ids import EOS_ID
from t2t_jax.kernels import choice
from t2t_jax.model import transformer

Array = jax.Array


def _model(cfg: configs.ModelConfig) -> transformer.Transformer:
  """The model with the kernels its config chooses, as the cached decoder runs it."""
  return transformer.Transformer(cfg, choice.plugins(cfg))


def uncached_decoder(cfg: configs.ModelConfig, params: Any, inputs: Array,
                     max_len: int) -> tuple[Any, beam_search.StepFn]:
  """A (cache, step_fn) pair that reruns the whole decoder on the prefix every step.

  The encoder runs once (as with the cache); each step then applies the
  teacher-forced `Transformer.decode` to all `max_len` positions and reads one.
  """
  batch = inputs.shape[0]
  encoded = _model(cfg).apply({"params": params}, inputs, method=transformer.Transformer.encode)
  state = {"inputs": inputs, "prefix": jnp.zeros((batch, max_len), jnp.int32), "encoded": encoded}
  return state, functools.partial(uncached_step, cfg, params)


def uncached_step(cfg: configs.ModelConfig, params: Any, state: dict, tokens: Array,
                  position: Array) -> tuple[Array, dict]:
  """One step of `uncached_decoder`'s step function: logits [rows, vocab] at `position`."""
  # `tokens` is the output at position - 1 (the model shifts targets right itself).
  written = jax.lax.dynamic_update_index_in_dim(
      state["prefix"], tokens, jnp.maximum(position - 1, 0), axis=1)
  prefix = jnp.where(position == 0, state["prefix"], written)
  # The teacher-forced decoder hides target positions holding padding; any
  # non-zero id at `position` keeps the query real (its value is never read).
  targets = jax.lax.dynamic_update_index_in_dim(
      prefix, jnp.full_like(tokens, EOS_ID), position, axis=1)
  logits = _model(cfg).apply(
      {"params": params}, state["encoded"], state["inputs"], targets,
      method=transformer.Transformer.decode)                           # [rows, max_len, vocab]
  next_logits = jax.lax.dynamic_index_in_dim(logits, position, axis=1, keepdims=False)
  return next_logits, {**state, "prefix": prefix}


@functools.partial(jax.jit, static_argnames=("cfg", "beam_size", "alpha", "max_len", "n_best",
                                             "min_len"))
def _beam(params: Any, inputs: Array, max_lens: Array, *, cfg: configs.ModelConfig,
          beam_size: int, alpha: float, max_len: int, n_best: int, min_len: int):
  cache, step_fn = uncached_decoder(cfg, params, inputs, max_len)
  return beam_search.beam_search(step_fn, cache, beam_size=beam_size, alpha=alpha,
                                 max_len=max_len, max_lens=max_lens, n_best=n_best,
                                 min_len=min_len)


def decode_batch(member: batch_decoder.Member, inputs: Any,
                 search: batch_decoder.Search) -> tuple[np.ndarray, np.ndarray]:
  """`batch_decoder.decode_batch` of one model with no cache: the same outputs, each step
  rerunning the whole decoder (one program, no chunks)."""
  if search.sample:
    raise ValueError("the uncached reference decodes with beam search")
  inputs, max_len, max_lens = batch_decoder.checked_limits(inputs, search, member.cfg.max_len)
  tokens, scores = _beam(member.params, *jax.device_put((inputs, max_lens)), cfg=member.cfg,
                         beam_size=search.beam_size, alpha=float(search.alpha),
                         max_len=max_len, n_best=search.n_best, min_len=search.min_len)
  return np.asarray(tokens), np.asarray(scores)
