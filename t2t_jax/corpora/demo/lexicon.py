"""The demo corpus's lexicon: words, their forms and the morphology tables (data only).

The grammar that combines them is in `syntax.py` (rendering) and `corpus.py`
(sampling). Changing any entry changes the generated corpus.
"""

# --- Words -------------------------------------------------------------------
# Nouns: English singular, English plural, gender, German singular, German plural
# (None: mass noun), categories, optional oblique singular of weak nouns.
# Categories: p person, a animal, b readable, t portable thing, o openable,
# e electric, f food, d drink, v vehicle, l place (also a destination).
NOUNS = [
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
COMPOUNDS = [
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
HEAD_ONLY = {
    "tree": ("trees", "m", "baum", "bäume", "l"),
    "room": ("rooms", "n", "zimmer", "zimmer", "l"),
}

# Adjectives: English, German predicative form, German attributive stem.
ADJECTIVES = [
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
ADJ_FOR = {
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
VERBS = """
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

ONES_EN = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
            "fourteen fifteen sixteen seventeen eighteen nineteen").split()
TENS_EN = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
ONES_DE = ("null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn "
            "vierzehn fünfzehn sechzehn siebzehn achtzehn neunzehn").split()
TENS_DE = "_ _ zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig neunzig".split()

# --- Morphology tables -----------------------------------------------------------
# Keys: case ("nom", "acc", "dat") and gender/number ("m", "f", "n", "p" = plural).
DEFINITE = {
    "nom": {"m": "der", "f": "die", "n": "das", "p": "die"},
    "acc": {"m": "den", "f": "die", "n": "das", "p": "die"},
    "dat": {"m": "dem", "f": "der", "n": "dem", "p": "den"},
}
DER_WORD = {  # dieser, jeder
    "nom": {"m": "er", "f": "e", "n": "es", "p": "e"},
    "acc": {"m": "en", "f": "e", "n": "es", "p": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "p": "en"},
}
EIN_WORD = {  # ein, kein, mein, sein, ihr, unser
    "nom": {"m": "", "f": "e", "n": "", "p": "e"},
    "acc": {"m": "en", "f": "e", "n": "", "p": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "p": "en"},
}
WEAK_ADJ = {  # after der-words
    "nom": {"m": "e", "f": "e", "n": "e", "p": "en"},
    "acc": {"m": "en", "f": "e", "n": "e", "p": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "p": "en"},
}
MIXED_ADJ = {  # after ein-words
    "nom": {"m": "er", "f": "e", "n": "es", "p": "en"},
    "acc": {"m": "en", "f": "e", "n": "es", "p": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "p": "en"},
}
STRONG_ADJ = {  # no determiner, or after numbers, "einige", "viele"
    "nom": {"m": "er", "f": "e", "n": "es", "p": "e"},
    "acc": {"m": "en", "f": "e", "n": "es", "p": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "p": "en"},
}
# Determiners: English, German stem, kind ("def", "der", "ein", "none"), number
# ("s" singular only, "p" plural only, "sp" either).
DETERMINERS = [
    ("the", "", "def", "sp", 10.0), ("a", "ein", "ein", "s", 4.0),
    ("this", "dies", "der", "s", 1.0), ("these", "dies", "der", "p", 0.7),
    ("every", "jed", "der", "s", 0.5), ("my", "mein", "ein", "sp", 1.0),
    ("his", "sein", "ein", "sp", 1.0), ("her", "ihr", "ein", "sp", 1.0),
    ("our", "unser", "ein", "sp", 0.7), ("their", "ihr", "ein", "sp", 0.7),
    ("some", "einig", "none", "p", 0.6), ("many", "viel", "none", "p", 0.6),
]
CONTRACT = {("in", "dem"): "im", ("in", "das"): "ins", ("zu", "dem"): "zum",
             ("zu", "der"): "zur", ("von", "dem"): "vom", ("an", "dem"): "am",
             ("bei", "dem"): "beim"}
# Location prepositions (dative): English, German.
LOCATIONS = [("in", "in"), ("behind", "hinter"), ("next to", "neben"),
              ("in front of", "vor"), ("near", "bei")]
# Adjuncts with a person or animal: English, German, case.
COMPANIONS = [("with", "mit", "dat"), ("for", "für", "acc"), ("without", "ohne", "acc"),
               ("from", "von", "dat")]
SUBORDINATORS = [("because", "weil"), ("although", "obwohl"), ("while", "während"),
                  ("before", "bevor"), ("if", "wenn"), ("when", None)]  # when: wenn/als
DAYS = [("Monday", "Montag"), ("Tuesday", "Dienstag"), ("Wednesday", "Mittwoch"),
         ("Thursday", "Donnerstag"), ("Friday", "Freitag"), ("Saturday", "Samstag"),
         ("Sunday", "Sonntag")]
# Time adverbials: English, German, tenses they allow.
TIMES = [
    ("yesterday", "gestern", "past could"), ("last week", "letzte Woche", "past could"),
    ("tomorrow", "morgen", "fut"), ("next week", "nächste Woche", "fut"),
    ("today", "heute", "pres fut can past"), ("now", "jetzt", "pres can"),
    ("every day", "jeden Tag", "pres past can could"),
    ("in the morning", "am Morgen", "pres past fut can could"),
    ("in the evening", "am Abend", "pres past fut can could"),
    ("at night", "in der Nacht", "pres past fut can could"),
]
FREQUENCY = [("often", "oft"), ("always", "immer"), ("sometimes", "manchmal"),
              ("never", "nie"), ("usually", "meistens")]
TENSES = ["pres", "past", "fut", "can", "could"]
TENSE_WEIGHTS = [5, 4, 1.2, 0.8, 0.6]
SUBJECT_PRONOUNS = [  # English, German, person/number
    ("I", "ich", "1s"), ("he", "er", "3s"), ("she", "sie", "3s"), ("we", "wir", "1p"),
    ("they", "sie", "3p")]
