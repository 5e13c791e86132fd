"""data/buckets.py: the one series of padded lengths, against a brute-force reading of it."""

from t2t_jax.data import buckets


def test_bucket_length_is_the_smallest_member_that_holds_n():
  for n in range(0, 1025):
    expected = min(b for b in buckets.BUCKET_LENGTHS if b >= max(n, 8))
    assert buckets.bucket_length(n) == expected, n


def test_bucket_length_goes_on_past_the_table_and_honours_the_minimum():
  assert [buckets.bucket_length(n) for n in (1025, 1537, 2049)] == [1536, 2048, 3072]
  assert buckets.bucket_length(3, minimum=2) == 3 and buckets.bucket_length(5, minimum=2) == 6
  assert buckets.bucket_length(20, minimum=32) == 32


def test_bucket_lengths_end_at_the_maximum_once():
  assert buckets.bucket_lengths(100) == [8, 12, 16, 24, 32, 48, 64, 96, 100]
  assert buckets.bucket_lengths(64) == [8, 12, 16, 24, 32, 48, 64]
  assert buckets.bucket_lengths(5) == [5]
