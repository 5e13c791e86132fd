"""Which keys each query may attend to: dense boolean masks, their additive bias, and the
structured `Mask` the fused attention kernels read.

Shapes: masks and biases broadcast to attention's [batch, heads, q_length, kv_length].
Masks are booleans (True = may attend). `mask_to_bias` turns them into additive
biases with a large but finite negative value, so a row with nothing to attend to
gets a uniform distribution instead of NaN.
"""

from __future__ import annotations

from typing import Any, Optional

import flax.struct
import jax
import jax.numpy as jnp

from t2t_jax.ids import PAD_ID
from t2t_jax.kernels.logits import NEG_INF

Array = jax.Array


def causal_mask(length: int) -> Array:
  """[1, 1, length, length] bool: query i may attend to keys j <= i."""
  idx = jnp.arange(length)
  return (idx[None, :] <= idx[:, None])[None, None]


def padding_mask(q_ids: Array, kv_ids: Array) -> Array:
  """[batch, 1, q_length, kv_length] bool: both the query and the key are real tokens (id != 0)."""
  if q_ids.ndim != 2 or kv_ids.ndim != 2:
    raise ValueError(f"padding_mask expects [batch, length] ids, got {q_ids.shape} and {kv_ids.shape}")
  return ((q_ids != PAD_ID)[:, :, None] & (kv_ids != PAD_ID)[:, None, :])[:, None]


def local_mask(length: int, window: int) -> Array:
  """[1, 1, length, length] bool: |i - j| <= window (restricted self-attention, Table 1).

  For the decoder, combine with `causal_mask` to get the r previous positions.
  """
  if window < 0:
    raise ValueError(f"window={window} must be >= 0")
  idx = jnp.arange(length)
  return (jnp.abs(idx[None, :] - idx[:, None]) <= window)[None, None]


def mask_to_bias(mask: Array, dtype: Any = jnp.float32) -> Array:
  """0 where `mask` is True, NEG_INF (kernels/logits.py) where it is False."""
  return jnp.where(mask, 0.0, NEG_INF).astype(dtype)


@flax.struct.dataclass
class Mask:
  """Which keys each query may attend to, in a form fused kernels understand.

  Query i may attend to key j when both belong to the same segment, the key is
  not padding (segment 0), and, if `causal`, j <= i; with `window`, also
  |i - j| <= window. Unpacked rows (`packed` False) hold one sentence each and
  their padding only trails, so the mask is just the two rows' lengths.
  """
  q_segments: Array                  # [batch, q_length] int32, 0 = padding
  kv_segments: Array                 # [batch, kv_length] int32, 0 = padding
  causal: bool = flax.struct.field(pytree_node=False, default=False)
  window: Optional[int] = flax.struct.field(pytree_node=False, default=None)
  packed: bool = flax.struct.field(pytree_node=False, default=False)

  def dense(self) -> Array:
    """[batch, 1, q_length, kv_length] bool, as the reference attention wants it."""
    q, kv = self.q_segments[:, :, None], self.kv_segments[:, None, :]
    mask = ((q == kv) & (kv != 0))[:, None]
    if self.causal:
      mask = mask & causal_mask(max(q.shape[1], kv.shape[2]))[:, :, :q.shape[1], :kv.shape[2]]
    if self.window is not None:
      mask = mask & local_mask(max(q.shape[1], kv.shape[2]), self.window)[
          :, :, :q.shape[1], :kv.shape[2]]
    return mask
