"""The demo corpus's phrases and clauses, rendered in English and in German word order.

A `Clause` is kept in parts (subject, verb, tense, objects, adjuncts, ...) so
that German can put them in main-clause (verb-second), question, subordinate
(verb-final) or relative-clause order; `NP` renders a noun phrase with the
article, adjective endings and noun form its case, gender and number ask for.
Which phrases are built, and how often, is `corpus.py`'s job.
"""

from __future__ import annotations

from typing import Optional

from t2t_jax.corpora.demo import lexicon


def number_words(n: int) -> tuple[str, str]:
  """English and German words for 1 <= n <= 99 ("twenty-one", "einundzwanzig")."""
  if not 1 <= n <= 99:
    raise ValueError(f"n={n} is out of range: number words cover 1..99")
  if n < 20:
    return lexicon.ONES_EN[n], lexicon.ONES_DE[n]
  tens, ones = divmod(n, 10)
  if ones == 0:
    return lexicon.TENS_EN[tens], lexicon.TENS_DE[tens]
  one_de = "ein" if ones == 1 else lexicon.ONES_DE[ones]
  return (f"{lexicon.TENS_EN[tens]}-{lexicon.ONES_EN[ones]}",
          f"{one_de}und{lexicon.TENS_DE[tens]}")


class Noun:
  """A noun's English and German forms, gender and categories (see lexicon.NOUNS)."""

  __slots__ = ("en_sg", "en_pl", "gender", "de_sg", "de_pl", "de_dat_pl", "de_obl", "cats",
               "adjectives")

  def __init__(self, en_sg, en_pl, gender, de_sg, de_pl, cats, de_obl=None):
    self.en_sg, self.en_pl, self.gender, self.cats = en_sg, en_pl, gender, cats
    self.de_sg, self.de_pl, self.de_obl = de_sg, de_pl, de_obl or de_sg
    self.de_dat_pl = None if de_pl is None else (
        de_pl if de_pl[-1] in "ns" else de_pl + "n")
    self.adjectives = [a for a in lexicon.ADJECTIVES if a[0] in ADJ_WORDS[cats[0]]]


class Verb:
  """A verb's forms and what it takes, parsed from one line of lexicon.VERBS."""

  __slots__ = ("en3", "en", "en_past", "en_particle", "inf", "de3", "past", "particle",
               "subj", "obj", "frame")

  def __init__(self, line):
    en, de, subj, obj, frame = [part.split() for part in line.split("|")]
    self.en3, self.en, self.en_past, particle = en
    self.en_particle = None if particle == "-" else particle
    self.inf, self.de3, self.past, particle = de
    self.particle = None if particle == "-" else particle
    self.subj, self.obj, self.frame = subj[0], obj[0].strip("-"), frame[0]


ADJ_WORDS = {cat: set(words.split()) for cat, words in lexicon.ADJ_FOR.items()}


def _build_nouns() -> list[Noun]:
  nouns = [Noun(*entry) for entry in lexicon.NOUNS]
  by_en = {n.en_sg: n for n in nouns}
  for en_mod, de_mod, heads in lexicon.COMPOUNDS:
    for head in heads:
      if head in lexicon.HEAD_ONLY:
        en_pl, gender, de_sg, de_pl, cats = lexicon.HEAD_ONLY[head]
        base = Noun(head, en_pl, gender, de_sg, de_pl, cats)
      else:
        base = by_en[head]
      de_pl = None if base.de_pl is None else de_mod + base.de_pl.lower()
      en_pl = None if base.en_pl is None else f"{en_mod} {base.en_pl}"
      obl = de_mod + base.de_obl.lower()
      nouns.append(Noun(f"{en_mod} {head}", en_pl, base.gender, de_mod + base.de_sg.lower(),
                        de_pl, base.cats, obl))
  return nouns


NOUN_LIST = _build_nouns()
VERB_LIST = [Verb(line) for line in lexicon.VERBS.strip().splitlines()]


class NP:
  """A noun phrase: English words, and German words for a given case."""
  __slots__ = ("en", "noun", "plural", "det", "adjs", "number", "pp", "rel", "pronoun")

  def __init__(self):
    self.pp = self.rel = self.pronoun = self.number = None
    self.adjs = []

  @property
  def negatable(self) -> bool:
    """Whether negation fuses into "kein": "a dog" and bare nouns, not "his dog"."""
    return self.det[0] == "a" or self.det[2] == "bare"

  @property
  def person(self) -> str:
    if self.pronoun is not None:
      return self.pronoun[2]
    return "3p" if self.plural else "3s"

  def gn(self) -> str:
    return "p" if self.plural else self.noun.gender

  def english(self) -> list[str]:
    det_en = self.det[0]
    if self.pronoun is not None:
      return [self.pronoun[0]]
    words = []
    adjs = [a[0] for a in self.adjs]
    noun = (self.noun.en_pl if self.plural else self.noun.en_sg).split()
    if det_en == "a":
      first = (adjs or noun)[0]
      words.append("an" if first[0] in "aeiou" else "a")
    elif det_en:
      words.append(det_en)
    words += adjs + noun
    if self.pp is not None:
      words += self.pp[0]
    if self.rel is not None:
      rel = self.rel
      if rel.rel_role == "subj":
        pron = "who" if "p" in self.noun.cats else "that"
        words += [pron] + rel.english(subject=[])
      else:
        words += ["that"] + rel.english()
    return words

  def german(self, case: str, negate: bool = False) -> list[str]:
    """Renders in `case`; `negate` turns an indefinite or bare phrase into "kein"."""
    if self.pronoun is not None:
      return [self.pronoun[1]]
    gn = self.gn()
    _, stem, kind = self.det
    words = []
    if negate and self.negatable:
      stem, kind = "kein", "ein"
    if kind == "def":
      words.append(lexicon.DEFINITE[case][gn])
      adj_table = lexicon.WEAK_ADJ
    elif kind == "der":
      words.append(stem + lexicon.DER_WORD[case][gn])
      adj_table = lexicon.WEAK_ADJ
    elif kind == "ein":
      words.append(stem + lexicon.EIN_WORD[case][gn])
      adj_table = lexicon.MIXED_ADJ
    elif kind == "none":
      words.append(stem + lexicon.STRONG_ADJ[case][gn])
      adj_table = lexicon.STRONG_ADJ
    elif kind == "num":
      words.append(stem)
      adj_table = lexicon.STRONG_ADJ
    else:  # bare plural or mass noun
      adj_table = lexicon.STRONG_ADJ
    ending = adj_table[case][gn]
    words.extend(adj[2] + ending for adj in self.adjs)
    if self.plural:
      words.append(self.noun.de_dat_pl if case == "dat" else self.noun.de_pl)
    else:
      words.append(self.noun.de_sg if case == "nom" else self.noun.de_obl)
    if self.pp is not None:
      words.extend(self.pp[1])
    if self.rel is not None:
      words.append(",")
      words.extend(self.rel.german_relative(self))
      words.append(",")
    return words


class Clause:
  """One clause, kept in parts so it can be rendered in any German word order."""
  __slots__ = ("subj", "verb", "tense", "negated", "objects", "adjuncts", "time", "freq",
               "predicate", "complement", "rel_role", "en_rest", "time_fronted")

  def __init__(self):
    self.objects = []     # (np, case)
    self.adjuncts = []    # (english words, german words)
    self.time = self.freq = self.predicate = self.complement = self.rel_role = None
    self.negated = self.time_fronted = False
    self.en_rest = []

  # English
  def english(self, question: bool = False, subject: Optional[list[str]] = None) -> list[str]:
    person = self.subj.person
    subj = self.subj.english() if subject is None else subject
    v, t = self.verb, self.tense
    freq = [self.freq[0]] if self.freq else []
    if v is None:  # copula: "is", or an auxiliary and "be"
      if t == "past":
        aux, base = ("was" if person in ("1s", "3s") else "were"), []
      elif t == "pres":
        aux, base = {"1s": "am", "3s": "is"}.get(person, "are"), []
      else:
        aux, base = {"fut": "will", "can": "can", "could": "could"}[t], ["be"]
    else:
      third = person == "3s"
      base = [v.en]
      if t == "fut":
        aux = "will"
      elif t in ("can", "could"):
        aux = t
      elif self.negated or question:
        aux = ("does" if third else "do") if t == "pres" else "did"
      else:
        aux, base = (v.en3 if third else v.en) if t == "pres" else v.en_past, []
    if question:  # questions are never negated
      words = [aux] + subj + freq + base
    elif self.negated:
      words = subj + (["cannot"] if aux == "can" else [aux, "not"]) + base
    elif base:
      words = subj + [aux] + freq + base
    else:  # simple present or past: the adverb goes before a full verb, after "is"
      words = subj + ([aux] + freq if v is None else freq + [aux])
    if v is None:
      words += self.predicate[0]
    else:
      if v.en_particle:
        words.append(v.en_particle)
      words += self.en_rest
    for en, _ in self.adjuncts:
      words += en
    if self.complement is not None:
      words += ["that"] + self.complement.english()
    if self.time is not None and not self.time_fronted:
      words += self.time[0]
    return words

  # German
  def _finite_and_rest(self) -> tuple[str, list[str]]:
    """The finite verb and what goes at the end of the clause (particle or infinitive)."""
    person, t, v = self.subj.person, self.tense, self.verb
    plural = person[1] == "p"
    if t in ("fut", "can", "could"):
      if t == "fut":
        finite = {"1s": "werde", "3s": "wird"}.get(person, "werden")
      elif t == "can":
        finite = "können" if plural else "kann"
      else:
        finite = "konnten" if plural else "konnte"
      if v is None:
        return finite, ["sein"]
      return finite, [(v.particle or "") + v.inf]
    if v is None:
      if t == "past":
        return ("waren" if plural else "war"), []
      return {"1s": "bin", "3s": "ist"}.get(person, "sind"), []
    if t == "pres":
      if plural:
        finite = v.inf
      elif person == "1s":
        finite = "weiß" if v.inf == "wissen" else v.inf[:-1]
      else:
        finite = v.de3
    else:
      finite = v.past + (("n" if v.past.endswith("e") else "en") if plural else "")
    return finite, ([v.particle] if v.particle else [])

  def _middle(self) -> list[str]:
    words: list[str] = []
    if self.time is not None and not self.time_fronted:
      words += self.time[1]
    if self.freq is not None:
      words.append(self.freq[1])
    negated = self.negated
    kein_used = False
    # Dative before accusative; "kein" replaces "nicht" for an indefinite object.
    for np, case in sorted(self.objects, key=lambda oc: oc[1] != "dat"):
      if negated and case == "acc" and not kein_used and np.negatable:
        words += np.german(case, negate=True)
        kein_used = True
      else:
        words += np.german(case)
    if negated and not kein_used:
      words.append("nicht")
    for _, de in self.adjuncts:
      words += de
    if self.predicate is not None:
      words += self.predicate[1]
    return words

  def german_main(self, front: Optional[list[str]] = None) -> list[str]:
    """Verb-second order; `front` (an adverbial or a clause) takes the first place."""
    finite, end = self._finite_and_rest()
    subj = self.subj.german("nom")
    if front is None:
      words = subj + [finite] + self._middle() + end
    else:
      words = front + [finite] + subj + self._middle() + end
    return words + self._german_complement()

  def german_question(self) -> list[str]:
    finite, end = self._finite_and_rest()
    return [finite] + self.subj.german("nom") + self._middle() + end + \
        self._german_complement()

  def german_sub(self) -> list[str]:
    """Verb-final order (subordinate clause, without its conjunction)."""
    finite, end = self._finite_and_rest()
    if self.tense in ("fut", "can", "could"):
      verbs = end + [finite]
    else:
      verbs = ["".join(end) + finite]  # separable particle joins the verb again
    return self.subj.german("nom") + self._middle() + verbs + self._german_complement()

  def german_relative(self, head: NP) -> list[str]:
    """Relative clause on `head`; rel_role says whether it is the subject or object."""
    finite, end = self._finite_and_rest()
    verbs = end + [finite] if self.tense in ("fut", "can", "could") else [
        "".join(end) + finite]
    gn = head.gn()
    if self.rel_role == "subj":
      return [lexicon.DEFINITE["nom"][gn]] + self._middle() + verbs
    return [lexicon.DEFINITE["acc"][gn]] + self.subj.german("nom") + self._middle() + verbs

  def _german_complement(self) -> list[str]:
    if self.complement is None:
      return []
    return [",", "dass"] + self.complement.german_sub()



def pp_german(prep: str, np: NP, case: str) -> list[str]:
  words = np.german(case)
  fused = lexicon.CONTRACT.get((prep, words[0])) if np.det[2] == "def" else None
  if fused is not None:
    return [fused] + words[1:]
  return [prep] + words



def render(words: list[str], end: str) -> str:
  """Joins words; attaches commas, drops doubled or trailing ones; capitalises."""
  text = " ".join(words).replace(" ,", ",")
  while ",," in text:
    text = text.replace(",,", ",")
  if text.endswith(","):
    text = text[:-1]
  return text[0].upper() + text[1:] + end
