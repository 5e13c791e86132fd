"""What plugs into the model from outside: the forms its jobs run in.

The model classes hold the paper (model/attention.py, layers.py, encoder_decoder.py,
transformer.py) and run each job in its reference form. A job with another form (a fused
attention kernel, dropout masks from a hash, products in int8 or bfloat16) takes it from a
`Plugins` handed to the model, in the way Flax's own layers take an `attention_fn` or a
`dot_general`:

    attention_fn  (q, k, v, mask, *, dtype, dropout_rate, dropout_rng, probabilities)
                  -> (output, probabilities or None)       `attention.dot_product_attention`
    dropout_fn    (x, key, rate) -> x                       `layers.dropout`
    dense         (features, *, axis, use_bias, dtype, kernel_init, name) -> a Linen layer,
                  every projection's                         `layers.dense`
    fused_dense   (x, [each layer's params], dtype) -> the outputs side by side: decoding's
                  query, key and value projections as one product over the parameters
                  `dense`'s layers hold                      `layers.fused_dense`

`Plugins()` is the paper's reference forms; `kernels.choice.plugins(cfg)` is what a config
asks for (its `attention_impl` and `dropout_generator`; a model for decoding in int8 or
bfloat16 gets its products from quantization/int8.py or quantization/bfloat16.py), and it is what
training and decoding hand in. A `dense` of other parameters (int8 weights and scales) makes another
parameter tree: the params are then that plug-in's (quantization/quantized.py converts them).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import flax.linen as nn
import jax

from t2t_jax.model import attention
from t2t_jax.model import layers

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Plugins:
  """The forms the model's jobs run in (module docstring); the defaults are the references."""
  attention_fn: Callable[..., tuple[Array, Optional[Array]]] = attention.dot_product_attention
  dropout_fn: Callable[[Array, Array, float], Array] = layers.dropout
  dense: Callable[..., nn.Module] = layers.dense
  fused_dense: Callable[[Array, list, Any], Array] = layers.fused_dense

  def replace(self, **changes: Any) -> "Plugins":
    return dataclasses.replace(self, **changes)
