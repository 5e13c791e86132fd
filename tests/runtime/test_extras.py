"""runtime/extras.py: a missing extra is an ImportError whose message says how to install it."""

import pytest

from t2t_jax.runtime import extras


def test_install_names_the_editable_install_of_the_extra():
  assert extras.install("serve") == "pip install -e '.[serve]'"
  assert extras.install("accelerators") == "pip install -e '.[accelerators]'"


def test_missing_extra_error_is_an_import_error_that_keeps_its_message():
  with pytest.raises(ImportError) as caught:      # callers that catch ImportError still do
    raise extras.MissingExtraError(f"ctranslate2 is not installed: {extras.install('export')}")
  assert type(caught.value) is extras.MissingExtraError
  assert str(caught.value) == "ctranslate2 is not installed: pip install -e '.[export]'"
