"""errors.py: an exception's message as one line, for one-line errors and logs."""

from t2t_jax import errors


def test_one_line_is_the_first_line_of_the_message():
  assert errors.one_line(ValueError("bad step 3\n  details\nmore")) == "bad step 3"
  # Leading blank lines and spaces are not the message's first line.
  assert errors.one_line(OSError("\n\n  disk full\nsecond")) == "disk full"
  assert errors.one_line(KeyError("x")) == "'x'"


def test_a_message_without_text_gives_the_error_s_type():
  assert errors.one_line(RuntimeError()) == "RuntimeError"
  assert errors.one_line(FloatingPointError(" \n\t")) == "FloatingPointError"
