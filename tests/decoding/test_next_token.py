"""decoding/next_token.py: a step's best next tokens are the same whichever layout its logits come in."""

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.decoding import next_token
from t2t_jax.ids import FILLER, PAD_ID
from t2t_jax.kernels import logits as logits_lib


def _logits(rng, rows, vocab, ties):
  x = rng.integers(-3, 2, (rows, vocab)) if ties else rng.normal(size=(rows, vocab)) * 3
  return jnp.asarray(x, jnp.float32)


def test_best_equals_top_k_of_the_log_probs_in_both_layouts():
  rng = np.random.default_rng(0)
  # 37000 takes the blocked top-k; integer logits make ties, which go to the lower id.
  for rows, vocab, n, ties in ((6, 37000, 8, False), (6, 37000, 8, True), (5, 40, 8, True)):
    x = _logits(rng, rows, vocab, ties)
    want = jax.lax.top_k(next_token.log_probs(x), n)
    for logits in (x, logits_lib.VocabMajor(x.T)):
      values, tokens = jax.jit(next_token.best, static_argnums=1)(logits, n)
      np.testing.assert_array_equal(tokens, want[1])
      np.testing.assert_allclose(values, want[0], rtol=1e-6, atol=1e-5)
      assert not np.any(np.asarray(tokens) == PAD_ID)


def test_padding_only_when_nothing_else_is_left_and_then_at_neg_inf():
  x = jnp.asarray([[5.0, 0.0, 1.0], [9.0, 2.0, -1.0]])               # padding scores best
  for logits in (x, logits_lib.VocabMajor(x.T)):
    values, tokens = next_token.best(logits, 3)
    np.testing.assert_array_equal(tokens, [[2, 1, PAD_ID], [1, 2, PAD_ID]])
    assert np.all(np.asarray(values)[:, 2] == logits_lib.NEG_INF)
    # The normaliser still counts padding's probability, as log_probs does.
    np.testing.assert_allclose(values[:, :2], jnp.take_along_axis(
        next_token.log_probs(x), tokens[:, :2], axis=1), rtol=1e-6)


def test_log_probs_read_either_layout():
  x = _logits(np.random.default_rng(1), 4, 30, False)
  np.testing.assert_array_equal(logits_lib.row_major(logits_lib.VocabMajor(x.T)), x)
  np.testing.assert_allclose(next_token.log_probs(logits_lib.VocabMajor(x.T)),
                             next_token.log_probs(x), rtol=1e-6)
  log_probs = np.asarray(next_token.log_probs(x))
  assert np.all(log_probs[:, PAD_ID] == logits_lib.NEG_INF)
  np.testing.assert_allclose(np.exp(log_probs[:, 1:]).sum(1), 1 - jax.nn.softmax(x)[:, PAD_ID],
                             rtol=1e-5)


def _shortlisted(x, listed, size):
  """x [rows, vocab]'s listed columns as shortlist logits, padded to `size` with FILLER rows
  holding huge logits (which must count for nothing)."""
  ids = np.full(size, FILLER, np.int32)
  ids[:len(listed)] = listed
  rows = np.full((size, x.shape[0]), 1e4, np.float32)
  rows[:len(listed)] = np.asarray(x).T[listed]
  return logits_lib.VocabMajor(jnp.asarray(rows), jnp.asarray(ids), x.shape[1])


def test_a_shortlist_picks_as_the_whole_vocabulary_with_the_others_masked():
  rng = np.random.default_rng(2)
  for vocab, ties in ((300, False), (300, True), (37000, False)):
    x = _logits(rng, 5, vocab, ties)
    listed = np.sort(rng.choice(np.arange(1, vocab), 60, replace=False))
    masked = jnp.where(np.isin(np.arange(vocab), listed), x, -jnp.inf)
    want = jax.lax.top_k(next_token.log_probs(masked), 8)
    values, tokens = jax.jit(next_token.best, static_argnums=1)(_shortlisted(x, listed, 96), 8)
    np.testing.assert_array_equal(tokens, want[1])
    np.testing.assert_allclose(values, want[0], rtol=1e-6, atol=1e-5)
    # Row-major readers (sampling, ensembles) get the others at NEG_INF.
    masked = jnp.where(np.isin(np.arange(vocab), listed), x, logits_lib.NEG_INF)
    np.testing.assert_allclose(next_token.log_probs(_shortlisted(x, listed, 96)),
                               next_token.log_probs(masked), rtol=1e-6, atol=1e-5)


def test_a_shortlist_never_picks_padding_or_filler_ahead_of_a_listed_id():
  x = _logits(np.random.default_rng(3), 4, 50, False)
  listed = np.asarray([PAD_ID, 1, 7, 30])                  # padding listed: normalised, not picked
  values, tokens = next_token.best(_shortlisted(x, listed, 8), 6)
  tokens, values = np.asarray(tokens), np.asarray(values)
  assert {int(t) for t in tokens[:, :3].ravel()} <= {1, 7, 30}
  np.testing.assert_array_equal(tokens[:, 3:], PAD_ID)     # nothing else left: padding at NEG_INF
  assert np.all(values[:, 3:] == logits_lib.NEG_INF)
  masked = jnp.where(np.isin(np.arange(50), listed), x, -jnp.inf)
  np.testing.assert_allclose(values[:, :3], jnp.take_along_axis(
      next_token.log_probs(masked), jnp.asarray(tokens[:, :3]), axis=1), rtol=1e-6)
