"""A seeded English -> German-like parallel corpus for the demo run, notebooks and tests.

The translation is a deterministic function of the source, written as rules, so a
small model can learn it in minutes; but it cannot be learnt by copying words in
order. The German side has:

- verb-second main clauses ("Yesterday the man saw the dog." ->
  "Gestern sah der Mann den Hund."), also after a fronted subordinate clause;
- verb-final subordinate clauses (weil, dass, obwohl, wenn/als, bevor, während)
  and relative clauses whose pronoun agrees with its noun ("der Hund, den ...");
- separable verbs ("opens the door" -> "macht die Tür auf"; joined again at the
  end of a subordinate clause: "... weil das Kind die Tür aufmacht");
- future and "can" with the infinitive at the end of the clause;
- gender and case agreement of articles, possessives and adjective endings
  (der/den/dem, ein/einen/einem, "ein alter Mann" / "mit dem alten Mann"),
  weak nouns ("den Jungen"), dative plurals ("mit den Kindern"), prepositions
  that contract ("im", "zum", "ins") and "in" + accusative for a direction;
- negation moved to the end of the middle field ("nicht") or fused into "kein";
- noun compounds written as one word ("the apple tree" -> "der Apfelbaum");
- number words built the other way round ("twenty-one" -> "einundzwanzig");
- umlauts and ß, so UTF-8 matters.

`write_corpus(directory)` writes train/dev/test `.en`/`.de` files; no dev or test
sentence (source or target) occurs in the training split.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from typing import Optional

from t2t_jax.corpora.demo import lexicon
from t2t_jax.corpora.demo.syntax import (ADJ_WORDS, NOUN_LIST, NP, VERB_LIST, Clause, Verb,
                                      number_words, pp_german, render)

log = logging.getLogger(__name__)

_NOUNS_BY_CAT = {cat: [n for n in NOUN_LIST if cat in n.cats] for cat in "pabtoefdvl"}
_VERBS_BY_FRAME = {f: [v for v in VERB_LIST if v.frame == f] for f in "itdmc"}
# Verbs a relative clause can use with its noun as the subject / the object.
_REL_SUBJECT_VERBS = {cat: [v for v in VERB_LIST if cat in v.subj and v.frame in "it"]
                      for cat in "pabtoefdvl"}
_REL_OBJECT_VERBS = {cat: [v for v in VERB_LIST if cat in v.obj and v.frame == "t"]
                     for cat in "pabtoefdvl"}


class _Generator:
  """Samples one sentence pair at a time from a seeded `random.Random`."""

  def __init__(self, seed: int):
    self.rng = random.Random(seed)
    weights = [d[4] for d in lexicon.DETERMINERS]
    self._det_cum = list(_cumulative(weights))

  def noun_phrase(self, cats: str, depth: int = 0, allow_number: bool = True,
                  allow_rel: bool = True) -> NP:
    r = self.rng
    cat = _choice(r, cats)
    noun = _choice(r, _NOUNS_BY_CAT[cat])
    np = NP()
    np.noun = noun
    mass = noun.de_pl is None
    np.plural = (not mass) and r.random() < 0.3
    u = r.random()
    if mass:
      np.det = ("the", "", "def") if u < 0.6 else ("", "", "bare")
    elif np.plural and allow_number and u < 0.18:
      n = r.randint(2, 99) if r.random() < 0.6 else r.randint(2, 12)
      en, de = number_words(n)
      np.det = (en, de, "num")
    elif np.plural and u < 0.26:
      np.det = ("", "", "bare")
    else:
      while True:
        d = lexicon.DETERMINERS[_pick(self._det_cum, r.random())]
        if ("p" if np.plural else "s") in d[3]:
          break
      np.det = d[:3]
    k = r.random()
    nadj = 0 if k < 0.55 else (1 if k < 0.88 else 2)
    if nadj and noun.adjectives:
      np.adjs = r.sample(noun.adjectives, min(nadj, len(noun.adjectives)))
    if depth == 0 and cat in "pa" and r.random() < 0.08:
      inner = self.noun_phrase("ta", depth + 1, allow_number=False, allow_rel=False)
      np.pp = (["with"] + inner.english(), pp_german("mit", inner, "dat"))
    if allow_rel and depth <= 1 and r.random() < 0.07:
      np.rel = self.relative_clause(np)
    return np

  def relative_clause(self, head: NP) -> Optional[Clause]:
    r = self.rng
    cat = head.noun.cats[0]
    as_subject, as_object = _REL_SUBJECT_VERBS[cat], _REL_OBJECT_VERBS[cat]
    if as_subject and (not as_object or r.random() < 0.5):
      c = self.clause(verb=_choice(r, as_subject), subject=head, depth=1)
      c.rel_role = "subj"
    elif as_object:
      c = self.clause(verb=_choice(r, as_object), depth=1, object_np=head)
      c.rel_role = "obj"
    else:
      return None
    return c

  def clause(self, verb: Optional[Verb] = None, subject: Optional[NP] = None,
             depth: int = 0, tense: Optional[str] = None, object_np: Optional[NP] = None,
             allow_time: bool = True) -> Clause:
    """A clause; with `object_np` the object is left out (it is a relative pronoun)."""
    r = self.rng
    c = Clause()
    c.tense = tense or lexicon.TENSES[_pick(_TENSE_CUM, r.random())]
    if allow_time and depth == 0 and r.random() < 0.3:
      options = _TIMES_FOR[c.tense]
      if r.random() < 0.1:
        options = [(("on", d_en), ("am", d_de), "") for d_en, d_de in lexicon.DAYS]
      elif r.random() < 0.1:
        n = r.randint(1, 12)
        en, de = number_words(n)
        de = "ein" if n == 1 else de
        options = [(("at", en, "o'clock"), ("um", de, "Uhr"), "")]
      t = _choice(r, options)
      c.time = (list(t[0]) if isinstance(t[0], tuple) else t[0].split(),
                list(t[1]) if isinstance(t[1], tuple) else t[1].split())
    if verb is None:
      if r.random() < 0.12 and subject is None:
        verb = None  # copula
      else:
        frame = "itdmc"[_pick(_FRAME_CUM if depth == 0 else _FRAME_CUM_NO_C, r.random())]
        verb = _choice(r, _VERBS_BY_FRAME[frame])
    c.verb = verb
    if subject is not None:
      c.subj = subject
    elif r.random() < 0.15 and depth == 0:
      c.subj = NP()
      c.subj.pronoun = _choice(r, lexicon.SUBJECT_PRONOUNS)
      c.subj.plural = c.subj.pronoun[2][1] == "p"
      c.subj.det = ("", "", "pron")
    else:
      c.subj = self.noun_phrase(verb.subj if verb else "pav", depth, allow_rel=depth == 0)
    c.negated = r.random() < 0.12
    if r.random() < 0.08 and not c.negated and depth == 0:
      c.freq = _choice(r, lexicon.FREQUENCY)
    if verb is None:
      cat = "p" if c.subj.pronoun else c.subj.noun.cats[0]
      if r.random() < 0.75:
        adj = _choice(r, _ADJ_BY_CAT[cat])
        c.predicate = ([adj[0]], [adj[1]])
      else:
        prep_en, prep_de = _choice(r, lexicon.LOCATIONS)
        place = self.noun_phrase("l", depth + 1, allow_number=False, allow_rel=False)
        c.predicate = (prep_en.split() + place.english(), pp_german(prep_de, place, "dat"))
      return c
    if verb.frame in "t" and object_np is None:
      obj = self.noun_phrase(verb.obj, depth + 1, allow_number=not c.negated)
      c.objects.append((obj, "acc"))
      c.en_rest = obj.english()
    elif verb.frame == "d":
      obj = self.noun_phrase(verb.obj, depth + 1, allow_number=not c.negated, allow_rel=False)
      rec = self.noun_phrase("pa", depth + 1, allow_rel=False)
      c.objects += [(rec, "dat"), (obj, "acc")]
      if r.random() < 0.5:
        c.en_rest = rec.english() + obj.english()
      else:
        c.en_rest = obj.english() + ["to"] + rec.english()
    elif verb.frame == "m":
      u = r.random()
      if u < 0.2:
        c.adjuncts.append((["home"], ["nach", "Hause"]))
      else:
        place = self.noun_phrase("l", depth + 1, allow_number=False, allow_rel=False)
        if u < 0.6:
          c.adjuncts.append((["into"] + place.english(), pp_german("in", place, "acc")))
        else:
          c.adjuncts.append((["to"] + place.english(), pp_german("zu", place, "dat")))
    elif verb.frame == "c":
      c.complement = self.clause(depth=depth + 1, allow_time=False)
    if verb.frame in "itm" and depth == 0 and r.random() < 0.25:
      if r.random() < 0.6:
        prep_en, prep_de = _choice(r, lexicon.LOCATIONS)
        place = self.noun_phrase("l", depth + 1, allow_number=False, allow_rel=False)
        c.adjuncts.append((prep_en.split() + place.english(), pp_german(prep_de, place, "dat")))
      else:
        prep_en, prep_de, case = _choice(r, lexicon.COMPANIONS)
        other = self.noun_phrase("pa", depth + 1, allow_rel=False)
        c.adjuncts.append(([prep_en] + other.english(), pp_german(prep_de, other, case)))
    return c

  def sentence(self) -> tuple[list[str], list[str], str]:
    """One pair as word lists, and the closing punctuation."""
    r = self.rng
    u = r.random()
    if u < 0.07:  # yes/no question
      c = self.clause(allow_time=False)
      c.negated = False
      return c.english(question=True), c.german_question(), "?"
    if u < 0.22:  # main clause, then a subordinate clause
      main, sub, conj_en, conj_de = self._with_subordinate()
      return (main.english() + [","] * (conj_en != "when") + [conj_en] + sub.english(),
              main.german_main() + [",", conj_de] + sub.german_sub(), ".")
    if u < 0.32:  # subordinate clause first: the main clause's verb comes right after it
      main, sub, conj_en, conj_de = self._with_subordinate()
      front = [conj_de] + sub.german_sub() + [","]
      return ([conj_en] + sub.english() + [","] + main.english(),
              main.german_main(front=front), ".")
    if u < 0.42:  # two main clauses
      a, b = self.clause(), self.clause()
      if r.random() < 0.6:
        return a.english() + ["and"] + b.english(), a.german_main() + ["und"] + \
            b.german_main(), "."
      return a.english() + [",", "but"] + b.english(), a.german_main() + [",", "aber"] + \
          b.german_main(), "."
    c = self.clause()
    if c.time is not None and r.random() < 0.55:
      c.time_fronted = True
      return c.time[0] + c.english(), c.german_main(front=c.time[1]), "."
    return c.english(), c.german_main(), "."

  def _with_subordinate(self):
    r = self.rng
    main = self.clause()
    sub = self.clause(allow_time=False)
    conj_en, conj_de = _choice(r, lexicon.SUBORDINATORS)
    if conj_de is None:  # "when": "als" for one past event, otherwise "wenn"
      conj_de = "als" if sub.tense in ("past", "could") else "wenn"
    return main, sub, conj_en, conj_de



def _choice(r: random.Random, seq):
  # Faster than Random.choice, and just as deterministic for a given seed.
  return seq[int(r.random() * len(seq))]


def _cumulative(weights):
  total, acc = sum(weights), 0.0
  for w in weights:
    acc += w / total
    yield acc


def _pick(cum: list[float], u: float) -> int:
  for i, c in enumerate(cum):
    if u < c:
      return i
  return len(cum) - 1


_TENSE_CUM = list(_cumulative(lexicon.TENSE_WEIGHTS))
_FRAME_CUM = list(_cumulative([3, 7, 1.5, 1.5, 1]))  # i t d m c; no that-clauses when nested
_FRAME_CUM_NO_C = list(_cumulative([3, 7, 1.5, 1.5, 0]))
_TIMES_FOR = {t: [x for x in lexicon.TIMES if t in x[2].split()] for t in lexicon.TENSES}
_ADJ_BY_CAT = {cat: [a for a in lexicon.ADJECTIVES if a[0] in words]
               for cat, words in ADJ_WORDS.items()}


def generate(num_pairs: int, seed: int = 0, min_words: int = 3,
             max_words: int = 40) -> list[tuple[str, str]]:
  """`num_pairs` distinct (English, German) pairs; no source or target repeats."""
  gen = _Generator(seed)
  pairs: list[tuple[str, str]] = []
  seen_en, seen_de = set(), set()
  attempts = 0
  while len(pairs) < num_pairs:
    attempts += 1
    if attempts > 20 * num_pairs + 1000:
      raise ValueError(f"could not generate {num_pairs} distinct pairs in {attempts - 1} "
                       f"attempts (max_words={max_words}); ask for fewer pairs")
    en_words, de_words, end = gen.sentence()
    en, de = render(en_words, end), render(de_words, end)
    n_en, n_de = en.count(" ") + 1, de.count(" ") + 1
    if not (min_words <= n_en <= max_words and min_words <= n_de <= max_words):
      continue
    if en in seen_en or de in seen_de:
      continue
    seen_en.add(en)
    seen_de.add(de)
    pairs.append((en, de))
  return pairs


SPLITS = ("train", "dev", "test")


MANIFEST = "MANIFEST.json"  # sha256 of each file, written last: the corpus is complete


def _sha256(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def _paths(directory: str) -> dict[str, tuple[str, str]]:
  return {s: (os.path.join(directory, f"{s}.en"), os.path.join(directory, f"{s}.de"))
          for s in SPLITS}


def write_corpus(directory: str, num_train: int = 200_000, num_dev: int = 1000,
                 num_test: int = 1000, seed: int = 0) -> dict[str, tuple[str, str]]:
  """Writes `{train,dev,test}.{en,de}` into `directory`; returns {split: (src, tgt) paths}.

  Files are written under temporary names and renamed, and the checksums in
  MANIFEST.json last, so a crash never leaves a corpus that a later run would
  take as complete. Not safe against a concurrent writer: callers lock.
  """
  pairs = generate(num_train + num_dev + num_test, seed)
  # Dev and test come first in generation order; all pairs are distinct, so
  # neither overlaps training.
  chunks = {"dev": pairs[:num_dev], "test": pairs[num_dev:num_dev + num_test],
            "train": pairs[num_dev + num_test:]}
  os.makedirs(directory, exist_ok=True)
  manifest_path = os.path.join(directory, MANIFEST)
  if os.path.exists(manifest_path):
    os.remove(manifest_path)
  paths = _paths(directory)
  for split in SPLITS:
    for side, path in enumerate(paths[split]):
      with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(p[side] for p in chunks[split]) + "\n")
  for split in SPLITS:
    for path in paths[split]:
      os.replace(path + ".tmp", path)
  manifest = {os.path.basename(p): _sha256(p) for pair in paths.values() for p in pair}
  with open(manifest_path + ".tmp", "w", encoding="utf-8") as f:
    json.dump(manifest, f)
  os.replace(manifest_path + ".tmp", manifest_path)
  return paths


def corpus_paths(directory: str) -> Optional[dict[str, tuple[str, str]]]:
  """The corpus files in `directory`; None when any is missing or differs from MANIFEST.json.

  A damaged corpus is logged as a warning (the caller writes it again: the
  generator is deterministic, so the rewritten corpus is the same one).
  """
  paths = _paths(directory)
  manifest_path = os.path.join(directory, MANIFEST)
  if not os.path.exists(manifest_path):
    return None
  try:
    with open(manifest_path, encoding="utf-8") as f:
      manifest = json.load(f)
    damaged = [os.path.basename(p) for pair in paths.values() for p in pair
               if not os.path.exists(p) or manifest.get(os.path.basename(p)) != _sha256(p)]
  except (OSError, ValueError, AttributeError) as e:
    damaged = [f"{MANIFEST} ({type(e).__name__})"]
  if damaged:
    log.warning("The demo corpus in %s is damaged (%s differ from their checksums); "
                "writing it again", directory, ", ".join(damaged))
    return None
  return paths
