"""One batch of source ids -> n outputs per sentence: beam search or sampling, one model or an ensemble.

    search = Search.from_config(cfg, n_best=4)                # or sample=True, top_k=10, seed=1
    tokens, scores = decode_batch(members, inputs, search)    # [batch, n, L], [batch, n]
    pairs = align_batch(members, sources, source_words, outputs, output_words)

The layer between the searches (`decode.beam_search`, `sampling.sample`), the
ensemble step (`decoding/ensemble.py`), word alignments (`decoding/alignment.py`) and text
(`inference/translator.py`). Scores are best first: beam search's length-penalised
log-probabilities, or for samples the model's log-probability of the sample.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax import configs
from t2t_jax.decoding import alignment
from t2t_jax.decoding import decode
from t2t_jax.decoding import ensemble
from t2t_jax.decoding import sampling
from t2t_jax.ids import PAD_ID

Member = ensemble.Member


@dataclasses.dataclass(frozen=True)
class Search:
  """How each sentence is decoded, and into how many outputs (`n_best`).

  Beam search (the default) returns its `n_best` best hypotheses (n_best <=
  beam_size). With `sample=True`, `n_best` independent samples are drawn per
  sentence instead (temperature, top_k: `sampling.sample`); the j-th sample of
  the sentence with id i uses the key fold_in(fold_in(key(seed), i), j), so it
  does not depend on the batch it was decoded in. Each output has at most
  (source length + EOS) + max_decode_extra tokens. `narrow_batch`: one model's
  beam search goes on with fewer sentences once half of a batch has stopped
  (`decode.translate_batch`).
  """
  beam_size: int = 4
  alpha: float = 0.6
  n_best: int = 1
  max_decode_extra: int = 50
  sample: bool = False
  temperature: float = 1.0
  top_k: int = 0
  seed: int = 0
  narrow_batch: bool = False

  def __post_init__(self):
    if self.n_best < 1:
      raise ValueError(f"n_best={self.n_best} must be >= 1")
    if not self.sample and self.n_best > self.beam_size:
      raise ValueError(f"n_best={self.n_best} must be <= beam_size={self.beam_size}: beam "
                       "search keeps beam_size hypotheses; raise the beam size")
    if self.beam_size < 1 or self.alpha < 0 or self.max_decode_extra < 0:
      raise ValueError(f"beam_size={self.beam_size} must be >= 1, alpha={self.alpha} and "
                       f"max_decode_extra={self.max_decode_extra} >= 0")
    if self.sample and (not self.temperature > 0 or self.top_k < 0):
      raise ValueError(f"temperature={self.temperature} must be > 0 and top_k={self.top_k} "
                       ">= 0 (0: the whole vocabulary)")

  @classmethod
  def from_config(cls, cfg: configs.TransformerConfig, **overrides: Any) -> "Search":
    """The config's beam_size, alpha and max_decode_extra, then `overrides` (None: keep)."""
    fields = dict(beam_size=cfg.beam_size, alpha=cfg.alpha, max_decode_extra=cfg.max_decode_extra)
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**fields)


def max_positions(members: Sequence[Member]) -> int:
  """Positions every member supports: the shortest max_len."""
  return min(m.cfg.max_len for m in members)


@functools.partial(jax.jit, static_argnames=("cfgs", "beam_size", "alpha", "n_best", "max_len"))
def _beam(params: tuple, inputs: jax.Array, max_lens: jax.Array, *, cfgs: tuple,
          beam_size: int, alpha: float, n_best: int, max_len: int):
  members = [Member(c, p) for c, p in zip(cfgs, params)]
  cache, step_fn = ensemble.init_decoder(members, inputs, max_len)
  return decode.beam_search(step_fn, cache, beam_size=beam_size, alpha=alpha, max_len=max_len,
                            max_lens=max_lens, n_best=n_best)


@functools.partial(jax.jit, static_argnames=("cfgs", "n", "temperature", "top_k", "max_len"))
def _sample(params: tuple, inputs: jax.Array, max_lens: jax.Array, keys: jax.Array, *,
            cfgs: tuple, n: int, temperature: float, top_k: int, max_len: int):
  members = [Member(c, p) for c, p in zip(cfgs, params)]
  batch = inputs.shape[0]
  cache, step_fn = ensemble.init_decoder(members, jnp.repeat(inputs, n, axis=0), max_len)
  tokens, scores = sampling.sample(step_fn, cache, keys.reshape(batch * n),
                                   max_len=max_len, max_lens=jnp.repeat(max_lens, n),
                                   temperature=temperature, top_k=top_k)
  tokens, scores = tokens.reshape(batch, n, max_len), scores.reshape(batch, n)
  order = jnp.argsort(-scores, axis=1, stable=True)                   # best first
  return (jnp.take_along_axis(tokens, order[..., None], axis=1),
          jnp.take_along_axis(scores, order, axis=1))


def decode_batch(members: Sequence[Member], inputs: Any, search: Search,
                 ids: Optional[Sequence[int]] = None) -> tuple[np.ndarray, np.ndarray]:
  """`search.n_best` outputs for each row of `inputs` [batch, src] (EOS-terminated, 0-padded).

  `ids` [batch] name the sentences for sampling's keys (default 0..batch-1); an
  all-padding (filler) row stops after one token. Returns tokens [batch, n, L]
  int32 (0 after EOS) and scores [batch, n] float32, best first.
  """
  members = tuple(members)
  ensemble.check_compatible(members)
  inputs = np.asarray(inputs, np.int32)
  if inputs.ndim != 2:
    raise ValueError(f"inputs must be [batch, length] ids, got shape {inputs.shape}")
  positions = max_positions(members)
  if inputs.shape[1] > positions:
    raise ValueError(f"inputs have length {inputs.shape[1]} > max_len={positions}; "
                     "truncate the sources first")
  max_len = min(inputs.shape[1] + search.max_decode_extra, positions)
  lengths = (inputs != PAD_ID).sum(axis=1)
  max_lens = np.where(lengths == 0, 1, np.minimum(lengths + search.max_decode_extra, max_len))
  if not search.sample and len(members) == 1:
    # One model: the project's one beam-search path (the one evaluation takes).
    out = decode.translate_batch(members[0].cfg, members[0].params, inputs,
                                 beam_size=search.beam_size, alpha=search.alpha,
                                 max_decode_extra=search.max_decode_extra, n_best=search.n_best,
                                 narrow_batch=search.narrow_batch)
    return np.asarray(out[0]), np.asarray(out[1])
  params = tuple(m.params for m in members)
  cfgs = tuple(m.cfg for m in members)
  if not search.sample:
    out = _beam(params, inputs, max_lens.astype(np.int32), cfgs=cfgs, beam_size=search.beam_size,
                alpha=float(search.alpha), n_best=search.n_best, max_len=max_len)
  else:
    ids = np.arange(len(inputs)) if ids is None else np.asarray(ids)
    keys = sampling.row_keys(jax.random.key(search.seed), ids)         # [batch]
    keys = jax.vmap(lambda k: sampling.row_keys(k, np.arange(search.n_best)))(keys)
    out = _sample(params, inputs, max_lens.astype(np.int32), keys, cfgs=cfgs, n=search.n_best,
                  temperature=float(search.temperature), top_k=search.top_k, max_len=max_len)
  return np.asarray(out[0]), np.asarray(out[1])


def align_batch(members: Sequence[Member], sources: Sequence[Sequence[int]],
                source_words: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]],
                output_words: Sequence[Sequence[int]], *, layer: int = -1,
                head: Optional[int] = None) -> list[alignment.Pairs]:
  """`alignment.align` with the members' cross-attention averaged (as fairseq's ensembles do)."""
  return alignment.align([(m.cfg, m.params) for m in members], sources, source_words, outputs,
                         output_words, layer=layer, head=head)
