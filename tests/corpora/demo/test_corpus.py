"""The generated demo corpus: seeded, split cleanly, and full of the phenomena it promises."""

import re

import pytest

from t2t_jax.corpora import demo
from t2t_jax.corpora.demo import syntax


@pytest.fixture(scope="module")
def pairs():
  return demo.generate(6000, seed=3)


def _verb_forms() -> set[str]:
  """Every finite German verb form the lexicon can produce (plus auxiliaries)."""
  forms = {"ist", "sind", "bin", "war", "waren", "wird", "werden", "werde", "kann", "können",
           "konnte", "konnten"}
  for v in syntax.VERB_LIST:
    stems = [v.inf, v.de3, v.inf[:-1], v.past, v.past + ("n" if v.past.endswith("e") else "en"),
             "weiß"]
    forms.update(stems)
    forms.update((v.particle or "") + s for s in stems)
  return forms


def test_same_seed_same_corpus_other_seed_other_corpus():
  assert demo.generate(300, seed=7) == demo.generate(300, seed=7)
  assert demo.generate(300, seed=7) != demo.generate(300, seed=8)


def test_lengths_distinct_and_utf8(pairs):
  lengths = [len(s.split()) for pair in pairs for s in pair]
  assert min(lengths) >= 3 and max(lengths) <= 40
  assert max(lengths) > 25  # a real tail, not only short sentences
  en_lengths = sorted(len(en.split()) for en, _ in pairs)
  median = en_lengths[len(en_lengths) // 2]
  assert 5 <= median <= 20
  assert len({en for en, _ in pairs}) == len({de for _, de in pairs}) == len(pairs)
  german = " ".join(de for _, de in pairs)
  for char in "äöüßÄ":
    assert char in german, char
  assert len({w for en, _ in pairs for w in en.split()}) > 300
  assert len({w for _, de in pairs for w in de.split()}) > 300


def test_splits_do_not_overlap(tmp_path):
  paths = demo.write_corpus(str(tmp_path), num_train=2000, num_dev=200, num_test=200,
                                   seed=1)
  assert demo.corpus_paths(str(tmp_path)) == paths
  text = {split: [open(p, encoding="utf-8").read().split("\n")[:-1] for p in files]
          for split, files in paths.items()}
  assert [len(text[s][0]) for s in ("train", "dev", "test")] == [2000, 200, 200]
  for side in (0, 1):
    train = set(text["train"][side])
    assert not train & set(text["dev"][side])
    assert not train & set(text["test"][side])
    assert not set(text["dev"][side]) & set(text["test"][side])
  assert not list(tmp_path.glob("*.tmp"))


def test_numbers_in_corpus_are_translated(pairs):
  table = dict(syntax.number_words(n) for n in range(2, 100))
  seen = 0
  for en, de in pairs:
    for word in re.findall(r"\b[a-z]+-[a-z]+\b", en):
      if word in table:
        assert table[word] in de.lower().split(), (en, de)
        seen += 1
  assert seen > 20


def test_verb_final_after_subordinating_conjunctions(pairs):
  forms = _verb_forms()
  checked = 0
  for en, de in pairs:
    match = re.search(r", (weil|dass|obwohl|bevor|während) ([^,]*)\.$", de)
    if match and " und " not in match.group(2):
      last = match.group(2).split()[-1]
      # The finite verb (with a separable particle joined to it) ends the clause.
      assert last in forms, (en, de)
      checked += 1
  assert checked > 100


def test_verb_second_after_fronted_time(pairs):
  forms = _verb_forms()
  checked = 0
  for en, de in pairs:
    if en.startswith("Yesterday ") and not en.startswith("Yesterday,"):
      words = de.split()
      assert words[0] == "Gestern" and words[1] in forms, (en, de)
      checked += 1
  assert checked > 10


def test_separable_verbs_compounds_and_agreement(pairs):
  opens = [(en, de) for en, de in pairs if re.fullmatch(r"(The|A) \w+ opens the \w+\.", en)]
  for en, de in opens:
    assert de.split()[2] == "macht" and de.endswith(" auf."), (en, de)
  assert any("aufmacht" in de for _, de in pairs)
  trees = [(en, de) for en, de in pairs if "apple tree" in en]
  assert trees and all("Apfelb" in de for _, de in trees)
  # Gender and case: "the dog" is "der Hund" as a subject, "den Hund" as a direct
  # object, "dem Hund" after "with".
  verbs = r"(sees|saw|hears|heard|finds|found|loves|loved|follows|followed|catches|caught)"
  subjects = [de for en, de in pairs if re.match(rf"The dog {verbs} ", en)]
  objects = [de for en, de in pairs if re.search(rf"\b{verbs} the dog\b", en)]
  withs = [de for en, de in pairs if re.search(r"\bwith the dog\b", en)]
  assert subjects and all(de.startswith("Der Hund ") for de in subjects)
  assert objects and all("den Hund" in de for de in objects)
  assert withs and all("mit dem Hund" in de for de in withs)


def test_negation_moves_or_becomes_kein(pairs):
  simple = [(en, de) for en, de in pairs if not re.search(r",| and | that | who |\?", en)]
  indefinite = [(en, de) for en, de in simple
                if re.search(r"\b(does|did) not (see|find|buy|need|read|eat) an? ", en)]
  possessive = [(en, de) for en, de in simple
                if re.search(r"\b(does|did) not (see|find|buy|need|read|eat) (his|my|our) ", en)]
  assert indefinite and possessive
  for en, de in indefinite:  # "does not see a dog" -> "sieht keinen Hund"
    assert re.search(r"\bkein(e|en|em|er)?\b", de) and "nicht" not in de, (en, de)
  for en, de in possessive:  # "does not see his dog" -> "sieht seinen Hund nicht"
    assert " nicht" in de and "kein" not in de, (en, de)
