"""Positions, segments, dropout and the feed-forward layer: pure functions and the thin Linen
modules around them.

Shapes, named the same way everywhere:
  ids          [batch, length] int32, 0 is padding
  activations  [batch, length, d_model]
  per head     [batch, length, heads, depth]
  attention    [batch, heads, q_length, kv_length]; masks and biases broadcast to it

Attention and its masks are model/attention.py's. Each form here is the paper's reference;
a faster or other form of a job plugs in from outside through model/plugins.py (the
dropout function, the projections' layer), so these modules import nothing of the package
but its conventions.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from t2t_jax.configs import POSITION_LAYOUTS
from t2t_jax.ids import PAD_ID

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


def sinusoidal_encoding(positions: Array, d_model: int, layout: str = "interleaved",
                        length: Optional[int] = None) -> Array:
  """[..., d_model] float32 encodings of integer `positions` (section 3.5).

  PE(pos, 2i) = sin(pos / 10000^(2i / d_model)) and PE(pos, 2i + 1) = cos(same):
  sine and cosine interleaved, as the paper writes it, computed here in float32.
  `layout="halves"` (the config's `position_layout`): the same functions with all the
  sines first, then all the cosines, as Marian lays them out (a fixed permutation of the
  features), read from `halves_table`'s `length` rows, which computes them as Marian's
  reference does; `positions` must be below `length`.
  """
  if layout not in POSITION_LAYOUTS:
    raise ValueError(f"position layout {layout!r} is not one of {POSITION_LAYOUTS}")
  if layout == "halves":
    if length is None:
      raise ValueError("the halves layout is a table: pass its length (the model's max_len)")
    return jnp.take(jnp.asarray(halves_table(length, d_model)), jnp.asarray(positions), axis=0)
  two_i = jnp.arange(0, d_model, 2, dtype=jnp.float32)                 # [ceil(d_model / 2)]
  angles = jnp.asarray(positions, jnp.float32)[..., None] / jnp.power(10000.0, two_i / d_model)
  pe = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)          # [..., d/2, 2]
  return pe.reshape(*pe.shape[:-2], -1)[..., :d_model]


@functools.lru_cache(maxsize=8)
def halves_table(length: int, d_model: int) -> np.ndarray:
  """[length, d_model] float32: the sines of every frequency, then the cosines, at positions
  0..length-1, as transformers' MarianSinusoidalPositionalEmbedding computes Marian's table:
  angles pos / 10000^(2i / d_model) and their sines and cosines in float64 NumPy, cast to
  float32 once (the same computed in float32, as the interleaved layout is, drifts from them
  by up to 8e-6 by position 128 and 3.4e-5 by 512 at d_model 512).
  With an odd d_model the sines take the extra column. Read-only (cached)."""
  features = np.arange(d_model)
  angles = np.arange(length)[:, None] / np.power(10000, 2 * (features // 2) / d_model)
  table = np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1)
  table = table.astype(np.float32)
  table.flags.writeable = False
  return table


def sinusoidal_positions(length: int, d_model: int, layout: str = "interleaved") -> Array:
  """[length, d_model] float32 table of `sinusoidal_encoding` for positions 0..length-1."""
  return sinusoidal_encoding(jnp.arange(length), d_model, layout, length)


# --------------------------------------------------------------------------- dropout


def dropout(x: Array, key: Array, rate: float) -> Array:
  """Inverted dropout of `x` at `rate` (section 5.4): each element kept with probability
  1 - rate and scaled by 1 / (1 - rate), the rest 0; the mask drawn from `key` (typed or
  raw) with `jax.random.bernoulli`, as Flax's `nn.Dropout` draws it.

  The reference `Dropout` runs by default; a function of the same signature plugs in for it
  (`plugins.Plugins.dropout_fn`).
  """
  if not 0.0 <= rate <= 1.0:
    raise ValueError(f"dropout rate must be in [0, 1], got {rate}")
  if rate == 0.0:
    return x
  if rate == 1.0:
    return jnp.zeros_like(x)
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


# --------------------------------------------------------------------------- modules

default_kernel_init = nn.initializers.xavier_uniform()


# The feed-forward activations (the config's `activation`): the paper's ReLU, and those
# of published models of this architecture. "gelu" is the exact one (erf), as torch's and
# transformers' "gelu"; "swish" is x sigmoid(x) (SiLU).
ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": nn.relu, "swish": nn.swish, "gelu": functools.partial(nn.gelu, approximate=False)}


def dense(features: int | tuple[int, ...], *, axis: int | tuple[int, ...] = -1,
          use_bias: bool = True, dtype: Any = jnp.float32,
          kernel_init: Callable = default_kernel_init, name: str | None = None) -> nn.Module:
  """The layer of every projection: `nn.Dense` (x W + b over the last axis) or, for several
  output or input axes, `nn.DenseGeneral`; parameters float32, products in `dtype`.

  The reference factory of `plugins.Plugins.dense`: a factory taking the same arguments (a
  layer of other products, or of other parameters) plugs in for it.
  """
  if isinstance(features, int) and axis == -1:
    return nn.Dense(features, use_bias=use_bias, dtype=dtype, param_dtype=jnp.float32,
                    kernel_init=kernel_init, name=name)
  return nn.DenseGeneral(features, axis=axis, use_bias=use_bias, dtype=dtype,
                         param_dtype=jnp.float32, kernel_init=kernel_init, name=name)


def fused_dense(x: Array, params: list[dict[str, Any]], dtype: Any) -> Array:
  """x [..., d_model] by several `dense` layers' kernels at once -> their outputs side by side
  [..., sum of their widths], without biases (one product costs less than several).

  `params`: each layer's parameters ({"kernel": [d_model, *features]}). The reference of
  `plugins.Plugins.fused_dense`, which reads the parameters that `Plugins.dense` makes.
  """
  kernel = jnp.concatenate([p["kernel"].reshape(p["kernel"].shape[0], -1) for p in params],
                           axis=1)                                     # [d_model, sum]
  return jnp.dot(x.astype(dtype), kernel.astype(dtype))


class FeedForward(nn.Module):
  """FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3), or another `activation` in place of
  max(0, .) (`ACTIVATIONS`); both projections made by `dense` (`plugins.Plugins.dense`)."""
  d_model: int
  d_ff: int
  dtype: Any = jnp.float32
  kernel_init: Callable = default_kernel_init
  activation: str = "relu"
  dense: Callable[..., nn.Module] = dense

  @nn.compact
  def __call__(self, x: Array) -> Array:
    layer = lambda n, name: self.dense(n, dtype=self.dtype, kernel_init=self.kernel_init,
                                       name=name)
    return layer(self.d_model, "wo")(ACTIVATIONS[self.activation](layer(self.d_ff, "wi")(x)))


class Dropout(nn.Module):
  """`dropout_fn(x, key, rate)` (default: the reference `dropout`) with a key from the
  "dropout" rngs; the identity when `deterministic` or at rate 0."""
  rate: float
  dropout_fn: Callable[[Array, Array, float], Array] = dropout
  rng_collection: str = "dropout"

  @nn.compact
  def __call__(self, x: Array, deterministic: bool) -> Array:
    if deterministic or self.rate == 0.0:
      return x
    return self.dropout_fn(x, self.make_rng(self.rng_collection), self.rate)
