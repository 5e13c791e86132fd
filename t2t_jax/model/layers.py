"""Positions, segments, the feed-forward layer and dropout: pure functions and the thin Linen
modules around them.

Shapes, named the same way everywhere:
  ids          [batch, length] int32, 0 is padding
  activations  [batch, length, d_model]
  per head     [batch, length, heads, depth]
  attention    [batch, heads, q_length, kv_length]; masks and biases broadcast to it

Attention, its masks and dropout's masks are kernels/'s: the model calls them
through kernels/ops.py, which chooses the kernel that runs them.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from t2t_jax.ids import PAD_ID
from t2t_jax.kernels import int8 as int8_lib
from t2t_jax.kernels import ops

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


def sinusoidal_encoding(positions: Array, d_model: int) -> Array:
  """[..., d_model] float32 encodings of integer `positions` (section 3.5).

  PE(pos, 2i) = sin(pos / 10000^(2i / d_model)) and PE(pos, 2i + 1) = cos(same):
  sine and cosine interleaved, not two concatenated halves.
  """
  two_i = jnp.arange(0, d_model, 2, dtype=jnp.float32)                 # [ceil(d_model / 2)]
  angles = jnp.asarray(positions, jnp.float32)[..., None] / jnp.power(10000.0, two_i / d_model)
  pe = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)          # [..., d/2, 2]
  return pe.reshape(*pe.shape[:-2], -1)[..., :d_model]


def sinusoidal_positions(length: int, d_model: int) -> Array:
  """[length, d_model] float32 table of `sinusoidal_encoding` for positions 0..length-1."""
  return sinusoidal_encoding(jnp.arange(length), d_model)


# --------------------------------------------------------------------------- modules

default_kernel_init = nn.initializers.xavier_uniform()


class Int8Dense(nn.Module):
  """`nn.DenseGeneral` for decoding with int8 weights: x [..., *in] -> [..., *features] float32.

  Contracts x's last `inputs` axes with a `kernels.int8.Int8Kernel` "kernel" ([prod(features),
  prod(in)], the float kernel flattened and transposed: model/quantized.py) and adds a
  float32 "bias" [prod(features)] if `use_bias`. Its own initial values are zeros:
  its parameters come from a float32 model's.
  """
  features: Union[int, tuple[int, ...]]
  inputs: int = 1
  use_bias: bool = True

  @nn.compact
  def __call__(self, x: Array) -> Array:
    features = self.features if isinstance(self.features, tuple) else (self.features,)
    batch, n_in = x.shape[:-self.inputs], math.prod(x.shape[-self.inputs:])
    n_out = math.prod(features)
    kernel = self.param("kernel", lambda _: int8_lib.Int8Kernel(
        jnp.zeros((n_out, n_in), jnp.int8), jnp.ones((n_out,), jnp.float32)))
    y = ops.int8_dense(x.reshape(*batch, n_in), kernel)               # [..., prod(features)]
    if self.use_bias:
      y = y + self.param("bias", nn.initializers.zeros, (n_out,), jnp.float32)
    return y.reshape(*batch, *features)


class FeedForward(nn.Module):
  """FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3); `int8`: `Int8Dense` products."""
  d_model: int
  d_ff: int
  dtype: Any = jnp.float32
  kernel_init: Callable = default_kernel_init
  int8: bool = False

  @nn.compact
  def __call__(self, x: Array) -> Array:
    if self.int8:
      dense = lambda n, name: Int8Dense(n, name=name)
    else:
      dense = lambda n, name: nn.Dense(n, dtype=self.dtype, param_dtype=jnp.float32,
                                       kernel_init=self.kernel_init, name=name)
    return dense(self.d_model, "wo")(nn.relu(dense(self.d_ff, "wi")(x)))


class Dropout(nn.Module):
  """Dropout at `rate` (section 5.4), its masks drawn by `generator` (the config's
  `dropout_generator`, `ops.dropout`) with a key from the "dropout" rngs."""
  rate: float
  generator: str = "hash"
  rng_collection: str = "dropout"

  @nn.compact
  def __call__(self, x: Array, deterministic: bool) -> Array:
    if deterministic or self.rate == 0.0:
      return x
    return ops.dropout(x, self.make_rng(self.rng_collection), self.rate, self.generator)
