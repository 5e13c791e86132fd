"""Which kernel runs each job, for the platform a program is built for: the one place that chooses,
and what hands the choices to the model and the search.

    plugins = choice.plugins(cfg)       # model.plugins.Plugins for cfg (a configs.ModelConfig)
    transformer.Transformer(cfg, plugins), transformer.decode_features(cfg, ..., plugins)
    output = choice.output_layer(cfg)   # logits.OutputLayer: how a search projects the features

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
              swap-in `logits.blocked_best_columns`; chosen inside the program by the
              platform it is lowered for, beside the kernels (`logits.chosen_top_k`,
              `logits.chosen_best_columns`), so that the search imports nothing of the model
What each model field chooses (`plugins`, `output_layer`):
  attention_impl     the attention the model runs: "reference" the model's own
                     `dot_product_attention`; otherwise `Attention`, which runs the kernel
                     `attention_kernel` picks for each attention
  dropout_generator  "hash": `dropout.dropout` (masks from an index hash); "threefry": the
                     model's own `layers.dropout` (`jax.random.bernoulli`); the same on
                     every platform
  quantization       "int8" or "bfloat16" (decoding only): the products of quantization/int8.py
                     or quantization/bfloat16.py as the model's `dense` and `fused_dense` and the
                     search's output layer; each module is imported only then, so training
                     and a float32 model never load it
"""

from __future__ import annotations

import functools
import platform
import dataclasses
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp

from t2t_jax import errors
from t2t_jax.configs import ModelConfig
from t2t_jax.kernels import dropout
from t2t_jax.kernels import fused_attention
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import layers
from t2t_jax.model import plugins as plugins_lib

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


# ------------------------------------------------------------------ what the model takes


@dataclasses.dataclass(frozen=True)
class Attention:
  """The model's `attention_fn` for an `attention_impl` other than "reference": each call runs
  the kernel `choice.attention_kernel` picks for it (`model.attention.dot_product_attention`
  where none applies, or where the probabilities are wanted)."""
  implementation: str

  def __call__(self, q: Array, k: Array, v: Array, mask: Union[attention_lib.Mask, Array, None],
               *, dtype: Any = None, dropout_rate: float = 0.0,
               dropout_rng: Optional[Array] = None,
               probabilities: bool = False) -> tuple[Array, Optional[Array]]:
    dropout_on = dropout_rng is not None and dropout_rate > 0.0
    structured = isinstance(mask, attention_lib.Mask)
    kernel = attention_kernel(
        self.implementation, dense=not structured, window=mask.window if structured else None,
        d_k=k.shape[-1], d_v=v.shape[-1], dtype=dtype or q.dtype, dropout=dropout_on,
        probabilities=probabilities)
    if kernel == "reference":
      return attention_lib.dot_product_attention(q, k, v, mask, dtype=dtype,
                                                 dropout_rate=dropout_rate,
                                                 dropout_rng=dropout_rng)
    if kernel in ("core", "core_recompute"):  # any backend builds these
      return fused_attention.fused_attention(q, k, v, mask, dtype, kernel), None
    try:
      return fused_attention.fused_attention(q, k, v, mask, dtype, kernel), None
    except (NotImplementedError, RuntimeError, ValueError) as e:  # cuDNN checks while tracing
      raise ValueError(f"{kernel} attention cannot be built ({errors.one_line(e)}); use "
                       "--config.attention_impl=core") from e


def plugins(cfg: ModelConfig) -> plugins_lib.Plugins:
  """The model's plug-ins for `cfg` (module docstring): what training and decoding hand in."""
  chosen = plugins_lib.Plugins(
      attention_fn=(attention_lib.dot_product_attention if cfg.attention_impl == "reference"
                    else Attention(cfg.attention_impl)),
      dropout_fn=dropout.dropout if cfg.dropout_generator == "hash" else layers.dropout)
  products = _products(cfg)
  if products is None:
    return chosen
  return chosen.replace(dense=products.dense, fused_dense=products.fused_dense)


def output_layer(cfg: ModelConfig) -> logits_lib.OutputLayer:
  """How a search projects `cfg`'s decoder features onto the vocabulary (module docstring)."""
  products = _products(cfg)
  return logits_lib.OutputLayer() if products is None else products.OUTPUT


def _products(cfg: ModelConfig) -> Any:
  """The module of a quantized model's products, imported only for one; None for float."""
  # pylint: disable=import-outside-toplevel
  if cfg.quantization == "int8":
    from t2t_jax.quantization import int8
    return int8
  if cfg.quantization == "bfloat16":
    from t2t_jax.quantization import bfloat16
    return bfloat16
  return None


# ----------------------------------------------------------------------------- logits


def logits_layout(models: int) -> str:
  """The layout a search over `models` models asks its step function for.

  One model's logits go to the search as they are, vocabulary-major (read in place by
  `decoding.beam_search.best`); an ensemble averages row-major log-probabilities.
  """
  return "vocab_major" if models == 1 else "row_major"


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
