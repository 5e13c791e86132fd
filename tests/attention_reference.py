"""Helpers of the attention tests (kernels/test_fused_attention.py, model/test_attention.py,
model/test_encoder_decoder.py):
the textbook attention in NumPy and padded token ids."""

import jax.numpy as jnp
import numpy as np


def numpy_attention(q, k, v, bias):
  """Per-batch, per-head loops: the textbook formula, nothing shared with the code."""
  batch, q_len, heads, d_k = q.shape
  out = np.zeros((batch, q_len, heads, v.shape[-1]))
  probs = np.zeros((batch, heads, q_len, k.shape[1]))
  bias = np.broadcast_to(bias, probs.shape)
  for b in range(batch):
    for h in range(heads):
      logits = q[b, :, h] @ k[b, :, h].T / np.sqrt(d_k) + bias[b, h]
      e = np.exp(logits - logits.max(-1, keepdims=True))
      probs[b, h] = e / e.sum(-1, keepdims=True)
      out[b, :, h] = probs[b, h] @ v[b, :, h]
  return out, probs


def token_ids(rng, batch, length, lengths):
  """[batch, length] int32 ids in 1..8, row b padded (0) from lengths[b] on."""
  ids = rng.integers(1, 9, (batch, length))
  for b, n in enumerate(lengths):
    ids[b, n:] = 0
  return jnp.asarray(ids, jnp.int32)
