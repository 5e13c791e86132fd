"""How a batch is decoded: the search settings and the output length policy.

    search = Search.from_config(cfg, n_best=4)            # or sample=True, top_k=10, seed=1
    max_len, limits = output_limits(inputs, 50, 1.0, 512)  # the batch's and each sentence's

The compiled programs (decoding/batch_decoder.py) take these settings as static
arguments; every caller that bounds an output (the server, the exported engines'
comparison) reads the one rule here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from t2t_jax import configs
from t2t_jax.decoding import beam_search
from t2t_jax.decoding import ensemble
from t2t_jax.ids import PAD_ID


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
