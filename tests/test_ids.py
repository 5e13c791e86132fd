"""A decoded row read back as a sentence's ids."""

from t2t_jax.ids import EOS_ID, PAD_ID, strip_eos


def test_strip_eos_keeps_the_ids_before_the_first_eos_or_padding():
  assert strip_eos([5, 6, EOS_ID, 7, EOS_ID]) == [5, 6]
  assert strip_eos([5, PAD_ID, 7]) == [5]
  assert strip_eos([EOS_ID]) == [] and strip_eos([4, 3]) == [4, 3]
