"""evaluation/text.py: text <-> ids as every translation path reads and writes them; the plain
one-model translation of a test set (what training scores) gives the Translator's translations,
blank lines and cut long lines included."""

import logging

import pytest

from random_run import LINES, LONG
from t2t_jax.data import textio
from t2t_jax.ids import UNK_ID
from t2t_jax.evaluation import bleu
from t2t_jax.evaluation import text as text_lib
from t2t_jax.inference import translator as translator_lib


@pytest.fixture(scope="module")
def translator(random_workdir):
  return translator_lib.Translator(random_workdir[0])


def test_decode_and_score_writes_hypotheses_and_three_scores(translator, tmp_path):
  # LINES again, so that the programs compiled above are reused.
  sources, references = LINES, ["der Hund schläft", "", "gestern sah der alte Mann den Hund",
                                "Steuerzeichen", "Text", "", "der alte Mann", "ein", "die Kinder"]
  out = tmp_path / "test.hyp"
  scores = bleu.decode_and_score(translator.cfg, translator.params, translator.tokenizer,
                                     sources, references, out)
  assert {"sacrebleu", "sacrebleu_intl", "paper"} <= set(scores)
  hyps = textio.read_lines(out)
  # A line longer than the model is cut, as --long_inputs=crop does (the Translator splits
  # it by default).
  assert hyps == translator.translate(sources, long_inputs="crop", warn=lambda _: None)
  assert scores["sacrebleu"]["score"] == pytest.approx(
      bleu.bleu_scores(hyps, references, "de")["sacrebleu"]["score"])
  assert scores["decode"]["sentences"] == len(LINES)


def test_ids_beyond_the_sentencepiece_model_read_as_unknown(translator):
  tokenizer = translator.tokenizer
  ids = tokenizer.encode("the dog")[:-1]
  assert text_lib.ids_to_text(tokenizer, ids) == "the dog"
  text = text_lib.ids_to_text(tokenizer, ids + [tokenizer.vocab_size, tokenizer.vocab_size + 7])
  assert text == tokenizer.decode(ids + [UNK_ID, UNK_ID])


def test_a_line_longer_than_the_model_is_cut_with_a_warning(translator, caplog):
  cfg = translator.cfg
  assert text_lib.source_pieces(translator.tokenizer, LONG) > cfg.max_len - 1
  with caplog.at_level(logging.WARNING):
    cut = text_lib.translate_lines(cfg, translator.params, translator.tokenizer, ["", LONG])
  assert cut[0] == "" and cut[1]
  assert "line 2 has" in caplog.text and "truncated" in caplog.text
  assert cut[1] == translator.translate([LONG], long_inputs="crop", warn=lambda _: None)[0]
