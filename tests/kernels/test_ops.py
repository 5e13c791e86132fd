"""kernels/ops.py: each job runs the kernel chosen for it, and a choice outside the known
ones is an error naming them."""

import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.kernels import logits as logits_lib
from t2t_jax.kernels import ops


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
