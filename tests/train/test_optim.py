"""The paper's schedule (section 5.3) and Adam, against hand-written references."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.train import optim


def _paper_lrate(d_model, warmup, step):
  return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("step", [1, 4000, 100_000])
def test_schedule_is_the_papers_formula(step):
  cfg = configs.get_config("base")
  assert (cfg.d_model, cfg.warmup_steps) == (512, 4000)
  got = float(optim.learning_rate_schedule(cfg)(step))
  assert got == pytest.approx(_paper_lrate(512, 4000, step), rel=1e-6)


def test_schedule_peaks_at_warmup_and_scales():
  cfg = configs.get_config("base")
  schedule = optim.learning_rate_schedule(cfg)
  values = [float(schedule(s)) for s in (3999, 4000, 4001)]
  assert values[1] > values[0] and values[1] > values[2]
  doubled = optim.learning_rate_schedule(cfg.replace(learning_rate_scale=2.0))
  assert float(doubled(123)) == pytest.approx(2 * float(schedule(123)), rel=1e-6)
  assert float(schedule(0)) == pytest.approx(float(schedule(1)))  # never 0 or inf


def test_adam_matches_numpy_with_the_papers_hyperparameters():
  """Three updates: optax's count 0, 1, 2 must use the paper's steps 1, 2, 3."""
  cfg = configs.get_config("base", warmup_steps=4, learning_rate_scale=10.0)
  assert (cfg.adam_b1, cfg.adam_b2, cfg.adam_eps) == (0.9, 0.98, 1e-9)
  optimizer = optim.make_optimizer(cfg)
  rng = np.random.default_rng(0)
  params = rng.normal(size=(6,)).astype(np.float32)
  # Gradients of very different sizes, some near eps, so that eps and both betas matter.
  grads = [rng.normal(size=(6,)) * np.array([1, 1e-3, 1e-6, 1e-9, 3e-9, 10])
           for _ in range(3)]

  state = optimizer.init(jnp.asarray(params))
  got = jnp.asarray(params)
  for g in grads:
    updates, state = optimizer.update(jnp.asarray(g, jnp.float32), state, got)
    got = got + updates

  b1, b2, eps = 0.9, 0.98, 1e-9
  expected = params.astype(np.float64)
  m = np.zeros(6)
  v = np.zeros(6)
  for step, g in enumerate(grads, start=1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1 ** step), v / (1 - b2 ** step)
    lr = 10.0 * _paper_lrate(512, 4, step)
    expected = expected - lr * m_hat / (np.sqrt(v_hat) + eps)
  np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-7)
  assert not math.isclose(float(got[0]), float(params[0]))  # it did move
