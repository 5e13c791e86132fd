"""A tiny random-weight model for the decoding tests: its config, params, sources and batches.

Random weights decode fast and compile small programs; `params(peaked=True)`
sharpens the output distribution (logits x4 through the shared embedding) so
that outputs run longer than EOS alone.
"""

import jax
import numpy as np

from t2t_jax import configs
from t2t_jax.ids import EOS_ID
from t2t_jax.model import transformer

TINY = configs.get_config("demo", vocab_size=24, num_layers=2, d_model=32, d_ff=64, num_heads=4,
                          max_len=32, max_decode_extra=6, beam_size=3, decode_batch_size=4)


def params(peaked: bool = False):
  """TINY's params from key 1; `peaked`: the shared embedding x4."""
  out = transformer.init_params(TINY.model, jax.random.key(1))
  if peaked:
    out["embedding"]["embedding"] = 4.0 * np.asarray(out["embedding"]["embedding"])
  return out


def sources(seed: int, lengths) -> list[list[int]]:
  """Random source ids (no EOS, no reserved ids) of the given lengths."""
  rng = np.random.default_rng(seed)
  return [list(rng.integers(3, TINY.vocab_size, size=n)) for n in lengths]


def rows(sentences, width: int = 8) -> np.ndarray:
  """EOS-terminated rows [len(sentences), width] int32, 0-padded."""
  inputs = np.zeros((len(sentences), width), np.int32)
  for row, src in enumerate(sentences):
    inputs[row, :len(src) + 1] = [*src, EOS_ID]
  return inputs
