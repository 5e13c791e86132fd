"""errors.py: an exception's message as one line, for one-line errors and logs; a missing extra is
an ImportError whose message says how to install it."""

import pytest

from t2t_jax import errors


def test_one_line_is_the_first_line_of_the_message():
  assert errors.one_line(ValueError("bad step 3\n  details\nmore")) == "bad step 3"
  # Leading blank lines and spaces are not the message's first line.
  assert errors.one_line(OSError("\n\n  disk full\nsecond")) == "disk full"
  assert errors.one_line(KeyError("x")) == "'x'"


def test_a_message_without_text_gives_the_error_s_type():
  assert errors.one_line(RuntimeError()) == "RuntimeError"
  assert errors.one_line(FloatingPointError(" \n\t")) == "FloatingPointError"


def test_install_names_the_editable_install_of_the_extra():
  assert errors.install("serve") == "pip install -e '.[serve]'"
  assert errors.install("accelerators") == "pip install -e '.[accelerators]'"


def test_missing_extra_error_is_an_import_error_that_keeps_its_message():
  with pytest.raises(ImportError) as caught:      # callers that catch ImportError still do
    raise errors.MissingExtraError(f"ctranslate2 is not installed: {errors.install('export')}")
  assert type(caught.value) is errors.MissingExtraError
  assert str(caught.value) == "ctranslate2 is not installed: pip install -e '.[export]'"
