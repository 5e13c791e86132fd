"""A transformers MarianMTModel directory (an OPUS-MT model) as a work directory.

    import_marian("opus-mt-en-de", "runs/opus-en-de")   # then t2t-translate --workdir runs/opus-en-de
    t2t-import --from marian --model opus-mt-en-de --workdir runs/opus-en-de   # the command

The directory is what transformers' `save_pretrained` writes for a MarianMTModel and
its MarianTokenizer: config.json, the weights (model.safetensors or
pytorch_model.bin), source.spm, target.spm and vocab.json. Nothing is downloaded.
The work directory it writes is read as a trained run's by every command
(t2t-translate, t2t-serve, t2t-export, `t2t-train --finetune_from`, t2t-shortlist):

- config.json: the model's shapes, and where Marian departs from the paper, the
  config's options (configs.py): its `activation`, `attention_bias` and `output_bias`
  (final_logits_bias), sinusoids in `halves`, `layer_norm_epsilon` 1e-5. The rest
  (training, decoding) is the paper's base settings;
- averaged/0: its weights as our params (export/huggingface.py's mapping inverted);
- vocab/spm.model and vocab/target.model: source.spm and target.spm numbered as our
  ids (`vocab.reindexed`), and vocab/imported/: the three tokenizer files as they
  were and the Marian id of each of ours, which the export back to transformers
  reads.

Ids are permuted at import: Marian's padding (also its decoder start), EOS and <unk>
(padding last, EOS 0, <unk> 1 in OPUS-MT's vocabularies) become ours, 0, 1 and 2,
the other ids keep their order after them; the embedding rows and output biases move
with them. A directory that is not such a model is refused in one line naming what is
wrong; nothing is left in the work directory, which is built beside it and renamed
into place.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import tempfile
from typing import Any

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
             "sinusoidal positions, one embedding shared by both sides and the output, "
             "activation relu, swish or gelu) saved by save_pretrained with its MarianTokenizer "
             "(config.json, model.safetensors or pytorch_model.bin, source.spm, target.spm, "
             "vocab.json)")
# transformers' activation_function -> ours (configs.ACTIVATIONS); transformers' "gelu" is erf's.
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
# Config flags (some of other architectures of the BART family) and the value the model
# we run has; an absent flag reads as MarianConfig's default (`_ABSENT`), else as ours.
_MARIAN_FLAGS = {"normalize_before": False, "add_final_layer_norm": False,
                 "normalize_embedding": False, "layernorm_embedding": False,
                 "static_position_embeddings": True, "add_bias_logits": False,
                 "scale_embedding": True, "share_encoder_decoder_embeddings": True,
                 "tie_word_embeddings": True}
_ABSENT = {"scale_embedding": False}
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
  """Our config's model fields for a MarianConfig's (config.json); ValueError for what we
  cannot run."""
  if config.get("model_type") != "marian":
    architectures = ", ".join(config.get("architectures") or []) or "none named"
    raise _refused(model_dir, f"config.json's model_type is {config.get('model_type')!r} "
                              f"(architectures: {architectures}), not 'marian'")
  for flag, ours in _MARIAN_FLAGS.items():
    value = config.get(flag, _ABSENT.get(flag, ours))
    if bool(value) != ours:
      raise _refused(model_dir, f"config.json has {flag}={value!r}"
                     + (" (pre-norm layers)" if flag == "normalize_before" else ""))
  for ours, (encoder, decoder) in {"num_layers": ("encoder_layers", "decoder_layers"),
                                   "num_heads": ("encoder_attention_heads",
                                                 "decoder_attention_heads"),
                                   "d_ff": ("encoder_ffn_dim", "decoder_ffn_dim")}.items():
    if config[encoder] != config[decoder]:
      raise _refused(model_dir, f"its {encoder}={config[encoder]} and {decoder}="
                                f"{config[decoder]} differ ({ours} is one for both stacks)")
  vocab_size = config["vocab_size"]
  if config.get("decoder_vocab_size") not in (None, vocab_size):
    raise _refused(model_dir, f"its decoder_vocab_size={config['decoder_vocab_size']} is not "
                              f"its vocab_size={vocab_size} (separate vocabularies)")
  activation = config.get("activation_function", "gelu")
  if activation not in ACTIVATIONS:
    raise _refused(model_dir, f"its activation_function is {activation!r}")
  if config.get("decoder_start_token_id", config["pad_token_id"]) != config["pad_token_id"]:
    raise _refused(model_dir, f"its decoder starts from id {config['decoder_start_token_id']}, "
                              f"not its padding {config['pad_token_id']}")
  return dict(
      vocab_size=vocab_size, num_layers=config["encoder_layers"], d_model=config["d_model"],
      d_ff=config["encoder_ffn_dim"], num_heads=config["encoder_attention_heads"],
      dropout_rate=config.get("dropout", 0.1),
      attention_dropout_rate=config.get("attention_dropout", 0.0),
      max_len=config["max_position_embeddings"], embeddings="shared",
      positional_encoding="sinusoidal", activation=ACTIVATIONS[activation],
      attention_bias=True, output_bias=True, position_layout="halves",
      layer_norm_epsilon=huggingface.MARIAN_LAYER_NORM_EPSILON)


def marian_ids(tokens: dict[str, int], config: dict[str, Any],
               model_dir: pathlib.Path) -> tuple[huggingface.MarianIds, list[str]]:
  """The permutation to our ids (`huggingface.MarianIds`) and the pieces by our id."""
  vocab_size = config["vocab_size"]
  by_id = {i: piece for piece, i in tokens.items()}
  if sorted(by_id) != list(range(vocab_size)) or len(tokens) != vocab_size:
    raise _refused(model_dir, f"vocab.json has {len(tokens)} entries with ids "
                              f"{min(by_id, default=0)}..{max(by_id, default=0)}, but the model "
                              f"has vocab_size={vocab_size} embedding rows (one id each)")
  if "<unk>" not in tokens:
    raise _refused(model_dir, "vocab.json has no <unk>")
  special = {"<pad>": config["pad_token_id"], "</s>": config["eos_token_id"],
             "<unk>": tokens["<unk>"]}
  for piece, i in special.items():
    if by_id[i] != piece:
      raise _refused(model_dir, f"vocab.json names id {i} {by_id[i]!r}, where config.json "
                                f"has its {piece}")
  first = list(special.values())
  order = np.asarray(first + [i for i in range(vocab_size) if i not in first], np.int64)
  pieces = [by_id[int(i)] for i in order]
  return huggingface.MarianIds(order, *first), pieces


def read_state(weights_path: pathlib.Path) -> dict[str, np.ndarray]:
  """The weights file as float32 NumPy arrays by name."""
  if weights_path.suffix == ".safetensors":
    state = loading.require("safetensors.numpy").load_file(str(weights_path))
  else:
    torch = loading.require("torch")
    state = {k: v.float().numpy() for k, v in
             torch.load(weights_path, map_location="cpu", weights_only=True).items()}
  return {k: np.asarray(v, np.float32) for k, v in state.items()}


def _embedding(state: dict[str, np.ndarray], model_dir: pathlib.Path) -> np.ndarray:
  """The one embedding matrix, wherever save_pretrained kept it; an untied copy is refused."""
  names = [huggingface.EMBEDDING, "model.encoder.embed_tokens.weight",
           "model.decoder.embed_tokens.weight", "lm_head.weight"]
  found = [state[name] for name in names if name in state]
  if not found:
    raise _refused(model_dir, f"its weights have no embedding ({huggingface.EMBEDDING})")
  if any(x.shape != found[0].shape or not np.array_equal(x, found[0]) for x in found[1:]):
    raise _refused(model_dir, "its embeddings and output projection are not one matrix")
  return found[0]


def our_params(cfg: configs.TransformerConfig, state: dict[str, np.ndarray],
               order: huggingface.MarianIds, model_dir: pathlib.Path) -> dict[str, Any]:
  """The Marian state dict as the params of the model `cfg` builds, rows in our ids' order."""
  state = {**state, huggingface.EMBEDDING: _embedding(state, model_dir)}
  rows = state[huggingface.EMBEDDING].shape[0]
  if rows != cfg.vocab_size:
    raise _refused(model_dir, f"its embedding has {rows} rows, not vocab_size={cfg.vocab_size}")
  state.setdefault(huggingface.OUTPUT_BIAS, np.zeros((1, rows), np.float32))
  try:
    w = huggingface.marian_weights(cfg, state)
  except KeyError as e:
    raise _refused(model_dir, f"its weights have no {e.args[0]}") from None
  w = w._replace(embedding=w.embedding[order.order], output_bias=w.output_bias[order.order])
  params = weights_lib.to_params(cfg, w)
  want = jax.eval_shape(lambda key: transformer.init_params(cfg.model, key), jax.random.key(0))
  shapes = lambda tree: jax.tree.map(lambda x: tuple(x.shape), tree)
  if shapes(params) != shapes(want):
    raise _refused(model_dir, "its weights do not have the shapes its config.json gives")
  return params


def _write_vocabulary(model_dir: pathlib.Path, directory: pathlib.Path, pieces: list[str],
                      order: huggingface.MarianIds) -> str:
  """vocab/: both SentencePiece models numbered as our ids, the original files in
  `vocab.IMPORTED`; returns the source model's type."""
  imported = directory / vocab.IMPORTED
  imported.mkdir(parents=True)
  for name in huggingface.TOKENIZER_FILES:
    shutil.copyfile(model_dir / name, imported / name)
  huggingface.write_ids(order, imported)
  for theirs, ours in (("source.spm", "spm.model"), ("target.spm", vocab.TARGET_MODEL)):
    model, left_out = vocab.reindexed((model_dir / theirs).read_bytes(), pieces,
                                      control=("<pad>", "</s>"))
    (directory / ours).write_bytes(model)
    if left_out:
      log.warning("%d pieces of %s are not in vocab.json: text it would cut into them is "
                  "cut otherwise (MarianTokenizer reads them as <unk>)", left_out, theirs)
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=import-outside-toplevel
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString((directory / "spm.model").read_bytes())
  model_type = _SPM_TYPES.get(proto.trainer_spec.model_type, "unigram")
  # Both models read (and number their pieces alike); spm.json as a vocabulary trained here
  # has it (data/vocab.py adds its checksum the first time a run loads it).
  tokenizer = vocab.Tokenizer(str(directory / "spm.model"), vocab.target_model(directory))
  (directory / "spm.json").write_text(json.dumps({"vocab_size": tokenizer.vocab_size,
                                                  "model_type": model_type}))
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
    tokens = json.loads((model_dir / "vocab.json").read_text(encoding="utf-8"))
  except ValueError as e:
    raise _refused(model_dir, f"a JSON file does not read ({e})") from None
  tokenizer_config = {}
  if (model_dir / "tokenizer_config.json").is_file():
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
  try:
    fields = model_fields(config, model_dir)
  except KeyError as e:
    raise _refused(model_dir, f"config.json has no {e.args[0]}") from None
  order, pieces = marian_ids(tokens, config, model_dir)
  cfg = configs.TransformerConfig().replace(
      **fields, dataset="text", source_lang=tokenizer_config.get("source_lang") or "src",
      target_lang=tokenizer_config.get("target_lang") or "tgt")
  params = our_params(cfg, read_state(weights_path), order, model_dir)
  workdir.parent.mkdir(parents=True, exist_ok=True)
  staging = pathlib.Path(tempfile.mkdtemp(dir=workdir.parent, prefix=f".{workdir.name}.import"))
  try:
    cfg = cfg.replace(vocab_type=_write_vocabulary(model_dir, staging / "vocab", pieces, order))
    workdir_lib.check_or_write_config(cfg, staging)
    averaging.write_params(staging, params, source=f"imported from {model_dir.absolute()}")
    if workdir.exists():
      workdir.rmdir()                   # empty (checked above)
    os.rename(staging, workdir)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
  log.info("Imported %s (Marian, %d layers, d_model %d, %s) into %s", model_dir,
           cfg.num_layers, cfg.d_model, cfg.activation, workdir)
  return workdir
