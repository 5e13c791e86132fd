"""kernels/logits.py: the output projection in either layout, read back as [rows, vocab]."""

import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.kernels import logits as logits_lib


def _operands(rng, *hidden_shape, vocab=11):
  hidden = jnp.asarray(rng.normal(size=hidden_shape), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(vocab, hidden_shape[-1])), jnp.float32)
  return hidden, kernel


def test_both_layouts_are_the_same_logits_transposed():
  hidden, kernel = _operands(np.random.default_rng(0), 3, 8)
  rows = logits_lib.projection(hidden, kernel)
  major = logits_lib.vocab_major_projection(hidden, kernel)
  assert isinstance(major, logits_lib.VocabMajor) and major.logits.shape == (11, 3)
  np.testing.assert_allclose(rows, np.asarray(hidden) @ np.asarray(kernel).T, rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(major.logits.T, rows, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(logits_lib.row_major(major), rows, rtol=1e-6, atol=1e-6)
  assert logits_lib.row_major(rows) is rows


def test_row_major_takes_any_leading_axes_and_gives_float32():
  hidden, kernel = _operands(np.random.default_rng(1), 2, 3, 8)
  for logits in (logits_lib.projection(hidden.astype(jnp.bfloat16), kernel),
                 logits_lib.vocab_major_projection(hidden[0].astype(jnp.bfloat16), kernel).logits):
    assert logits.dtype == jnp.float32
  logits = logits_lib.projection(hidden.astype(jnp.bfloat16), kernel)
  assert logits.shape == (2, 3, 11)
  want = np.einsum("btd,vd->btv", np.asarray(hidden), np.asarray(kernel))
  np.testing.assert_allclose(logits, want, rtol=0.05, atol=0.05 * np.abs(want).max())


def test_project_logits_runs_the_layout_asked_for():
  rng = np.random.default_rng(0)
  hidden = jnp.asarray(rng.normal(size=(3, 8)), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(11, 8)), jnp.float32)
  rows = logits_lib.project_logits(hidden, kernel)
  np.testing.assert_array_equal(rows, logits_lib.projection(hidden, kernel))
  major = logits_lib.project_logits(hidden, kernel, "vocab_major")
  assert isinstance(major, logits_lib.VocabMajor)
  np.testing.assert_array_equal(major.logits,
                                logits_lib.vocab_major_projection(hidden, kernel).logits)
  with pytest.raises(ValueError, match=r"logits layout 'columns' is not one of \('row_major', "
                                       r"'vocab_major'\)"):
    logits_lib.project_logits(hidden, kernel, "columns")
