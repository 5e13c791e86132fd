"""One shared SentencePiece vocabulary for source and target: train once, cache, reload; an
imported model's models of each side.

Ids follow the project convention: 0 padding, 1 end of sentence, 2 unknown, no BOS.
Normalisation is the identity, so `decode(encode(s)) == s` for text whose
characters the model knows, and what BLEU scores is exactly what the model emits.

An imported model (export/import_marian.py) brings two SentencePiece models: its work
directory's `vocab/spm.model` cuts the sources and `vocab/target.model` (`TARGET_MODEL`)
cuts the targets and puts the outputs back together, both re-indexed to the model's ids
(`reindexed`). Over one vocabulary they number the same pieces alike; a model with
separate source and target vocabularies has a target side of its own ids (spm.json
records its size: `TARGET_SIZE`). Everything trained here has the one shared model, and
`Tokenizer` uses it for both sides.

Language tokens: a multilingual model's source vocabulary holds tokens such as `>>deu<<`
(`LANGUAGE_TOKEN`) that name the language to translate into, and each source starts with
one. As transformers' MarianTokenizer does, the leading token is read as one id and the
rest of the line cut by the source model; a model that has them refuses a source without
one, in one line naming them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
import tempfile
from typing import Iterable, Optional, Sequence

import sentencepiece as spm

from t2t_jax.ids import EOS_ID, PAD_ID, UNK_ID
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)


# A vocabulary directory's target-side model, where the target side has its own.
TARGET_MODEL = "target.model"
# spm.json's record of the target side's own vocabulary size (separate vocabularies).
TARGET_SIZE = "target_vocab_size"
# A source piece that names a target language (MarianTokenizer's rule): >>deu<<, >>nld<<.
LANGUAGE_TOKEN = re.compile(r">>.+<<")
# The files an imported vocabulary came from, kept for the export back
# (export/import_marian.py writes them); `adopt` copies them with the rest.
IMPORTED = "imported"


class Tokenizer:
  """Text <-> ids; encoded sequences end with EOS.

  `sp` cuts sources (`encode`, a leading language token read as one id where the model
  has them: `language_tokens`); `target_sp`, the target side's model (`target_path`)
  or else the same shared model, cuts targets (`encode_target`) and puts outputs
  back together (`decode`). Both models number the same pieces alike, unless the target
  side has a vocabulary of its own (`separate`; None: as the directory's spm.json says).
  """

  def __init__(self, model_path: str, target_path: Optional[str] = None,
               separate: Optional[bool] = None):
    self.model_path = model_path
    self.target_path = target_path
    self.sp = spm.SentencePieceProcessor(model_file=model_path)
    self.target_sp = self.sp
    self.separate = target_path is not None and (
        separate if separate is not None else own_target_vocabulary(os.path.dirname(model_path)))
    if target_path is not None:
      self.target_sp = spm.SentencePieceProcessor(model_file=target_path)
      if not self.separate and (self.target_sp.get_piece_size() != self.vocab_size
                                or self.target_sp.id_to_piece(list(range(self.vocab_size)))
                                != self.sp.id_to_piece(list(range(self.vocab_size)))):
        raise ValueError(f"{target_path} numbers its pieces otherwise than {model_path}: a "
                         "target model must share the source model's vocabulary")
    pieces = self.sp.id_to_piece(list(range(self.vocab_size)))
    self._languages = {p: i for i, p in enumerate(pieces) if LANGUAGE_TOKEN.fullmatch(p)}

  @property
  def vocab_size(self) -> int:
    """The source side's pieces (both sides' over one vocabulary)."""
    return self.sp.get_piece_size()

  @property
  def target_vocab_size(self) -> int:
    return self.target_sp.get_piece_size()

  @property
  def language_tokens(self) -> list[str]:
    """The source vocabulary's language tokens (`LANGUAGE_TOKEN`), by id; [] for most models."""
    return list(self._languages)

  def split_language(self, text: str) -> tuple[Optional[str], str]:
    """(`text`'s leading language token, the rest), as MarianTokenizer splits a source;
    (None, text) for a model without language tokens. ValueError, naming the model's
    tokens, for a source that does not start with one of them."""
    if not self._languages:
      return None, text
    end = text.find("<<") if text.startswith(">>") else -1
    token = text[:end + 2] if end >= 0 else None
    if token not in self._languages:
      listed = ", ".join(list(self._languages)[:20]) + (
          f" ... ({len(self._languages)} in all)" if len(self._languages) > 20 else "")
      found = f"it starts with {token}, not one of them" if token else "it has none"
      rest = text[end + 2:].strip() if token else text
      raise ValueError(f"this model needs a target language token at the start of each source "
                       f"({listed}): {found}; write e.g. '{next(iter(self._languages))} "
                       f"{rest[:30]}'")
    return token, text[end + 2:]

  def encode(self, text: str) -> list[int]:
    token, rest = self.split_language(text)
    return ([] if token is None else [self._languages[token]]) + self.sp.encode(rest) + [EOS_ID]

  def encode_batch(self, texts: Sequence[str], num_threads: int = -1) -> list[list[int]]:
    """Like `encode` for many lines; SentencePiece spreads them over threads."""
    if not self._languages:
      return _with_eos(self.sp.encode(list(texts), num_threads=num_threads))
    split = [self.split_language(text) for text in texts]
    rows = self.sp.encode([rest for _, rest in split], num_threads=num_threads)
    return _with_eos([[self._languages[token], *row] for (token, _), row in zip(split, rows)])

  def encode_target(self, text: str) -> list[int]:
    """A target sentence's ids, EOS-terminated (the target side's model)."""
    return self.target_sp.encode(text) + [EOS_ID]

  def encode_target_batch(self, texts: Sequence[str], num_threads: int = -1) -> list[list[int]]:
    """Like `encode_target` for many lines."""
    return _with_eos(self.target_sp.encode(list(texts), num_threads=num_threads))

  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids` up to the first EOS (the target side's model); padding is skipped."""
    out = []
    for i in ids:
      i = int(i)
      if i == EOS_ID:
        break
      if i != PAD_ID:
        out.append(i)
    return self.target_sp.decode(out)


def _with_eos(rows: list[list[int]]) -> list[list[int]]:
  for row in rows:
    row.append(EOS_ID)
  return rows


def target_model(directory: str | os.PathLike) -> Optional[str]:
  """The target side's model in a vocabulary directory (`TARGET_MODEL`), or None (shared)."""
  path = os.path.join(directory, TARGET_MODEL)
  return path if os.path.isfile(path) else None


def own_target_vocabulary(directory: str | os.PathLike) -> bool:
  """Whether a vocabulary directory's target side has ids of its own (spm.json's `TARGET_SIZE`,
  which an import of separate vocabularies writes)."""
  try:
    with open(os.path.join(directory, "spm.json"), encoding="utf-8") as f:
      meta = json.load(f)
  except (OSError, ValueError):
    return False
  return isinstance(meta, dict) and TARGET_SIZE in meta


def reindexed(model: bytes, pieces: Sequence[str], control: Sequence[str] = ()
              ) -> tuple[bytes, int]:
  """A serialised SentencePiece model numbered as `pieces` (piece i gets id i), and how many
  of its own pieces that left out.

  Its own pieces keep their scores and types, so it cuts text as before; a piece it lacks
  is UNUSED (never cut, decoded as written), or CONTROL when named in `control`
  (decoded as nothing). Its pieces not in `pieces` are dropped, and the count is of
  those it could cut text into (control pieces such as <s> aside): SentencePiece cuts
  their strings otherwise. Needs protobuf (which orbax-checkpoint brings).
  """
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=import-outside-toplevel
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(model)
  proto.DiscardUnknownFields()  # its self-test samples, which name the old pieces
  own = {p.piece: p for p in proto.pieces}
  new = []
  for piece in pieces:
    entry = sentencepiece_model_pb2.ModelProto.SentencePiece()
    if piece in own:
      entry.CopyFrom(own[piece])
    else:
      entry.piece, entry.score = piece, 0.0
      entry.type = entry.CONTROL if piece in control else entry.UNUSED
    new.append(entry)
  del proto.pieces[:]
  proto.pieces.extend(new)
  left_out = [p for name, p in own.items() if name not in set(pieces) and p.type != p.CONTROL]
  return proto.SerializeToString(), len(left_out)


def _sample_sentences(pairs: Sequence[tuple[str, str]], max_sentences: int,
                      seed: int) -> list[str]:
  """Up to `max_sentences` lines, half from each side, from pairs chosen at random."""
  num_pairs = min(len(pairs), max(1, max_sentences // 2))
  chosen = random.Random(seed).sample(range(len(pairs)), num_pairs) \
      if num_pairs < len(pairs) else range(len(pairs))
  lines = []
  for i in chosen:
    for text in pairs[i]:
      text = text.strip()
      if text:
        lines.append(text)
  return lines


def train(pairs: Sequence[tuple[str, str]], model_prefix: str, vocab_size: int,
          model_type: str = "bpe", max_sentences: int = 2_000_000, seed: int = 0) -> str:
  """Trains a shared model on a sample of both sides of `pairs`; returns the model path."""
  lines = _sample_sentences(pairs, max_sentences, seed)
  if not lines:
    raise ValueError("cannot train a vocabulary: the training data has no non-empty lines")
  directory = os.path.dirname(model_prefix) or "."
  os.makedirs(directory, exist_ok=True)
  with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", dir=directory,
                                   delete=False) as f:
    # SentencePiece reads one sentence per line: a stray newline inside a pair's
    # text cannot exist here because readers split on "\n".
    f.write("\n".join(lines) + "\n")
    sample_path = f.name
  try:
    with open(os.devnull, "w") as devnull:
      spm.SentencePieceTrainer.Train(
          logstream=devnull,
          input=sample_path, model_prefix=model_prefix, vocab_size=vocab_size,
          model_type=model_type, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
          normalization_rule_name="identity",
          # Rare characters (a few per million) become <unk> rather than pieces.
          character_coverage=0.9999 if vocab_size > 4000 else 1.0,
          # Small corpora (the demo) may not have vocab_size distinct pieces; take
          # what there is instead of failing.
          hard_vocab_limit=False,
          input_sentence_size=0, shuffle_input_sentence=False,  # already sampled
          num_threads=os.cpu_count() or 1, minloglevel=2)
  except RuntimeError as e:
    raise ValueError(f"SentencePiece training failed for vocab_size={vocab_size}, "
                     f"model_type={model_type!r}: {e}") from None
  finally:
    os.remove(sample_path)
  return model_prefix + ".model"


def _sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def _read_meta(meta_path: str) -> Optional[dict]:
  """spm.json ({} when absent: models from before it existed); None when unreadable."""
  if not os.path.exists(meta_path):
    return {}
  try:
    with open(meta_path, encoding="utf-8") as f:
      meta = json.load(f)
  except (OSError, ValueError) as e:
    log.warning("%s is unreadable (%s); writing it again from the model", meta_path, e)
    return None
  if not isinstance(meta, dict):
    log.warning("%s is damaged; writing it again from the model", meta_path)
    return None
  return meta


def _write_meta(meta_path: str, meta: dict) -> None:
  tmp = meta_path + f".tmp{os.getpid()}"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(meta, f)
  os.replace(tmp, meta_path)


def load(directory: str) -> Tokenizer:
  """The model in `directory`, checked against the checksum recorded when it was built.

  A damaged model is a ValueError saying what to do: it cannot be rebuilt in
  place, because SentencePiece training is not reproducible bit for bit and a
  model trained with the old pieces would silently read the wrong ones.
  """
  return _load_checked(directory)[0]


def _load_checked(directory: str) -> tuple[Tokenizer, Optional[dict], str]:
  """(tokenizer, spm.json's content or None if unreadable, the model's sha256)."""
  model_path = os.path.join(directory, "spm.model")
  meta_path = os.path.join(directory, "spm.json")
  if not os.path.exists(model_path):
    raise FileNotFoundError(f"{model_path} not found: train a model into that work "
                            "directory first (it builds the vocabulary)")
  meta = _read_meta(meta_path)
  damaged = (f"{model_path} is damaged ({{}}); restore it from a backup (a model trained "
             "with it cannot use a rebuilt one), or delete the work directory's vocab/ and "
             "checkpoints/ to start the run over")
  digest = _sha256(model_path)
  if meta and "sha256" in meta and meta["sha256"] != digest:
    raise ValueError(damaged.format("its checksum differs from the one recorded in "
                                    "spm.json when it was built"))
  try:
    tokenizer = Tokenizer(model_path, target_model(directory))
  except (RuntimeError, OSError) as e:
    raise ValueError(damaged.format(str(e).strip().splitlines()[0] if str(e).strip()
                                    else type(e).__name__)) from None
  return tokenizer, meta, digest


def build_or_load(vocab_size: int, directory: str, train_pairs_fn, model_type: str = "bpe",
                  max_sentences: int = 2_000_000, seed: int = 0) -> Tokenizer:
  """The cached model in `directory`, or a new one trained on `train_pairs_fn()`.

  `train_pairs_fn` is called only when a model must be trained. A cached model made
  for a different vocab_size or model_type is an error, never silently reused;
  so is a damaged one (see `load`). Processes sharing `directory` train it once:
  the others wait for it (workdir_lib.build_once).
  """
  model_path = os.path.join(directory, "spm.model")
  meta_path = os.path.join(directory, "spm.json")
  wanted = {"vocab_size": vocab_size, "model_type": model_type}

  def build() -> bool:
    os.makedirs(directory, exist_ok=True)
    # Train under a temporary prefix and rename, so an interrupted run leaves no
    # half-written model that a restart would trust. spm.json comes first: a kill
    # between the two leaves no model, so the next run trains again.
    prefix = os.path.join(directory, f"spm.tmp{os.getpid()}")
    path = train(train_pairs_fn(), prefix, vocab_size, model_type, max_sentences, seed)
    _write_meta(meta_path, {**wanted, "sha256": _sha256(path)})
    os.replace(prefix + ".vocab", os.path.join(directory, "spm.vocab"))
    os.replace(path, model_path)
    log.info("Trained vocabulary %s: %d pieces (asked for %d)", model_path,
             Tokenizer(model_path).vocab_size, vocab_size)
    return True

  if workdir_lib.build_once(model_path, build, os.path.join(directory, ".locks")) is None:
    log.info("Loaded vocabulary %s", model_path)
  tokenizer, meta, digest = _load_checked(directory)
  if meta is None:  # unreadable: what it was built for is lost; the piece count still checks
    meta = dict(wanted)
  if "sha256" not in meta:
    _write_meta(meta_path, {**meta, "sha256": digest})
  made_for = {"vocab_size": meta.get("vocab_size", tokenizer.vocab_size),
              "model_type": meta.get("model_type", model_type)}
  if made_for != wanted or tokenizer.vocab_size > vocab_size:
    raise ValueError(
        f"{model_path} was built with vocab_size={made_for['vocab_size']}, "
        f"model_type={made_for['model_type']!r} ({tokenizer.vocab_size} pieces) but the "
        f"config asks for vocab_size={vocab_size}, model_type={model_type!r}; use another "
        "workdir or delete that vocab directory to rebuild it")
  return tokenizer


def adopt(source_dir: str, directory: str) -> Tokenizer:
  """Makes `directory` hold the vocabulary of `source_dir` (another run's), and returns it.

  For fine-tuning: the new run must read text into the same ids as the run its
  params come from. The files are copied when `directory` has none; a
  different vocabulary already there is a ValueError, never replaced.
  """
  tokenizer, _, digest = _load_checked(source_dir)
  model_path = os.path.join(directory, "spm.model")
  if os.path.exists(model_path):
    if _sha256(model_path) != digest:
      raise ValueError(f"{model_path} is another vocabulary than {source_dir}'s; fine-tune "
                       "into a new work directory")
    return tokenizer
  os.makedirs(directory, exist_ok=True)
  if os.path.isdir(os.path.join(source_dir, IMPORTED)):
    tmp = os.path.join(directory, f"{IMPORTED}.tmp{os.getpid()}")
    shutil.rmtree(os.path.join(directory, IMPORTED), ignore_errors=True)
    shutil.copytree(os.path.join(source_dir, IMPORTED), tmp)
    os.replace(tmp, os.path.join(directory, IMPORTED))
  # The model last: it marks a copy done.
  for name in ("spm.vocab", "spm.json", TARGET_MODEL, "spm.model"):
    source = os.path.join(source_dir, name)
    if os.path.exists(source):
      tmp = os.path.join(directory, f"{name}.tmp{os.getpid()}")
      shutil.copyfile(source, tmp)
      os.replace(tmp, os.path.join(directory, name))
  log.info("Copied the vocabulary of %s into %s", source_dir, directory)
  return Tokenizer(model_path, target_model(directory))
