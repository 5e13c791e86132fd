"""data/demo_syntax.py: the demo grammar's number words in both languages (the grammar at
work in a generated corpus: tests/data/test_demo.py)."""

import pytest

from t2t_jax.data import demo_syntax


def test_number_words():
  assert demo_syntax.number_words(21) == ("twenty-one", "einundzwanzig")
  assert demo_syntax.number_words(30) == ("thirty", "dreißig")
  assert demo_syntax.number_words(17) == ("seventeen", "siebzehn")
  assert demo_syntax.number_words(96) == ("ninety-six", "sechsundneunzig")
  with pytest.raises(ValueError, match="n=100"):
    demo_syntax.number_words(100)

