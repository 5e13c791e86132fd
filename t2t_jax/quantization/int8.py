"""Int8 products for decoding: weights quantised per output channel, activations per row.

A weight matrix becomes an `Int8Kernel`: int8 values [out, in] (one row per output
channel, as CTranslate2 stores them) and a float32 scale [out], weights ~= values *
scale[:, None], the scale being the channel's absolute maximum / 127. At run time each
activation row [in] is quantised the same way (`quantize_rows`), the product runs in
int8 x int8 -> int32 and the two scales turn the sums back into float32
(`int8_product`, `vocab_major_int8_product`). Only the integer product pays on XLA
CPU: int8 weights converted to float32 inside a program run slower than float32 weights
(docs/benchmarks.md, "int8 decoding"). The reference, `reference_product`, multiplies
the unquantised activations by the dequantised weights; tests/quantization/test_int8.py
holds the two within the rounding error of the activations' quantisation.

A config with `quantization="int8"` (decoding only: `t2t-translate --int8`) hands the
Transformer the plug-ins here (model/plugins.py; kernels/choice.py imports this module only
then, so training and a float32 model never load it): every projection an `Int8Dense`
(`dense`), decoding's query, key and value projections one int8 product (`fused_dense`),
and the search's output projection int8 over the int8 copy of the pre-softmax weights
(`OUTPUT`). quantization/quantized.py converts a float32 model's params.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from t2t_jax.kernels import logits as logits_lib

Array = jax.Array

# Symmetric int8: -127..127, so that negation never overflows and zero is exact.
LEVELS = 127


@flax.struct.dataclass
class Int8Kernel:
  """A weight matrix quantised per output channel: values [out, in] int8, scale [out] float32."""
  values: Array
  scale: Array


def _scale(absmax: Array) -> Array:
  # An all-zero channel (or row) keeps scale 1: its values are 0 whatever the scale,
  # and no division by zero makes NaN.
  return jnp.where(absmax > 0, absmax / LEVELS, 1.0).astype(jnp.float32)


def _round(x: Array, scale: Array) -> Array:
  return jnp.clip(jnp.round(x / scale), -LEVELS, LEVELS).astype(jnp.int8)


def quantize(weights: Array) -> Int8Kernel:
  """weights [out, in] float -> `Int8Kernel`, one scale per output channel (row)."""
  weights = jnp.asarray(weights, jnp.float32)
  scale = _scale(jnp.max(jnp.abs(weights), axis=1))                  # [out]
  return Int8Kernel(_round(weights, scale[:, None]), scale)


def dequantize(kernel: Int8Kernel) -> Array:
  """The weights [out, in] float32 an `Int8Kernel` stands for."""
  return kernel.values.astype(jnp.float32) * kernel.scale[:, None]


def concatenate(kernels: Sequence[Int8Kernel]) -> Int8Kernel:
  """Kernels over the same inputs as one, their output channels one after another."""
  return Int8Kernel(jnp.concatenate([k.values for k in kernels], axis=0),
                    jnp.concatenate([k.scale for k in kernels], axis=0))


def quantize_rows(x: Array) -> tuple[Array, Array]:
  """x [..., in] float -> values [..., in] int8 and scale [..., 1] float32, one per row."""
  x = x.astype(jnp.float32)
  scale = _scale(jnp.max(jnp.abs(x), axis=-1, keepdims=True))
  return _round(x, scale), scale


def int8_product(x: Array, kernel: Int8Kernel) -> Array:
  """x [..., in] by the kernel's weights -> [..., out] float32, multiplied in int8 x int8 -> int32."""
  values, scale = quantize_rows(x)
  sums = jnp.einsum("...i,oi->...o", values, kernel.values,
                    preferred_element_type=jnp.int32)
  return sums.astype(jnp.float32) * scale * kernel.scale


def vocab_major_int8_product(hidden: Array, kernel: Int8Kernel) -> Array:
  """`int8_product` transposed: hidden [rows, in] -> [out, rows] float32 (kernels/logits.py's
  vocabulary-major layout)."""
  values, scale = quantize_rows(hidden)                               # [rows, in], [rows, 1]
  sums = jnp.einsum("oi,ri->or", kernel.values, values, preferred_element_type=jnp.int32)
  return sums.astype(jnp.float32) * kernel.scale[:, None] * scale[:, 0]


def reference_product(x: Array, kernel: Int8Kernel) -> Array:
  """The reference: x [..., in] float32 by the dequantised weights -> [..., out] float32."""
  return jnp.einsum("...i,oi->...o", x.astype(jnp.float32), dequantize(kernel))


def int8_dense(x: Array, kernels: Int8Kernel | Sequence[Int8Kernel]) -> Array:
  """x [..., in] by int8 weights [out, in] -> [..., out] float32: `int8_product`, x
  quantised per row. Several kernels over the same inputs run as one product, their
  outputs side by side. The product runs in int8 x int8 -> int32: weights converted
  back to float32 inside the program run slower than float32 ones (docs/benchmarks.md,
  "int8 decoding")."""
  if not isinstance(kernels, Int8Kernel):
    kernels = concatenate(kernels)
  return int8_product(x, kernels)


def project_logits(hidden: Array, kernel: Int8Kernel, layout: str = "row_major") -> logits_lib.Logits:
  """`logits.project_logits` with int8 pre-softmax weights [vocab, d_model]."""
  if layout not in logits_lib.LAYOUTS:
    raise ValueError(f"logits layout {layout!r} is not one of {logits_lib.LAYOUTS}")
  if layout == "vocab_major":
    return logits_lib.VocabMajor(vocab_major_int8_product(hidden, kernel))
  return int8_product(hidden, kernel)


def output_kernel(params: Any, kernel: Array) -> Int8Kernel:
  """The int8 copy of the pre-softmax weights an int8 model's params hold beside the float32
  embeddings the lookups read ("output_projection", made by quantization/quantized.py)."""
  del kernel
  return params["output_projection"]


# The search's output projection of an int8 model.
OUTPUT = logits_lib.OutputLayer(project=project_logits, kernel=output_kernel)


class Int8Dense(nn.Module):
  """`nn.DenseGeneral` for decoding with int8 weights: x [..., *in] -> [..., *features] float32.

  Contracts x's last `inputs` axes with an `Int8Kernel` "kernel" ([prod(features),
  prod(in)], the float kernel flattened and transposed: quantization/quantized.py) and adds a
  float32 "bias" [*features] (as `nn.DenseGeneral`'s) if `use_bias`. Its own initial
  values are zeros: its parameters come from a float32 model's.
  """
  features: Union[int, tuple[int, ...]]
  inputs: int = 1
  use_bias: bool = True

  @nn.compact
  def __call__(self, x: Array) -> Array:
    features = self.features if isinstance(self.features, tuple) else (self.features,)
    batch, n_in = x.shape[:-self.inputs], math.prod(x.shape[-self.inputs:])
    n_out = math.prod(features)
    kernel = self.param("kernel", lambda _: Int8Kernel(
        jnp.zeros((n_out, n_in), jnp.int8), jnp.ones((n_out,), jnp.float32)))
    y = int8_dense(x.reshape(*batch, n_in), kernel)                   # [..., prod(features)]
    if self.use_bias:
      y = y + self.param("bias", nn.initializers.zeros, features, jnp.float32).reshape(n_out)
    return y.reshape(*batch, *features)


def dense(features: Union[int, tuple[int, ...]], *, axis: Union[int, tuple[int, ...]] = -1,
          use_bias: bool = True, dtype: Any = None, kernel_init: Any = None,
          name: Optional[str] = None) -> Int8Dense:
  """The int8 model's `dense` plug-in (`model.layers.dense`'s arguments): an `Int8Dense`
  over the input axes `axis`; its products are int8 and its outputs float32, whatever
  `dtype`; `kernel_init` is unused (the parameters come from a float32 model's)."""
  del dtype, kernel_init
  return Int8Dense(features, inputs=1 if axis == -1 else len(axis), use_bias=use_bias,
                   name=name)


def fused_dense(x: Array, params: list[dict[str, Any]], dtype: Any) -> Array:
  """The int8 model's `fused_dense` plug-in: x by the `Int8Dense` layers' kernels as one int8
  product (`int8_dense`), float32."""
  del dtype
  return int8_dense(x, [p["kernel"] for p in params])
