"""kernels/topk.py: exact top-k against jax.lax.top_k (ties included), rows and columns; and
choice.top_k: the TPU's own top_k where the program is lowered for a TPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.kernels import choice
from t2t_jax.kernels import topk


def test_blocked_top_k_equals_lax_top_k_ties_included():
  rng = np.random.default_rng(1)
  for shape, n in (((5, 4, 1000), 8), ((3, 37000), 8), ((4, 513), 8), ((2, 7), 3)):
    # Few distinct values (many ties, whole blocks equal), then distinct ones.
    for x in (rng.integers(-3, 1, shape), rng.normal(size=shape)):
      x = jnp.asarray(x, jnp.float32)
      rows = x.reshape(-1, shape[-1])
      for got, want in ((topk.blocked_top_k(x, n), jax.lax.top_k(x, n)),
                        (choice.top_k(x, n), jax.lax.top_k(x, n)),
                        # the same rows stored as columns, read in place
                        (topk.blocked_top_k_columns(rows.T, n), jax.lax.top_k(rows, n)),
                        (choice.top_k_columns(rows.T, n), jax.lax.top_k(rows, n))):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("fn,shape", [(choice.top_k, (4, 37000)), (choice.top_k_columns, (37000, 4))])
def test_top_k_is_the_tpus_own_in_a_tpu_program_and_blocked_elsewhere(fn, shape):
  # Chosen by the platform the program is lowered for, not the one running this process.
  x = jax.ShapeDtypeStruct(shape, jnp.float32)
  top_ks = lambda platform: jax.jit(lambda x: fn(x, 8)).trace(x).lower(
      lowering_platforms=(platform,)).as_text().count("top_k")
  assert top_ks("tpu") == 1          # jax.lax.top_k alone
  assert top_ks("cpu") == 2          # the blocks' maxima, then the chosen blocks

