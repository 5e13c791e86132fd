"""tests/conftest.py turns a deprecation raised from t2t_jax's own modules into a failure."""

import warnings

import pytest


def test_a_deprecation_from_t2t_jax_fails_the_test_that_reaches_it():
  for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
    with pytest.raises(category):
      warnings.warn_explicit("x is deprecated", category, "t2t_jax/model/layers.py", 1,
                             module="t2t_jax.model.layers")


def test_a_deprecation_inside_another_library_stays_a_warning():
  with pytest.warns(DeprecationWarning):
    warnings.warn_explicit("x is deprecated", DeprecationWarning, "jax/_src/api.py", 1,
                           module="jax._src.api")
