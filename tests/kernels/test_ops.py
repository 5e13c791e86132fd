"""kernels/ops.py: each job runs the kernel chosen for it, and a choice outside the known
ones is an error naming them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.kernels import attention as attention_lib
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.kernels import masks
from t2t_jax.kernels import ops

SEGMENTS = jnp.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], jnp.int32)   # [batch, length]
MASK = masks.Mask(SEGMENTS, SEGMENTS, causal=True)


def _qkv(d_v=8):
  rng = np.random.default_rng(0)
  make = lambda depth: jnp.asarray(rng.normal(size=(2, 6, 2, depth)), jnp.float32)
  return make(8), make(8), make(d_v)


def test_fused_attention_kernel_follows_the_platform():
  assert ops.fused_attention_kernel(jnp.bfloat16, 64, "cuda") == "cudnn"
  assert ops.fused_attention_kernel(jnp.bfloat16, 64, "gpu") == "cudnn"
  assert ops.fused_attention_kernel(jnp.bfloat16, 136, "cuda") == "core"   # deeper than cuDNN's
  assert ops.fused_attention_kernel(jnp.float32, 64, "cuda") == "core"
  assert ops.fused_attention_kernel(jnp.bfloat16, 64, "tpu") == "core_recompute"
  assert ops.fused_attention_kernel(jnp.float32, 64, "tpu") == "core"
  assert ops.fused_attention_kernel(jnp.bfloat16, 64, "cpu") == "core"
  assert ops.fused_attention_kernel(jnp.bfloat16, 64) == "core"            # this CPU


@pytest.mark.parametrize("case,kernel", [
    (dict(), "core"),
    (dict(implementation="core_recompute"), "core_recompute"),
    (dict(implementation="reference"), "reference"),
    (dict(probabilities=True), "reference"),
    (dict(mask=masks.mask_to_bias(MASK.dense())), "reference"),
    (dict(mask=MASK.replace(window=2)), "reference"),
    (dict(d_v=4), "reference"),
    (dict(dropout=True), "reference"),
])
def test_attention_runs_the_reference_only_where_no_fused_kernel_applies(case, kernel):
  case = dict(case)
  q, k, v = _qkv(case.pop("d_v", 8))
  mask = case.pop("mask", MASK)
  rng = jax.random.key(0, impl="rbg") if case.pop("dropout", False) else None
  settings = {"implementation": "fused", "probabilities": False, **case}
  assert ops.attention_kernel(settings["implementation"], mask, k.shape[-1], v.shape[-1],
                              jnp.float32, rng is not None, settings["probabilities"]) == kernel
  out, probs = ops.attention(q, k, v, mask, dropout_rate=0.1, dropout_rng=rng, **settings)
  assert (probs is None) == (kernel != "reference")
  if kernel == "reference":
    bias = masks.mask_to_bias(mask.dense()) if isinstance(mask, masks.Mask) else mask
    want, _ = attention_lib.scaled_dot_product_attention(
        q, k, v, bias, dropout_rng=rng, dropout_rate=0.1, deterministic=rng is None)
  else:
    want = attention_lib.fused_attention(q, k, v, mask, implementation=kernel)
  np.testing.assert_array_equal(out, want)


def test_cudnn_where_it_cannot_apply_is_an_error_not_a_fallback():
  q, k, v = _qkv()
  with pytest.raises(ValueError, match=r"cuDNN attention cannot run here \(the attention is "
                                       r"windowed\); use --config.attention_impl=fused"):
    ops.attention(q, k, v, MASK.replace(window=2), implementation="cudnn")
  # Where the maps are collected the reference runs whatever the kernel asked for.
  assert ops.attention_kernel("cudnn", MASK, 8, 8, jnp.bfloat16, probabilities=True) == "reference"


def test_logits_are_vocabulary_major_for_one_model_only():
  assert ops.logits_layout(1) == "vocab_major"
  assert ops.logits_layout(2) == ops.logits_layout(3) == "row_major"


def test_project_logits_runs_the_layout_asked_for():
  rng = np.random.default_rng(0)
  hidden = jnp.asarray(rng.normal(size=(3, 8)), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(11, 8)), jnp.float32)
  rows = ops.project_logits(hidden, kernel)
  np.testing.assert_array_equal(rows, logits_lib.projection(hidden, kernel))
  major = ops.project_logits(hidden, kernel, "vocab_major")
  assert isinstance(major, logits_lib.VocabMajor)
  np.testing.assert_array_equal(major.logits,
                                logits_lib.vocab_major_projection(hidden, kernel).logits)
  with pytest.raises(ValueError, match=r"logits layout 'columns' is not one of \('row_major', "
                                       r"'vocab_major'\)"):
    ops.project_logits(hidden, kernel, "columns")
