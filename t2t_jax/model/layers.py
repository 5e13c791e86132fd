"""Positions, segments, dropout and the feed-forward layer: pure functions and the thin Linen
modules around them.

Shapes, named the same way everywhere:
  ids          [batch, length] int32, 0 is padding
  activations  [batch, length, d_model]
  per head     [batch, length, heads, depth]
  attention    [batch, heads, q_length, kv_length]; masks and biases broadcast to it

Attention and its masks are model/attention.py's. Dropout's masks come from
`jax.random.bernoulli` (the reference) or a hash of the element's index
(kernels/dropout.py), as the config's `dropout_generator` says.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from t2t_jax.configs import DROPOUT_GENERATORS, POSITION_LAYOUTS
from t2t_jax.ids import PAD_ID
from t2t_jax.kernels import choice
from t2t_jax.kernels import dropout as dropout_lib

Array = jax.Array


# -------------------------------------------------------------------------- segments


def segment_ids(ids: Array) -> Array:
  """[batch, length] int32: 1 on real tokens, 0 on padding (one sentence per row)."""
  return (ids != PAD_ID).astype(jnp.int32)


def segment_positions(segments: Array) -> Array:
  """[batch, length] int32 position of each token within its segment (0 at each start).

  `segments` [batch, length] numbers the sentences packed into a row (1, 2, ...;
  0 = padding); positions restart wherever the segment id changes.
  """
  length = segments.shape[-1]
  index = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), segments.shape)
  previous = jnp.pad(segments, ((0, 0), (1, 0)), constant_values=-1)[:, :-1]
  starts = jnp.where(segments != previous, index, 0)
  return index - lax.cummax(starts, axis=1)


# ------------------------------------------------------------------------- positions


def sinusoidal_encoding(positions: Array, d_model: int, layout: str = "interleaved") -> Array:
  """[..., d_model] float32 encodings of integer `positions` (section 3.5).

  PE(pos, 2i) = sin(pos / 10000^(2i / d_model)) and PE(pos, 2i + 1) = cos(same):
  sine and cosine interleaved, as the paper writes it. `layout="halves"` (the
  config's `position_layout`): the same values with all the sines first, then all
  the cosines, as Marian and tensor2tensor compute them (a fixed permutation of
  the features).
  """
  if layout not in POSITION_LAYOUTS:
    raise ValueError(f"position layout {layout!r} is not one of {POSITION_LAYOUTS}")
  two_i = jnp.arange(0, d_model, 2, dtype=jnp.float32)                 # [ceil(d_model / 2)]
  angles = jnp.asarray(positions, jnp.float32)[..., None] / jnp.power(10000.0, two_i / d_model)
  if layout == "halves":
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)[..., :d_model // 2]], axis=-1)
  pe = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)          # [..., d/2, 2]
  return pe.reshape(*pe.shape[:-2], -1)[..., :d_model]


def sinusoidal_positions(length: int, d_model: int, layout: str = "interleaved") -> Array:
  """[length, d_model] float32 table of `sinusoidal_encoding` for positions 0..length-1."""
  return sinusoidal_encoding(jnp.arange(length), d_model, layout)


# --------------------------------------------------------------------------- dropout


def dropout(x: Array, key: Array, rate: float, generator: str = "hash") -> Array:
  """Inverted dropout of `x` at `rate` (section 5.4): each element kept with probability
  1 - rate and scaled by 1 / (1 - rate), the rest 0; masks from `key` (typed or raw).

  `generator` is the config's `dropout_generator`: "threefry", the reference, draws
  the mask with `jax.random.bernoulli`; "hash" (the default) is `dropout.hash_dropout`,
  the same law from a hash of the element's index, which XLA fuses and the backward
  pass recomputes (kernels/dropout.py says why).
  """
  if not 0.0 <= rate <= 1.0:
    raise ValueError(f"dropout rate must be in [0, 1], got {rate}")
  if generator not in DROPOUT_GENERATORS:
    raise ValueError(f"dropout generator must be one of {DROPOUT_GENERATORS}, got {generator!r}")
  if rate == 0.0:
    return x
  if rate == 1.0:
    return jnp.zeros_like(x)
  if generator == "threefry":
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return dropout_lib.apply_mask(keep, x, rate)
  return dropout_lib.hash_dropout(x, dropout_lib.seeds(key), rate)


# --------------------------------------------------------------------------- modules

default_kernel_init = nn.initializers.xavier_uniform()


# The feed-forward activations (the config's `activation`): the paper's ReLU, and those
# of published models of this architecture. "gelu" is the exact one (erf), as torch's and
# transformers' "gelu"; "swish" is x sigmoid(x) (SiLU).
ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": nn.relu, "swish": nn.swish, "gelu": functools.partial(nn.gelu, approximate=False)}


def float32_products(*args: Any, **kwargs: Any) -> Array:
  """`lax.dot_general` accumulating in and returning float32 (`choice.bfloat16_results`),
  whatever its operands: the products of a `quantization="bfloat16"` model."""
  return lax.dot_general(*args, preferred_element_type=choice.bfloat16_results(), **kwargs)


class FeedForward(nn.Module):
  """FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3), or another `activation` in place of
  max(0, .) (`ACTIVATIONS`); `int8`: int8 products (decoding a `quantization="int8"` model;
  kernels/int8.py, imported only then); `bfloat16`: products in `dtype` returning float32
  (`float32_products`: decoding a `quantization="bfloat16"` model)."""
  d_model: int
  d_ff: int
  dtype: Any = jnp.float32
  kernel_init: Callable = default_kernel_init
  int8: bool = False
  activation: str = "relu"
  bfloat16: bool = False

  @nn.compact
  def __call__(self, x: Array) -> Array:
    if self.int8:
      from t2t_jax.kernels import int8  # pylint: disable=import-outside-toplevel
      dense = lambda n, name: int8.Int8Dense(n, name=name)
    else:
      dense = lambda n, name: nn.Dense(
          n, dtype=self.dtype, param_dtype=jnp.float32, kernel_init=self.kernel_init, name=name,
          dot_general=float32_products if self.bfloat16 else None)
    return dense(self.d_model, "wo")(ACTIVATIONS[self.activation](dense(self.d_ff, "wi")(x)))


class Dropout(nn.Module):
  """`dropout` at `rate`, its masks drawn by `generator` (the config's `dropout_generator`)
  with a key from the "dropout" rngs."""
  rate: float
  generator: str = "hash"
  rng_collection: str = "dropout"

  @nn.compact
  def __call__(self, x: Array, deterministic: bool) -> Array:
    if deterministic or self.rate == 0.0:
      return x
    return dropout(x, self.make_rng(self.rng_collection), self.rate, self.generator)
