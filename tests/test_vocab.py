"""The shared SentencePiece vocabulary: ids, exact round trip, caching, clear errors."""

import os

import pytest

from t2t_jax import vocab
from t2t_jax.datasets import demo
from t2t_jax.ids import EOS_ID, PAD_ID, UNK_ID


@pytest.fixture(scope="module")
def corpus():
  return demo.generate(1500, seed=11)


@pytest.fixture(scope="module")
def tokenizer(corpus, tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("vocab"))
  return vocab.build_or_load(400, directory, lambda: corpus, max_sentences=2000)


def test_ids_and_round_trip(tokenizer, corpus):
  assert tokenizer.vocab_size <= 400
  sp = tokenizer.sp
  assert (sp.pad_id(), sp.eos_id(), sp.unk_id(), sp.bos_id()) == (0, 1, 2, -1)
  for en, de in corpus[:300]:
    for text in (en, de):
      ids = tokenizer.encode(text)
      assert ids[-1] == EOS_ID and PAD_ID not in ids and EOS_ID not in ids[:-1]
      assert UNK_ID not in ids
      assert tokenizer.decode(ids) == text  # identity normalisation: exact text back
  batch = tokenizer.encode_batch([de for _, de in corpus[:50]])
  assert batch == [tokenizer.encode(de) for _, de in corpus[:50]]
  # Decoding stops at EOS and skips padding.
  ids = tokenizer.encode("Der Hund schläft.")
  assert tokenizer.decode(ids + [0, 0] + ids) == "Der Hund schläft."
  assert tokenizer.decode([0] + ids[:-1]) == "Der Hund schläft."
  # Characters are kept exactly (identity normalisation, no NFKC folding).
  assert tokenizer.decode(tokenizer.encode("Die Straße ist groß.")) == "Die Straße ist groß."


def test_cached_model_is_reused_not_retrained(tokenizer):
  directory = os.path.dirname(tokenizer.model_path)
  before = os.stat(tokenizer.model_path).st_mtime_ns

  def must_not_train():
    raise AssertionError("the vocabulary was retrained")

  again = vocab.build_or_load(400, directory, must_not_train)
  assert os.stat(again.model_path).st_mtime_ns == before
  assert again.encode("Der Mann sieht den Hund.") == tokenizer.encode("Der Mann sieht den Hund.")
  with pytest.raises(ValueError, match="vocab_size=400.*vocab_size=500"):
    vocab.build_or_load(500, directory, must_not_train)


def test_small_corpus_with_a_large_vocab_still_trains(tmp_path):
  pairs = [("The dog sleeps.", "Der Hund schläft."), ("The cat eats.", "Die Katze frisst."),
           ("It costs ½ euro.", "Es kostet ½ Euro.")]
  tok = vocab.build_or_load(1000, str(tmp_path), lambda: pairs)
  assert tok.vocab_size < 1000
  assert tok.decode(tok.encode("Die Katze schläft.")) == "Die Katze schläft."
  # NFKC (SentencePiece's default) would turn "½" into "1⁄2"; identity keeps it.
  assert tok.decode(tok.encode("Es kostet ½ Euro.")) == "Es kostet ½ Euro."
  assert sorted(os.listdir(tmp_path)) == ["spm.json", "spm.model", "spm.vocab"]
  with pytest.raises(ValueError, match="no non-empty lines"):
    vocab.build_or_load(100, str(tmp_path / "empty"), lambda: [("", " ")])
