"""The kernels a program gets, chosen for the platform that will run it.

`for_platform(cfg, platform)` fixes the config's "fused" attention to the kernel
of `platform`'s programs ("cudnn" on NVIDIA GPUs where cuDNN flash attention
supports the layers, "core_recompute" on TPUs in 16 bits, "core" elsewhere), so
that a program compiled here for an H100 is the program an H100 would build for
itself, not the one this CPU would. The choice itself is kernels/choice.py's, the one
place every kernel is chosen: the beam search's top-k there follows the platform
a program is lowered for by itself (the TPU's own `lax.top_k`, the blocked one
elsewhere). Everything else the comparisons of docs/benchmarks.md ("compiler
predictions") looked at keeps one default on every platform.
"""

from __future__ import annotations

from t2t_jax.configs import TransformerConfig
from t2t_jax.kernels import choice


def for_platform(cfg: TransformerConfig, platform: str) -> TransformerConfig:
  """`cfg` with the kernels `platform` ("cpu", "cuda"/"gpu", "tpu") runs."""
  return cfg.replace(attention_impl=choice.attention_for_config(cfg, platform))
