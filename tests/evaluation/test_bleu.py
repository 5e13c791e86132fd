"""The three BLEU scores: sacreBLEU itself, and the paper's tokenised BLEU from first principles."""

import collections
import math

import pytest
import sacrebleu

from t2t_jax.evaluation import bleu

REFS = [
    "Die Rich-Text-Datei kostet 3,50 Euro.",
    "Er sagte: „Das ist ein E-Mail-Programm.“",
    "Wir haben’s geschafft, sagte die Vize-Präsidentin.",
    "Das Wetter ist heute schön.",
]
HYPS = [
    "Die Rich-Format-Datei kostet 3,50 Euro.",
    "Er sagte: \"Das ist ein E-Mail-Programm.\"",
    "Wir haben's geschafft, sagte die Präsidentin.",
    "Das Wetter ist schön heute.",
]


def multi_bleu(hyps, refs):
  """multi-bleu.perl's corpus BLEU on whitespace tokens: cased, unsmoothed, one reference."""
  correct, total, hyp_len, ref_len = [0] * 4, [0] * 4, 0, 0
  for hyp, ref in zip(hyps, refs):
    hyp, ref = hyp.split(), ref.split()
    hyp_len, ref_len = hyp_len + len(hyp), ref_len + len(ref)
    for n in range(1, 5):
      hyp_grams = collections.Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
      ref_grams = collections.Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
      correct[n - 1] += sum(min(c, ref_grams[g]) for g, c in hyp_grams.items())
      total[n - 1] += max(len(hyp) - n + 1, 0)
  if min(correct) == 0:
    return 0.0
  brevity = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
  return 100 * brevity * math.exp(sum(math.log(c / t) for c, t in zip(correct, total)) / 4)


def test_sacrebleu_scores_are_sacrebleus_own():
  scores = bleu.bleu_scores(HYPS, REFS, "de")
  assert set(scores) == {"sacrebleu", "sacrebleu_intl", "paper"}
  assert scores["sacrebleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
  assert scores["sacrebleu_intl"]["score"] == pytest.approx(
      sacrebleu.corpus_bleu(HYPS, [REFS], tokenize="intl").score)
  assert "tok:13a" in scores["sacrebleu"]["signature"]
  assert "tok:intl" in scores["sacrebleu_intl"]["signature"]
  assert "tok:moses-de+atat" in scores["paper"]["signature"]


def test_paper_tokenisation_splits_compounds_and_normalises_quotes():
  assert bleu.paper_tokenize(REFS[0], "de") == \
      "Die Rich ##AT##-##AT## Text ##AT##-##AT## Datei kostet 3,50 Euro ."
  assert bleu.paper_tokenize(REFS[1], "de") == \
      'Er sagte : " Das ist ein E ##AT##-##AT## Mail ##AT##-##AT## Programm . "'
  # Matches do not overlap, as with perl's s///g: the second hyphen of "a-b-c" stays.
  assert bleu.paper_tokenize("a-b-c", "de") == "a ##AT##-##AT## b-c"
  assert bleu.paper_tokenize(HYPS[1], "de") == bleu.paper_tokenize(REFS[1], "de")
  assert bleu.paper_tokenize("Wir haben’s „so“ gewollt.", "de") == \
      bleu.paper_tokenize("Wir haben's \"so\" gewollt.", "de")


def test_paper_score_is_multi_bleu_of_both_sides_tokenised():
  scores = bleu.bleu_scores(HYPS, REFS, "de")
  tokenised_hyps = [bleu.paper_tokenize(h, "de") for h in HYPS]
  tokenised_refs = [bleu.paper_tokenize(r, "de") for r in REFS]
  assert any("##AT##-##AT##" in r for r in tokenised_refs)
  assert any("##AT##-##AT##" in h for h in tokenised_hyps)
  assert scores["paper"]["score"] == pytest.approx(multi_bleu(tokenised_hyps, tokenised_refs))
  # Quotes that differ only in style match under the paper's rules, not under 13a.
  quoted = bleu.bleu_scores(HYPS[1:2], REFS[1:2], "de")
  assert quoted["paper"]["score"] == pytest.approx(100.0)
  assert quoted["sacrebleu"]["score"] < 100.0


def test_mismatched_line_counts_raise():
  with pytest.raises(ValueError, match="3 hypothesis lines but 4 reference lines"):
    bleu.bleu_scores(HYPS[:3], REFS, "de")
