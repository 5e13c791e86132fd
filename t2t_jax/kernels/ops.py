"""The one place that chooses a kernel: each job the model and the searches do, run by the
kernel chosen here for the platform the program is built for.

The model reads as the paper: `attention(q, k, v, mask)`, `dropout(x, key, rate)`,
`project_logits(hidden, embedding)`; the searches pick with `top_k`. Which kernel
runs each, and why, is decided here and nowhere else; each kernel lives beside
its reference in its own module of this package (tests hold them equal):
  attention   reference `attention.scaled_dot_product_attention`; kernels
              `attention.fused_attention`'s "core", "core_recompute", "cudnn";
              by the config's `attention_impl` and the platform
  dropout     reference `dropout.threefry_dropout`; kernel `dropout.hash_dropout`;
              by the config's `dropout_generator`
  logits      reference `logits.projection`; kernel `logits.vocab_major_projection`;
              by the layout a search asks for (`logits_layout`); onto a shortlist's
              rows only when a search gives one
  top-k       reference `jax.lax.top_k`; kernels `topk.blocked_top_k(_columns)`;
              by the platform the program is lowered for
  int8        reference `int8.reference_product`; kernels `int8.int8_product`,
              `int8.vocab_major_int8_product`; by the weights (an `int8.Int8Kernel`:
              a model with `quantization="int8"`, model/quantized.py)
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import jax
import jax.numpy as jnp
from jax import lax

from t2t_jax import errors
from t2t_jax.configs import DROPOUT_GENERATORS
from t2t_jax.kernels import attention as attention_lib
from t2t_jax.kernels import dropout as dropout_lib
from t2t_jax.kernels import int8
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.kernels import masks
from t2t_jax.kernels import topk

Array = jax.Array

# Platforms whose programs get cuDNN attention: the names jax.default_backend() and the
# compile-only topologies give NVIDIA GPUs.
CUDNN_PLATFORMS = ("gpu", "cuda")


# -------------------------------------------------------------------------- attention


def fused_attention_kernel(dtype: Any, depth: int, platform: Optional[str] = None) -> str:
  """The fused attention for `platform`'s programs (default: the backend running this
  process): "cudnn" where cuDNN flash attention supports the case (NVIDIA GPU,
  16-bit, depth a multiple of 8 up to 128); on a TPU in 16 bits "core_recompute"
  (`attention_core` recomputing its probabilities: XLA's TPU cost model predicts a
  shorter step, docs/benchmarks.md); else "core" (`attention_core`)."""
  platform = platform or jax.default_backend()
  sixteen_bits = jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)
  if platform in CUDNN_PLATFORMS and sixteen_bits and depth % 8 == 0 and depth <= 128:
    return "cudnn"
  if platform == "tpu" and sixteen_bits:
    return "core_recompute"
  return "core"


def _not_fused(dense: bool, window: Optional[int], d_k: int, d_v: int,
               dropout: bool) -> Optional[str]:
  """Why no fused kernel can run an attention (None: one can)."""
  return ("the mask is a dense bias" if dense else
          "the attention is windowed" if window is not None else
          f"d_k={d_k} != d_v={d_v}" if d_k != d_v else
          "attention dropout is on" if dropout else None)


def attention_for_config(cfg: Any, platform: str) -> str:
  """The `attention_impl` `platform`'s programs run for a config (`configs.ModelConfig` or
  `TransformerConfig`): "fused" resolved to its kernel where every full-sequence layer
  can run it; left "fused" where some layers run the reference anyway."""
  if cfg.attention_impl != "fused":
    return cfg.attention_impl
  if _not_fused(False, cfg.attention_window, cfg.key_depth, cfg.value_depth,
                cfg.attention_dropout_rate > 0):
    return "fused"
  return fused_attention_kernel(cfg.dtype, cfg.key_depth, platform)


def attention_kernel(implementation: str, mask: Union[masks.Mask, Array, None], d_k: int,
                     d_v: int, dtype: Any, dropout: bool = False,
                     probabilities: bool = False) -> str:
  """The kernel one attention runs: "reference", or `fused_attention`'s "core",
  "core_recompute", "cudnn".

  `implementation` is the config's `attention_impl`. The reference runs where it
  is asked for, where the probabilities are wanted (attention maps), and where no
  fused kernel applies (`_not_fused`: a dense bias, a window, d_k != d_v, attention
  dropout); "fused" becomes `fused_attention_kernel` for the backend running this
  process. "cudnn" that cannot apply is an error, never a silent fallback.
  """
  if implementation == "reference" or probabilities:
    return "reference"
  dense = not isinstance(mask, masks.Mask)
  why = _not_fused(dense, None if dense else mask.window, d_k, d_v, dropout)
  if why and implementation == "cudnn":
    raise ValueError(f"cuDNN attention cannot run here ({why}); use "
                     "--config.attention_impl=fused or reference")
  if why:
    return "reference"
  if implementation == "fused":
    return fused_attention_kernel(dtype, d_k)
  return implementation


def attention(q: Array, k: Array, v: Array, mask: Union[masks.Mask, Array, None], *,
              implementation: str = "fused", dtype: Any = None, dropout_rate: float = 0.0,
              dropout_rng: Optional[Array] = None,
              probabilities: bool = False) -> tuple[Array, Optional[Array]]:
  """softmax(q k^T / sqrt(d_k) + mask) v for every head, by the kernel `attention_kernel` picks.

  Args:
    q: [batch, q_length, heads, d_k] queries.
    k: [batch, kv_length, heads, d_k] keys.
    v: [batch, kv_length, heads, d_v] values.
    mask: a `masks.Mask`, or an additive bias broadcastable to [batch, heads,
      q_length, kv_length] (`masks.mask_to_bias`), or None.
    implementation: the config's `attention_impl`.
    dtype: compute dtype of the products (default: q's); the softmax is float32.
    dropout_rate, dropout_rng: attention dropout on the probabilities, when a key
      is given.
    probabilities: the caller wants the probabilities.

  Returns:
    output [batch, q_length, heads, d_v] in `dtype`, and the probabilities [batch,
    heads, q_length, kv_length] float32 before dropout (None from a fused kernel,
    whose padded query rows are zeros).
  """
  dropout = dropout_rng is not None and dropout_rate > 0.0
  kernel = attention_kernel(implementation, mask, k.shape[-1], v.shape[-1], dtype or q.dtype,
                            dropout, probabilities)
  if kernel == "reference":
    bias = masks.mask_to_bias(mask.dense()) if isinstance(mask, masks.Mask) else mask
    return attention_lib.scaled_dot_product_attention(
        q, k, v, bias, dropout_rng=dropout_rng, dropout_rate=dropout_rate,
        deterministic=not dropout, dtype=dtype)
  if kernel in ("core", "core_recompute"):  # any backend builds these
    return attention_lib.fused_attention(q, k, v, mask, dtype, kernel), None
  try:
    return attention_lib.fused_attention(q, k, v, mask, dtype, kernel), None
  except (NotImplementedError, RuntimeError, ValueError) as e:  # cuDNN checks while tracing
    raise ValueError(f"{kernel} attention cannot be built ({errors.one_line(e)}); use "
                     "--config.attention_impl=core") from e


# ---------------------------------------------------------------------------- dropout


def dropout(x: Array, key: Array, rate: float, generator: str = "hash") -> Array:
  """Inverted dropout of `x` at `rate` with masks from `key` (typed or raw PRNG key).

  `generator` is the config's `dropout_generator`: "hash" (`dropout.hash_dropout`,
  which XLA fuses and the backward pass recomputes) or "threefry" (the reference,
  `jax.random.bernoulli`); the same on every platform.
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
    return dropout_lib.threefry_dropout(x, key, rate)
  return dropout_lib.hash_dropout(x, dropout_lib.seeds(key), rate)


# ----------------------------------------------------------------------------- logits


def logits_layout(models: int) -> str:
  """The layout a search over `models` models asks its step function for.

  One model's logits go to the search as they are, vocabulary-major (read in place,
  decoding/next_token.py); an ensemble averages row-major log-probabilities.
  """
  return "vocab_major" if models == 1 else "row_major"


def project_logits(hidden: Array, kernel: Array | int8.Int8Kernel, layout: str = "row_major",
                   shortlist: Optional[Array] = None) -> logits_lib.Logits:
  """The output projection of hidden [..., d_model] by the pre-softmax weights [vocab, d_model].

  "row_major": logits [..., vocab]; "vocab_major" (hidden [rows, d_model] only):
  `logits.VocabMajor` [vocab, rows]. Operands in hidden's dtype, logits float32;
  int8 weights (`int8.Int8Kernel`) multiply in int8 (`int8_dense`).
  `shortlist` [size] (hidden [rows, d_model] only): only those rows of the weights
  are multiplied (`logits.shortlist_kernel`); "vocab_major" gives `VocabMajor`
  [size, rows] with the ids, "row_major" [rows, vocab] with the others at NEG_INF.
  """
  if layout not in logits_lib.LAYOUTS:
    raise ValueError(f"logits layout {layout!r} is not one of {logits_lib.LAYOUTS}")
  quantized = isinstance(kernel, int8.Int8Kernel)
  if shortlist is not None:
    vocab = (kernel.values if quantized else kernel).shape[0]
    listed = _vocab_major(hidden, int8.take_rows(kernel, shortlist) if quantized
                          else logits_lib.shortlist_kernel(kernel, shortlist))
    listed = logits_lib.VocabMajor(listed.logits, shortlist, vocab)
    return listed if layout == "vocab_major" else logits_lib.row_major(listed)
  if layout == "vocab_major":
    return _vocab_major(hidden, kernel)
  if quantized:
    return int8.int8_product(hidden, kernel)
  return logits_lib.projection(hidden, kernel)


def _vocab_major(hidden: Array, kernel: Array | int8.Int8Kernel) -> logits_lib.VocabMajor:
  if isinstance(kernel, int8.Int8Kernel):
    return logits_lib.VocabMajor(int8.vocab_major_int8_product(hidden, kernel))
  return logits_lib.vocab_major_projection(hidden, kernel)


# ------------------------------------------------------------------------------- int8


def int8_weights(weights: Array) -> int8.Int8Kernel:
  """weights [out, in] float32 as `int8_dense` takes them: int8, one scale per output
  channel (`int8.quantize`)."""
  return int8.quantize(weights)


def int8_dense(x: Array, kernels: int8.Int8Kernel | Sequence[int8.Int8Kernel]) -> Array:
  """x [..., in] by int8 weights [out, in] -> [..., out] float32: `int8.int8_product`, x
  quantised per row. Several kernels over the same inputs run as one product, their
  outputs side by side. The product runs in int8 x int8 -> int32: weights converted
  back to float32 inside the program run slower than float32 ones (docs/benchmarks.md,
  "int8 decoding")."""
  if not isinstance(kernels, int8.Int8Kernel):
    kernels = int8.concatenate(kernels)
  return int8.int8_product(x, kernels)


# ------------------------------------------------------------------------------ top-k
# Chosen inside the program by the platform it is compiled for (`lax.platform_dependent`),
# so a program built here for a TPU gets the TPU's choice: `jax.lax.top_k` itself, which
# XLA's TPU cost model predicts faster than the blocked one over 256 x 37000
# (docs/benchmarks.md, "compiler predictions"); elsewhere `topk.blocked_top_k`.


def top_k(x: Array, n: int) -> tuple[Array, Array]:
  """`jax.lax.top_k(x, n)`: itself on a TPU, `topk.blocked_top_k` elsewhere."""
  return lax.platform_dependent(x, tpu=lambda x: tuple(jax.lax.top_k(x, n)),
                                default=lambda x: topk.blocked_top_k(x, n))


def top_k_columns(x: Array, n: int) -> tuple[Array, Array]:
  """`jax.lax.top_k(x.T, n)` for x [size, columns]: itself on a TPU,
  `topk.blocked_top_k_columns` elsewhere."""
  return lax.platform_dependent(x, tpu=lambda x: tuple(jax.lax.top_k(x.T, n)),
                                default=lambda x: topk.blocked_top_k_columns(x, n))
