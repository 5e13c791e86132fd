"""Tree reading, linearisation, robust delinearisation and EVALB-style F1 (section 6.3)."""

import random

import pytest

from t2t_jax.recipes import treebank

GOLD = "(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"

# A WSJ .mrg-style file: root wrapper, function tags, traces, trees over several lines.
MRG = """
( (S
    (NP-SBJ-1 (NNP John) )
    (VP (VBZ wants)
      (S
        (NP-SBJ (-NONE- *-1) )
        (VP (TO to)
          (VP (VB leave) ))))
    (. .) ))
( (S (NP-SBJ (PRP It)) (VP (VBD rained)) (. .)) )
"""


def tree(text):
  return treebank.clean(treebank.parse_trees(text)[0])


def test_read_treebank_cleans_wsj_conventions(tmp_path):
  (tmp_path / "wsj_0001.mrg").write_text(MRG)
  (tmp_path / "wsj_0002.mrg").write_text(f"(TOP {GOLD})\n")
  trees = [treebank.clean(t) for t in treebank.read_treebank(tmp_path)]
  assert len(trees) == 3
  assert treebank.to_string(trees[0]) == (
      "(S (NP (NNP John)) (VP (VBZ wants) (S (VP (TO to) (VP (VB leave))))) (. .))")
  assert treebank.words(trees[1]) == ["It", "rained", "."]
  assert treebank.to_string(trees[2]) == GOLD
  with pytest.raises(FileNotFoundError, match="licensed"):
    treebank.read_treebank(tmp_path / "missing.mrg")


def test_parse_errors_are_clear():
  with pytest.raises(ValueError, match="not closed"):
    treebank.parse_trees("(S (NP (DT a)")
  with pytest.raises(ValueError, match="expected '\\('"):
    treebank.parse_trees("S (NP a)")


def test_strip_function_tags():
  assert treebank.strip_function_tags("NP-SBJ-1") == "NP"
  assert treebank.strip_function_tags("PP-LOC=2") == "PP"
  assert treebank.strip_function_tags("-LRB-") == "-LRB-"
  assert treebank.strip_function_tags("S") == "S"


def test_linearize_as_in_grammar_as_a_foreign_language():
  t = tree(GOLD)
  assert treebank.linearize(t) == "(S (NP XX XX )NP (VP XX (PP XX (NP XX XX )NP )PP )VP XX )S"
  assert treebank.linearize(t, keep_pos=True).split()[:4] == ["(S", "(NP", "DT", "NN"]


def _random_tree(rng, depth=0):
  """A random cleaned tree with real POS tags (some of them punctuation)."""
  if depth > 3 or rng.random() < 0.3:
    return treebank.Tree(rng.choice(["NN", "VB", "DT", ",", "."]), (rng.choice("abcde"),))
  children = tuple(_random_tree(rng, depth + 1) for _ in range(rng.randint(1, 3)))
  return treebank.Tree(rng.choice(["S", "NP", "VP", "PP", "ADVP", "PRT"]), children)


def test_delinearize_inverts_linearize_on_random_trees():
  rng = random.Random(0)
  for _ in range(200):
    t = _random_tree(rng)
    if t.is_preterminal or set(treebank.pos_tags(t)) <= treebank.PUNCTUATION_TAGS:
      continue  # no brackets to score
    sentence = treebank.words(t)
    assert treebank.delinearize(treebank.linearize(t, keep_pos=True), sentence) == t
    # With XX tags the brackets are the same, so the score against the gold is perfect.
    predicted = treebank.delinearize(treebank.linearize(t), sentence)
    assert treebank.bracket_f1([t], [predicted])["f1"] == 100.0


def test_delinearize_repairs_malformed_sequences():
  sentence = "a b c d".split()
  # Unclosed brackets, a stray closing bracket, too few POS tokens.
  t = treebank.delinearize(")NP (S (NP XX XX (VP XX", sentence)
  assert treebank.words(t) == sentence
  assert treebank.to_string(t) == "(S (NP (XX a) (XX b) (VP (XX c))) (XX d))"
  # Too many POS tokens, an empty constituent, two top-level pieces.
  t = treebank.delinearize("(NP XX XX )NP (PP )PP (VP XX XX XX XX )VP", sentence)
  assert treebank.to_string(t) == "(S (NP (XX a) (XX b)) (VP (XX c) (XX d)))"
  # Tokens a decoder glued together are split apart; a bare "(" builds nothing.
  assert treebank.split_sequence("(S (NP XX)NP(VP XX") == ["(S", "(NP", "XX", ")NP", "(VP", "XX"]
  t = treebank.delinearize("(S ( (NP XX XX)NP(VP XX XX)VP)S", sentence)
  assert treebank.to_string(t) == "(S (NP (XX a) (XX b)) (VP (XX c) (XX d)))"
  # Random garbage always yields a tree over exactly the sentence.
  rng = random.Random(1)
  vocabulary = ["(S", "(NP", "(VP", ")S", ")NP", ")VP", ")", "(", "XX"]
  for _ in range(200):
    tokens = [rng.choice(vocabulary) for _ in range(rng.randint(0, 12))]
    t = treebank.delinearize(tokens, sentence)
    assert treebank.words(t) == sentence
    treebank.bracket_f1([tree("(S (XX a) (XX b) (XX c) (XX d))")], [t])


def test_gold_scores_100_and_a_wrong_tree_the_hand_computed_f1():
  gold = tree(GOLD)
  assert treebank.bracket_f1([gold], [gold])["f1"] == 100.0
  # Gold brackets over the 6 non-punctuation words: S(0,6) NP(0,2) VP(2,6) PP(3,6) NP(4,6).
  # The prediction has S(0,6) NP(0,2) VP(2,6) NP(3,6): 3 of 4 right, 3 of 5 found.
  wrong = treebank.delinearize("(S (NP XX XX )NP (VP XX (NP XX XX XX )NP )VP XX )S",
                              treebank.words(gold))
  score = treebank.bracket_f1([gold], [wrong])
  assert (score["matched"], score["gold_brackets"], score["predicted_brackets"]) == (3, 5, 4)
  assert score["precision"] == pytest.approx(75.0)
  assert score["recall"] == pytest.approx(60.0)
  assert score["f1"] == pytest.approx(2 * 75 * 60 / 135)
  # Corpus-level micro average: adding the perfect tree again adds 5/5/5.
  both = treebank.bracket_f1([gold, gold], [wrong, gold])
  assert both["precision"] == pytest.approx(100 * 8 / 9)
  assert both["recall"] == pytest.approx(100 * 8 / 10)
  assert both["exact_match"] == pytest.approx(50.0)


def test_evalb_rules_punctuation_root_and_equivalent_labels():
  gold = tree(GOLD)
  # The final "." attached inside the VP instead of under S: EVALB ignores punctuation.
  moved = treebank.delinearize("(S (NP XX XX )NP (VP XX (PP XX (NP XX XX )NP )PP XX )VP )S",
                              treebank.words(gold))
  assert treebank.bracket_f1([gold], [moved])["f1"] == 100.0
  # A root wrapper is not a bracket: same score with or without it.
  wrapped = treebank.Tree("TOP", (gold,))
  spans = treebank.labelled_brackets(gold, [False] * 6 + [True])
  assert treebank.labelled_brackets(treebank.clean(wrapped), [False] * 6 + [True]) == spans
  assert sum(spans.values()) == 5
  # A root holding several pieces is kept as TOP (so it linearises) but not scored.
  several = treebank.clean(treebank.parse_trees("( (NP (NN Hello)) (. !) (NP (NN world)) )")[0])
  assert treebank.linearize(several) == "(TOP (NP XX )NP XX (NP XX )NP )TOP"
  assert set(treebank.labelled_brackets(several, [False] * 3)) == {("NP", 0, 1), ("NP", 2, 3)}
  # ADVP and PRT are one label; unary chains count each bracket.
  a = tree("(S (VP (VB give) (PRT (RP up))))")
  b = tree("(S (VP (VB give) (ADVP (RP up))))")
  assert treebank.bracket_f1([a], [b])["f1"] == 100.0
  unary = tree("(S (S (VP (VB go))))")
  assert sum(treebank.labelled_brackets(unary, [False]).values()) == 3
  assert treebank.bracket_f1([unary], [tree("(S (VP (VB go)))")])["recall"] == pytest.approx(
      100 * 2 / 3)


def test_bracket_f1_rejects_mismatched_inputs():
  gold = tree(GOLD)
  with pytest.raises(ValueError, match="predicted trees"):
    treebank.bracket_f1([gold], [])
  with pytest.raises(ValueError, match="differ"):
    treebank.bracket_f1([gold], [tree("(S (NN a))")])
