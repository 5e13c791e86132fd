"""model/quantized.py and the int8 and bfloat16 models: their params from float32 ones, their
logits near float32's; the bfloat16 model's products in bfloat16 accumulating in float32.

The int8 model's logits differ from float32's by the rounding of every product's
activations and weights (at most half a step, absmax / 127, per element: kernels/int8.py),
which compounds over the layers; on these tiny random models that is a few percent of the
logits' range, so the bounds below are loose by design and fixed keys make them repeatable.
"""

import collections
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.kernels import int8
from t2t_jax.model import quantized
from t2t_jax.model import transformer
from t2t_jax.train import step as step_lib

# d_k != d_v so that a swapped or mis-flattened projection cannot go unnoticed.
CFG = configs.get_config("demo", vocab_size=23, num_layers=2, d_model=16, d_ff=32, num_heads=2,
                         d_k=8, d_v=6, max_len=16, dropout_rate=0.0)
# Unshared embeddings: the output projection comes from its own table.
CFG_UNSHARED = CFG.replace(share_embeddings=False, positional_encoding="learned", num_layers=1)
# A published model's biases (attention, output): kept float32 beside the int8 products.
CFG_BIASES = CFG.replace(attention_bias=True, output_bias=True, activation="swish", num_layers=1)

RNG = np.random.default_rng(0)
INPUTS = jnp.asarray(RNG.integers(3, 23, (3, 7)), jnp.int32).at[1, 4:].set(0)
TARGETS = jnp.asarray(RNG.integers(3, 23, (3, 6)), jnp.int32).at[2, 3:].set(0)


@functools.lru_cache(maxsize=None)
def _params(cfg):
  params = transformer.init_params(cfg.model, jax.random.key(0))
  # Biases off their initial 0, so that one dropped by the int8 model shows.
  return jax.tree_util.tree_map_with_path(
      lambda path, x: x + 0.5 if getattr(path[-1], "key", "") in ("bias", "output_bias") else x,
      params)


def _int8(cfg):
  return cfg.replace(quantization="int8")


def _forward(cfg, params):
  return np.asarray(transformer.Transformer(cfg.model).apply({"params": params}, INPUTS, TARGETS))


@pytest.mark.parametrize("cfg", [CFG, CFG_UNSHARED], ids=["shared", "unshared"])
def test_quantized_params_are_the_int8_models(cfg):
  params = quantized.quantize_params(_int8(cfg).model, _params(cfg))
  want = jax.eval_shape(functools.partial(transformer.init_params, _int8(cfg).model),
                        jax.random.key(0))
  shapes = lambda tree: jax.tree.map(lambda x: (x.shape, str(x.dtype)), tree)
  assert shapes(params) == shapes(want)
  layer = params["decoder"]["layers_0"]
  assert isinstance(layer["ffn"]["wi"]["kernel"], int8.Int8Kernel)
  # W^O [heads, d_v, d_model] flattened over its inputs: [d_model, heads * d_v].
  assert layer["self_attention"]["out"]["kernel"].values.shape == (16, 2 * 6)
  # The embeddings the lookups read stay float32 and unchanged.
  name = "embedding" if cfg.share_embeddings else "source_embedding"
  np.testing.assert_array_equal(params[name]["embedding"], _params(cfg)[name]["embedding"])


def test_each_int8_kernel_is_its_float_kernel_quantised():
  float_params, params = _params(CFG), quantized.quantize_params(_int8(CFG).model, _params(CFG))
  for path in [("decoder", "layers_1", "cross_attention", "query"),
               ("encoder", "layers_0", "self_attention", "out"),
               ("decoder", "layers_0", "ffn", "wo")]:
    sub = functools.reduce(lambda tree, key: tree[key], path, float_params)["kernel"]
    kernel = functools.reduce(lambda tree, key: tree[key], path, params)["kernel"]
    n_out = kernel.scale.shape[0]
    weights = np.asarray(sub).reshape(-1, n_out).T                      # [out, in]
    step = np.abs(weights).max(axis=1, keepdims=True) / int8.LEVELS
    assert (np.abs(np.asarray(int8.dequantize(kernel)) - weights) <= step / 2 + 1e-7).all()
  np.testing.assert_array_equal(params["output_projection"].values,
                                int8.quantize(float_params["embedding"]["embedding"]).values)


@pytest.mark.parametrize("cfg", [CFG, CFG_UNSHARED, CFG_BIASES], ids=["shared", "unshared", "biases"])
def test_int8_logits_are_close_to_float32s(cfg):
  float_logits = _forward(cfg, _params(cfg))
  logits = _forward(_int8(cfg), quantized.quantize_params(_int8(cfg).model, _params(cfg)))
  spread = float_logits.max() - float_logits.min()
  assert np.abs(logits - float_logits).max() <= 0.05 * spread
  # Not float32 itself: the products did run quantised.
  assert np.abs(logits - float_logits).max() > 1e-6 * spread
  # The output projection is the int8 one.
  if cfg.output_bias:
    return
  hidden, kernel = transformer.Transformer(_int8(cfg).model).apply(
      {"params": quantized.quantize_params(_int8(cfg).model, _params(cfg))}, INPUTS, TARGETS,
      method=transformer.Transformer.features)
  assert isinstance(kernel, int8.Int8Kernel)
  np.testing.assert_array_equal(logits, int8.project_logits(hidden, kernel))


def test_int8_cached_decoding_is_its_full_forward_pass():
  cfg = _int8(CFG)
  params = quantized.quantize_params(cfg.model, _params(CFG))
  full = _forward(cfg, params)
  cache = transformer.init_cache(cfg.model, params, INPUTS, TARGETS.shape[1])
  tokens = jnp.zeros((3,), jnp.int32)
  for position in range(TARGETS.shape[1]):
    logits, cache = transformer.decode_step(cfg.model, params, cache, tokens, position,
                                            "vocab_major")
    # Rows are quantised alike on both paths; float32 sums in another order may round
    # an activation to the neighbouring int8 value, hence a tolerance above float32's.
    real = np.asarray(TARGETS[:, position] != 0)                      # padding is masked there
    np.testing.assert_allclose(logits.logits.T[real], full[real, position],
                               atol=1e-3 * np.abs(full).max())
    tokens = TARGETS[:, position]


def test_float32_params_are_refused_by_the_float_config_and_training_refuses_int8():
  with pytest.raises(ValueError, match="quantize_params makes int8 or bfloat16 params"):
    quantized.quantize_params(CFG.model, _params(CFG))
  with pytest.raises(ValueError, match="quantization='int8' is for decoding only"):
    step_lib.build(_int8(CFG))
  with pytest.raises(ValueError, match="cannot be combined with dtype='bfloat16'"):
    _int8(CFG).replace(dtype="bfloat16")


# ------------------------------------------------------------------------- bfloat16


def _bfloat16(cfg):
  return cfg.replace(quantization="bfloat16")


def _dots_and_converts(cfg, params):
  """The lowered decode step's dot_general operand/result types and converted shapes."""
  cache = transformer.init_cache(cfg.model, params, INPUTS, 8)
  text = jax.jit(lambda p, c: transformer.decode_step(cfg.model, p, c, TARGETS[:, 0], 0,
                                                      "vocab_major")).lower(params, cache).as_text()
  dots = re.findall(r"stablehlo.dot_general .*: \((tensor<[^>]*>), (tensor<[^>]*>)\) -> "
                    r"(tensor<[^>]*>)", text)
  converted = re.findall(r"stablehlo.convert %\S+ : \(tensor<((?:\d+x)*\d+)x(?:bf16|f32)>\)", text)
  return dots, converted


@pytest.mark.parametrize("cfg", [CFG, CFG_UNSHARED, CFG_BIASES],
                         ids=["shared", "unshared", "biases"])
def test_bfloat16_weights_are_cast_once_and_every_product_accumulates_in_float32(cfg):
  params = quantized.quantize_params(_bfloat16(cfg).model, _params(cfg))
  for path, x in jax.tree_util.tree_flatten_with_path(params)[0]:
    source = functools.reduce(lambda tree, key: tree[key.key], path, _params(cfg))
    cast = path[-1].key in ("kernel", "embedding")   # the products' weights
    assert x.dtype == (jnp.bfloat16 if cast else jnp.float32), path
    np.testing.assert_array_equal(x, np.asarray(source).astype(x.dtype))
  dots, converted = _dots_and_converts(_bfloat16(cfg), params)
  kinds = collections.Counter((a[-5:-1], b[-5:-1], out[-4:-1]) for a, b, out in dots)
  # A decoder layer's six products by weights (fused QKV, W^O, the cross-attention query and
  # W^O, the feed-forward pair) and the output projection in bfloat16; the attention's own
  # four (queries by keys, probabilities by values, twice) in float32.
  assert kinds == {("bf16", "bf16", "f32"): 6 * cfg.num_layers + 1,
                   ("xf32", "xf32", "f32"): 4 * cfg.num_layers}, kinds
  # No weight is converted in the step, to or from bfloat16: only activations (rows first)
  # and biases.
  weights = {"x".join(map(str, x.shape))
             for path, x in jax.tree_util.tree_flatten_with_path(params)[0]
             if path[-1].key in ("kernel", "embedding")}
  assert not weights & set(converted), weights & set(converted)


@pytest.mark.parametrize("cfg", [CFG, CFG_UNSHARED, CFG_BIASES],
                         ids=["shared", "unshared", "biases"])
def test_bfloat16_logits_are_close_to_float32s_and_cached_decoding_is_the_forward_pass(cfg):
  float_logits = _forward(cfg, _params(cfg))
  model = _bfloat16(cfg)
  params = quantized.quantize_params(model.model, _params(cfg))
  logits = _forward(model, params)
  spread = float_logits.max() - float_logits.min()
  assert logits.dtype == np.float32
  assert 1e-6 * spread < np.abs(logits - float_logits).max() <= 0.02 * spread
  cache = transformer.init_cache(model.model, params, INPUTS, TARGETS.shape[1])
  tokens = jnp.zeros((3,), jnp.int32)
  for position in range(TARGETS.shape[1]):
    step, cache = transformer.decode_step(model.model, params, cache, tokens, position)
    real = np.asarray(TARGETS[:, position] != 0)
    np.testing.assert_allclose(step[real], logits[real, position], atol=1e-2 * spread)
    tokens = TARGETS[:, position]
