"""kernels/choice.py: each job runs the kernel chosen for it by the platform and what the
layer needs; a cuDNN attention that cannot apply is an error, never a fallback."""

import logging

import jax.numpy as jnp
import pytest

from t2t_jax.kernels import choice


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


def test_the_bfloat16_products_form_is_float32_results_and_logged_at_debug(caplog):
  choice._log_once.cache_clear()   # pylint: disable=protected-access
  with caplog.at_level(logging.DEBUG, logger="t2t_jax.kernels.choice"):
    assert choice.bfloat16_results() == jnp.float32
    choice.bfloat16_results()
  said = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
  assert len(said) == 1 and choice.cpu_description() in said[0] and "float32" in said[0]
