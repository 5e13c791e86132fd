"""corpora/demo/syntax.py: the demo grammar's number words in both languages (the grammar at
work in a generated corpus: tests/corpora/demo/test_corpus.py)."""

import pytest

from t2t_jax.corpora.demo import syntax


def test_number_words():
  assert syntax.number_words(21) == ("twenty-one", "einundzwanzig")
  assert syntax.number_words(30) == ("thirty", "dreißig")
  assert syntax.number_words(17) == ("seventeen", "siebzehn")
  assert syntax.number_words(96) == ("ninety-six", "sechsundneunzig")
  with pytest.raises(ValueError, match="n=100"):
    syntax.number_words(100)

