"""The accelerator tests' shared pieces: skips for an absent compiler, a small bfloat16 model.

Without the `accelerators` extra (jax[cuda12], jax[tpu]) the compile tests skip, saying so.
"""

import extras
import pytest

from t2t_jax import configs
from t2t_jax.accelerators import targets


def _needs_compiler(platform: str) -> pytest.MarkDecorator:
  """Skips without `platform`'s compiler (the accelerators extra), saying how to install it."""
  reason = extras.missing("accelerators", (targets.COMPILER_PACKAGES[platform],))
  return pytest.mark.skipif(reason is not None, reason=reason or "")


NO_CUDA = _needs_compiler("cuda")
NO_TPU = _needs_compiler("tpu")


SMALL = configs.get_config("base", num_layers=2, d_model=128, d_ff=256, num_heads=4,
                           vocab_size=512, max_len=64, dtype="bfloat16")

