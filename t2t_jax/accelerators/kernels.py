"""The kernels a program gets, chosen for the platform that will run it.

`for_platform(cfg, platform)` turns the config's "fused" attention into the
kernel of `platform`'s programs ("cudnn" on NVIDIA GPUs where cuDNN flash
attention supports the layers, "core_recompute" on TPUs in 16 bits, "core"
elsewhere: `layers.fused_implementation`), so that a program compiled here for
an H100 is the program an H100 would build for itself, not the one this CPU
would. The beam search's top-k is chosen inside the program by the platform it
is lowered for (decoding/topk.py: the TPU's own `lax.top_k`, the blocked one
elsewhere). Everything else the comparisons of docs/benchmarks.md ("compiler
predictions") looked at keeps one default on every platform.
"""

from __future__ import annotations

from t2t_jax.configs import TransformerConfig
from t2t_jax.model import layers


def attention_for_platform(cfg: TransformerConfig, platform: str) -> str:
  """The `attention_impl` `platform`'s programs run for `cfg` ("fused" resolved)."""
  if cfg.attention_impl != "fused":
    return cfg.attention_impl
  # The fused path is taken only by layers without windows, attention dropout or
  # d_k != d_v (MultiHeadAttention._fused); the others run the reference anyway.
  if cfg.attention_window is not None or cfg.attention_dropout_rate > 0 or (
      cfg.key_depth != cfg.value_depth):
    return "fused"
  return layers.fused_implementation(cfg.dtype, cfg.key_depth, platform)


def for_platform(cfg: TransformerConfig, platform: str) -> TransformerConfig:
  """`cfg` with the kernels `platform` ("cpu", "cuda"/"gpu", "tpu") runs."""
  return cfg.replace(attention_impl=attention_for_platform(cfg, platform))
