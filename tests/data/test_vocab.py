"""The shared SentencePiece vocabulary: ids, exact round trip, caching, clear errors."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import sentencepiece as spm

from t2t_jax.corpora import demo
from t2t_jax.data import vocab
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
  assert sorted(n for n in os.listdir(tmp_path) if not n.startswith(".")) == [
      "spm.json", "spm.model", "spm.vocab"]
  with pytest.raises(ValueError, match="no non-empty lines"):
    vocab.build_or_load(100, str(tmp_path / "empty"), lambda: [("", " ")])


def _damage(path, how):
  data = open(path, "rb").read()
  damaged = {"truncated": data[:len(data) // 2], "emptied": b"",
             "garbled": data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF])
             + data[len(data) // 2 + 1:]}[how]
  with open(path, "wb") as f:
    f.write(damaged)


@pytest.mark.parametrize("how", ["truncated", "emptied", "garbled"])
def test_a_damaged_model_stops_with_what_to_do_never_a_silent_rebuild(tokenizer, tmp_path, how):
  directory = tmp_path / "vocab"
  shutil.copytree(os.path.dirname(tokenizer.model_path), directory)
  _damage(directory / "spm.model", how)

  def must_not_train():
    raise AssertionError("a damaged vocabulary was silently retrained")

  for load in (lambda: vocab.build_or_load(400, str(directory), must_not_train),
               lambda: vocab.load(str(directory))):
    with pytest.raises(ValueError) as error:
      load()
    message = str(error.value)
    assert "spm.model is damaged" in message and "restore it from a backup" in message
    assert "\n" not in message


@pytest.mark.parametrize("how", ["truncated", "emptied", "garbled"])
def test_a_damaged_spm_json_is_written_again_with_a_warning(tokenizer, tmp_path, how, caplog):
  directory = tmp_path / "vocab"
  shutil.copytree(os.path.dirname(tokenizer.model_path), directory)
  _damage(directory / "spm.json", how)
  again = vocab.build_or_load(400, str(directory), lambda: 1 / 0)
  assert again.encode("Der Hund.") == tokenizer.encode("Der Hund.")
  assert "spm.json is unreadable" in caplog.text or "spm.json is damaged" in caplog.text
  meta = json.loads((directory / "spm.json").read_text())
  assert meta["sha256"] == json.loads(
      open(os.path.join(os.path.dirname(tokenizer.model_path), "spm.json")).read())["sha256"]


# Builds a vocabulary in argv[1]; prints TRAINED when this process trained it.
_BUILDER = """
import sys
from t2t_jax.corpora import demo
from t2t_jax.data import vocab
def pairs():
  print("TRAINED", flush=True)
  return demo.generate(600, seed=3)
vocab.build_or_load(200, sys.argv[1], pairs)
"""


def test_concurrent_first_runs_train_the_vocabulary_once(tmp_path):
  root = pathlib.Path(__file__).resolve().parents[2]
  processes = [subprocess.Popen([sys.executable, "-c", _BUILDER, str(tmp_path)], cwd=root,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
  outputs = [p.communicate(timeout=120) for p in processes]
  assert all(p.returncode == 0 for p in processes), [err for _, err in outputs]
  assert sum(out.count("TRAINED") for out, _ in outputs) == 1
  vocab.load(str(tmp_path))


# ------------------------------------------------- two models over one vocabulary (imports)


def _spm(path, lines, vocab_size):
  """A SentencePiece model as Marian's are trained (its own ids: <unk> 0, <s> 1, </s> 2)."""
  path.with_suffix(".txt").write_text("\n".join(lines) + "\n")
  spm.SentencePieceTrainer.Train(input=str(path.with_suffix(".txt")), model_prefix=str(path),
                                 vocab_size=vocab_size, character_coverage=1.0, minloglevel=2)
  return spm.SentencePieceProcessor(model_file=f"{path}.model")


@pytest.fixture(scope="module")
def two_models(corpus, tmp_path_factory):
  """A vocabulary directory with a source (English) and a target (German) model over one
  joint vocabulary, numbered ours: <pad> 0, </s> 1, <unk> 2, then the pieces."""
  root = tmp_path_factory.mktemp("two")
  source = _spm(root / "source", [en for en, _ in corpus], 150)
  target = _spm(root / "target", [de for _, de in corpus], 180)
  own = lambda sp: [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]
  pieces = ["<pad>", "</s>", "<unk>"] + sorted(set(own(source)) | set(own(target)))
  directory = root / "vocab"
  directory.mkdir()
  for name, model in (("spm.model", source), (vocab.TARGET_MODEL, target)):
    data, dropped = vocab.reindexed(model.serialized_model_proto(), pieces, control=["<pad>"])
    assert dropped == 0                                   # (its <s>, a control piece, is)
    (directory / name).write_bytes(data)
  (directory / vocab.IMPORTED).mkdir()
  (directory / vocab.IMPORTED / "vocab.json").write_text("{}")
  return vocab.load(str(directory)), source, target, pieces


def test_sources_are_cut_by_the_source_model_targets_and_outputs_by_the_target_model(
    two_models, corpus):
  tokenizer, source, target, pieces = two_models
  assert tokenizer.vocab_size == len(pieces) and tokenizer.target_path is not None
  for en, de in corpus[:100]:
    assert tokenizer.encode(en) == [pieces.index(p) for p in source.encode(en, out_type=str)] \
        + [EOS_ID]
    ids = tokenizer.encode_target(de)
    assert ids == [pieces.index(p) for p in target.encode(de, out_type=str)] + [EOS_ID]
    assert tokenizer.decode(ids) == de
  assert tokenizer.encode_batch([en for en, _ in corpus[:5]]) == [
      tokenizer.encode(en) for en, _ in corpus[:5]]
  assert tokenizer.encode_target_batch([de for _, de in corpus[:5]]) == [
      tokenizer.encode_target(de) for _, de in corpus[:5]]
  # The two models cut the same text differently: each side has its own.
  text = corpus[0][1]
  assert tokenizer.encode(text) != tokenizer.encode_target(text)
  # A piece only the source side has is never cut from a target but decodes as written.
  only_source = next(i for i, p in enumerate(pieces) if i > 2 and p not in
                     {target.id_to_piece(j) for j in range(target.get_piece_size())})
  assert tokenizer.target_sp.is_unused(only_source)
  assert tokenizer.decode([only_source]) == pieces[only_source].replace("▁", " ").strip()
  assert tokenizer.decode([0, only_source, 1, 5]) == tokenizer.decode([only_source])


def test_a_shared_model_cuts_both_sides(tokenizer, corpus):
  en, de = corpus[0]
  assert tokenizer.target_sp is tokenizer.sp and tokenizer.target_path is None
  assert tokenizer.encode_target(de) == tokenizer.encode(de)


def test_adopting_two_models_copies_both_and_the_imported_files(two_models, tmp_path, corpus):
  tokenizer = two_models[0]
  again = vocab.adopt(os.path.dirname(tokenizer.model_path), str(tmp_path / "vocab"))
  assert sorted(os.listdir(tmp_path / "vocab")) == [vocab.IMPORTED, "spm.model",
                                                     vocab.TARGET_MODEL]
  assert (tmp_path / "vocab" / vocab.IMPORTED / "vocab.json").read_text() == "{}"
  de = corpus[3][1]
  assert again.encode_target(de) == tokenizer.encode_target(de)


def test_a_target_model_numbered_otherwise_is_refused(two_models, tokenizer):
  with pytest.raises(ValueError, match="numbers its pieces otherwise than"):
    vocab.Tokenizer(two_models[0].model_path, tokenizer.model_path)


# ------------------------------------ separate vocabularies, language tokens (imports)


@pytest.fixture(scope="module")
def separate_models(corpus, tmp_path_factory):
  """A source model over the English pieces and two language tokens, and a target model
  over the German pieces numbered as its own vocabulary (spm.json records its size)."""
  root = tmp_path_factory.mktemp("separate")
  source = _spm(root / "source", [en for en, _ in corpus], 150)
  target = _spm(root / "target", [de for _, de in corpus], 120)
  own = lambda sp: [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]
  special = ["<pad>", "</s>", "<unk>"]
  source_pieces = special + own(source) + [">>deu<<", ">>nld<<"]
  target_pieces = special + own(target)
  directory = root / "vocab"
  directory.mkdir()
  for name, model, pieces in (("spm.model", source, source_pieces),
                              (vocab.TARGET_MODEL, target, target_pieces)):
    (directory / name).write_bytes(vocab.reindexed(model.serialized_model_proto(), pieces,
                                                   control=["<pad>"])[0])
  (directory / "spm.json").write_text(json.dumps({"vocab_size": len(source_pieces),
                                                  vocab.TARGET_SIZE: len(target_pieces)}))
  return vocab.load(str(directory)), source, target, source_pieces, target_pieces


def test_separate_vocabularies_number_each_side_by_its_own_pieces(separate_models, corpus):
  tokenizer, source, target, source_pieces, target_pieces = separate_models
  assert tokenizer.separate and vocab.own_target_vocabulary(os.path.dirname(tokenizer.model_path))
  assert (tokenizer.vocab_size, tokenizer.target_vocab_size) == (len(source_pieces),
                                                                 len(target_pieces))
  en, de = corpus[7]
  assert tokenizer.encode(f">>nld<< {en}") == [source_pieces.index(">>nld<<")] + [
      source_pieces.index(p) for p in source.encode(en, out_type=str)] + [EOS_ID]
  ids = tokenizer.encode_target(de)
  assert ids == [target_pieces.index(p) for p in target.encode(de, out_type=str)] + [EOS_ID]
  assert tokenizer.decode(ids) == de and max(ids) < len(target_pieces)
  # Without spm.json's record the same two files are one vocabulary, which they are not.
  with pytest.raises(ValueError, match="numbers its pieces otherwise than"):
    vocab.Tokenizer(tokenizer.model_path, tokenizer.target_path, separate=False)


def test_a_leading_language_token_is_one_id_as_marian_tokenizer_reads_it(separate_models, corpus):
  tokenizer, source, *_ = separate_models
  assert tokenizer.language_tokens == [">>deu<<", ">>nld<<"]
  en = corpus[2][0]
  # MarianTokenizer's rule: the token up to the first "<<", the rest cut by SentencePiece
  # (which drops the space after it), whatever follows the token.
  for text in (f">>deu<< {en}", f">>deu<<{en}"):
    assert tokenizer.encode(text)[1:] == tokenizer.encode_batch([f">>nld<< {en}"])[0][1:]
    assert tokenizer.split_language(text) == (">>deu<<", text[len(">>deu<<"):])
    assert tokenizer.encode(text)[0] == tokenizer.sp.piece_to_id(">>deu<<")
  # A source without one, or with another, is refused in one line naming the model's.
  for text, found in ((en, "it has none"), (f">>fra<< {en}", "it starts with >>fra<<")):
    with pytest.raises(ValueError, match=f"language token at the start of each source "
                                         f"\\(>>deu<<, >>nld<<\\): {found}") as error:
      tokenizer.encode_batch([f">>deu<< {en}", text])
    assert "\n" not in str(error.value)
  # A model without language tokens cuts ">>" as text, as ever.
  plain = vocab.Tokenizer(tokenizer.target_path)
  assert plain.language_tokens == [] and len(plain.encode(f">>deu<< {en}")) > len(
      plain.encode(en)) + 2
