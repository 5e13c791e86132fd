"""kernels/choice.py: each job runs the kernel chosen for it by the platform and what the
layer needs (a fused attention only where one applies; cuDNN that cannot apply is an error,
never a fallback), and a config's choices reach the model and the search: its attention, the
dropout masks its generator draws, a quantized model's products."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_reference import token_ids
from t2t_jax import configs
from t2t_jax.quantization import bfloat16
from t2t_jax.kernels import choice
from t2t_jax.kernels import dropout
from t2t_jax.kernels import fused_attention
from t2t_jax.quantization import int8
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import layers
from t2t_jax.model import plugins as plugins_lib
from t2t_jax.model import transformer


def test_fused_attention_kernel_follows_the_platform():
  assert choice.fused_attention_kernel(jnp.bfloat16, 64, "cuda") == "cudnn"
  assert choice.fused_attention_kernel(jnp.bfloat16, 64, "gpu") == "cudnn"
  assert choice.fused_attention_kernel(jnp.bfloat16, 136, "cuda") == "core"   # deeper than cuDNN's
  assert choice.fused_attention_kernel(jnp.float32, 64, "cuda") == "core"
  assert choice.fused_attention_kernel(jnp.bfloat16, 64, "tpu") == "core_recompute"
  assert choice.fused_attention_kernel(jnp.float32, 64, "tpu") == "core"
  assert choice.fused_attention_kernel(jnp.bfloat16, 64, "cpu") == "core"
  assert choice.fused_attention_kernel(jnp.bfloat16, 64) == "core"            # this CPU


@pytest.mark.parametrize("case,kernel", [
    (dict(), "core"),
    (dict(implementation="core_recompute"), "core_recompute"),
    (dict(implementation="reference"), "reference"),
    (dict(probabilities=True), "reference"),
    (dict(dense=True), "reference"),
    (dict(window=2), "reference"),
    (dict(d_v=4), "reference"),
    (dict(dropout=True), "reference"),
])
def test_the_reference_runs_only_where_no_fused_kernel_applies(case, kernel):
  settings = {**dict(implementation="fused", dense=False, window=None, d_k=8, d_v=8,
                     dtype=jnp.float32), **case}
  assert choice.attention_kernel(settings.pop("implementation"), **settings) == kernel


def test_cudnn_where_it_cannot_apply_is_an_error_not_a_fallback():
  with pytest.raises(ValueError, match=r"cuDNN attention cannot run here \(the attention is "
                                       r"windowed\); use --config.attention_impl=fused"):
    choice.attention_kernel("cudnn", dense=False, window=2, d_k=8, d_v=8, dtype=jnp.bfloat16)
  # Where the maps are collected the reference runs whatever the kernel asked for.
  assert choice.attention_kernel("cudnn", dense=False, window=None, d_k=8, d_v=8,
                                 dtype=jnp.bfloat16, probabilities=True) == "reference"


def test_logits_are_vocabulary_major_for_one_model_only():
  assert choice.logits_layout(1) == "vocab_major"
  assert choice.logits_layout(2) == choice.logits_layout(3) == "row_major"


SAPPHIRE_RAPIDS = ("fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 "
                   "amx_tile amx_int8")


@pytest.mark.parametrize("model,flags,want", [
    ("Intel(R) Xeon(R) Platinum 8480+", SAPPHIRE_RAPIDS,
     "amx_bf16 amx_int8 avx512_bf16 avx512_vnni avx512f avx2"),
    ("AMD EPYC", "fpu avx2 avx512f avx512_bf16 avx512_vnni",
     "avx512_bf16 avx512_vnni avx512f avx2"),
    ("AMD EPYC 7R32", "fpu sse2 avx avx2 fma", "avx2"),
])
def test_the_cpus_flags_are_read_from_cpuinfo(tmp_path, model, flags, want):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text(f"processor\t: 0\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
                     f"processor\t: 1\nmodel name\t: {model}\nflags\t\t: {flags}\n")
  assert choice.cpu_flags(str(cpuinfo)) == frozenset(want.split())
  assert choice.cpu_description(str(cpuinfo)) == f"{model} ({want})"


def test_an_unreadable_cpuinfo_has_no_flags(tmp_path):
  assert choice.cpu_flags(str(tmp_path / "missing")) == frozenset()
  assert "none of amx_bf16/" in choice.cpu_description(str(tmp_path / "missing"))


SEGMENTS = jnp.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], jnp.int32)   # [batch, length]
MASK = attention_lib.Mask(SEGMENTS, SEGMENTS, causal=True)
CFG = configs.get_config("demo", vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2,
                         dropout_rate=0.3, max_len=16)


def _qkv8(d_v=8):
  rng = np.random.default_rng(0)
  make = lambda depth: jnp.asarray(rng.normal(size=(2, 6, 2, depth)), jnp.float32)
  return make(8), make(8), make(d_v)


def test_each_config_field_chooses_its_plug_in():
  plugins = choice.plugins(CFG.model)
  assert plugins.attention_fn == choice.Attention("fused")
  assert plugins.dropout_fn is dropout.dropout
  assert plugins.dense is layers.dense and plugins.fused_dense is layers.fused_dense
  reference = choice.plugins(CFG.replace(attention_impl="reference",
                                         dropout_generator="threefry").model)
  assert reference == plugins_lib.Plugins()                  # the model's own references
  int8_model = choice.plugins(CFG.replace(quantization="int8").model)
  assert (int8_model.dense, int8_model.fused_dense) == (int8.dense, int8.fused_dense)
  assert int8_model.attention_fn == plugins.attention_fn     # the rest as the config says
  bf16_model = choice.plugins(CFG.replace(quantization="bfloat16").model)
  assert (bf16_model.dense, bf16_model.fused_dense) == (bfloat16.dense, bfloat16.fused_dense)
  assert choice.output_layer(CFG.model) == logits_lib.OutputLayer()
  assert choice.output_layer(CFG.replace(quantization="int8").model) is int8.OUTPUT
  assert choice.output_layer(CFG.replace(quantization="bfloat16").model) is bfloat16.OUTPUT


def test_the_model_draws_its_masks_with_the_configured_generator():
  ids = jnp.asarray(np.random.default_rng(0).integers(3, 40, (2, 7)), jnp.int32)
  params = transformer.init_params(CFG.model, jax.random.key(0))

  @functools.partial(jax.jit, static_argnums=0)
  def logits(generator, key):
    model = CFG.replace(dropout_generator=generator).model
    return transformer.Transformer(model, choice.plugins(model)).apply(
        {"params": params}, ids, ids, train=True, rngs={"dropout": key})

  hashed, threefry = logits("hash", jax.random.key(5)), logits("threefry", jax.random.key(5))
  np.testing.assert_array_equal(hashed, logits("hash", jax.random.key(5)))
  assert np.abs(np.asarray(hashed) - np.asarray(threefry)).max() > 1e-3
  assert np.abs(np.asarray(hashed) - np.asarray(logits("hash", jax.random.key(6)))).max() > 1e-3
  # "threefry" is the model's own reference: the default plug-ins draw the same masks (the
  # reference attention in place of the fused kernel rounds differently).
  reference = transformer.Transformer(CFG.model).apply(
      {"params": params}, ids, ids, train=True, rngs={"dropout": jax.random.key(5)})
  np.testing.assert_allclose(threefry, reference, atol=1e-5)


def test_module_uses_the_fused_path_only_where_it_applies():
  rng = np.random.default_rng(9)
  x = jnp.asarray(rng.normal(size=(2, 6, 8)), jnp.float32)
  seg = layers.segment_ids(token_ids(rng, 2, 6, [6, 4]))
  mask = attention_lib.Mask(seg, seg, causal=True)
  make = lambda impl, **kw: attention_lib.MultiHeadAttention(
      num_heads=2, d_k=4, d_v=4, d_model=8, attention_fn=choice.Attention(impl), **kw)
  params = jax.jit(make("reference").init)(jax.random.key(0), x, bias=mask)["params"]
  apply = lambda impl, **kw: jax.jit(lambda p: make(impl, **kw).apply(
      {"params": p}, x, bias=mask, mutable=["intermediates"]))(params)
  (ref, ref_state), (fused, fused_state) = apply("reference"), apply("fused")
  real = np.asarray(seg) != 0
  np.testing.assert_allclose(np.asarray(fused)[real], np.asarray(ref)[real], atol=1e-5)
  # Collecting attention maps needs the probabilities: the reference path runs and sows them.
  assert "attention_weights" in fused_state["intermediates"]
  np.testing.assert_allclose(fused, ref, atol=1e-6)
  # Without the intermediates collection the fused path runs: nothing sown, padded rows differ.
  plain = jax.jit(lambda p: make("fused").apply({"params": p}, x, bias=mask))(params)
  np.testing.assert_allclose(np.asarray(plain)[real], np.asarray(ref)[real], atol=1e-5)
  assert not np.allclose(np.asarray(plain)[~real], np.asarray(ref)[~real])


@pytest.mark.parametrize("case,kernel", [
    (dict(), "core"),
    (dict(implementation="core_recompute"), "core_recompute"),
    (dict(implementation="reference"), "reference"),
    (dict(probabilities=True), "reference"),
    (dict(mask=attention_lib.mask_to_bias(MASK.dense())), "reference"),
    (dict(mask=MASK.replace(window=2)), "reference"),
    (dict(d_v=4), "reference"),
    (dict(dropout=True), "reference"),
])
def test_attention_runs_the_reference_only_where_no_fused_kernel_applies(case, kernel):
  case = dict(case)
  q, k, v = _qkv8(case.pop("d_v", 8))
  mask = case.pop("mask", MASK)
  rng = jax.random.key(0, impl="rbg") if case.pop("dropout", False) else None
  settings = {"implementation": "fused", "probabilities": False, **case}
  attention = choice.Attention(settings.pop("implementation"))
  out, probs = attention(q, k, v, mask, dropout_rate=0.1, dropout_rng=rng, **settings)
  assert (probs is None) == (kernel != "reference")
  if kernel == "reference":
    bias = attention_lib.mask_to_bias(mask.dense()) if isinstance(mask, attention_lib.Mask) else mask
    want, _ = attention_lib.scaled_dot_product_attention(
        q, k, v, bias, dropout_rng=rng, dropout_rate=0.1, deterministic=rng is None)
  else:
    want = fused_attention.fused_attention(q, k, v, mask, implementation=kernel)
  np.testing.assert_array_equal(out, want)


def test_a_cudnn_attention_that_cannot_apply_raises_naming_the_fix():
  q, k, v = _qkv8()
  with pytest.raises(ValueError, match=r"cuDNN attention cannot run here \(the attention is "
                                       r"windowed\); use --config.attention_impl=fused"):
    choice.Attention("cudnn")(q, k, v, MASK.replace(window=2))
