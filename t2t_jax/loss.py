"""Label-smoothed cross-entropy (section 5.4) and token-level metrics, as sums.

Smoothing convention: with eps = label_smoothing and V = vocabulary size, the
target distribution q puts 1 - eps on the gold token and eps / (V - 1) on each of
the other V - 1 ids (padding included, as in the reference implementation). The
smoothed loss of a token is the cross-entropy H(q, p) minus the entropy H(q), i.e.
KL(q || p): its gradient is the cross-entropy's, and a prediction equal to q
scores 0 (as in Flax's WMT example). `nll` is the unsmoothed -log p(gold), whose
per-token mean gives the per-word-piece perplexity of Table 3.

Everything is float32 whatever the logits' dtype. Padding targets (id 0) weigh 0.
Functions return sums so that normalisation happens once over the global batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.ids import PAD_ID

# The sums every metric is computed from (over real target tokens); one home for the names.
METRIC_SUMS = ("loss", "nll", "correct", "tokens")


def smoothed_cross_entropy(logits: jnp.ndarray, targets: jnp.ndarray,
                           label_smoothing: float) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Per-token smoothed loss KL(q || p) and unsmoothed NLL, both unweighted.

  Args:
    logits: [batch, length, vocab] (any float dtype).
    targets: [batch, length] int ids.
    label_smoothing: eps_ls in [0, 1).

  Returns:
    (loss, nll), each [batch, length] float32.
  """
  if logits.ndim != targets.ndim + 1 or logits.shape[:-1] != targets.shape:
    raise ValueError(f"logits {logits.shape} do not match targets {targets.shape}: "
                     "expected [batch, length, vocab] and [batch, length]")
  vocab = logits.shape[-1]
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [batch, length, vocab]
  gold = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]  # [batch, length]
  nll = -gold
  if label_smoothing == 0.0:
    return nll, nll
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab - 1)
  # sum_j q_j log p_j without materialising q: the gold id gets `confidence`,
  # every id (the gold one included) gets `low`, so the gold one is corrected.
  cross_entropy = -((confidence - low) * gold + low * jnp.sum(log_probs, axis=-1))
  entropy = -(confidence * np.log(confidence) + (vocab - 1) * low * np.log(low))
  return cross_entropy - entropy, nll


def compute_metrics(logits: jnp.ndarray, targets: jnp.ndarray,
                    label_smoothing: float) -> dict[str, jnp.ndarray]:
  """Sums over the real (non-padding) target tokens of one batch.

  Returns a dict of float32 scalars: `loss` (smoothed), `nll`, `correct` (argmax
  equals the gold token) and `tokens` (the number of real target tokens).
  """
  loss, nll = smoothed_cross_entropy(logits, targets, label_smoothing)
  weights = (targets != PAD_ID).astype(jnp.float32)  # [batch, length]
  correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
  return {
      "loss": jnp.sum(loss * weights),
      "nll": jnp.sum(nll * weights),
      "correct": jnp.sum(correct * weights),
      "tokens": jnp.sum(weights),
  }


def summarize(sums: dict) -> dict[str, float]:
  """Per-token means from `compute_metrics` sums (added over batches/devices).

  Returns `loss`, `nll`, `accuracy` and `perplexity` (exp of the mean NLL) as floats.
  """
  tokens = max(float(sums["tokens"]), 1.0)
  nll = float(sums["nll"]) / tokens
  return {
      "loss": float(sums["loss"]) / tokens,
      "nll": nll,
      "accuracy": float(sums["correct"]) / tokens,
      "perplexity": float(np.exp(min(nll, 700.0))),  # np.exp overflows (with a warning) past ~709
  }
