"""data/packing.py: first-fit decreasing, the packed epoch plan and its layout (pure NumPy)."""

import dataclasses

import numpy as np
import pytest

from t2t_jax.data import packing


@dataclasses.dataclass
class _Split:
  src_ids: np.ndarray
  src_offsets: np.ndarray
  tgt_ids: np.ndarray
  tgt_offsets: np.ndarray


def _split(n, seed=0, longest=12):
  rng = np.random.default_rng(seed)
  sides = []
  for _ in range(2):
    lengths = rng.integers(1, longest + 1, n)
    ids = rng.integers(3, 50, int(lengths.sum())).astype(np.int32)
    sides += [ids, np.r_[0, np.cumsum(lengths)]]
  return _Split(*sides)


def _brute_ffd(sizes, capacity):
  free, row_of = [], {}
  for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
    for r, f in enumerate(free):
      if f >= sizes[i]:
        free[r] -= sizes[i]
        row_of[i] = r
        break
    else:
      free.append(capacity - sizes[i])
      row_of[i] = len(free) - 1
  return [row_of[i] for i in range(len(sizes))]


def test_first_fit_decreasing_matches_a_brute_force_one():
  sizes = np.random.default_rng(1).integers(1, 11, 200)
  rows = packing.first_fit_decreasing(sizes, 16)
  assert list(rows) == _brute_ffd(list(sizes), 16)
  assert np.bincount(rows, weights=sizes).max() <= 16
  with pytest.raises(ValueError, match="exceeds the row length"):
    packing.first_fit_decreasing(np.array([3, 17]), 16)


def test_row_lengths_halve_down_to_the_shortest():
  assert packing.row_lengths(256) == [256, 128, 64, 32]
  assert packing.row_lengths(64) == [64, 32]
  assert packing.row_lengths(48) == [48]
  assert packing.row_lengths(96, shortest=24) == [96, 48, 24]


def test_pack_window_places_every_item_once_in_the_shortest_rows_it_needs():
  sizes = np.random.default_rng(5).integers(1, 65, 500)
  packed = packing.pack_window(sizes, [64, 32])
  assert [length for length, _ in packed] == [64, 32]
  items = np.concatenate([np.concatenate(rows) for _, rows in packed])
  assert sorted(items) == list(range(500))
  for length, rows in packed:
    assert all(sizes[r].sum() <= length for r in rows)
  long_rows = packed[0][1]
  assert all(sizes[r[0]] > 32 for r in long_rows)          # each opened by a long item
  assert len(long_rows) == np.count_nonzero(sizes > 32)    # and no more of them
  short_rows = packed[1][1]
  assert all(sizes[r].max() <= 32 for r in short_rows)
  fill = sum(sizes[r].sum() for _, rows in packed for r in rows) / sum(
      length * len(rows) for length, rows in packed)
  assert fill > 0.9
  with pytest.raises(ValueError, match="exceeds the row length"):
    packing.pack_window(np.array([65]), [64, 32])


def _epoch(plan):
  batches = []
  while (batch := plan.batch(len(batches))) is not None:
    batches.append(batch)
  return batches


def test_epoch_plan_holds_every_pair_once_and_depends_on_seed_and_epoch_only(monkeypatch):
  monkeypatch.setattr(packing, "WINDOW", 64)     # several windows
  split = _split(300, longest=24)
  src, tgt = np.diff(split.src_offsets), np.diff(split.tgt_offsets)
  make = lambda seed, epoch: packing.EpochPlan(src, tgt, {32: 3, 16: 6}, seed, epoch)
  batches = _epoch(make(3, 0))
  rows = [(length, r) for length, rs in batches for r in rs]
  assert sorted(np.concatenate([r for _, r in rows])) == list(range(300))
  for length, r in rows:
    assert src[r].sum() <= length and tgt[r].sum() <= length
  for length, rs in batches[:-2]:                         # the last ones may be partial
    assert len(rs) == {32: 3, 16: 6}[length]
  assert {length for length, _ in batches} == {32, 16}
  assert np.mean([len(r) for _, r in rows]) > 1.5         # it does pack
  again = _epoch(make(3, 0))
  assert all(a[0] == b[0] and all(np.array_equal(x, y) for x, y in zip(a[1], b[1]))
             for a, b in zip(batches, again))
  other = _epoch(make(3, 1))
  assert [len(r) for _, rs in other for r in rs] != [len(r) for _, rs in batches for r in rs]


def test_plan_batches_are_the_same_asked_in_order_or_directly(monkeypatch):
  monkeypatch.setattr(packing, "WINDOW", 50)
  split = _split(400, seed=2)
  src, tgt = np.diff(split.src_offsets), np.diff(split.tgt_offsets)
  make = lambda: packing.EpochPlan(src, tgt, {16: 7}, seed=0, epoch=0)
  batches = _epoch(make())
  assert all(len(rows) == 7 for _, rows in batches[:-1]) and 0 < len(batches[-1][1]) <= 7
  assert sorted(np.concatenate([np.concatenate(b) for _, b in batches])) == list(range(400))
  length, resumed = make().batch(len(batches) - 2)       # a fresh plan, straight to a batch
  assert length == 16
  assert all(np.array_equal(a, b) for a, b in zip(resumed, batches[-2][1]))
  assert make().batch(len(batches)) is None


def _unpack(batch, side):
  """Per row, the token-id lists of segments 1, 2, ... of one side."""
  tokens = batch[side].reshape(-1, batch[side].shape[-1])
  segments = batch[f"{side}_segments"].reshape(tokens.shape)
  out = []
  for t, s in zip(tokens, segments):
    assert np.all(t[s == 0] == 0) and np.all(t[s > 0] != 0)
    out.append([list(t[s == k]) for k in range(1, s.max(initial=0) + 1)])
  return out


def test_layout_puts_each_pair_whole_in_its_row_and_splits_rows_over_devices():
  split = _split(40, seed=4)
  src, tgt = np.diff(split.src_offsets), np.diff(split.tgt_offsets)
  _, rows = packing.EpochPlan(src, tgt, {16: 6}, seed=0, epoch=0).batch(0)
  one = packing.layout_packed(split, rows, 8, 16, 1, 1, 0, 1)
  assert set(one) == {"inputs", "targets", *packing.SEGMENT_KEYS}
  assert one["inputs"].shape == (1, 1, 8, 16) and one["inputs"].dtype == np.int32
  for side, ids, offsets in (("inputs", split.src_ids, split.src_offsets),
                             ("targets", split.tgt_ids, split.tgt_offsets)):
    got = _unpack(one, side)
    for r, members in enumerate(rows):
      assert got[r] == [list(ids[offsets[i]:offsets[i + 1]]) for i in members]
    assert got[6:] == [[], []]                            # filler rows
  # Two devices x two micro-steps and two processes: the same rows, cut up.
  two = packing.layout_packed(split, rows, 8, 16, 2, 2, 0, 1)
  assert two["targets"].shape == (2, 2, 2, 16)
  np.testing.assert_array_equal(two["targets"].reshape(8, 16), one["targets"].reshape(8, 16))
  halves = [packing.layout_packed(split, rows, 8, 16, 1, 1, p, 2)["inputs"] for p in (0, 1)]
  np.testing.assert_array_equal(np.concatenate(halves, axis=2).reshape(8, 16),
                                one["inputs"].reshape(8, 16))
  with pytest.raises(ValueError, match="divisible"):
    packing.layout_packed(split, rows, 8, 16, 3, 1, 0, 1)
