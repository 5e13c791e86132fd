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

`compute_metrics(logits, ...)` is the reference; `output_metrics(features,
kernel, ...)` computes the same sums from the decoder's last layer and the
pre-softmax weights, with a hand-written gradient (what the steps use).
"""

from __future__ import annotations

import functools

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
  confidence, low, entropy = _smoothing(label_smoothing, vocab)
  # sum_j q_j log p_j without materialising q: the gold id gets `confidence`,
  # every id (the gold one included) gets `low`, so the gold one is corrected.
  cross_entropy = -((confidence - low) * gold + low * jnp.sum(log_probs, axis=-1))
  return cross_entropy - entropy, nll


def _smoothing(label_smoothing: float, vocab: int) -> tuple[float, float, float]:
  """(confidence, low, entropy): q's gold and other probabilities, and H(q)."""
  if label_smoothing == 0.0:
    return 1.0, 0.0, 0.0
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab - 1)
  return confidence, low, float(-(confidence * np.log(confidence)
                                  + (vocab - 1) * low * np.log(low)))


def _is_top(gold: jnp.ndarray, top: jnp.ndarray) -> jnp.ndarray:
  """1.0 where the gold logit is the row's largest, else 0.0 (float32, gold's shape).

  A tie with another id counts as correct (argmax would pick the lower id). The
  row maximum is the one log-sum-exp needs anyway: an argmax is one more pass over
  [tokens, vocab], a slow variadic reduction on CPUs (docs/benchmarks.md, "Training step").
  """
  return (gold >= top).astype(jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def output_metrics(features: jnp.ndarray, kernel: jnp.ndarray, targets: jnp.ndarray,
                   label_smoothing: float) -> dict[str, jnp.ndarray]:
  """`compute_metrics(features @ kernel.T, targets, label_smoothing)`, fused with its gradient.

  The pre-softmax projection and the loss in one function with a hand-written
  backward pass: the logits are computed once (float32 accumulation), and the
  backward pass writes their gradient once, (softmax - q) per token, instead of
  the several [tokens, vocab] temporaries autodiff of log_softmax leaves behind.
  At a 37000-word vocabulary those arrays are a large share of a step.

  Args:
    features: [..., d_model] in the compute dtype (the decoder's last layer).
    kernel: [vocab, d_model] float32, the pre-softmax weights (shared embedding).
    targets: [...] int ids; padding (0) weighs 0.
    label_smoothing: eps_ls (static).

  Returns:
    The same float32 sums as `compute_metrics`.
  """
  return _output_metrics_fwd(features, kernel, targets, label_smoothing)[0]


def _logits(features, kernel):
  """[tokens, d] x [vocab, d] -> [tokens, vocab] float32, operands in the features' dtype."""
  return jnp.dot(features, kernel.astype(features.dtype).T, preferred_element_type=jnp.float32)


def _output_metrics_fwd(features, kernel, targets, label_smoothing):
  if features.shape[:-1] != targets.shape or kernel.shape[1] != features.shape[-1]:
    raise ValueError(f"features {features.shape}, kernel {kernel.shape} and targets "
                     f"{targets.shape} do not match: expected [..., d], [vocab, d] and [...]")
  vocab = kernel.shape[0]
  flat = features.reshape(-1, features.shape[-1])                      # [tokens, d]
  gold_ids = targets.reshape(-1)                                       # [tokens]
  logits = _logits(flat, kernel)                                       # [tokens, vocab]
  top = jnp.max(logits, axis=-1)                                       # [tokens]
  log_z = top + jnp.log(jnp.sum(jnp.exp(logits - top[:, None]), axis=-1))
  gold = jnp.take_along_axis(logits, gold_ids[:, None], axis=-1)[:, 0]
  nll = log_z - gold
  confidence, low, entropy = _smoothing(label_smoothing, vocab)
  # -sum_j q_j log p_j, with log p_j = logit_j - log_z and sum_j q_j = 1.
  loss = (confidence - low) * nll + low * (vocab * log_z - jnp.sum(logits, axis=-1)) - entropy
  weights = (gold_ids != PAD_ID).astype(jnp.float32)
  correct = _is_top(gold, top)
  sums = {"loss": jnp.sum(loss * weights), "nll": jnp.sum(nll * weights),
          "correct": jnp.sum(correct * weights), "tokens": jnp.sum(weights)}
  return sums, (features, kernel, gold_ids, logits, log_z)


def _output_metrics_bwd(label_smoothing, residuals, g):
  features, kernel, gold_ids, logits, log_z = residuals
  vocab = kernel.shape[0]
  confidence, low, _ = _smoothing(label_smoothing, vocab)
  weights = (gold_ids != PAD_ID).astype(jnp.float32)                  # [tokens]
  # d loss / d logits = p - q and d nll / d logits = p - onehot(gold), per real token.
  scale = (weights * (g["loss"] + g["nll"]))[:, None]                  # [tokens, 1]
  gold_weight = (weights * (g["loss"] * (confidence - low) + g["nll"]))[:, None]
  one_hot = jnp.arange(vocab)[None, :] == gold_ids[:, None]            # fused, never stored
  d_logits = (scale * jnp.exp(logits - log_z[:, None]) - (weights * g["loss"] * low)[:, None]
              - jnp.where(one_hot, gold_weight, 0.0)).astype(features.dtype)  # [tokens, vocab]
  flat = features.reshape(-1, features.shape[-1])                      # [tokens, d]
  d_features = jnp.dot(d_logits, kernel.astype(features.dtype),
                       preferred_element_type=jnp.float32)
  d_kernel = jnp.dot(d_logits.T, flat, preferred_element_type=jnp.float32)
  return (d_features.astype(features.dtype).reshape(features.shape),
          d_kernel.astype(kernel.dtype), None)


output_metrics.defvjp(_output_metrics_fwd, _output_metrics_bwd)


def compute_metrics(logits: jnp.ndarray, targets: jnp.ndarray,
                    label_smoothing: float) -> dict[str, jnp.ndarray]:
  """Sums over the real (non-padding) target tokens of one batch.

  Returns a dict of float32 scalars: `loss` (smoothed), `nll`, `correct` (the gold
  token's logit is the largest; ties count) and `tokens` (real target tokens).
  """
  loss, nll = smoothed_cross_entropy(logits, targets, label_smoothing)
  weights = (targets != PAD_ID).astype(jnp.float32)  # [batch, length]
  logits = logits.astype(jnp.float32)
  correct = _is_top(jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0],
                    jnp.max(logits, axis=-1))
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
