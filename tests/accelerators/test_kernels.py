"""accelerators/kernels.py: the kernel follows the platform that will run the program, and
cuDNN attention that cannot be built is an error, never a silent fallback."""

import jax
import jax.numpy as jnp
import pytest

from compilers import SMALL
from t2t_jax.accelerators import kernels
from t2t_jax.kernels import choice
from t2t_jax.model import attention as attention_lib


def test_attention_kernel_follows_the_target_not_this_process():
  assert jax.default_backend() == "cpu"
  assert kernels.for_platform(SMALL, "cuda").attention_impl == "cudnn"
  assert kernels.for_platform(SMALL, "tpu").attention_impl == "core_recompute"  # 16-bit probabilities
  assert kernels.for_platform(SMALL.replace(dtype="float32"), "tpu").attention_impl == "core"
  assert kernels.for_platform(SMALL, "cpu").attention_impl == "core"
  # float32, or layers the fused path never takes, keep the config's choice.
  assert kernels.for_platform(SMALL.replace(dtype="float32"), "cuda").attention_impl == "core"
  assert kernels.for_platform(SMALL.replace(attention_dropout_rate=0.1),
                              "cuda").attention_impl == "fused"
  assert kernels.for_platform(SMALL.replace(attention_impl="reference"),
                              "cuda").attention_impl == "reference"


def test_cudnn_that_cannot_be_built_names_the_layer():
  attention = attention_lib.MultiHeadAttention(num_heads=2, d_k=8, d_v=8, d_model=16,
                                               dtype=jnp.bfloat16,
                                               attention_fn=choice.Attention("cudnn"))
  x = jnp.ones((1, 4, 16))
  mask = attention_lib.Mask(jnp.ones((1, 4), jnp.int32), jnp.ones((1, 4), jnp.int32))
  with pytest.raises(ValueError, match=r"attention layer .*cudnn attention cannot be built"):
    attention.init(jax.random.key(0), x, bias=mask)  # no cuDNN on this CPU

