"""A transformers MarianMTModel directory (an OPUS-MT model) as a work directory.

    import_marian("opus-mt-en-de", "runs/opus-en-de")   # then t2t-translate --workdir runs/opus-en-de
    t2t-import --from marian --model opus-mt-en-de --workdir runs/opus-en-de   # the command

The directory is what transformers' `save_pretrained` writes for a MarianMTModel and
its MarianTokenizer: config.json, the weights (model.safetensors or
pytorch_model.bin), source.spm, target.spm and vocab.json (and target_vocab.json for
separate vocabularies; generation_config.json where it has one). Nothing is downloaded.
The work directory it writes is read as a trained run's by every command
(t2t-translate, t2t-serve, t2t-export, `t2t-train --finetune_from`, t2t-shortlist):

- config.json: the model's shapes, and where Marian departs from the paper, the
  config's options (configs.py): its `activation`, `attention_bias` and `output_bias`
  (final_logits_bias), sinusoids in `halves`, `layer_norm_epsilon` 1e-5, which
  embedding matrices are one (`embeddings`: `model_embeddings`), the target side's own
  vocabulary size (`target_vocab_size`) and the decoder's own depth (`decoder_layers`).
  The rest (training, decoding) is the paper's base settings, its beam from the
  model's generation settings;
- averaged/0: its weights as our params (export/huggingface.py's mapping inverted);
- vocab/spm.model and vocab/target.model: source.spm and target.spm numbered as our
  ids (`vocab.reindexed`; with separate vocabularies each side as its own), and
  vocab/imported/: the tokenizer files as they were, the Marian id of each of ours,
  the embedding flags, the generation settings and the weights the model does not
  read (`huggingface.Original`), which the export back to transformers reads.

Ids are permuted at import: Marian's padding (also its decoder start), EOS and <unk>
(padding last, EOS 0, <unk> 1 in OPUS-MT's vocabularies) become ours, 0, 1 and 2,
the other ids keep their order after them; the embedding rows and output biases move
with them (each vocabulary's, when the sides have their own). A directory that is not
such a model is refused in one line naming what is wrong; nothing is left in the work
directory, which is built beside it and renamed into place.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import tempfile
from typing import Any, Optional

import jax
import numpy as np

from t2t_jax import configs
from t2t_jax.data import vocab
from t2t_jax.export import huggingface
from t2t_jax.export import loading
from t2t_jax.export import weights as weights_lib
from t2t_jax.model import transformer
from t2t_jax.runtime import averaging
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SUPPORTED = ("t2t_jax imports a transformers MarianMTModel (model_type marian: post-norm, "
             "sinusoidal positions, scaled embeddings, activation relu, swish or gelu, the same "
             "heads and feed-forward width in both stacks) saved by save_pretrained with its "
             "MarianTokenizer (config.json, model.safetensors or pytorch_model.bin, source.spm, "
             "target.spm, vocab.json, and target_vocab.json for separate vocabularies)")
# transformers' activation_function -> ours (configs.ACTIVATIONS); transformers' "gelu" is erf's.
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
# Config flags (some of other architectures of the BART family) and the value the model
# we run has; an absent flag reads as MarianConfig's default (`_ABSENT`), else as ours.
_MARIAN_FLAGS = {"normalize_before": False, "add_final_layer_norm": False,
                 "normalize_embedding": False, "layernorm_embedding": False,
                 "static_position_embeddings": True, "add_bias_logits": False,
                 "scale_embedding": True}
_ABSENT = {"scale_embedding": False}
# The generation settings config.json held before generation_config.json did (older
# transformers), read when the directory has no generation_config.json.
GENERATION_FIELDS = ("num_beams", "length_penalty", "max_length", "min_length", "max_new_tokens",
                     "bad_words_ids", "forced_eos_token_id", "early_stopping",
                     "no_repeat_ngram_size", "num_return_sequences", "pad_token_id",
                     "eos_token_id", "decoder_start_token_id")
_SPM_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}   # TrainerSpec.ModelType


def _refused(model_dir: pathlib.Path, what: str) -> ValueError:
  return ValueError(f"cannot import {model_dir}: {what}. {SUPPORTED}")


def _check_files(model_dir: pathlib.Path) -> pathlib.Path:
  """The weights file; the refusal names the first file missing."""
  if not model_dir.is_dir():
    raise FileNotFoundError(f"{model_dir} is not a directory: pass the directory "
                            "save_pretrained wrote (a local copy of the model)")
  for name in ("config.json", *huggingface.TOKENIZER_FILES):
    if not (model_dir / name).is_file():
      raise _refused(model_dir, f"it has no {name}")
  for name in WEIGHT_FILES:
    if (model_dir / name).is_file():
      return model_dir / name
  raise _refused(model_dir, f"it has no weights ({' or '.join(WEIGHT_FILES)})")


def model_fields(config: dict[str, Any], model_dir: pathlib.Path) -> dict[str, Any]:
  """Our config's model fields for a MarianConfig's (config.json), but `embeddings`, which the
  weights say (`model_embeddings`); ValueError for what we cannot run."""
  if config.get("model_type") != "marian":
    architectures = ", ".join(config.get("architectures") or []) or "none named"
    raise _refused(model_dir, f"config.json's model_type is {config.get('model_type')!r} "
                              f"(architectures: {architectures}), not 'marian'")
  for flag, ours in _MARIAN_FLAGS.items():
    value = config.get(flag, _ABSENT.get(flag, ours))
    if bool(value) != ours:
      raise _refused(model_dir, f"config.json has {flag}={value!r}"
                     + (" (pre-norm layers)" if flag == "normalize_before" else ""))
  for ours, (encoder, decoder) in {"num_heads": ("encoder_attention_heads",
                                                 "decoder_attention_heads"),
                                   "d_ff": ("encoder_ffn_dim", "decoder_ffn_dim")}.items():
    if config[encoder] != config[decoder]:
      raise _refused(model_dir, f"its {encoder}={config[encoder]} and {decoder}="
                                f"{config[decoder]} differ ({ours} is one for both stacks)")
  vocab_size, target_size = config["vocab_size"], _target_size(config)
  if _flags(config)[0] and target_size != vocab_size:
    raise _refused(model_dir, f"its decoder_vocab_size={target_size} is not its vocab_size="
                              f"{vocab_size}, but share_encoder_decoder_embeddings is true")
  activation = config.get("activation_function", "gelu")
  if activation not in ACTIVATIONS:
    raise _refused(model_dir, f"its activation_function is {activation!r}")
  if config.get("decoder_start_token_id", config["pad_token_id"]) != config["pad_token_id"]:
    raise _refused(model_dir, f"its decoder starts from id {config['decoder_start_token_id']}, "
                              f"not its padding {config['pad_token_id']}")
  depths = config["encoder_layers"], config["decoder_layers"]
  return dict(
      vocab_size=vocab_size, num_layers=depths[0], d_model=config["d_model"],
      d_ff=config["encoder_ffn_dim"], num_heads=config["encoder_attention_heads"],
      dropout_rate=config.get("dropout", 0.1),
      attention_dropout_rate=config.get("attention_dropout", 0.0),
      max_len=config["max_position_embeddings"],
      positional_encoding="sinusoidal", activation=ACTIVATIONS[activation],
      attention_bias=True, output_bias=True, position_layout="halves",
      layer_norm_epsilon=huggingface.MARIAN_LAYER_NORM_EPSILON,
      target_vocab_size=target_size if target_size != vocab_size else None,
      decoder_layers=depths[1] if depths[1] != depths[0] else None)


def _flags(config: dict[str, Any]) -> tuple[bool, bool]:
  """MarianConfig's (share_encoder_decoder_embeddings, tie_word_embeddings)."""
  return (bool(config.get("share_encoder_decoder_embeddings", True)),
          bool(config.get("tie_word_embeddings", True)))


def _target_size(config: dict[str, Any]) -> int:
  return config.get("decoder_vocab_size") or config["vocab_size"]


def marian_ids(tokens: dict[str, int], size: int, special: dict[str, int], name: str,
               model_dir: pathlib.Path) -> tuple[huggingface.MarianIds, list[str]]:
  """One vocabulary's permutation to our ids (`huggingface.MarianIds`) and its pieces by our
  id: `tokens` (the file `name`, piece -> Marian id) over `size` embedding rows, `special`
  the Marian ids of <pad>, </s> and <unk>."""
  by_id = {i: piece for piece, i in tokens.items()}
  if sorted(by_id) != list(range(size)) or len(tokens) != size:
    raise _refused(model_dir, f"{name} has {len(tokens)} entries with ids "
                              f"{min(by_id, default=0)}..{max(by_id, default=0)}, but the model "
                              f"has {size} embedding rows for it (one id each)")
  for piece, i in special.items():
    if by_id.get(i) != piece:
      raise _refused(model_dir, f"{name} names id {i} {by_id.get(i)!r}, where config.json "
                                f"has its {piece}")
  first = list(special.values())
  order = np.asarray(first + [i for i in range(size) if i not in first], np.int64)
  pieces = [by_id[int(i)] for i in order]
  return huggingface.MarianIds(order, *first), pieces


def _vocabularies(model_dir: pathlib.Path, config: dict[str, Any], separate: bool
                  ) -> tuple[huggingface.MarianIds, list[str], Optional[list[str]]]:
  """The ids (each side's) and the source's pieces by our id, and the target's where it
  has its own vocabulary (target_vocab.json) else None."""
  def read(name: str) -> dict[str, int]:
    if not (model_dir / name).is_file():
      raise _refused(model_dir, f"it has no {name}")
    try:
      return json.loads((model_dir / name).read_text(encoding="utf-8"))
    except ValueError as e:
      raise _refused(model_dir, f"{name} does not read ({e})") from None

  source = read("vocab.json")
  if "<unk>" not in source:
    raise _refused(model_dir, "vocab.json has no <unk>")
  by_config = {"<pad>": config["pad_token_id"], "</s>": config["eos_token_id"]}
  if not separate:
    ids, pieces = marian_ids(source, config["vocab_size"], {**by_config, "<unk>": source["<unk>"]},
                             "vocab.json", model_dir)
    return ids, pieces, None
  target = read(huggingface.TARGET_VOCABULARY)
  if "<unk>" not in target:
    raise _refused(model_dir, f"{huggingface.TARGET_VOCABULARY} has no <unk>")
  # The source side's special pieces are its own, by name (MarianTokenizer's rule); the
  # config's ids are the target side's (the decoder's start, EOS).
  by_name = {piece: source.get(piece, -1) for piece in ("<pad>", "</s>", "<unk>")}
  ids, pieces = marian_ids(source, config["vocab_size"], by_name, "vocab.json", model_dir)
  target_ids, target_pieces = marian_ids(target, _target_size(config),
                                         {**by_config, "<unk>": target["<unk>"]},
                                         huggingface.TARGET_VOCABULARY, model_dir)
  return ids._replace(target=target_ids), pieces, target_pieces


def read_state(weights_path: pathlib.Path) -> dict[str, np.ndarray]:
  """The weights file as float32 NumPy arrays by name."""
  if weights_path.suffix == ".safetensors":
    state = loading.require("safetensors.numpy").load_file(str(weights_path))
  else:
    torch = loading.require("torch")
    state = {k: v.float().numpy() for k, v in
             torch.load(weights_path, map_location="cpu", weights_only=True).items()}
  return {k: np.asarray(v, np.float32) for k, v in state.items()}


def _embeddings(state: dict[str, np.ndarray], config: dict[str, Any], model_dir: pathlib.Path
                ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], dict[str, np.ndarray]]:
  """(source embedding, target embedding, output projection) as the model computes with them,
  and the embedding weights it does not read, by name.

  Each stack reads its own `embed_tokens` where the file has it, else the shared matrix
  (older transformers saved one copy of tied weights); the output layer is `lm_head`
  unless tie_word_embeddings ties it to the target embedding. A tied copy that differs
  from what it is tied to is refused: which one the model computes with is not clear.
  """
  share, tie = _flags(config)
  names = (huggingface.ENCODER_EMBEDDING if huggingface.ENCODER_EMBEDDING in state or not share
           else huggingface.EMBEDDING,
           huggingface.DECODER_EMBEDDING if huggingface.DECODER_EMBEDDING in state or not share
           else huggingface.EMBEDDING,
           huggingface.OUTPUT if not tie else None)
  missing = [name for name in names if name is not None and name not in state]
  if missing:
    raise _refused(model_dir, f"its weights have no {missing[0]}")
  source, target = state[names[0]], state[names[1]]
  output = state[names[2]] if names[2] is not None else target
  copies = {name: state[name] for name in (huggingface.EMBEDDING, huggingface.ENCODER_EMBEDDING,
                                           huggingface.DECODER_EMBEDDING, huggingface.OUTPUT)
            if name in state}
  tied_to = ({name: source for name in copies} if share and tie else
             {huggingface.OUTPUT: target} if tie else {})
  for name, matrix in tied_to.items():
    if name in copies and not _same(copies[name], matrix):
      raise _refused(model_dir, f"its {name} differs from the matrix "
                                f"tie_word_embeddings={tie} ties it to")
  unread = {name: matrix for name, matrix in copies.items() if name not in names
            and name not in tied_to}
  return (source, target, output), unread


def _same(a: np.ndarray, b: np.ndarray) -> bool:
  return a.shape == b.shape and np.array_equal(a, b)


def model_embeddings(source: np.ndarray, target: np.ndarray, output: np.ndarray) -> str:
  """Our `embeddings` mode for a model's three matrices: which of them are one."""
  inputs, tied = _same(source, target), _same(target, output)
  return {(True, True): "shared", (True, False): "shared_inputs",
          (False, True): "tied_output", (False, False): "separate"}[inputs, tied]


def our_params(cfg: configs.TransformerConfig, state: dict[str, np.ndarray],
               embeddings: tuple[np.ndarray, np.ndarray, np.ndarray],
               order: huggingface.MarianIds, model_dir: pathlib.Path) -> dict[str, Any]:
  """The Marian state dict as the params of the model `cfg` builds (its `embeddings` mode:
  `model_embeddings`), rows in our ids' order (each side's)."""
  source, target, output = embeddings
  for what, matrix, rows in (("embedding", source, cfg.vocab_size),
                             ("target embedding", target, cfg.target_vocab),
                             ("output layer", output, cfg.target_vocab)):
    if matrix.shape[0] != rows:
      raise _refused(model_dir, f"its {what} has {matrix.shape[0]} rows, not the {rows} of "
                                "its vocabulary")
  bias = state.get(huggingface.OUTPUT_BIAS, np.zeros((1, cfg.target_vocab), np.float32))
  try:
    encoder, decoder = huggingface.marian_layers(cfg, state)
  except KeyError as e:
    raise _refused(model_dir, f"its weights have no {e.args[0]}") from None
  rows, target_rows = order.order, order.target_side.order
  inputs_shared, output_tied = huggingface.EMBEDDING_FLAGS[cfg.embeddings]
  w = weights_lib.Weights(
      source[rows], encoder, decoder, bias.reshape(-1)[target_rows],
      target_embedding=None if inputs_shared else target[target_rows],
      output=None if output_tied else output[target_rows])
  params = weights_lib.to_params(cfg, w)
  want = jax.eval_shape(lambda key: transformer.init_params(cfg.model, key), jax.random.key(0))
  shapes = lambda tree: jax.tree.map(lambda x: tuple(x.shape), tree)
  if shapes(params) != shapes(want):
    raise _refused(model_dir, "its weights do not have the shapes its config.json gives")
  return params


def _generation(model_dir: pathlib.Path, config: dict[str, Any]) -> dict[str, Any]:
  """The model's generation settings: generation_config.json's where it has one, else those
  config.json holds (`GENERATION_FIELDS`); transformers' own bookkeeping left out."""
  path = model_dir / "generation_config.json"
  try:
    fields = json.loads(path.read_text()) if path.is_file() else {
        name: config[name] for name in GENERATION_FIELDS if config.get(name) is not None}
  except ValueError as e:
    raise _refused(model_dir, f"generation_config.json does not read ({e})") from None
  return {k: v for k, v in fields.items() if not k.startswith("_") and k != "transformers_version"}


def _write_vocabulary(model_dir: pathlib.Path, directory: pathlib.Path, pieces: list[str],
                      target_pieces: Optional[list[str]], order: huggingface.MarianIds,
                      original: huggingface.Original) -> str:
  """vocab/: both SentencePiece models numbered as our ids (the target's as its own vocabulary
  where `target_pieces`), the original files and `original` in `vocab.IMPORTED`; returns the
  source model's type."""
  imported = directory / vocab.IMPORTED
  imported.mkdir(parents=True)
  for name in (*huggingface.TOKENIZER_FILES, huggingface.TARGET_VOCABULARY):
    if name in huggingface.TOKENIZER_FILES or target_pieces is not None:
      shutil.copyfile(model_dir / name, imported / name)
  huggingface.write_imported(order, original, imported)
  for theirs, ours, side in (("source.spm", "spm.model", pieces),
                             ("target.spm", vocab.TARGET_MODEL, target_pieces or pieces)):
    model, left_out = vocab.reindexed((model_dir / theirs).read_bytes(), side,
                                      control=("<pad>", "</s>"))
    (directory / ours).write_bytes(model)
    if left_out:
      log.warning("%d pieces of %s are not in its vocabulary: text it would cut into them is "
                  "cut otherwise (MarianTokenizer reads them as <unk>)", left_out, theirs)
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=import-outside-toplevel
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString((directory / "spm.model").read_bytes())
  model_type = _SPM_TYPES.get(proto.trainer_spec.model_type, "unigram")
  # Both models read (and number their pieces alike, or each its own vocabulary); spm.json
  # as a vocabulary trained here has it (data/vocab.py adds its checksum the first time a
  # run loads it), with the target side's size where it has its own.
  tokenizer = vocab.Tokenizer(str(directory / "spm.model"), vocab.target_model(directory),
                              separate=target_pieces is not None)
  meta = {"vocab_size": tokenizer.vocab_size, "model_type": model_type}
  if target_pieces is not None:
    meta[vocab.TARGET_SIZE] = tokenizer.target_vocab_size
  (directory / "spm.json").write_text(json.dumps(meta))
  return model_type


def import_marian(model_dir: str | os.PathLike, workdir: str | os.PathLike) -> pathlib.Path:
  """Writes the work directory of the Marian model in `model_dir` (module docstring); returns it.

  `workdir` must not exist yet (or be empty). ValueError names what makes `model_dir`
  a model this cannot import; nothing is written then.
  """
  model_dir, workdir = pathlib.Path(model_dir), pathlib.Path(workdir)
  weights_path = _check_files(model_dir)
  if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
    raise ValueError(f"{workdir} already exists: import into a new work directory")
  try:
    config = json.loads((model_dir / "config.json").read_text())
  except ValueError as e:
    raise _refused(model_dir, f"a JSON file does not read ({e})") from None
  tokenizer_config = {}
  if (model_dir / "tokenizer_config.json").is_file():
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
  try:
    fields = model_fields(config, model_dir)
    order, pieces, target_pieces = _vocabularies(
        model_dir, config, bool(tokenizer_config.get("separate_vocabs")))
  except KeyError as e:
    raise _refused(model_dir, f"config.json has no {e.args[0]}") from None
  state = read_state(weights_path)
  embeddings, unread = _embeddings(state, config, model_dir)
  generation = _generation(model_dir, config)
  cfg = configs.TransformerConfig().replace(
      **fields, embeddings=model_embeddings(*embeddings), dataset="text",
      source_lang=tokenizer_config.get("source_lang") or "src",
      target_lang=tokenizer_config.get("target_lang") or "tgt",
      **({"beam_size": generation["num_beams"]} if generation.get("num_beams") else {}))
  params = our_params(cfg, state, embeddings, order, model_dir)
  original = huggingface.Original(*_flags(config), generation, unread)
  workdir.parent.mkdir(parents=True, exist_ok=True)
  staging = pathlib.Path(tempfile.mkdtemp(dir=workdir.parent, prefix=f".{workdir.name}.import"))
  try:
    cfg = cfg.replace(vocab_type=_write_vocabulary(model_dir, staging / "vocab", pieces,
                                                   target_pieces, order, original))
    workdir_lib.check_or_write_config(cfg, staging)
    averaging.write_params(staging, params, source=f"imported from {model_dir.absolute()}")
    if workdir.exists():
      workdir.rmdir()                   # empty (checked above)
    os.rename(staging, workdir)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
  log.info("Imported %s (Marian, %d+%d layers, d_model %d, %s, embeddings %s%s) into %s",
           model_dir, cfg.num_layers, cfg.num_decoder_layers, cfg.d_model, cfg.activation,
           cfg.embeddings, "" if target_pieces is None else ", separate vocabularies", workdir)
  return workdir
