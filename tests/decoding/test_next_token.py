"""decoding/next_token.py: a step's best next tokens are the same whichever layout its logits come in."""

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.decoding import next_token
from t2t_jax.ids import PAD_ID
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
