"""model/step_attention.py: one position's attention over the write-once caches equals the
full attention's row for that hypothesis, however the search reordered its rows."""

import jax.numpy as jnp
import numpy as np

from attention_reference import numpy_attention
from t2t_jax.kernels import masks
from t2t_jax.model import step_attention


def test_record_position_follows_the_worked_example():
  # The module docstring's example: one sentence, r = 2, length 3.
  stored_in, holds = step_attention.record_position(jnp.zeros((2, 3), jnp.int32), 0, batch=1)
  np.testing.assert_array_equal(stored_in[:, 0], [0, 1])
  stored_in = stored_in[jnp.array([0, 0])]          # both rows extend row 0's hypothesis
  stored_in, holds = step_attention.record_position(stored_in, 1, batch=1)
  np.testing.assert_array_equal(stored_in[:, :2], [[0, 0], [0, 1]])
  assert holds.shape == (1, 2, 2, 3) and holds.dtype == jnp.bool_
  # Row 1 reads position 0 from cache row 0 and position 1 from its own.
  assert holds[0, 1, 0, 0] and holds[0, 1, 1, 1]
  assert not holds[0, 1, 1, 0] and not holds[0, 1, 0, 1]
  np.testing.assert_array_equal(holds[0, 0, :, :2], [[True, True], [False, False]])
  np.testing.assert_array_equal(holds.sum(axis=2), 1)  # one cache row per query row and position


def test_self_attention_of_one_position_equals_the_attention_over_its_own_history():
  rng = np.random.default_rng(0)
  batch, r, heads, d_k, d_v, length, position = 2, 3, 2, 4, 5, 6, 3
  rows = batch * r
  keys = rng.normal(size=(rows, heads, d_k, length)).astype(np.float32)
  values = rng.normal(size=(rows, heads, length, d_v)).astype(np.float32)
  q = rng.normal(size=(rows, 1, heads, d_k)).astype(np.float32)
  # A search's history: which of its sentence's rows wrote each earlier position.
  stored_in = jnp.asarray(rng.integers(0, r, (rows, length)), jnp.int32)
  stored_in, holds = step_attention.record_position(stored_in, position, batch)
  bias = masks.mask_to_bias(jnp.arange(length) <= position)[None, None, None, :]
  got = step_attention.self_attention(step_attention.scaled_queries(jnp.asarray(q), jnp.float32),
                                      jnp.asarray(keys), jnp.asarray(values), holds, bias,
                                      jnp.float32)
  assert got.shape == (rows, 1, heads, d_v)
  # The reference gathers each row's own keys/values [rows, length, heads, d] first.
  writer = (np.arange(rows) // r * r)[:, None] + np.asarray(stored_in)  # [rows, length]
  assert np.all(writer[:, position] == np.arange(rows))
  at = np.arange(length)
  own_keys = keys[writer, :, :, at[None]]                        # [rows, length, heads, d_k]
  own_values = values[writer, :, at[None], :]                    # [rows, length, heads, d_v]
  want, _ = numpy_attention(q, own_keys, own_values, np.asarray(bias))
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_cross_attention_of_one_position_equals_the_full_attention_row():
  rng = np.random.default_rng(1)
  batch, r, heads, d_k, d_v, src = 2, 2, 2, 4, 3, 5
  rows = batch * r
  keys = rng.normal(size=(batch, heads, src, d_k)).astype(np.float32)
  values = rng.normal(size=(batch, heads, src, d_v)).astype(np.float32)
  q = rng.normal(size=(rows, 1, heads, d_k)).astype(np.float32)
  source = jnp.array([[4, 5, 6, 0, 0], [7, 8, 9, 3, 2]])
  bias = masks.mask_to_bias(source != 0)[:, None, None, :]             # [batch, 1, 1, src]
  got = step_attention.cross_attention(step_attention.scaled_queries(jnp.asarray(q), jnp.float32),
                                       jnp.asarray(keys), jnp.asarray(values), bias, jnp.float32)
  assert got.shape == (rows, 1, heads, d_v)
  # Every row of a sentence reads that sentence's keys/values.
  per_row = lambda x: np.repeat(x, r, axis=0).transpose(0, 2, 1, 3)     # [rows, src, heads, d]
  want, probs = numpy_attention(q, per_row(keys), per_row(values),
                                np.repeat(np.asarray(bias), r, axis=0))
  np.testing.assert_allclose(got, want, atol=1e-5)
  assert np.all(probs[:r, :, :, 3:] < 1e-30)                           # padding gets no weight
