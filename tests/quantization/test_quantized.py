"""quantization/quantized.py and the int8 and bfloat16 models: their params from float32 ones, their
logits near float32's; the bfloat16 model's products in bfloat16 accumulating in float32.

The int8 model's logits differ from float32's by the rounding of every product's
activations and weights (at most half a step, absmax / 127, per element: quantization/int8.py),
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
from t2t_jax.decoding import batch_decoder
from t2t_jax.kernels import choice
from t2t_jax.quantization import int8
from t2t_jax.quantization import quantized
from t2t_jax.model import transformer
from t2t_jax.train import step as step_lib

# d_k != d_v so that a swapped or mis-flattened projection cannot go unnoticed.
CFG = configs.get_config("demo", vocab_size=23, num_layers=2, d_model=16, d_ff=32, num_heads=2,
                         d_k=8, d_v=6, max_len=16, dropout_rate=0.0)
# Unshared embeddings: the output projection comes from its own table.
CFG_UNSHARED = CFG.replace(embeddings="separate", positional_encoding="learned", num_layers=1)
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
  """Teacher-forced logits as a search computes them (the config's plug-ins and output layer)."""
  member = batch_decoder.Member(cfg.model, params)
  return np.asarray(batch_decoder.teacher_forced_logits(member, INPUTS, TARGETS))


def _decode(cfg, params, layout="row_major"):
  """Cached decoding of TARGETS position by position as a search steps: logits [batch, tgt, vocab]."""
  member = batch_decoder.Member(cfg.model, params)
  plugins = choice.plugins(cfg.model)
  cache = transformer.init_cache(cfg.model, params, INPUTS, TARGETS.shape[1], plugins)
  step = batch_decoder.model_step(member, layout)
  tokens, out = jnp.zeros((3,), jnp.int32), []
  for position in range(TARGETS.shape[1]):
    logits, cache = step(cache, tokens, position)
    out.append(logits.logits.T if layout == "vocab_major" else logits)
    tokens = TARGETS[:, position]
  return np.stack(out, axis=1)


@pytest.mark.parametrize("cfg", [CFG, CFG_UNSHARED], ids=["shared", "unshared"])
def test_quantized_params_are_the_int8_models(cfg):
  params = quantized.quantize_params(_int8(cfg).model, _params(cfg))
  want = jax.eval_shape(functools.partial(transformer.init_params, _int8(cfg).model,
                                          plugins=choice.plugins(_int8(cfg).model)),
                        jax.random.key(0))
  shapes = lambda tree: jax.tree.map(lambda x: (x.shape, str(x.dtype)), tree)
  # The int8 plug-ins' tree, and the int8 copy of the pre-softmax weights beside it.
  output = params.pop("output_projection")
  assert shapes(params) == shapes(want)
  assert output.values.shape == (cfg.target_vocab, cfg.d_model) and output.values.dtype == jnp.int8
  layer = params["decoder"]["layers_0"]
  assert isinstance(layer["ffn"]["wi"]["kernel"], int8.Int8Kernel)
  # W^O [heads, d_v, d_model] flattened over its inputs: [d_model, heads * d_v].
  assert layer["self_attention"]["out"]["kernel"].values.shape == (16, 2 * 6)
  # The embeddings the lookups read stay float32 and unchanged.
  name = "embedding" if cfg.embeddings == "shared" else "source_embedding"
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
  # The output projection is the int8 one, over the int8 copy of the weights.
  if cfg.output_bias:
    return
  params = quantized.quantize_params(_int8(cfg).model, _params(cfg))
  hidden = transformer.Transformer(_int8(cfg).model, choice.plugins(_int8(cfg).model)).apply(
      {"params": params}, INPUTS, TARGETS, method=transformer.Transformer.decoder_features)
  np.testing.assert_array_equal(logits,
                                int8.project_logits(hidden, params["output_projection"]))


def test_int8_cached_decoding_is_its_full_forward_pass():
  cfg = _int8(CFG)
  params = quantized.quantize_params(cfg.model, _params(CFG))
  full = _forward(cfg, params)
  cached = _decode(cfg, params, "vocab_major")
  # Rows are quantised alike on both paths; float32 sums in another order may round
  # an activation to the neighbouring int8 value, hence a tolerance above float32's.
  real = np.asarray(TARGETS != 0)                                     # padding is masked there
  np.testing.assert_allclose(cached[real], full[real], atol=1e-3 * np.abs(full).max())


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
  cache = transformer.init_cache(cfg.model, params, INPUTS, 8, choice.plugins(cfg.model))
  step = lambda p, c: batch_decoder.model_step(batch_decoder.Member(cfg.model, p),
                                               "vocab_major")(c, TARGETS[:, 0], 0)
  text = jax.jit(step).lower(params, cache).as_text()
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
  cached = _decode(model, params)
  real = np.asarray(TARGETS != 0)
  np.testing.assert_allclose(cached[real], logits[real], atol=1e-4 * spread)
