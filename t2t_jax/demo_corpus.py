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

import os
import random
from typing import Optional

# --- Lexicon -------------------------------------------------------------------
# Nouns: English singular, English plural, gender, German singular, German plural
# (None: mass noun), categories, optional oblique singular of weak nouns.
# Categories: p person, a animal, b readable, t portable thing, o openable,
# e electric, f food, d drink, v vehicle, l place (also a destination).
_NOUNS = [
    ("man", "men", "m", "Mann", "Männer", "p"),
    ("woman", "women", "f", "Frau", "Frauen", "p"),
    ("child", "children", "n", "Kind", "Kinder", "p"),
    ("boy", "boys", "m", "Junge", "Jungen", "p", "Jungen"),
    ("girl", "girls", "n", "Mädchen", "Mädchen", "p"),
    ("teacher", "teachers", "m", "Lehrer", "Lehrer", "p"),
    ("doctor", "doctors", "m", "Arzt", "Ärzte", "p"),
    ("king", "kings", "m", "König", "Könige", "p"),
    ("queen", "queens", "f", "Königin", "Königinnen", "p"),
    ("farmer", "farmers", "m", "Bauer", "Bauern", "p", "Bauern"),
    ("baker", "bakers", "m", "Bäcker", "Bäcker", "p"),
    ("friend", "friends", "m", "Freund", "Freunde", "p"),
    ("sister", "sisters", "f", "Schwester", "Schwestern", "p"),
    ("brother", "brothers", "m", "Bruder", "Brüder", "p"),
    ("mother", "mothers", "f", "Mutter", "Mütter", "p"),
    ("father", "fathers", "m", "Vater", "Väter", "p"),
    ("student", "students", "m", "Student", "Studenten", "p", "Studenten"),
    ("cook", "cooks", "m", "Koch", "Köche", "p"),
    ("neighbour", "neighbours", "m", "Nachbar", "Nachbarn", "p", "Nachbarn"),
    ("grandmother", "grandmothers", "f", "Großmutter", "Großmütter", "p"),
    ("soldier", "soldiers", "m", "Soldat", "Soldaten", "p", "Soldaten"),
    ("dog", "dogs", "m", "Hund", "Hunde", "a"),
    ("cat", "cats", "f", "Katze", "Katzen", "a"),
    ("horse", "horses", "n", "Pferd", "Pferde", "a"),
    ("bird", "birds", "m", "Vogel", "Vögel", "a"),
    ("mouse", "mice", "f", "Maus", "Mäuse", "a"),
    ("cow", "cows", "f", "Kuh", "Kühe", "a"),
    ("bear", "bears", "m", "Bär", "Bären", "a", "Bären"),
    ("lion", "lions", "m", "Löwe", "Löwen", "a", "Löwen"),
    ("sheep", "sheep", "n", "Schaf", "Schafe", "a"),
    ("fox", "foxes", "m", "Fuchs", "Füchse", "a"),
    ("wolf", "wolves", "m", "Wolf", "Wölfe", "a"),
    ("duck", "ducks", "f", "Ente", "Enten", "a"),
    ("goose", "geese", "f", "Gans", "Gänse", "a"),
    ("book", "books", "n", "Buch", "Bücher", "bt"),
    ("letter", "letters", "m", "Brief", "Briefe", "bt"),
    ("newspaper", "newspapers", "f", "Zeitung", "Zeitungen", "bt"),
    ("map", "maps", "f", "Karte", "Karten", "bt"),
    ("door", "doors", "f", "Tür", "Türen", "o"),
    ("window", "windows", "n", "Fenster", "Fenster", "o"),
    ("table", "tables", "m", "Tisch", "Tische", "t"),
    ("chair", "chairs", "m", "Stuhl", "Stühle", "t"),
    ("key", "keys", "m", "Schlüssel", "Schlüssel", "t"),
    ("ball", "balls", "m", "Ball", "Bälle", "t"),
    ("box", "boxes", "f", "Kiste", "Kisten", "to"),
    ("bag", "bags", "f", "Tasche", "Taschen", "to"),
    ("cup", "cups", "f", "Tasse", "Tassen", "t"),
    ("glass", "glasses", "n", "Glas", "Gläser", "t"),
    ("hat", "hats", "m", "Hut", "Hüte", "t"),
    ("shoe", "shoes", "m", "Schuh", "Schuhe", "t"),
    ("coat", "coats", "m", "Mantel", "Mäntel", "t"),
    ("picture", "pictures", "n", "Bild", "Bilder", "t"),
    ("flower", "flowers", "f", "Blume", "Blumen", "t"),
    ("umbrella", "umbrellas", "m", "Regenschirm", "Regenschirme", "to"),
    ("lamp", "lamps", "f", "Lampe", "Lampen", "e"),
    ("radio", "radios", "n", "Radio", "Radios", "e"),
    ("light", "lights", "n", "Licht", "Lichter", "e"),
    ("television", "televisions", "m", "Fernseher", "Fernseher", "e"),
    ("computer", "computers", "m", "Computer", "Computer", "e"),
    ("phone", "phones", "n", "Telefon", "Telefone", "et"),
    ("car", "cars", "n", "Auto", "Autos", "vo"),
    ("bicycle", "bicycles", "n", "Fahrrad", "Fahrräder", "v"),
    ("train", "trains", "m", "Zug", "Züge", "v"),
    ("boat", "boats", "n", "Boot", "Boote", "v"),
    ("house", "houses", "n", "Haus", "Häuser", "l"),
    ("garden", "gardens", "m", "Garten", "Gärten", "l"),
    ("street", "streets", "f", "Straße", "Straßen", "l"),
    ("city", "cities", "f", "Stadt", "Städte", "l"),
    ("village", "villages", "n", "Dorf", "Dörfer", "l"),
    ("school", "schools", "f", "Schule", "Schulen", "l"),
    ("kitchen", "kitchens", "f", "Küche", "Küchen", "l"),
    ("forest", "forests", "m", "Wald", "Wälder", "l"),
    ("park", "parks", "m", "Park", "Parks", "l"),
    ("station", "stations", "m", "Bahnhof", "Bahnhöfe", "l"),
    ("shop", "shops", "m", "Laden", "Läden", "lo"),
    ("bridge", "bridges", "f", "Brücke", "Brücken", "l"),
    ("church", "churches", "f", "Kirche", "Kirchen", "l"),
    ("apple", "apples", "m", "Apfel", "Äpfel", "f"),
    ("bread", "breads", "n", "Brot", "Brote", "f"),
    ("cake", "cakes", "m", "Kuchen", "Kuchen", "f"),
    ("egg", "eggs", "n", "Ei", "Eier", "f"),
    ("pear", "pears", "f", "Birne", "Birnen", "f"),
    ("sausage", "sausages", "f", "Wurst", "Würste", "f"),
    ("potato", "potatoes", "f", "Kartoffel", "Kartoffeln", "f"),
    ("soup", "soups", "f", "Suppe", "Suppen", "f"),
    ("cheese", None, "m", "Käse", None, "f"),
    ("water", None, "n", "Wasser", None, "d"),
    ("milk", None, "f", "Milch", None, "d"),
    ("coffee", None, "m", "Kaffee", None, "d"),
    ("tea", None, "m", "Tee", None, "d"),
    ("wine", None, "m", "Wein", None, "d"),
    ("juice", None, "m", "Saft", None, "d"),
]

# Compounds: English modifier, German combining form, heads (English nouns above).
# "the apple tree" -> "der Apfelbaum": gender and plural come from the head.
_COMPOUNDS = [
    ("apple", "Apfel", ["cake", "juice", "tree"]),
    ("house", "Haus", ["door", "key"]),
    ("car", "Auto", ["door", "key", "radio"]),
    ("kitchen", "Küchen", ["table", "window", "lamp", "door", "chair"]),
    ("school", "Schul", ["book", "bag"]),
    ("coffee", "Kaffee", ["cup"]),
    ("tea", "Tee", ["cup"]),
    ("wine", "Wein", ["glass"]),
    ("water", "Wasser", ["glass"]),
    ("garden", "Garten", ["door", "chair", "table"]),
    ("birthday", "Geburtstags", ["cake", "letter", "picture"]),
    ("cheese", "Käse", ["cake", "bread"]),
    ("potato", "Kartoffel", ["soup"]),
    ("city", "Stadt", ["park", "map"]),
    ("village", "Dorf", ["street", "school", "church"]),
    ("forest", "Wald", ["street"]),
    ("football", "Fußball", ["shoe"]),
    ("winter", "Winter", ["coat", "hat", "shoe"]),
    ("summer", "Sommer", ["hat", "garden"]),
    ("children's", "Kinder", ["book", "chair", "room"]),
]
# Nouns that exist only as compound heads.
_HEAD_ONLY = {
    "tree": ("trees", "m", "baum", "bäume", "l"),
    "room": ("rooms", "n", "zimmer", "zimmer", "l"),
}

# Adjectives: English, German predicative form, German attributive stem.
_ADJECTIVES = [
    ("big", "groß", "groß"), ("small", "klein", "klein"), ("old", "alt", "alt"),
    ("young", "jung", "jung"), ("new", "neu", "neu"), ("red", "rot", "rot"),
    ("blue", "blau", "blau"), ("green", "grün", "grün"), ("white", "weiß", "weiß"),
    ("black", "schwarz", "schwarz"), ("beautiful", "schön", "schön"),
    ("ugly", "hässlich", "hässlich"), ("happy", "glücklich", "glücklich"),
    ("sad", "traurig", "traurig"), ("tired", "müde", "müd"), ("warm", "warm", "warm"),
    ("cold", "kalt", "kalt"), ("fast", "schnell", "schnell"), ("slow", "langsam", "langsam"),
    ("heavy", "schwer", "schwer"), ("clean", "sauber", "sauber"),
    ("dirty", "schmutzig", "schmutzig"), ("friendly", "freundlich", "freundlich"),
    ("hungry", "hungrig", "hungrig"), ("clever", "klug", "klug"), ("brave", "mutig", "mutig"),
    ("lazy", "faul", "faul"), ("loud", "laut", "laut"), ("quiet", "leise", "leis"),
    ("long", "lang", "lang"), ("short", "kurz", "kurz"), ("sweet", "süß", "süß"),
    ("fresh", "frisch", "frisch"), ("hot", "heiß", "heiß"), ("strange", "seltsam", "seltsam"),
    ("famous", "berühmt", "berühmt"), ("rich", "reich", "reich"), ("poor", "arm", "arm"),
    ("strong", "stark", "stark"), ("funny", "lustig", "lustig"),
    ("expensive", "teuer", "teur"), ("empty", "leer", "leer"),
]
# Adjectives that make sense for each category (used attributively and predicatively).
_ADJ_FOR = {
    "p": "big small old young happy sad tired friendly hungry clever brave lazy loud quiet "
         "famous rich poor strong funny strange",
    "a": "big small old young happy sad tired fast slow hungry clever brave lazy loud quiet "
         "strong funny black white strange dirty clean",
    "b": "old new long short strange famous funny red blue green white heavy",
    "t": "big small old new red blue green white black beautiful ugly heavy clean dirty "
         "expensive empty strange",
    "o": "big small old new red blue green white black clean dirty",
    "e": "old new small big expensive loud quiet red black white",
    "f": "big small fresh sweet warm cold hot old expensive",
    "d": "warm cold hot fresh sweet expensive",
    "v": "big small old new fast slow red blue green white black expensive clean dirty",
    "l": "big small old new beautiful ugly quiet loud clean dirty famous strange empty",
}

# Verbs: English 3sg, base, past, particle | German infinitive, 3sg, past sg,
# particle | subject categories | object categories | frame
# (i intransitive, t transitive, d ditransitive, m motion, c that-clause).
_VERBS = """
sleeps sleep slept - | schlafen schläft schlief - | pa | - | i
laughs laugh laughed - | lachen lacht lachte - | p | - | i
sings sing sang - | singen singt sang - | pa | - | i
works work worked - | arbeiten arbeitet arbeitete - | p | - | i
waits wait waited - | warten wartet wartete - | pa | - | i
swims swim swam - | schwimmen schwimmt schwamm - | pa | - | i
dances dance danced - | tanzen tanzt tanzte - | p | - | i
cries cry cried - | weinen weint weinte - | p | - | i
plays play played - | spielen spielt spielte - | pa | - | i
eats eat ate - | essen isst aß - | pa | f | t
drinks drink drank - | trinken trinkt trank - | pa | d | t
sees see saw - | sehen sieht sah - | pa | patbovel | t
reads read read - | lesen liest las - | p | b | t
buys buy bought - | kaufen kauft kaufte - | p | tbfdve | t
finds find found - | finden findet fand - | pa | tb | t
loves love loved - | lieben liebt liebte - | p | pa | t
hears hear heard - | hören hört hörte - | pa | pae | t
carries carry carried - | tragen trägt trug - | p | tbf | t
washes wash washed - | waschen wäscht wusch - | p | tavo | t
paints paint painted - | malen malt malte - | p | patvl | t
builds build built - | bauen baut baute - | p | vl | t
visits visit visited - | besuchen besucht besuchte - | p | pl | t
needs need needed - | brauchen braucht brauchte - | pa | tbfdve | t
writes write wrote - | schreiben schreibt schrieb - | p | b | t
takes take took - | nehmen nimmt nahm - | p | tbfv | t
holds hold held - | halten hält hielt - | p | tb | t
sells sell sold - | verkaufen verkauft verkaufte - | p | tbfdve | t
catches catch caught - | fangen fängt fing - | pa | at | t
forgets forget forgot - | vergessen vergisst vergaß - | pa | tbp | t
knows know knew - | kennen kennt kannte - | pa | pal | t
seeks seek sought - | suchen sucht suchte - | pa | patbl | t
cooks cook cooked - | kochen kocht kochte - | p | f | t
greets greet greeted - | grüßen grüßt grüßte - | pa | p | t
follows follow followed - | verfolgen verfolgt verfolgte - | pa | pav | t
gives give gave - | geben gibt gab - | p | tbfd | d
shows show showed - | zeigen zeigt zeigte - | p | tbave | d
brings bring brought - | bringen bringt brachte - | p | tbfd | d
sends send sent - | schicken schickt schickte - | p | tbf | d
opens open opened - | machen macht machte auf | p | o | t
closes close closed - | machen macht machte zu | p | o | t
picks pick picked up | heben hebt hob auf | p | tb | t
throws throw threw away | werfen wirft warf weg | p | tbf | t
turns turn turned on | schalten schaltet schaltete ein | p | e | t
switches switch switched off | schalten schaltet schaltete aus | p | e | t
invites invite invited - | laden lädt lud ein | p | p | t
calls call called - | rufen ruft rief an | p | p | t
looks look looked at | sehen sieht sah an | pa | patbvl | t
brings bring brought back | bringen bringt brachte zurück | p | tbv | t
gets get got up | stehen steht stand auf | pa | - | i
arrives arrive arrived - | kommen kommt kam an | pa | - | i
falls fall fell asleep | schlafen schläft schlief ein | pa | - | i
comes come came back | kommen kommt kam zurück | pa | - | i
goes go went - | gehen geht ging - | pa | l | m
runs run ran - | laufen läuft lief - | pa | l | m
drives drive drove - | fahren fährt fuhr - | p | l | m
comes come came - | kommen kommt kam - | pa | l | m
says say said - | sagen sagt sagte - | p | - | c
thinks think thought - | denken denkt dachte - | p | - | c
knows know knew - | wissen weiß wusste - | p | - | c
believes believe believed - | glauben glaubt glaubte - | p | - | c
hopes hope hoped - | hoffen hofft hoffte - | p | - | c
"""

_ONES_EN = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
            "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS_EN = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ONES_DE = ("null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn "
            "vierzehn fünfzehn sechzehn siebzehn achtzehn neunzehn").split()
_TENS_DE = "_ _ zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig neunzig".split()


def number_words(n: int) -> tuple[str, str]:
  """English and German words for 1 <= n <= 99 ("twenty-one", "einundzwanzig")."""
  if not 1 <= n <= 99:
    raise ValueError(f"n={n} is out of range: number words cover 1..99")
  if n < 20:
    return _ONES_EN[n], _ONES_DE[n]
  tens, ones = divmod(n, 10)
  if ones == 0:
    return _TENS_EN[tens], _TENS_DE[tens]
  one_de = "ein" if ones == 1 else _ONES_DE[ones]
  return f"{_TENS_EN[tens]}-{_ONES_EN[ones]}", f"{one_de}und{_TENS_DE[tens]}"


# --- Morphology tables -----------------------------------------------------------
# Keys: case ("nom", "acc", "dat") and gender/number ("m", "f", "n", "p" = plural).
_DEFINITE = {
    "nom": {"m": "der", "f": "die", "n": "das", "p": "die"},
    "acc": {"m": "den", "f": "die", "n": "das", "p": "die"},
    "dat": {"m": "dem", "f": "der", "n": "dem", "p": "den"},
}
_DER_WORD = {  # dieser, jeder
    "nom": {"m": "er", "f": "e", "n": "es", "p": "e"},
    "acc": {"m": "en", "f": "e", "n": "es", "p": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "p": "en"},
}
_EIN_WORD = {  # ein, kein, mein, sein, ihr, unser
    "nom": {"m": "", "f": "e", "n": "", "p": "e"},
    "acc": {"m": "en", "f": "e", "n": "", "p": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "p": "en"},
}
_WEAK_ADJ = {  # after der-words
    "nom": {"m": "e", "f": "e", "n": "e", "p": "en"},
    "acc": {"m": "en", "f": "e", "n": "e", "p": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "p": "en"},
}
_MIXED_ADJ = {  # after ein-words
    "nom": {"m": "er", "f": "e", "n": "es", "p": "en"},
    "acc": {"m": "en", "f": "e", "n": "es", "p": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "p": "en"},
}
_STRONG_ADJ = {  # no determiner, or after numbers, "einige", "viele"
    "nom": {"m": "er", "f": "e", "n": "es", "p": "e"},
    "acc": {"m": "en", "f": "e", "n": "es", "p": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "p": "en"},
}
# Determiners: English, German stem, kind ("def", "der", "ein", "none"), number
# ("s" singular only, "p" plural only, "sp" either).
_DETERMINERS = [
    ("the", "", "def", "sp", 10.0), ("a", "ein", "ein", "s", 4.0),
    ("this", "dies", "der", "s", 1.0), ("these", "dies", "der", "p", 0.7),
    ("every", "jed", "der", "s", 0.5), ("my", "mein", "ein", "sp", 1.0),
    ("his", "sein", "ein", "sp", 1.0), ("her", "ihr", "ein", "sp", 1.0),
    ("our", "unser", "ein", "sp", 0.7), ("their", "ihr", "ein", "sp", 0.7),
    ("some", "einig", "none", "p", 0.6), ("many", "viel", "none", "p", 0.6),
]
_CONTRACT = {("in", "dem"): "im", ("in", "das"): "ins", ("zu", "dem"): "zum",
             ("zu", "der"): "zur", ("von", "dem"): "vom", ("an", "dem"): "am",
             ("bei", "dem"): "beim"}
# Location prepositions (dative): English, German.
_LOCATIONS = [("in", "in"), ("behind", "hinter"), ("next to", "neben"),
              ("in front of", "vor"), ("near", "bei")]
# Adjuncts with a person or animal: English, German, case.
_COMPANIONS = [("with", "mit", "dat"), ("for", "für", "acc"), ("without", "ohne", "acc"),
               ("from", "von", "dat")]
_SUBORDINATORS = [("because", "weil"), ("although", "obwohl"), ("while", "während"),
                  ("before", "bevor"), ("if", "wenn"), ("when", None)]  # when: wenn/als
_DAYS = [("Monday", "Montag"), ("Tuesday", "Dienstag"), ("Wednesday", "Mittwoch"),
         ("Thursday", "Donnerstag"), ("Friday", "Freitag"), ("Saturday", "Samstag"),
         ("Sunday", "Sonntag")]
# Time adverbials: English, German, tenses they allow.
_TIMES = [
    ("yesterday", "gestern", "past could"), ("last week", "letzte Woche", "past could"),
    ("tomorrow", "morgen", "fut"), ("next week", "nächste Woche", "fut"),
    ("today", "heute", "pres fut can past"), ("now", "jetzt", "pres can"),
    ("every day", "jeden Tag", "pres past can could"),
    ("in the morning", "am Morgen", "pres past fut can could"),
    ("in the evening", "am Abend", "pres past fut can could"),
    ("at night", "in der Nacht", "pres past fut can could"),
]
_FREQUENCY = [("often", "oft"), ("always", "immer"), ("sometimes", "manchmal"),
              ("never", "nie"), ("usually", "meistens")]
_TENSES = ["pres", "past", "fut", "can", "could"]
_TENSE_WEIGHTS = [5, 4, 1.2, 0.8, 0.6]


class _Noun:
  __slots__ = ("en_sg", "en_pl", "gender", "de_sg", "de_pl", "de_dat_pl", "de_obl", "cats",
               "adjectives")

  def __init__(self, en_sg, en_pl, gender, de_sg, de_pl, cats, de_obl=None):
    self.en_sg, self.en_pl, self.gender, self.cats = en_sg, en_pl, gender, cats
    self.de_sg, self.de_pl, self.de_obl = de_sg, de_pl, de_obl or de_sg
    self.de_dat_pl = None if de_pl is None else (
        de_pl if de_pl[-1] in "ns" else de_pl + "n")
    self.adjectives = [a for a in _ADJECTIVES if a[0] in _ADJ_WORDS[cats[0]]]


class _Verb:
  __slots__ = ("en3", "en", "en_past", "en_particle", "inf", "de3", "past", "particle",
               "subj", "obj", "frame")

  def __init__(self, line):
    en, de, subj, obj, frame = [part.split() for part in line.split("|")]
    self.en3, self.en, self.en_past, particle = en
    self.en_particle = None if particle == "-" else particle
    self.inf, self.de3, self.past, particle = de
    self.particle = None if particle == "-" else particle
    self.subj, self.obj, self.frame = subj[0], obj[0].strip("-"), frame[0]


_ADJ_WORDS = {cat: set(words.split()) for cat, words in _ADJ_FOR.items()}


def _build_nouns() -> list[_Noun]:
  nouns = [_Noun(*entry) for entry in _NOUNS]
  by_en = {n.en_sg: n for n in nouns}
  for en_mod, de_mod, heads in _COMPOUNDS:
    for head in heads:
      if head in _HEAD_ONLY:
        en_pl, gender, de_sg, de_pl, cats = _HEAD_ONLY[head]
        base = _Noun(head, en_pl, gender, de_sg, de_pl, cats)
      else:
        base = by_en[head]
      de_pl = None if base.de_pl is None else de_mod + base.de_pl.lower()
      en_pl = None if base.en_pl is None else f"{en_mod} {base.en_pl}"
      obl = de_mod + base.de_obl.lower()
      nouns.append(_Noun(f"{en_mod} {head}", en_pl, base.gender, de_mod + base.de_sg.lower(),
                         de_pl, base.cats, obl))
  return nouns


_NOUN_LIST = _build_nouns()
_NOUNS_BY_CAT = {cat: [n for n in _NOUN_LIST if cat in n.cats] for cat in "pabtoefdvl"}
_VERB_LIST = [_Verb(line) for line in _VERBS.strip().splitlines()]
_VERBS_BY_FRAME = {f: [v for v in _VERB_LIST if v.frame == f] for f in "itdmc"}
# Verbs a relative clause can use with its noun as the subject / the object.
_REL_SUBJECT_VERBS = {cat: [v for v in _VERB_LIST if cat in v.subj and v.frame in "it"]
                      for cat in "pabtoefdvl"}
_REL_OBJECT_VERBS = {cat: [v for v in _VERB_LIST if cat in v.obj and v.frame == "t"]
                     for cat in "pabtoefdvl"}
_SUBJECT_PRONOUNS = [  # English, German, person/number
    ("I", "ich", "1s"), ("he", "er", "3s"), ("she", "sie", "3s"), ("we", "wir", "1p"),
    ("they", "sie", "3p")]


class _NP:
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
    det_en, stem, kind = self.det
    words = []
    if negate and self.negatable:
      stem, kind = "kein", "ein"
    if kind == "def":
      words.append(_DEFINITE[case][gn])
      adj_table = _WEAK_ADJ
    elif kind == "der":
      words.append(stem + _DER_WORD[case][gn])
      adj_table = _WEAK_ADJ
    elif kind == "ein":
      words.append(stem + _EIN_WORD[case][gn])
      adj_table = _MIXED_ADJ
    elif kind == "none":
      words.append(stem + _STRONG_ADJ[case][gn])
      adj_table = _STRONG_ADJ
    elif kind == "num":
      words.append(stem)
      adj_table = _STRONG_ADJ
    else:  # bare plural or mass noun
      adj_table = _STRONG_ADJ
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


class _Clause:
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

  def german_relative(self, head: _NP) -> list[str]:
    """Relative clause on `head`; rel_role says whether it is the subject or object."""
    finite, end = self._finite_and_rest()
    verbs = end + [finite] if self.tense in ("fut", "can", "could") else [
        "".join(end) + finite]
    gn = head.gn()
    if self.rel_role == "subj":
      return [_DEFINITE["nom"][gn]] + self._middle() + verbs
    return [_DEFINITE["acc"][gn]] + self.subj.german("nom") + self._middle() + verbs

  def _german_complement(self) -> list[str]:
    if self.complement is None:
      return []
    return [",", "dass"] + self.complement.german_sub()




class _Generator:
  """Samples one sentence pair at a time from a seeded `random.Random`."""

  def __init__(self, seed: int):
    self.rng = random.Random(seed)
    weights = [d[4] for d in _DETERMINERS]
    self._det_cum = list(_cumulative(weights))

  def noun_phrase(self, cats: str, depth: int = 0, allow_number: bool = True,
                  allow_rel: bool = True) -> _NP:
    r = self.rng
    cat = _choice(r, cats)
    noun = _choice(r, _NOUNS_BY_CAT[cat])
    np = _NP()
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
        d = _DETERMINERS[_pick(self._det_cum, r.random())]
        if ("p" if np.plural else "s") in d[3]:
          break
      np.det = d[:3]
    k = r.random()
    nadj = 0 if k < 0.55 else (1 if k < 0.88 else 2)
    if nadj and noun.adjectives:
      np.adjs = r.sample(noun.adjectives, min(nadj, len(noun.adjectives)))
    if depth == 0 and cat in "pa" and r.random() < 0.08:
      prep_en, prep_de = ("with", "mit")
      inner = self.noun_phrase("ta", depth + 1, allow_number=False, allow_rel=False)
      np.pp = (["with"] + inner.english(), _pp_german(prep_de, inner, "dat"))
    if allow_rel and depth <= 1 and r.random() < 0.07:
      np.rel = self.relative_clause(np)
    return np

  def relative_clause(self, head: _NP) -> Optional[_Clause]:
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

  def clause(self, verb: Optional[_Verb] = None, subject: Optional[_NP] = None,
             depth: int = 0, tense: Optional[str] = None, object_np: Optional[_NP] = None,
             allow_time: bool = True) -> _Clause:
    """A clause; with `object_np` the object is left out (it is a relative pronoun)."""
    r = self.rng
    c = _Clause()
    c.tense = tense or _TENSES[_pick(_TENSE_CUM, r.random())]
    if allow_time and depth == 0 and r.random() < 0.3:
      options = _TIMES_FOR[c.tense]
      if r.random() < 0.1:
        options = [(("on", d_en), ("am", d_de), "") for d_en, d_de in _DAYS]
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
      c.subj = _NP()
      c.subj.pronoun = _choice(r, _SUBJECT_PRONOUNS)
      c.subj.plural = c.subj.pronoun[2][1] == "p"
      c.subj.det = ("", "", "pron")
    else:
      c.subj = self.noun_phrase(verb.subj if verb else "pav", depth, allow_rel=depth == 0)
    c.negated = r.random() < 0.12
    if r.random() < 0.08 and not c.negated and depth == 0:
      c.freq = _choice(r, _FREQUENCY)
    if verb is None:
      cat = "p" if c.subj.pronoun else c.subj.noun.cats[0]
      if r.random() < 0.75:
        adj = _choice(r, _ADJ_BY_CAT[cat])
        c.predicate = ([adj[0]], [adj[1]])
      else:
        prep_en, prep_de = _choice(r, _LOCATIONS)
        place = self.noun_phrase("l", depth + 1, allow_number=False, allow_rel=False)
        c.predicate = (prep_en.split() + place.english(), _pp_german(prep_de, place, "dat"))
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
          c.adjuncts.append((["into"] + place.english(), _pp_german("in", place, "acc")))
        else:
          c.adjuncts.append((["to"] + place.english(), _pp_german("zu", place, "dat")))
    elif verb.frame == "c":
      c.complement = self.clause(depth=depth + 1, allow_time=False)
    if verb.frame in "itm" and depth == 0 and r.random() < 0.25:
      if r.random() < 0.6:
        prep_en, prep_de = _choice(r, _LOCATIONS)
        place = self.noun_phrase("l", depth + 1, allow_number=False, allow_rel=False)
        c.adjuncts.append((prep_en.split() + place.english(), _pp_german(prep_de, place, "dat")))
      else:
        prep_en, prep_de, case = _choice(r, _COMPANIONS)
        other = self.noun_phrase("pa", depth + 1, allow_rel=False)
        c.adjuncts.append(([prep_en] + other.english(), _pp_german(prep_de, other, case)))
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
    conj_en, conj_de = _choice(r, _SUBORDINATORS)
    if conj_de is None:  # "when": "als" for one past event, otherwise "wenn"
      conj_de = "als" if sub.tense in ("past", "could") else "wenn"
    return main, sub, conj_en, conj_de


def _pp_german(prep: str, np: _NP, case: str) -> list[str]:
  words = np.german(case)
  fused = _CONTRACT.get((prep, words[0])) if np.det[2] == "def" else None
  if fused is not None:
    return [fused] + words[1:]
  return [prep] + words


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


_TENSE_CUM = list(_cumulative(_TENSE_WEIGHTS))
_FRAME_CUM = list(_cumulative([3, 7, 1.5, 1.5, 1]))  # i t d m c; no that-clauses when nested
_FRAME_CUM_NO_C = list(_cumulative([3, 7, 1.5, 1.5, 0]))
_TIMES_FOR = {t: [x for x in _TIMES if t in x[2].split()] for t in _TENSES}
_ADJ_BY_CAT = {cat: [a for a in _ADJECTIVES if a[0] in words] for cat, words in _ADJ_WORDS.items()}


def _render(words: list[str], end: str) -> str:
  """Joins words; attaches commas, drops doubled or trailing ones; capitalises."""
  text = " ".join(words).replace(" ,", ",")
  while ",," in text:
    text = text.replace(",,", ",")
  if text.endswith(","):
    text = text[:-1]
  return text[0].upper() + text[1:] + end


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
      raise RuntimeError(f"could not generate {num_pairs} distinct pairs")
    en_words, de_words, end = gen.sentence()
    en, de = _render(en_words, end), _render(de_words, end)
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


def write_corpus(directory: str, num_train: int = 200_000, num_dev: int = 1000,
                 num_test: int = 1000, seed: int = 0) -> dict[str, tuple[str, str]]:
  """Writes `{train,dev,test}.{en,de}` into `directory`; returns {split: (src, tgt) paths}.

  Files are written under temporary names and renamed, so a crash never leaves a
  half-written corpus that a later run would take as complete.
  """
  pairs = generate(num_train + num_dev + num_test, seed)
  # Dev and test come first in generation order; all pairs are distinct, so
  # neither overlaps training.
  chunks = {"dev": pairs[:num_dev], "test": pairs[num_dev:num_dev + num_test],
            "train": pairs[num_dev + num_test:]}
  os.makedirs(directory, exist_ok=True)
  paths = {}
  for split in SPLITS:
    split_paths = []
    for side, lang in enumerate(("en", "de")):
      path = os.path.join(directory, f"{split}.{lang}")
      with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(p[side] for p in chunks[split]) + "\n")
      split_paths.append(path)
    paths[split] = tuple(split_paths)
  for split in SPLITS:
    for path in paths[split]:
      os.replace(path + ".tmp", path)
  return paths


def corpus_paths(directory: str) -> Optional[dict[str, tuple[str, str]]]:
  """The corpus files in `directory`, or None when any is missing."""
  paths = {s: (os.path.join(directory, f"{s}.en"), os.path.join(directory, f"{s}.de"))
           for s in SPLITS}
  if all(os.path.exists(p) for pair in paths.values() for p in pair):
    return paths
  return None
