"""inference/shortlist.py: the table counts what a brute-force count over the pairs gives, in any chunks;
a batch's candidates hold its sources' entries, the frequent ids, padding and EOS (first)."""

import collections
import itertools

import numpy as np
import pytest

from t2t_jax.inference import shortlist
from t2t_jax.ids import EOS_ID, FILLER, PAD_ID, UNK_ID

CORPUS = [("the dog sleeps", "der Hund schläft"), ("the cat sleeps", "die Katze schläft"),
          ("a dog runs", "ein Hund läuft"), ("the dog runs", "der Hund läuft"),
          ("a cat sees the dog", "eine Katze sieht den Hund"), ("the cat", "die Katze"),
          ("a house", "ein Haus"), ("the house sleeps", "das Haus schläft")]


class WordTokenizer:
  """Whitespace words as ids 3.. (0 padding, 1 EOS, 2 unknown), as vocab.Tokenizer's calls."""

  def __init__(self, path):
    words = sorted({w for pair in CORPUS for line in pair for w in line.split()})
    self.ids = {w: i for i, w in enumerate(words, 3)}
    self.vocab_size = self.target_vocab_size = len(words) + 3
    self.separate = False
    self.model_path = str(path)
    path.write_text(" ".join(words))

  def encode_batch(self, texts):
    return [[self.ids.get(w, UNK_ID) for w in text.split()] + [EOS_ID] for text in texts]

  encode_target_batch = encode_batch


class SeparateWordTokenizer(WordTokenizer):
  """Source words and target words numbered apart (separate vocabularies): the targets' ids
  3.. in reverse alphabetical order, and more of them than the sources'."""

  def __init__(self, path):
    super().__init__(path)
    sources = sorted({w for en, _ in CORPUS for w in en.split()})
    targets = sorted({w for _, de in CORPUS for w in de.split()} | {"unseen"}, reverse=True)
    self.ids = {w: i for i, w in enumerate(sources, 3)}
    self.target_ids = {w: i for i, w in enumerate(targets, 3)}
    self.vocab_size, self.target_vocab_size = len(sources) + 3, len(targets) + 3
    self.separate = True

  def encode_target_batch(self, texts):
    return [[self.target_ids.get(w, UNK_ID) for w in text.split()] + [EOS_ID] for text in texts]


@pytest.fixture
def tokenizer(tmp_path):
  return WordTokenizer(tmp_path / "words.model")


def _brute_force(tokenizer, per_source, frequent):
  """Dice over sentence sets, ranked best first then by id; target ids by count then id."""
  pairs = [tuple(set(ids[0]) - set(shortlist.SPECIAL) for ids in
                 (tokenizer.encode_batch([en]), tokenizer.encode_target_batch([de])))
           for en, de in CORPUS]
  c_s = collections.Counter(s for src, _ in pairs for s in src)
  c_t = collections.Counter(t for _, tgt in pairs for t in tgt)
  c_st = collections.Counter((s, t) for src, tgt in pairs for s, t in itertools.product(src, tgt))
  table = {}
  for s in c_s:
    ranked = sorted((t for (s2, t) in c_st if s2 == s),
                    key=lambda t: (-2 * c_st[s, t] / (c_s[s] + c_t[t]), t))
    table[s] = ranked[:per_source]
  tokens = collections.Counter(
      t for ids in tokenizer.encode_target_batch([t for _, t in CORPUS]) for t in ids
      if t not in shortlist.SPECIAL)
  most = sorted(tokens, key=lambda t: (-tokens[t], t))[:frequent]
  return table, most


def test_the_table_is_the_brute_force_count_in_any_chunks(tokenizer):
  want, most = _brute_force(tokenizer, 3, 4)
  tables = [shortlist.build(tokenizer, CORPUS, per_source=3, frequent=4, chunk=chunk)
            for chunk in (1, 3, 100)]
  for table in tables:
    np.testing.assert_array_equal(table.per_source, tables[0].per_source)
    np.testing.assert_array_equal(table.frequent, most)
  for source in range(tokenizer.vocab_size):
    row = tables[0].per_source[source]
    assert list(row[row != FILLER]) == want.get(source, [])
  # The dog's translation comes first: the pieces that co-occur with it beat the frequent ones.
  ids = tokenizer.ids
  assert tables[0].per_source[ids["dog"], 0] == ids["Hund"]
  assert tables[0].per_source[ids["cat"], 0] == ids["Katze"]
  assert tables[0].per_source[ids["house"], 0] == ids["Haus"]


def test_a_batch_holds_its_sources_entries_the_frequent_ids_padding_and_eos_first(tokenizer):
  table = shortlist.build(tokenizer, CORPUS, per_source=1, frequent=3)
  inputs = np.zeros((2, 6), np.int32)                                  # padded rows
  for row, ids in enumerate(tokenizer.encode_batch(["house", "a house"])):
    inputs[row, :len(ids)] = ids
  listed = table.candidates(inputs)
  entries = set()
  for source in np.unique(inputs):
    entries |= set(table.per_source[source]) - {FILLER}
  assert set(table.frequent) - entries                     # the frequent ids add candidates
  assert set(listed) == {PAD_ID, EOS_ID, UNK_ID, *table.frequent} | entries
  assert list(listed) == sorted(listed) and list(listed[:2]) == [PAD_ID, EOS_ID]
  ids = table.batch_ids(inputs)
  assert len(ids) in shortlist.sizes(table.vocab_size) and len(ids) >= len(listed)
  np.testing.assert_array_equal(ids[:len(listed)], listed)
  assert np.all(ids[len(listed):] == FILLER)


def test_sizes_are_few_and_end_at_the_vocabulary():
  assert shortlist.sizes(37000)[:5] == [256, 384, 512, 768, 1024]
  assert shortlist.sizes(37000)[-1] == 37000 and len(shortlist.sizes(37000)) < 20
  assert shortlist.sizes(24) == [24]


def test_saved_tables_load_and_refuse_another_vocabulary(tokenizer, tmp_path):
  table = shortlist.build(tokenizer, CORPUS, per_source=2, frequent=3)
  path = shortlist.save(table, tmp_path / "w" / shortlist.FILE)
  loaded = shortlist.workdir_table(tmp_path / "w", tokenizer)
  np.testing.assert_array_equal(loaded.per_source, table.per_source)
  np.testing.assert_array_equal(loaded.frequent, table.frequent)
  with pytest.raises(FileNotFoundError, match="t2t-shortlist"):
    shortlist.workdir_table(tmp_path / "elsewhere")
  (tmp_path / "words.model").write_text("another model")
  with pytest.raises(ValueError, match="another SentencePiece model"):
    shortlist.load(path, tokenizer)


def test_separate_vocabularies_map_source_ids_to_the_targets_own(tmp_path):
  tokenizer = SeparateWordTokenizer(tmp_path / "words.model")
  table = shortlist.build(tokenizer, CORPUS, per_source=2, frequent=3)
  assert table.per_source.shape[0] == tokenizer.vocab_size < tokenizer.target_vocab_size
  assert table.target_vocab_size == tokenizer.target_vocab_size
  want, most = _brute_force(tokenizer, 2, 3)
  for source in range(tokenizer.vocab_size):
    row = table.per_source[source]
    assert list(row[row != FILLER]) == want.get(source, [])
  np.testing.assert_array_equal(table.frequent, most)
  ids, targets = tokenizer.ids, tokenizer.target_ids
  assert table.per_source[ids["dog"], 0] == targets["Hund"]
  assert table.per_source[ids["house"], 0] == targets["Haus"]
  inputs = np.asarray(tokenizer.encode_batch(["the dog"]), np.int32)
  assert len(table.batch_ids(inputs)) in shortlist.sizes(tokenizer.target_vocab_size)
  loaded = shortlist.load(shortlist.save(table, tmp_path / "table.npz"), tokenizer)
  assert loaded.target_size == tokenizer.target_vocab_size
  np.testing.assert_array_equal(loaded.per_source, table.per_source)
  with pytest.raises(ValueError, match="target vocabulary of its own"):
    shortlist.vocabulary_map(table, ["<pad>"] * tokenizer.target_vocab_size)


def test_the_vocabulary_map_lists_the_frequent_ids_then_each_source(tokenizer):
  table = shortlist.build(tokenizer, CORPUS, per_source=2, frequent=2)
  pieces = ["<pad>", "</s>", "<unk>", *sorted(tokenizer.ids, key=tokenizer.ids.get)]
  lines = shortlist.vocabulary_map(table, pieces).splitlines()
  assert lines[0] == "\t" + " ".join(pieces[i] for i in table.frequent)
  rules = dict(line.split("\t") for line in lines[1:])
  assert rules["dog"].split() == [pieces[i] for i in table.per_source[tokenizer.ids["dog"]]]
  assert not set(rules) & {"<pad>", "</s>", "<unk>"}


def test_by_shape_every_batch_of_a_shape_takes_one_size_that_holds_its_candidates():
  rng = np.random.default_rng(0)
  vocab_size = 3000                  # sizes 256, 384, 512, ...: batches would differ in size
  entries = rng.integers(3, vocab_size, (vocab_size, 40)).astype(np.int32)
  entries[rng.random(entries.shape) < 0.5] = FILLER           # sources with fewer entries
  entries[:3] = FILLER
  table = shortlist.Shortlist(entries, np.arange(3, 20, dtype=np.int32)).by_shapes()
  for rows, width in ((1, 4), (2, 6), (4, 8)):
    sizes = set()
    for _ in range(20):
      inputs = rng.integers(0, vocab_size, (rows, width)).astype(np.int32)
      inputs[:, -1] = EOS_ID
      inputs[:, rng.integers(1, width):] = PAD_ID               # rows of any length
      listed, ids = table.candidates(inputs), table.batch_ids(inputs)
      assert len(listed) <= table.shape_size(rows, width)
      np.testing.assert_array_equal(ids[:len(listed)], listed)
      assert np.all(ids[len(listed):] == FILLER)
      sizes.add(len(ids))
    assert sizes == {table.shape_size(rows, width)}
