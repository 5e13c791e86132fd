"""Dropout (section 5.4) with masks that are a hash of the element's index: the swap-in for the
reference `model.layers.dropout` (`dropout` here, handed to the model as its `dropout_fn`).

The reference draws its masks with `jax.random.bernoulli`, as Flax's `nn.Dropout` does. On a CPU, JAX lowers threefry to a loop that XLA cannot fuse with
anything: each mask's random bits are written out, kept for the backward pass (8
bytes an element) and read back there. In a base update on a CPU that is a sizeable
share of the step (docs/benchmarks.md, "Training step"), most of it in the backward
fusions that read the saved bits.

Here element i of a layer's mask is kept when `mix(mix(mix(i + s0) ^ s1) + s0)`
is at least `rate * 2**32`, where (s0, s1) are two 32-bit seeds drawn from the
layer's dropout key and `mix` is the "lowbias32" integer hash (a bijection of
32-bit words with near-ideal avalanche). s0 enters twice so that two keys give
shifted copies of one mask only if both seeds agree (with one stage, sharing s1
would be enough, and a long run draws millions of keys). The few integer
operations fuse into the fusions around them, and the backward pass recomputes
the mask from the two seeds instead of storing it (`jax.custom_vjp`). The keep
probability is exact to 2**-32 (`jax.random.bernoulli` compares a float32 with
23 random bits).

`cfg.dropout_generator` chooses between them ("hash", the default, or "threefry", the
reference: kernels/choice.py); the tests hold the hash to the reference in what matters: the
kept fraction, the scaling, independent masks for different keys and neighbouring
elements, and the gradient.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from t2t_jax.model import layers

Array = jax.Array


def _mix(x: Array) -> Array:
  """lowbias32: uint32 -> uint32, a bijection whose output bits each depend on all input bits."""
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x7FEB352D)
  x = x ^ (x >> 15)
  x = x * jnp.uint32(0x846CA68B)
  return x ^ (x >> 16)


def seeds(key: Array) -> Array:
  """The two uint32 seeds [2] of a mask, drawn from a PRNG key (typed or raw)."""
  return jax.random.bits(key, (2,), jnp.uint32)


def hash_keep_mask(seed: Array, shape: tuple[int, ...], rate: float) -> Array:
  """bool `shape`: True where an element is kept, each with probability 1 - rate.

  `seed` is uint32 [2] (`seeds(key)`); element i (row-major) depends on the seed
  and i only, so the same seed and shape always give the same mask.
  """
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"hash dropout needs a rate in [0, 1), got {rate}")
  size = math.prod(shape)
  if size >= 2**32:
    raise ValueError(f"hash dropout numbers elements with 32 bits; an array of shape {shape} "
                     "is too large: apply dropout to smaller pieces or use "
                     "dropout_generator='threefry'")
  index = lax.iota(jnp.uint32, size).reshape(shape)
  bits = _mix(_mix(_mix(index + seed[0]) ^ seed[1]) + seed[0])
  # Dropped when bits < threshold: probability threshold / 2**32 = rate (to 2**-32).
  threshold = min(round(rate * 2**32), 2**32 - 1)
  return bits >= jnp.uint32(threshold)


def apply_mask(keep: Array, x: Array, rate: float) -> Array:
  """Kept elements scaled by 1 / (1 - rate) (inverted dropout), the rest 0; x's dtype."""
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def hash_dropout(x: Array, seed: Array, rate: float) -> Array:
  """Dropout of `x` with `hash_keep_mask(seed, x.shape, rate)`; 0 <= rate < 1."""
  return apply_mask(hash_keep_mask(seed, x.shape, rate), x, rate)


def _hash_dropout_fwd(x, seed, rate):
  return hash_dropout(x, seed, rate), seed  # the mask is rebuilt from the seed, not saved


def _hash_dropout_bwd(rate, seed, grad):
  # Dropout is linear in x with a fixed mask: its transpose applies the same mask.
  return apply_mask(hash_keep_mask(seed, grad.shape, rate), grad, rate), None


hash_dropout.defvjp(_hash_dropout_fwd, _hash_dropout_bwd)


def dropout(x: Array, key: Array, rate: float) -> Array:
  """`model.layers.dropout(x, key, rate)` with the hash's masks (`hash_dropout`, seeded from
  `key`): the model's `dropout_fn` where the config's `dropout_generator` is "hash". Rates 0
  and 1, and a rate out of range, are the reference's own cases."""
  if not 0.0 < rate < 1.0:
    return layers.dropout(x, key, rate)
  return hash_dropout(x, seeds(key), rate)
