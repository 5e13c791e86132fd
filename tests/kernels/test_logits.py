"""kernels/logits.py: the output projection in either layout, read back as [rows, vocab], and
onto a shortlist's rows; the blocked top-k against jax.lax.top_k (ties included), and
logits_lib.chosen_top_k the TPU's own where the program is lowered for a TPU."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.ids import FILLER
from t2t_jax.kernels import logits as logits_lib

# Agreement with the reference to a tight bound: CI also runs these compiled as the commands are.
pytestmark = pytest.mark.exact


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


def test_blocked_top_k_equals_lax_top_k_ties_included():
  rng = np.random.default_rng(1)
  for shape, n in (((5, 4, 1000), 8), ((3, 37000), 8), ((4, 513), 8), ((2, 7), 3)):
    # Few distinct values (many ties, whole blocks equal), then distinct ones.
    for x in (rng.integers(-3, 1, shape), rng.normal(size=shape)):
      x = jnp.asarray(x, jnp.float32)
      for got, want in ((logits_lib.blocked_top_k(x, n), jax.lax.top_k(x, n)),
                        (logits_lib.chosen_top_k(x, n), jax.lax.top_k(x, n))):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_blocked_best_columns_equals_the_reference_ties_and_the_skipped_row_included():
  rng = np.random.default_rng(3)
  best = jax.jit(logits_lib.best_columns, static_argnums=(1, 2))
  blocked = jax.jit(logits_lib.blocked_best_columns, static_argnums=(1, 2))
  # 37000: blocks of 74, no partial one; 37003 (prime): a partial last block; 300: few blocks.
  for size, n, skip in ((37000, 8, 0), (37003, 8, 0), (1000, 8, 999), (1000, 6, 130), (300, 8, 0),
                        (9, 8, 0)):
    for x in (rng.integers(-3, 1, (size, 5)), rng.normal(size=(size, 5)) * 3):
      x = jnp.asarray(x, jnp.float32)
      x = x.at[skip, 0].set(9.0)                        # the skipped row best in one column
      want = jax.lax.top_k(jax.nn.log_softmax(x, axis=0).at[skip].set(-jnp.inf).T, n)
      for got in (best(x, n, skip), blocked(x, n, skip), logits_lib.chosen_best_columns(x, n, skip)):
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-5)
      np.testing.assert_array_equal(blocked(x, n, skip)[0], best(x, n, skip)[0])
      assert not np.any(np.asarray(want[1])[:, :min(n, size - 1)] == skip)


def test_blocked_best_columns_reads_the_logits_in_place():
  # Nothing of the logits' size is written: no copy with the skipped row at -inf, no padding
  # to whole blocks, no slice of the whole blocks (XLA CPU copies those out).
  for size in (37000, 37003):
    x = jax.ShapeDtypeStruct((size, 64), jnp.float32)
    text = jax.jit(lambda x: logits_lib.blocked_best_columns(x, 8, 0)).lower(x).compile().as_text()
    entry = text[text.index("ENTRY"):].splitlines()[1:]
    shapes = [re.match(r"\s*(?:ROOT )?%\S+ = f32\[(\d+),64\]", line) for line in entry]
    written = [line for line, shape in zip(entry, shapes)
               if shape and int(shape[1]) > size // 2 and "parameter(" not in line]
    assert not written, written


@pytest.mark.parametrize("fn,shape", [(logits_lib.chosen_top_k, (4, 37000)),
                                      (lambda x, n: logits_lib.chosen_best_columns(x, n, 0), (37000, 4))])
def test_top_k_is_the_tpus_own_in_a_tpu_program_and_blocked_elsewhere(fn, shape):
  # Chosen by the platform the program is lowered for, not the one running this process.
  x = jax.ShapeDtypeStruct(shape, jnp.float32)
  top_ks = lambda platform: jax.jit(lambda x: fn(x, 8)).trace(x).lower(
      lowering_platforms=(platform,)).as_text().count("top_k")
  assert top_ks("tpu") == 1          # jax.lax.top_k alone
  assert top_ks("cpu") == 2          # the blocks' maxima, then the chosen blocks


def test_add_bias_adds_each_ids_bias_in_either_layout_and_on_a_shortlist():
  rng = np.random.default_rng(2)
  hidden, kernel = _operands(rng, 3, 8)
  bias = jnp.asarray(rng.normal(size=11), jnp.float32)
  want = np.asarray(logits_lib.projection(hidden, kernel)) + np.asarray(bias)
  rows = logits_lib.add_bias(logits_lib.project_logits(hidden, kernel), bias)
  np.testing.assert_allclose(rows, want, rtol=1e-6, atol=1e-6)
  major = logits_lib.add_bias(logits_lib.project_logits(hidden, kernel, "vocab_major"), bias)
  np.testing.assert_allclose(logits_lib.row_major(major), want, rtol=1e-6, atol=1e-6)
  ids = jnp.asarray([1, 4, 10, FILLER], jnp.int32)
  for layout in logits_lib.LAYOUTS:
    listed = logits_lib.listed_logits(logits_lib.project_logits(
        hidden, logits_lib.listed_rows(kernel, ids), layout), ids)
    listed = logits_lib.row_major(logits_lib.add_bias(listed, bias, ids))   # [rows, size]
    np.testing.assert_allclose(listed[:, :3], want[:, [1, 4, 10]], rtol=1e-6, atol=1e-6)
    # A filler row scores -inf, bias or not: it adds nothing to a normaliser.
    assert np.all(np.asarray(listed[:, 3]) == -np.inf)
