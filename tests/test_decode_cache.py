"""decode_cache.py: the wrappers say which parts of a cache a search tiles, reorders and
resizes."""

import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax import decode_cache
from t2t_jax.decoding import beam_search


def test_cache_wrappers_tile_reorder_and_resize_only_their_parts():
  batch, r = 2, 3
  per_row = jnp.arange(batch * 4.0).reshape(batch, 4)
  positions = jnp.arange(batch * 5.0).reshape(batch, 1, 5)          # position axis 2
  shared = jnp.array([[7.0], [8.0]])
  one = {"row": per_row, "self": decode_cache.Positions([positions], axis=2),
         "sentence": decode_cache.PerSentence({"cross": shared})}
  cache = [one, one]                                                  # an ensemble's caches
  tiled = beam_search.tile(cache, r)
  for c in tiled:
    np.testing.assert_array_equal(c["row"], np.repeat(per_row, r, 0))
    np.testing.assert_array_equal(c["self"].value[0], np.repeat(positions, r, 0))
    assert c["sentence"].value["cross"] is shared
  rows = jnp.array([2, 0, 0, 5, 3, 4])
  taken = beam_search.take_rows(tiled, rows)
  np.testing.assert_array_equal(taken[1]["row"], np.repeat(per_row, r, 0)[rows])
  assert taken[1]["sentence"].value["cross"] is shared
  # The reference path tiles and reorders the shared part too.
  unshared = beam_search.take_rows(beam_search.tile(cache, r, shared=False), rows, shared=False)
  np.testing.assert_array_equal(unshared[0]["sentence"].value["cross"], np.repeat(shared, r, 0)[rows])
  assert beam_search.position_length(tiled) == 5
  short = beam_search.resize(tiled, 2)
  long = beam_search.resize(short, 7)
  assert beam_search.position_length(long) == 7
  np.testing.assert_array_equal(long[0]["self"].value[0][..., :2], tiled[0]["self"].value[0][..., :2])
  np.testing.assert_array_equal(long[0]["self"].value[0][..., 2:], 0)
  np.testing.assert_array_equal(long[0]["row"], tiled[0]["row"])
  assert beam_search.cache_rows(cache) == batch and beam_search.cache_rows(tiled) == batch * r
  assert beam_search.cache_rows({"s": decode_cache.PerSentence(shared)}) is None
  # Unordered buffers are tiled and resized like Positions but never reordered
  # (unless shared=False, where they are plain rows).
  kept = {"u": decode_cache.Unordered(positions, axis=2), "row": per_row}
  u_tiled = beam_search.tile(kept, r)
  np.testing.assert_array_equal(u_tiled["u"].value, np.repeat(positions, r, 0))
  u_taken = beam_search.take_rows(u_tiled, rows)
  assert u_taken["u"].value is u_tiled["u"].value
  np.testing.assert_array_equal(u_taken["row"], np.repeat(per_row, r, 0)[rows])
  np.testing.assert_array_equal(beam_search.take_rows(u_tiled, rows, shared=False)["u"].value,
                                np.repeat(positions, r, 0)[rows])
  assert beam_search.cache_rows(u_tiled) == batch * r
  assert beam_search.position_length(beam_search.resize(u_tiled, 7)) == 7
  assert beam_search.position_length({"x": per_row}) is None
  with pytest.raises(ValueError, match="different lengths"):
    beam_search.position_length([tiled[0], long[0]])


def test_positions_are_reordered_with_their_rows_and_row_counts_must_agree():
  # Positions buffers are per row: a picked row brings what its hypothesis wrote.
  written = jnp.arange(4 * 3.0).reshape(4, 3)                         # [rows, length]
  cache = {"self": decode_cache.Positions(written), "row": jnp.arange(4)}
  rows = jnp.array([3, 3, 0, 1])
  taken = beam_search.take_rows(cache, rows)
  np.testing.assert_array_equal(taken["self"].value, np.asarray(written)[[3, 3, 0, 1]])
  np.testing.assert_array_equal(taken["row"], [3, 3, 0, 1])
  with pytest.raises(ValueError, match=r"different leading dims \[2, 4\]"):
    beam_search.cache_rows({"a": jnp.zeros((4, 1)), "b": decode_cache.Positions(jnp.zeros((2, 3)))})
