"""kernels/dropout.py: the hash masks against the reference's (`model.layers.dropout`,
jax.random.bernoulli) in what matters, and their gradient; `dropout.dropout`, the model's
plug-in, keeps the reference's contract."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.kernels import dropout
from t2t_jax.model import layers

SHAPE = (64, 32, 256)  # [batch, length, d_model]; 524288 elements
KEY = jax.random.key(0)


def _keep(key, rate, shape=SHAPE):
  return np.asarray(dropout.hash_keep_mask(dropout.seeds(key), shape, rate))


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_kept_fraction_is_one_minus_rate(rate):
  keep = _keep(KEY, rate)
  sigma = np.sqrt(rate * (1 - rate) / keep.size)
  assert abs(keep.mean() - (1 - rate)) < 5 * sigma
  # Every slice keeps its share too: no region of the index space is favoured.
  per_row = keep.reshape(SHAPE[0], -1).mean(axis=1)               # [batch]
  row_sigma = np.sqrt(rate * (1 - rate) / (keep.size // SHAPE[0]))
  assert np.abs(per_row - (1 - rate)).max() < 5 * row_sigma


def test_masks_of_different_keys_and_neighbours_are_independent():
  rate = 0.3
  a, b = _keep(KEY, rate), _keep(jax.random.fold_in(KEY, 1), rate)
  agree = (a == b).mean()  # independent masks agree with probability p^2 + (1-p)^2
  expected = rate**2 + (1 - rate)**2
  assert abs(agree - expected) < 5 * np.sqrt(expected * (1 - expected) / a.size)
  flat = a.ravel().astype(np.float64)
  for lag in (1, 2, SHAPE[2], SHAPE[1] * SHAPE[2]):  # along d_model, length and batch
    corr = np.corrcoef(flat[:-lag], flat[lag:])[0, 1]
    assert abs(corr) < 5 / np.sqrt(flat.size), (lag, corr)


def test_the_same_key_gives_the_same_mask_and_the_mask_is_not_shifted_by_the_seed():
  np.testing.assert_array_equal(_keep(KEY, 0.1), _keep(KEY, 0.1))
  # Seeds that differ in one word only give neither the same nor a shifted mask.
  seed = np.asarray(dropout.seeds(KEY))
  a = np.asarray(dropout.hash_keep_mask(jnp.asarray(seed), (4096,), 0.5))
  for step in ([1, 0], [0, 1]):
    b = np.asarray(dropout.hash_keep_mask(jnp.asarray(seed + np.array(step, np.uint32)),
                                          (4096,), 0.5))
    for shift in (0, 1):
      assert abs((a[shift:] == b[:a.size - shift]).mean() - 0.5) < 0.05, (step, shift)


@pytest.mark.parametrize("dropout_fn", [dropout.dropout, layers.dropout], ids=["hash", "reference"])
def test_dropout_zeroes_or_scales_each_element(dropout_fn):
  x = jax.random.normal(jax.random.key(1), SHAPE)
  y = np.asarray(dropout_fn(x, KEY, 0.25))
  kept = y != 0
  np.testing.assert_allclose(y[kept], np.asarray(x)[kept] / 0.75, rtol=1e-6)
  assert abs(kept.mean() - 0.75) < 0.01
  np.testing.assert_array_equal(dropout_fn(x, KEY, 0.0), x)
  assert not np.asarray(dropout_fn(x, KEY, 1.0)).any()


@pytest.mark.exact
def test_the_plug_in_runs_the_hash_and_the_reference_is_jax_random_bernoulli():
  x = jnp.ones(SHAPE)
  keep = jax.random.bernoulli(KEY, 0.9, SHAPE)
  np.testing.assert_array_equal(layers.dropout(x, KEY, 0.1) != 0, keep)
  np.testing.assert_array_equal(layers.dropout(x, KEY, 0.1), jnp.where(keep, x / 0.9, 0))
  np.testing.assert_array_equal(dropout.dropout(x, KEY, 0.1),
                                dropout.hash_dropout(x, dropout.seeds(KEY), 0.1))


@pytest.mark.exact
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_gradient_applies_the_forward_mask(dtype):
  """The custom backward pass rebuilds the mask: it must be the forward one."""
  x = jax.random.normal(jax.random.key(2), (8, 16, 32)).astype(dtype)
  w = jax.random.normal(jax.random.key(3), x.shape).astype(dtype)
  seed = dropout.seeds(KEY)
  grad = jax.grad(lambda x: jnp.sum(dropout.hash_dropout(x, seed, 0.2) * w).astype(jnp.float32))(x)
  keep = dropout.hash_keep_mask(seed, x.shape, 0.2)
  reference = jax.grad(lambda x: jnp.sum(dropout.apply_mask(keep, x, 0.2) * w)
                       .astype(jnp.float32))(x)
  assert grad.dtype == dtype
  np.testing.assert_array_equal(np.asarray(grad, np.float32), np.asarray(reference, np.float32))
  assert np.count_nonzero(np.asarray(grad, np.float32)) < 0.9 * grad.size


def test_bad_rate_generator_or_size_is_a_clear_error():
  x = jnp.ones((2, 3))
  for dropout_fn in (layers.dropout, dropout.dropout):
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\]"):
      dropout_fn(x, KEY, 1.5)
  with pytest.raises(ValueError, match=r"rate in \[0, 1\)"):
    dropout.hash_keep_mask(jnp.zeros(2, jnp.uint32), (2, 3), 1.0)
  with pytest.raises(ValueError, match="dropout_generator='threefry'"):
    jax.eval_shape(lambda: dropout.hash_keep_mask(jnp.zeros(2, jnp.uint32), (2**16, 2**16), 0.1))
  with pytest.raises(ValueError, match="dropout_generator"):
    configs.get_config("demo", dropout_generator="philox")
