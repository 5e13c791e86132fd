"""Fused attention: `model.attention.scaled_dot_product_attention`'s output by faster kernels.

Shapes: per head [batch, length, heads, depth]; attention [batch, heads, q_length,
kv_length]. `fused_attention` hands a structured `model.attention.Mask` (segment ids,
causal flag) to `jax.nn.dot_product_attention`, so that cuDNN's flash attention runs on
NVIDIA GPUs, and elsewhere runs `attention_core`, whose hand-written backward pass is
cheaper than autodiff's. Which one a layer runs is chosen in kernels/choice.py;
tests/kernels/test_fused_attention.py holds each to the reference.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from t2t_jax.ids import NEG_INF

Array = jax.Array


def _bias(allowed: Array) -> Array:
  """0 where allowed, NEG_INF elsewhere (`model.attention.mask_to_bias`)."""
  return jnp.where(allowed, 0.0, NEG_INF).astype(jnp.float32)


def fused_attention(q: Array, k: Array, v: Array, mask: Any, dtype: Any = None,
                    implementation: str = "core") -> Array:
  """`scaled_dot_product_attention`'s output, by the fastest path the backend has.

  Args:
    q: [batch, q_length, heads, d] queries.
    k, v: [batch, kv_length, heads, d] keys and values (one depth for both).
    mask: a `model.attention.Mask`; for `jax.nn.dot_product_attention`, unpacked rows become sequence
      lengths (cuDNN's native padding mask), packed rows a boolean segment mask,
      and `causal` is passed as such; `attention_core` takes it as a dense bias.
    dtype: compute dtype (default: q's); the softmax runs in float32 regardless.
    implementation: "core": `attention_core` (any backend; on CPU faster than
      `jax.nn.dot_product_attention`'s XLA path, whose backward XLA builds from
      the softmax by autodiff); "core_recompute": `attention_core` that keeps
      no probabilities for the backward pass (`recompute`); "xla" or "cudnn"
      (NVIDIA GPUs, bf16/fp16): `jax.nn.dot_product_attention` with that
      implementation.

  Returns:
    [batch, q_length, heads, d] in `dtype`. Rows of padded queries may differ from
    the reference's (they are zero here); every real row agrees.
  """
  assert q.ndim == k.ndim == v.ndim == 4, f"rank-4 q, k, v expected: {q.shape} {k.shape} {v.shape}"
  if k.shape[-1] != v.shape[-1]:
    raise ValueError(f"fused attention needs d_k == d_v, got {k.shape[-1]} and {v.shape[-1]}; "
                     "use the reference (attention_impl=reference)")
  if mask.window is not None:
    raise ValueError("fused attention has no restricted (windowed) attention; use "
                     "scaled_dot_product_attention")
  dtype = dtype or q.dtype
  if implementation in ("core", "core_recompute"):
    heads_first = lambda x: x.astype(dtype).transpose(0, 2, 1, 3)     # [batch, heads, len, d]
    out = attention_core(heads_first(q / math.sqrt(q.shape[-1])), heads_first(k),
                         heads_first(v), _bias(mask.dense()),
                         implementation == "core_recompute")
    real = (mask.q_segments != 0)[:, :, None, None]                    # [batch, q, 1, 1]
    return jnp.where(real, out.transpose(0, 2, 1, 3), 0).astype(dtype)
  q, k, v = (x.astype(dtype) for x in (q, k, v))
  if mask.packed:
    # The causal part goes as is_causal, which cuDNN handles without a dense mask.
    allowed = mask.replace(causal=False).dense()                       # [batch, 1, q, kv]
    return jax.nn.dot_product_attention(q, k, v, mask=allowed, is_causal=mask.causal,
                                        implementation=implementation)
  lengths = lambda segments: jnp.sum(segments != 0, axis=-1, dtype=jnp.int32)  # [batch]
  return jax.nn.dot_product_attention(
      q, k, v, is_causal=mask.causal, query_seq_lengths=lengths(mask.q_segments),
      key_value_seq_lengths=lengths(mask.kv_segments), implementation=implementation)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def attention_core(q: Array, k: Array, v: Array, bias: Array, recompute: bool = False) -> Array:
  """softmax(q k^T + bias) v with a hand-written backward pass.

  q [batch, heads, q_length, d] (already scaled by 1/sqrt(d)), k and v [batch,
  heads, kv_length, d], all in the compute dtype; bias float32, broadcastable to
  [batch, heads, q_length, kv_length]. Returns [batch, heads, q_length, d].
  The backward pass reuses the saved probabilities P and needs two elementwise
  passes over them (dS = P * (dP - rowsum(dO * O))); autodiff of the softmax makes
  XLA CPU run several more, which dominated the attention layers' backward.

  `recompute` (the TPU's "core_recompute", kernels/choice.py) keeps no P: the forward
  pass takes each row's max and sum of exponentials (float32) in a first pass over
  q k^T and computes P in a second one, and the backward pass computes P again
  from q, k and those statistics. The [batch, heads, q, kv] float32 exponentials
  then never go to memory, which on a TPU is most of the attention's time (XLA's
  cost model, docs/benchmarks.md); the second q k^T is a short matmul. Same
  float32 softmax, same result.
  """
  return _attention_core_fwd(q, k, v, bias, recompute)[0]


def _probs(q: Array, k: Array, bias: Array, top: Array, total: Array) -> Array:
  """softmax(q k^T + bias) [batch, heads, q, kv] float32 from its row max `top` and sum `total`."""
  logits = jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(jnp.float32) + bias
  return jnp.exp(logits - top) / total


def _attention_core_fwd(q, k, v, bias, recompute):
  if not recompute:
    logits = jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(jnp.float32) + bias
    probs = jax.nn.softmax(logits, axis=-1)                            # [batch, heads, q, kv]
    out = jnp.einsum("bhqk,bhkd->bhqd", probs.astype(v.dtype), v)
    return out, (q, k, v, probs, out)
  logits = jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(jnp.float32) + bias
  top = jnp.max(logits, axis=-1, keepdims=True)                        # [batch, heads, q, 1]
  total = jnp.sum(jnp.exp(logits - top), axis=-1, keepdims=True)
  # The barrier keeps XLA from merging the two q k^T (which would bring back the
  # float32 exponentials in memory between the two passes).
  probs = _probs(*lax.optimization_barrier((q, k)), bias, top, total)
  out = jnp.einsum("bhqk,bhkd->bhqd", probs.astype(v.dtype), v)
  return out, (q, k, v, (bias, top, total), out)


def _attention_core_bwd(recompute, residuals, d_out):
  q, k, v, saved, out = residuals
  probs = _probs(q, k, *saved) if recompute else saved                 # [batch, heads, q, kv]
  d_v = jnp.einsum("bhqk,bhqd->bhkd", probs.astype(d_out.dtype), d_out)
  d_probs = jnp.einsum("bhqd,bhkd->bhqk", d_out, v).astype(jnp.float32)
  row = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), -1, keepdims=True)
  d_logits = (probs * (d_probs - row)).astype(q.dtype)                 # [batch, heads, q, kv]
  d_q = jnp.einsum("bhqk,bhkd->bhqd", d_logits, k)
  d_k = jnp.einsum("bhqk,bhqd->bhkd", d_logits, q)
  return d_q, d_k, d_v, None


attention_core.defvjp(_attention_core_fwd, _attention_core_bwd)
