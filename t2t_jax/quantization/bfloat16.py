"""bfloat16 products for decoding: the plug-ins of a `quantization="bfloat16"` model.

The model's weights are cast to bfloat16 once at load (quantization/quantized.py); every product
multiplies bfloat16 operands and accumulates in and returns float32, and everything else
(activations, LayerNorm, the attention's own products over float32 caches, softmax, the
search) stays float32. Measured on an AMD EPYC with avx512_bf16 and avx512_vnni (no AMX),
[64..256, 512] x [512, 2048]: bfloat16 x bfloat16 -> float32 runs at twice float32's speed,
-> bfloat16 no faster than float32 (XLA CPU rounds each result apart); no AMX or AVX2-only
CPU is measured yet. The plug-ins (model/plugins.py; kernels/choice.py imports this module
only for such a model): every
projection a Dense of those products (`dense`), decoding's query, key and value projections
one such product (`fused_dense`), and the search's output projection over the bfloat16
pre-softmax weights (`OUTPUT`). On XLA CPU the attention's small batched products run
faster in float32 than in bfloat16 (docs/model.md), so the attention keeps the model's
float32.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from t2t_jax.kernels import logits as logits_lib

Array = jax.Array


def float32_products(*args: Any, **kwargs: Any) -> Array:
  """`lax.dot_general` accumulating in and returning float32, whatever its operands: the
  products of a `quantization="bfloat16"` model."""
  return lax.dot_general(*args, preferred_element_type=jnp.float32, **kwargs)


def dense(features: Union[int, tuple[int, ...]], *, axis: Union[int, tuple[int, ...]] = -1,
          use_bias: bool = True, dtype: Any = None,
          kernel_init: Callable = nn.initializers.xavier_uniform(),
          name: Optional[str] = None) -> nn.Module:
  """The bfloat16 model's `dense` plug-in (`model.layers.dense`'s arguments): the same layer,
  its operands bfloat16 and its products `float32_products`, whatever `dtype`."""
  del dtype
  kwargs = dict(use_bias=use_bias, dtype=jnp.bfloat16, param_dtype=jnp.float32,
                kernel_init=kernel_init, name=name, dot_general=float32_products)
  if isinstance(features, int) and axis == -1:
    return nn.Dense(features, **kwargs)
  return nn.DenseGeneral(features, axis=axis, **kwargs)


def fused_dense(x: Array, params: list[dict[str, Any]], dtype: Any) -> Array:
  """The bfloat16 model's `fused_dense` plug-in: `model.layers.fused_dense` with bfloat16
  operands and float32 results."""
  del dtype
  kernel = jnp.concatenate([p["kernel"].reshape(p["kernel"].shape[0], -1) for p in params],
                           axis=1)                                     # [d_model, sum]
  return jnp.dot(x.astype(jnp.bfloat16), kernel.astype(jnp.bfloat16),
                 preferred_element_type=jnp.float32)


def project_logits(hidden: Array, kernel: Array, layout: str = "row_major") -> logits_lib.Logits:
  """`logits.project_logits` with bfloat16 operands (the weights cast at load) and float32
  logits."""
  return logits_lib.project_logits(hidden.astype(jnp.bfloat16), kernel, layout)


# The search's output projection of a bfloat16 model.
OUTPUT = logits_lib.OutputLayer(project=project_logits)
