"""Label-smoothed cross-entropy against a NumPy reference that builds q explicitly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.train import loss


def _reference(logits, targets, eps):
  """Per-token KL(q || p) and -log p(gold) with the smoothed q written out in full."""
  logits = np.asarray(logits, np.float64)
  vocab = logits.shape[-1]
  log_p = logits - logits.max(-1, keepdims=True)
  log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
  q = np.full(logits.shape, eps / (vocab - 1))
  np.put_along_axis(q, targets[..., None], 1.0 - eps, axis=-1)
  log_q = np.log(np.where(q > 0, q, 1.0))  # 0 log 0 = 0
  kl = np.sum(q * (log_q - log_p), axis=-1)
  nll = -np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
  return kl, nll


def _batch(seed=0, batch=3, length=7, vocab=11):
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(batch, length, vocab)).astype(np.float32) * 3
  targets = rng.integers(1, vocab, size=(batch, length)).astype(np.int32)
  targets[0, 4:] = 0  # trailing padding
  targets[2, 1:] = 0
  return logits, targets


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.2])
def test_matches_numpy_reference(eps):
  logits, targets = _batch()
  kl, nll = _reference(logits, targets, eps)
  got_loss, got_nll = loss.smoothed_cross_entropy(jnp.asarray(logits), jnp.asarray(targets), eps)
  np.testing.assert_allclose(got_loss, kl, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got_nll, nll, rtol=1e-5, atol=1e-5)

  sums = loss.compute_metrics(jnp.asarray(logits), jnp.asarray(targets), eps)
  weights = targets != 0
  np.testing.assert_allclose(sums["loss"], kl[weights].sum(), rtol=1e-5)
  np.testing.assert_allclose(sums["nll"], nll[weights].sum(), rtol=1e-5)
  assert float(sums["tokens"]) == weights.sum()
  correct = (logits.argmax(-1) == targets) & weights
  assert float(sums["correct"]) == correct.sum()


def test_padding_is_ignored():
  logits, targets = _batch(seed=1)
  sums = loss.compute_metrics(jnp.asarray(logits), jnp.asarray(targets), 0.1)
  # Anything at padded positions, and whole filler rows, change nothing.
  noisy = logits.copy()
  noisy[targets == 0] = np.random.default_rng(2).normal(size=noisy[targets == 0].shape) * 50
  padded_logits = np.concatenate([noisy, np.ones_like(noisy[:2])], axis=0)
  padded_targets = np.concatenate([targets, np.zeros_like(targets[:2])], axis=0)
  again = loss.compute_metrics(jnp.asarray(padded_logits), jnp.asarray(padded_targets), 0.1)
  for name in sums:
    np.testing.assert_allclose(again[name], sums[name], rtol=1e-6)


def test_perfect_prediction_scores_zero_smoothed_loss():
  eps, vocab = 0.1, 11
  targets = np.array([[3, 5, 0]], np.int32)
  q = np.full((1, 3, vocab), eps / (vocab - 1))
  np.put_along_axis(q, targets[..., None], 1 - eps, axis=-1)
  per_token, nll = loss.smoothed_cross_entropy(jnp.log(jnp.asarray(q, jnp.float32)),
                                               jnp.asarray(targets), eps)
  np.testing.assert_allclose(per_token, 0.0, atol=1e-5)
  np.testing.assert_allclose(nll, -np.log(1 - eps), rtol=1e-5)


def test_bfloat16_logits_give_float32_sums():
  logits, targets = _batch(seed=3)
  sums = loss.compute_metrics(jnp.asarray(logits, jnp.bfloat16), jnp.asarray(targets), 0.1)
  assert all(v.dtype == jnp.float32 for v in sums.values())
  kl, _ = _reference(np.asarray(jnp.asarray(logits, jnp.bfloat16).astype(jnp.float32)),
                     targets, 0.1)
  np.testing.assert_allclose(sums["loss"], kl[targets != 0].sum(), rtol=1e-4)


def test_summarize_normalises_by_tokens():
  out = loss.summarize({"loss": 6.0, "nll": 8.0, "correct": 3.0, "tokens": 4.0})
  assert out["loss"] == pytest.approx(1.5)
  assert out["accuracy"] == pytest.approx(0.75)
  assert out["perplexity"] == pytest.approx(np.exp(2.0))


def test_shape_mismatch_is_a_clear_error():
  with pytest.raises(ValueError, match="do not match"):
    loss.smoothed_cross_entropy(jnp.zeros((2, 3, 5)), jnp.zeros((2, 4), jnp.int32), 0.1)


def _features(seed, dtype=jnp.float32, tokens=(3, 7), d=5, vocab=11):
  rng = np.random.default_rng(seed)
  features = jnp.asarray(rng.normal(size=(*tokens, d)), dtype)
  kernel = jnp.asarray(rng.normal(size=(vocab, d)), jnp.float32)
  _, targets = _batch(seed, *tokens, vocab)
  return features, kernel, jnp.asarray(targets)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_output_metrics_equal_the_reference_and_its_gradient(eps):
  features, kernel, targets = _features(4)

  def reference(f, k):
    logits = jnp.einsum("bld,vd->blv", f, k)
    return loss.compute_metrics(logits, targets, eps)

  def fused(f, k):
    return loss.output_metrics(f, k, targets, eps)

  want, got = reference(features, kernel), fused(features, kernel)
  for name in loss.METRIC_SUMS:
    np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)
  # Both differentiable sums at once, with different weights, so a swapped term shows.
  combine = lambda f: lambda *a: f(*a)["loss"] + 0.3 * f(*a)["nll"]
  want_grads = jax.grad(combine(reference), argnums=(0, 1))(features, kernel)
  got_grads = jax.jit(jax.grad(combine(fused), argnums=(0, 1)))(features, kernel)
  for w, g in zip(want_grads, got_grads):
    assert g.dtype == w.dtype and g.shape == w.shape
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_gold_logit_tied_for_the_largest_counts_as_correct_in_both_paths():
  # Three tokens, vocabulary 4, d = 4: the kernel is the identity, so logits = features.
  features = jnp.asarray([[[1.0, 3.0, 3.0, 0.0],     # gold 2 ties id 1 for the top: correct
                           [1.0, 3.0, 3.0, 0.0],     # gold 3 is below the top: wrong
                           [0.0, 0.0, 5.0, 1.0]]])   # gold 2 is the top: correct
  targets = jnp.asarray([[2, 3, 2]])
  kernel = jnp.eye(4)
  assert float(loss.output_metrics(features, kernel, targets, 0.1)["correct"]) == 2.0
  assert float(loss.compute_metrics(features, targets, 0.1)["correct"]) == 2.0


def test_output_metrics_in_bfloat16_keep_float32_sums_and_kernel_gradient():
  features, kernel, targets = _features(5, jnp.bfloat16)
  sums = loss.output_metrics(features, kernel, targets, 0.1)
  assert all(v.dtype == jnp.float32 for v in sums.values())
  want = loss.compute_metrics(
      jnp.einsum("bld,vd->blv", features.astype(jnp.float32),
                 kernel.astype(jnp.bfloat16).astype(jnp.float32)), targets, 0.1)
  np.testing.assert_allclose(sums["loss"], want["loss"], rtol=1e-5)
  d_features, d_kernel = jax.grad(lambda f, k: loss.output_metrics(f, k, targets, 0.1)["loss"],
                                  argnums=(0, 1))(features, kernel)
  assert d_features.dtype == jnp.bfloat16 and d_kernel.dtype == jnp.float32


def test_output_metrics_shape_mismatch_is_a_clear_error():
  features, kernel, targets = _features(6)
  with pytest.raises(ValueError, match="do not match"):
    loss.output_metrics(features, kernel, targets[:, :3], 0.1)
