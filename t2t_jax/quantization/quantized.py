"""A decoding model's parameters from a float32 model's, made once when a model is loaded.

A config with `quantization="int8"` runs the same Transformer with int8 plug-ins
(quantization/int8.py, handed in by kernels/choice.py): every Dense product (attention
projections, feed-forward) a `quantization.int8.Int8Dense` and the search's output projection
over an int8 copy of the pre-softmax weights ("output_projection", beside the float32
embeddings the lookups read); embeddings, LayerNorm, biases and the attention itself stay
float32 and so do the softmax and the search. `quantize_params` turns a trained model's
float32 params into that model's: each kernel [*in, *out] flattened to [in, out],
transposed and quantised per output channel (`quantization.int8.quantize`).

A config with `quantization="bfloat16"` runs the same Transformer with bfloat16 plug-ins
(quantization/bfloat16.py): its products' operands in bfloat16 accumulating in float32 and
everything else float32; `quantize_params` casts its Dense kernels and embedding tables to
bfloat16 once (`BFLOAT16`), so that no program casts them at every step.
"""

from __future__ import annotations

import functools
from typing import Any

import flax
import jax
import jax.numpy as jnp

from t2t_jax.configs import ModelConfig
from t2t_jax.kernels import choice
from t2t_jax.quantization import int8
from t2t_jax.model import transformer

Params = Any


def _output_embedding(cfg: ModelConfig, flat_params: dict[tuple[str, ...], Any]) -> jax.Array:
  """The float32 pre-softmax weights [target vocab, d_model] (`Transformer.output_weights`)."""
  return flat_params[(transformer.EMBEDDING_PARAMS[cfg.embeddings]["output"], "embedding")]


# One program per kernel shape (a base model has four), not one per operation and shape.
@functools.partial(jax.jit, static_argnames="transpose")
def _quantize(weights: jax.Array, transpose: bool = True) -> int8.Int8Kernel:
  """weights [in, out] (`transpose`) or [out, in] -> `int8.Int8Kernel` [out, in]."""
  return int8.quantize(weights.T if transpose else weights)


# The parameters a quantization="bfloat16" model holds in bfloat16: the products' weights.
BFLOAT16 = ("kernel", "embedding")


def quantize_params(cfg: ModelConfig, params: Params) -> Params:
  """A float32 model's params -> the params of the model `cfg` (quantization "int8" or
  "bfloat16") builds.

  int8: the int8 model's parameter tree, from `transformer.init_params`' shapes with its
  plug-ins, says which arrays become `int8.Int8Kernel`s; every other array is the float32
  one; "output_projection" is the int8 copy of the pre-softmax weights
  (`int8.output_kernel`).
  bfloat16: the same tree, the `BFLOAT16` arrays cast to bfloat16.
  """
  if cfg.quantization == "bfloat16":
    return jax.tree_util.tree_map_with_path(
        lambda path, x: x.astype(jnp.bfloat16) if path[-1].key in BFLOAT16 else x,
        flax.core.unfreeze(params))
  if cfg.quantization != "int8":
    raise ValueError(f"quantize_params makes int8 or bfloat16 params; the config has "
                     f"quantization={cfg.quantization!r}")
  target = flax.traverse_util.flatten_dict(jax.eval_shape(
      functools.partial(transformer.init_params, cfg, plugins=choice.plugins(cfg)),
      jax.random.key(0)))
  source = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
  quantized = {("output_projection",): _quantize(_output_embedding(cfg, source), transpose=False)}
  for path, want in target.items():
    if isinstance(want, int8.Int8Kernel):
      n_out, n_in = want.values.shape
      quantized[path] = _quantize(source[path].reshape(n_in, n_out))  # [*in, *out] -> [in, out]
    elif path in source and source[path].shape == want.shape:
      quantized[path] = source[path]
    else:
      raise ValueError(f"the params do not fit the model: {'/'.join(path)} is "
                       f"{getattr(source.get(path), 'shape', 'missing')}, the model's {want.shape}")
  return flax.traverse_util.unflatten_dict(quantized)
