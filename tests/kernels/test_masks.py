"""kernels/masks.py: the dense masks and the structured Mask against brute force."""

import jax.numpy as jnp
import numpy as np
import pytest

from attention_reference import token_ids
from t2t_jax.kernels import masks
from t2t_jax.kernels.logits import NEG_INF
from t2t_jax.model import layers


def test_masks_match_brute_force():
  n, r = 7, 2
  causal = np.asarray(masks.causal_mask(n))[0, 0]
  local = np.asarray(masks.local_mask(n, r))[0, 0]
  for i in range(n):
    for j in range(n):
      assert causal[i, j] == (j <= i)
      assert local[i, j] == (abs(i - j) <= r)
  q_ids = jnp.array([[3, 4, 0]])
  kv_ids = jnp.array([[5, 0, 6, 0]])
  pad = np.asarray(masks.padding_mask(q_ids, kv_ids))
  assert pad.shape == (1, 1, 3, 4)
  expected = np.outer([1, 1, 0], [1, 0, 1, 0]).astype(bool)
  np.testing.assert_array_equal(pad[0, 0], expected)
  bias = np.asarray(masks.mask_to_bias(pad))
  assert np.all(np.isfinite(bias)) and set(np.unique(bias)) == {0.0, NEG_INF}
  with pytest.raises(ValueError, match="window"):
    masks.local_mask(4, -1)


def test_segment_mask_matches_brute_force():
  segments = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]], np.int32)
  kv_segments = np.array([[1, 1, 2, 2, 2, 3, 3, 0], [1, 1, 1, 0, 0, 0, 0, 0]], np.int32)
  for causal in (False, True):
    mask = np.asarray(masks.Mask(jnp.asarray(segments), jnp.asarray(kv_segments),
                                 causal=causal, packed=True).dense())
    assert mask.shape == (2, 1, 8, 8)
    for b, i, j in np.ndindex(2, 8, 8):
      want = segments[b, i] == kv_segments[b, j] != 0 and (not causal or j <= i)
      assert mask[b, 0, i, j] == want, (b, i, j, causal)
  # One sentence per row: the dense mask is the padding mask.
  ids = token_ids(np.random.default_rng(0), 2, 5, [5, 3])
  seg = layers.segment_ids(ids)
  np.testing.assert_array_equal(masks.Mask(seg, seg).dense(), masks.padding_mask(ids, ids))
