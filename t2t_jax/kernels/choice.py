"""Which kernel runs each job, for the platform a program is built for: the one place that chooses.

Each job has its reference where a reader meets it and faster swap-ins here in kernels/,
held equal to the reference by the tests:
  attention   reference `model.attention.scaled_dot_product_attention`; swap-ins
              `fused_attention.fused_attention`'s "core", "core_recompute", "cudnn";
              by the config's `attention_impl`, the platform and what the layer needs
              (`attention_kernel`)
  logits      reference `logits.projection` [rows, vocab]; swap-in
              `logits.vocab_major_projection` [vocab, rows], which one model's searches
              read in place (`logits_layout`)
  top-k       reference `jax.lax.top_k`; swap-in `logits.blocked_top_k`, and for
              vocabulary-major logits (with their normaliser) reference `logits.best_columns`,
              swap-in `logits.blocked_best_columns`; by the platform the program is lowered
              for (`top_k`, `best_columns`)
Dropout's masks are chosen by the config's `dropout_generator` (`model.layers.dropout`:
`jax.random.bernoulli`, or `dropout.hash_dropout`), the same on every platform.
"""

from __future__ import annotations

import functools
import logging
import platform
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax import lax

from t2t_jax.kernels import logits as logits_lib

Array = jax.Array
log = logging.getLogger(__name__)

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


def attention_kernel(implementation: str, *, dense: bool, window: Optional[int], d_k: int,
                     d_v: int, dtype: Any, dropout: bool = False,
                     probabilities: bool = False) -> str:
  """The kernel one attention runs: "reference", or `fused_attention`'s "core",
  "core_recompute", "cudnn".

  `implementation` is the config's `attention_impl`. The reference runs where it
  is asked for, where the probabilities are wanted (attention maps), and where no
  fused kernel applies (`_not_fused`: a `dense` bias rather than a structured mask,
  a `window`, d_k != d_v, attention `dropout`); "fused" becomes
  `fused_attention_kernel` for the backend running this process. "cudnn" that
  cannot apply is an error, never a silent fallback.
  """
  if implementation == "reference" or probabilities:
    return "reference"
  why = _not_fused(dense, None if dense else window, d_k, d_v, dropout)
  if why and implementation == "cudnn":
    raise ValueError(f"cuDNN attention cannot run here ({why}); use "
                     "--config.attention_impl=fused or reference")
  if why:
    return "reference"
  if implementation == "fused":
    return fused_attention_kernel(dtype, d_k)
  return implementation


# ----------------------------------------------------------------------------- logits


def logits_layout(models: int) -> str:
  """The layout a search over `models` models asks its step function for.

  One model's logits go to the search as they are, vocabulary-major (read in place by
  `decoding.beam_search.best`); an ensemble averages row-major log-probabilities.
  """
  return "vocab_major" if models == 1 else "row_major"


# ------------------------------------------------------------------------------ top-k
# Chosen inside the program by the platform it is compiled for (`lax.platform_dependent`),
# so a program built here for a TPU gets the TPU's choice: `jax.lax.top_k` itself, which
# XLA's TPU cost model predicts faster than the blocked one over 256 x 37000
# (docs/benchmarks.md, "compiler predictions"); elsewhere the blocked ones.


def top_k(x: Array, n: int) -> tuple[Array, Array]:
  """`jax.lax.top_k(x, n)`: itself on a TPU, `logits.blocked_top_k` elsewhere."""
  return lax.platform_dependent(x, tpu=lambda x: tuple(jax.lax.top_k(x, n)),
                                default=lambda x: logits_lib.blocked_top_k(x, n))


def best_columns(x: Array, n: int, skip: int) -> tuple[Array, Array]:
  """`logits.best_columns(x, n, skip)` for logits x [size, columns] (each column's n best
  log-probabilities, row `skip` left out of the picking): itself on a TPU,
  `logits.blocked_best_columns` elsewhere."""
  return lax.platform_dependent(x, tpu=lambda x: logits_lib.best_columns(x, n, skip),
                                default=lambda x: logits_lib.blocked_best_columns(x, n, skip))


# ------------------------------------------------------------------------------ the CPU
# The instruction sets a CPU's products may use, as /proc/cpuinfo (lscpu) names them, best
# first: AMX tiles (Sapphire Rapids and later Xeons), AVX-512 with bfloat16 and VNNI
# (int8 dot products), AVX-512, AVX2. XLA's CPU backend picks its instructions itself;
# the choices below are of the program's form where one form is measured faster.
CPU_FLAGS = ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f", "avx2")
CPUINFO = "/proc/cpuinfo"


@functools.cache
def _cpuinfo(path: str) -> tuple[str, frozenset[str]]:
  model, flags = "", frozenset()
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
          model = value.strip()
        elif key.strip() == "flags" and not flags:
          flags = frozenset(value.split())
        if model and flags:
          break
  except OSError:
    pass
  return model or platform.processor() or "unknown CPU", flags


def cpu_flags(path: str = CPUINFO) -> frozenset[str]:
  """This host's CPU feature flags among `CPU_FLAGS` (read once; empty where unknown)."""
  return _cpuinfo(path)[1] & frozenset(CPU_FLAGS)


def cpu_description(path: str = CPUINFO) -> str:
  """The CPU's model name and its `CPU_FLAGS`, e.g. "Intel(R) Xeon(R) Platinum 8480+
  (amx_bf16 amx_int8 avx512_bf16 avx512_vnni avx512f avx2)"."""
  model, _ = _cpuinfo(path)
  flags = cpu_flags(path)
  named = " ".join(f for f in CPU_FLAGS if f in flags) or "none of " + "/".join(CPU_FLAGS)
  return f"{model} ({named})"


def bfloat16_results() -> Any:
  """The dtype a bfloat16 product (a `quantization="bfloat16"` model's) accumulates in and
  returns: float32, on every CPU measured so far; logged at debug level with the CPU's flags.

  Measured on an AMD EPYC with avx512_bf16 and avx512_vnni (no AMX), [64..256, 512] x
  [512, 2048]: bfloat16 x bfloat16 -> float32 runs at twice float32's speed, -> bfloat16
  no faster than float32 (XLA CPU rounds each result apart). No AMX or AVX2-only CPU is
  measured yet; where another form is found faster there, `cpu_flags` chooses it here.
  """
  _log_once(f"bfloat16 products accumulate in and return float32 on {cpu_description()}")
  return jnp.float32


@functools.cache
def _log_once(message: str) -> None:
  log.debug("kernels.choice: %s", message)
