"""ids.py: a decoded row read back as a sentence's ids; the one series of padded lengths
against a brute-force reading of it."""

from t2t_jax import ids
from t2t_jax.ids import EOS_ID, PAD_ID, strip_eos


def test_strip_eos_keeps_the_ids_before_the_first_eos_or_padding():
  assert strip_eos([5, 6, EOS_ID, 7, EOS_ID]) == [5, 6]
  assert strip_eos([5, PAD_ID, 7]) == [5]
  assert strip_eos([EOS_ID]) == [] and strip_eos([4, 3]) == [4, 3]


def test_bucket_length_is_the_smallest_member_that_holds_n():
  for n in range(0, 1025):
    expected = min(b for b in ids.BUCKET_LENGTHS if b >= max(n, 8))
    assert ids.bucket_length(n) == expected, n


def test_bucket_length_goes_on_past_the_table_and_honours_the_minimum():
  assert [ids.bucket_length(n) for n in (1025, 1537, 2049)] == [1536, 2048, 3072]
  assert ids.bucket_length(3, minimum=2) == 3 and ids.bucket_length(5, minimum=2) == 6
  assert ids.bucket_length(20, minimum=32) == 32


def test_bucket_lengths_end_at_the_maximum_once():
  assert ids.bucket_lengths(100) == [8, 12, 16, 24, 32, 48, 64, 96, 100]
  assert ids.bucket_lengths(64) == [8, 12, 16, 24, 32, 48, 64]
  assert ids.bucket_lengths(5) == [5]
