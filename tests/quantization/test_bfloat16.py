"""quantization/bfloat16.py: the bfloat16 model's plug-ins multiply bfloat16 operands into float32
results, the fused projection is the three layers side by side, and the output projection
rounds its features to bfloat16."""

import re

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.quantization import bfloat16
from t2t_jax.kernels import logits as logits_lib

RNG = np.random.default_rng(0)
X = jnp.asarray(RNG.normal(size=(3, 1, 16)), jnp.float32)


def _as_bfloat16(x):
  return np.asarray(jnp.asarray(x).astype(jnp.bfloat16).astype(jnp.float32))


def test_dense_multiplies_bfloat16_operands_into_float32():
  layer = bfloat16.dense((2, 4), use_bias=True, name="query")
  params = layer.init(jax.random.key(0), X)["params"]
  params = jax.tree.map(lambda p: p + 0.25, params)                    # a bias off 0
  y = layer.apply({"params": params}, X)
  assert y.dtype == jnp.float32 and y.shape == (3, 1, 2, 4)
  kernel = _as_bfloat16(params["kernel"]).reshape(16, 8)
  want = _as_bfloat16(X) @ kernel + _as_bfloat16(params["bias"]).reshape(8)
  np.testing.assert_allclose(np.asarray(y).reshape(3, 1, 8), want, rtol=1e-5, atol=1e-5)
  text = jax.jit(lambda p: layer.apply({"params": p}, X)).lower(params).as_text()
  assert re.findall(r"stablehlo.dot_general .*: \(tensor<[^>]*bf16>, tensor<[^>]*bf16>\) -> "
                    r"tensor<[^>]*f32>", text)


def test_fused_dense_is_the_layers_side_by_side():
  layers = [bfloat16.dense((2, depth), use_bias=False) for depth in (4, 4, 3)]
  params = [layer.init(jax.random.key(i), X)["params"] for i, layer in enumerate(layers)]
  fused = bfloat16.fused_dense(X, params, jnp.float32)
  apart = [np.asarray(layer.apply({"params": p}, X)).reshape(3, 1, -1)
           for layer, p in zip(layers, params)]
  assert fused.dtype == jnp.float32
  np.testing.assert_allclose(fused, np.concatenate(apart, axis=-1), rtol=1e-6, atol=1e-6)


def test_the_output_projection_rounds_the_features_to_bfloat16():
  hidden = X[:, 0]
  kernel = jnp.asarray(RNG.normal(size=(11, 16)), jnp.float32).astype(jnp.bfloat16)
  for layout in logits_lib.LAYOUTS:
    logits = logits_lib.row_major(bfloat16.project_logits(hidden, kernel, layout))
    want = _as_bfloat16(hidden) @ np.asarray(kernel, np.float32).T
    assert logits.dtype == jnp.float32
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)
  assert bfloat16.OUTPUT.project is bfloat16.project_logits
