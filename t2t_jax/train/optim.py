"""The paper's optimiser: Adam with the inverse-square-root warmup schedule (section 5.3).

Step numbering. The paper's formula counts updates from 1:

  lrate(step) = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),  step = 1, 2, ...

`learning_rate_schedule(cfg)` is that formula as a function of the paper's step.
optax calls its schedule with `count`, the number of updates already applied (0
for the first update), so `make_optimizer` feeds it `count + 1`. `TrainState.step`
(train/steps.py) is the same count before an update and the paper's step of the update
just applied after it, so the learning rate logged with step `s` is
`learning_rate_schedule(cfg)(s)`, exactly the one that update used.

Adam: optax's `adam` puts eps outside the square root of the bias-corrected second
moment, `m_hat / (sqrt(v_hat) + eps)`, as in Kingma & Ba's Algorithm 1. The
reference implementation (TensorFlow's AdamOptimizer) adds eps to the square root
of the uncorrected moment instead; with eps = 1e-9 the two differ only while
sqrt(v) is itself of order 1e-9.
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import optax

from t2t_jax.configs import TransformerConfig


def learning_rate_schedule(cfg: TransformerConfig) -> Callable[[jnp.ndarray], jnp.ndarray]:
  """The learning rate for the paper's (1-based) step number, float32.

  Step 0 (no update yet) is clamped to step 1 so that the rate is never 0 or inf.
  """
  scale = cfg.learning_rate_scale * cfg.d_model ** -0.5
  warmup = float(cfg.warmup_steps)

  def schedule(step):
    step = jnp.maximum(jnp.asarray(step, jnp.float32), 1.0)
    return scale * jnp.minimum(step ** -0.5, step * warmup ** -1.5)

  return schedule


def make_optimizer(cfg: TransformerConfig) -> optax.GradientTransformation:
  """Adam(b1, b2, eps) from the config driven by the paper's schedule."""
  schedule = learning_rate_schedule(cfg)
  # optax's count is the number of updates done so far; the paper's step is one more.
  return optax.adam(learning_rate=lambda count: schedule(count + 1),
                    b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps)
