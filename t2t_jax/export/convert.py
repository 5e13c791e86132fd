"""Export a trained work directory to Hugging Face `transformers` and to CTranslate2.

    export_huggingface(workdir, "hf")    # MarianMTModel + MarianTokenizer directory
    export_ctranslate2(workdir, "ct2")   # a ctranslate2.Translator model directory
    t2t-export --workdir runs/demo --to huggingface hf      # the command (cli/export.py)

Both engines run the model of section 3 (post-norm layers, one embedding matrix
shared by both embeddings and the pre-softmax projection and scaled by
sqrt(d_model), sinusoidal positions, ReLU FFN). The details where they differ
from ours, and how each is handled, are in docs/export.md:

- Marian's sinusoids are [sin | cos] halves, ours interleave them. A fixed
  permutation of the model dimension, applied to every weight that touches it,
  makes both compute the same function (`marian_permutation`). CTranslate2 takes
  our own position table, so its weights stay as they are.
- Marian's attention projections have biases: they are zero.
- Marian's layer norms use epsilon 1e-5 (fixed in its code), ours 1e-6. The
  residual stream is carried sqrt(10) times larger, which makes every layer norm
  but each stack's first compute ours exactly (`marian_state_dict`); what the
  first two still change is measured in docs/export.md. CTranslate2 is told 1e-6.
- Ids are ours in both (0 padding and decoder start, 1 EOS, 2 unknown); the
  vocabulary lists the SentencePiece pieces, padded with placeholder tokens when
  the model has more ids than the SentencePiece model has pieces.

The export libraries (transformers, torch, safetensors, ctranslate2) are imported
inside the functions that need them: `pip install -e .[export]`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import shutil
from typing import Any, Optional, Sequence

import numpy as np

from t2t_jax import configs
from t2t_jax import ids
from t2t_jax.data import vocab
from t2t_jax.inference import translator as inference
from t2t_jax.model import layers
from t2t_jax.model import transformer as model
from t2t_jax.runtime import checkpoint
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

# torch.nn.LayerNorm's default, which transformers' Marian layers use.
MARIAN_LAYER_NORM_EPSILON = 1e-5
PLACEHOLDER = "<unused{}>"   # vocabulary entry of an id the SentencePiece model lacks
_EXTRAS = "the export extras are not installed: run  pip install -e .[export]"


class MissingExtrasError(ImportError):
  """An export library is missing; the message says how to install it."""


def require(module: str) -> Any:
  """The module, or MissingExtrasError saying how to install the export extras."""
  try:
    return __import__(module, fromlist=["_"])
  except ImportError as e:
    raise MissingExtrasError(f"cannot import {module} ({e}); {_EXTRAS}") from None


# ------------------------------------------------------------------ work directory


def check_exportable(cfg: configs.TransformerConfig) -> None:
  """Raises ValueError naming the setting when the engines cannot run this model."""
  problems = []
  if not cfg.share_embeddings:
    problems.append("share_embeddings=False (both engines tie one embedding matrix)")
  if cfg.positional_encoding != "sinusoidal":
    problems.append(f"positional_encoding={cfg.positional_encoding!r} (only sinusoidal)")
  if cfg.attention_window is not None:
    problems.append(f"attention_window={cfg.attention_window} (no restricted attention)")
  if cfg.key_depth * cfg.num_heads != cfg.d_model or cfg.value_depth != cfg.key_depth:
    problems.append(f"d_k={cfg.key_depth}, d_v={cfg.value_depth} with {cfg.num_heads} heads "
                    f"(both must be d_model / num_heads = {cfg.d_model / cfg.num_heads:g})")
  if cfg.d_model % 2:
    problems.append(f"odd d_model={cfg.d_model}")
  if problems:
    raise ValueError("this model cannot be exported: " + "; ".join(problems))


def load_workdir(workdir: str | os.PathLike, average: bool = True
                 ) -> tuple[configs.TransformerConfig, Any, str]:
  """(config, host params, SentencePiece model path) of a trained work directory."""
  cfg = workdir_lib.load_config(workdir)
  check_exportable(cfg)
  spm_path = inference.load_tokenizer(workdir).model_path
  params = checkpoint.load_params(workdir, averaged=average)
  return cfg, params, spm_path


def vocabulary(spm_path: str, vocab_size: int) -> list[str]:
  """Token strings by id: the SentencePiece pieces, then placeholders up to `vocab_size`."""
  tokenizer = vocab.Tokenizer(spm_path)
  pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
  if len(pieces) > vocab_size:
    raise ValueError(f"{spm_path} has {len(pieces)} pieces but the model only "
                     f"vocab_size={vocab_size} ids: the work directory is inconsistent")
  expected = {ids.PAD_ID: "<pad>", ids.EOS_ID: "</s>", ids.UNK_ID: "<unk>"}
  for i, piece in expected.items():
    if pieces[i] != piece:
      raise ValueError(f"{spm_path}: id {i} is {pieces[i]!r}, expected {piece!r} "
                       "(t2t_jax vocabularies have <pad>=0, </s>=1, <unk>=2)")
  taken = set(pieces)
  placeholders = [PLACEHOLDER.format(i) for i in range(len(pieces), vocab_size)]
  if taken & set(placeholders):
    raise ValueError(f"{spm_path} has a piece named like the placeholders {PLACEHOLDER!r}")
  return pieces + placeholders


def position_table(length: int, d_model: int) -> np.ndarray:
  """[length, d_model] float32: our interleaved sinusoids (`layers.sinusoidal_positions`)."""
  return np.asarray(layers.sinusoidal_positions(length, d_model), np.float32)


# ------------------------------------------------------------------- Hugging Face


def marian_permutation(d_model: int) -> np.ndarray:
  """Marian feature m is our feature perm[m]: our even (sine) features, then the odd (cosine).

  Our position vector is [sin f0, cos f0, sin f1, cos f1, ...], Marian's is
  [sin f0, sin f1, ..., cos f0, cos f1, ...]; `ours[perm]` is Marian's.
  """
  return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def _attention(p: Any, perm: np.ndarray, scale_in: float, scale_out: float,
               prefix: str) -> dict[str, np.ndarray]:
  """Our [d_model, heads, depth] / [heads, depth, d_model] kernels as torch Linear weights.

  A torch Linear computes x W^T + b with W [out, in]; heads are the major part of
  the projected dimension in both layouts, so a reshape keeps them apart. Inputs
  arrive `scale_in` times ours; the output must leave `scale_out` times ours.
  """
  out = {}
  for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
    kernel = np.asarray(p[ours]["kernel"])[perm] / scale_in             # [d_model, heads, depth]
    out[f"{prefix}.{theirs}.weight"] = kernel.reshape(kernel.shape[0], -1).T
  kernel = np.asarray(p["out"]["kernel"]) * scale_out                   # [heads, depth, d_model]
  out[f"{prefix}.out_proj.weight"] = kernel.reshape(-1, kernel.shape[-1])[:, perm].T
  for theirs in ("q_proj", "k_proj", "v_proj", "out_proj"):
    rows = out[f"{prefix}.{theirs}.weight"].shape[0]
    out[f"{prefix}.{theirs}.bias"] = np.zeros((rows,), np.float32)      # ours has none
  return out


def _ffn(p: Any, perm: np.ndarray, scale: float, prefix: str) -> dict[str, np.ndarray]:
  return {
      f"{prefix}.fc1.weight": np.asarray(p["wi"]["kernel"])[perm].T / scale,  # [d_ff, d_model]
      f"{prefix}.fc1.bias": np.asarray(p["wi"]["bias"]),
      f"{prefix}.fc2.weight": np.asarray(p["wo"]["kernel"])[:, perm].T * scale,  # [d_model, d_ff]
      f"{prefix}.fc2.bias": np.asarray(p["wo"]["bias"])[perm] * scale,
  }


def _norm(p: Any, perm: np.ndarray, scale_out: float, name: str) -> dict[str, np.ndarray]:
  return {f"{name}.weight": np.asarray(p["scale"])[perm] * scale_out,
          f"{name}.bias": np.asarray(p["bias"])[perm] * scale_out}


def marian_state_dict(cfg: configs.TransformerConfig, params: Any,
                      layer_norm_epsilon: float = MARIAN_LAYER_NORM_EPSILON
                      ) -> dict[str, np.ndarray]:
  """Our params as a MarianMTModel state dict (float32 NumPy) computing our function.

  The model dimension is permuted (`marian_permutation`). Marian normalises with
  `layer_norm_epsilon` where we use model.LAYER_NORM_EPSILON; as LayerNorm(c z)
  with epsilon c^2 eps equals LayerNorm(z) with eps, the residual stream after
  each stack's first layer norm is carried c = sqrt(layer_norm_epsilon / ours)
  times larger: the gain and bias of every layer norm times c (but the decoder's
  last, which feeds the tied output projection), every later sub-layer's input
  projections divided by c and its output projection times c. Only the first
  layer norm of each stack still sees the other epsilon: its input holds
  transformers' own position table, which the export cannot scale (docs/export.md
  measures the effect). The tied copies of the embedding and the position tables
  are left to transformers.
  """
  check_exportable(cfg)
  perm = marian_permutation(cfg.d_model)
  c = math.sqrt(layer_norm_epsilon / model.LAYER_NORM_EPSILON)
  state = {"model.shared.weight": np.asarray(params["embedding"]["embedding"])[:, perm],
           "final_logits_bias": np.zeros((1, cfg.vocab_size), np.float32)}
  for i in range(cfg.num_layers):
    first = 1.0 if i == 0 else c        # scale of the stream entering layer i
    p, name = params["encoder"][f"layers_{i}"], f"model.encoder.layers.{i}"
    state.update(_attention(p["self_attention"], perm, first, first, f"{name}.self_attn"))
    state.update(_norm(p["norm_attention"], perm, c, f"{name}.self_attn_layer_norm"))
    state.update(_ffn(p["ffn"], perm, c, name))
    state.update(_norm(p["norm_ffn"], perm, c, f"{name}.final_layer_norm"))
    p, name = params["decoder"][f"layers_{i}"], f"model.decoder.layers.{i}"
    state.update(_attention(p["self_attention"], perm, first, first, f"{name}.self_attn"))
    state.update(_norm(p["norm_self"], perm, c, f"{name}.self_attn_layer_norm"))
    state.update(_attention(p["cross_attention"], perm, c, c, f"{name}.encoder_attn"))
    state.update(_norm(p["norm_cross"], perm, c, f"{name}.encoder_attn_layer_norm"))
    state.update(_ffn(p["ffn"], perm, c, name))
    last = 1.0 if i == cfg.num_layers - 1 else c
    state.update(_norm(p["norm_ffn"], perm, last, f"{name}.final_layer_norm"))
  return {k: np.ascontiguousarray(v, np.float32) for k, v in state.items()}


def marian_config(cfg: configs.TransformerConfig) -> dict[str, Any]:
  """MarianConfig fields for our architecture and token ids."""
  return dict(
      vocab_size=cfg.vocab_size, decoder_vocab_size=cfg.vocab_size, d_model=cfg.d_model,
      encoder_layers=cfg.num_layers, decoder_layers=cfg.num_layers,
      encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff,
      encoder_attention_heads=cfg.num_heads, decoder_attention_heads=cfg.num_heads,
      max_position_embeddings=cfg.max_len, activation_function="relu",
      dropout=cfg.dropout_rate, attention_dropout=cfg.attention_dropout_rate,
      activation_dropout=0.0, scale_embedding=True,
      share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
      pad_token_id=ids.PAD_ID, eos_token_id=ids.EOS_ID, decoder_start_token_id=ids.PAD_ID,
      forced_eos_token_id=None, bos_token_id=None)


def generation_config(cfg: configs.TransformerConfig) -> dict[str, Any]:
  """Defaults for `generate`: our beam; padding never generated, as in decoding/beam_search.py.

  transformers' length penalty divides by |Y|^alpha, ours by ((5 + |Y|) / 6)^alpha:
  `cfg.alpha` is the nearest setting, not the same ranking (docs/export.md).
  """
  return dict(num_beams=cfg.beam_size, length_penalty=cfg.alpha, max_length=cfg.max_len,
              bad_words_ids=[[ids.PAD_ID]], pad_token_id=ids.PAD_ID,
              eos_token_id=ids.EOS_ID, decoder_start_token_id=ids.PAD_ID)


def marian_model(cfg: configs.TransformerConfig, params: Any, rescale_epsilon: bool = True) -> Any:
  """A transformers MarianMTModel (eval mode) holding our params, with our generation defaults.

  `rescale_epsilon=False` leaves out the rescaling that makes up for Marian's
  layer-norm epsilon (`marian_state_dict`); only for measuring what it changes.
  """
  transformers = require("transformers")
  torch = require("torch")
  marian = transformers.MarianMTModel(transformers.MarianConfig(**marian_config(cfg)))
  epsilons = {m.eps for m in marian.modules() if isinstance(m, torch.nn.LayerNorm)}
  if len(epsilons) != 1:
    raise RuntimeError(f"transformers {transformers.__version__}'s Marian layer norms have "
                       f"several epsilons {sorted(epsilons)}; the export assumes one")
  epsilon = epsilons.pop() if rescale_epsilon else model.LAYER_NORM_EPSILON
  state = {k: torch.from_numpy(v) for k, v in marian_state_dict(cfg, params, epsilon).items()}
  missing, unexpected = marian.load_state_dict(state, strict=False)
  untied = [k for k in missing if not k.endswith(("embed_tokens.weight", "embed_positions.weight"))
            and k != "lm_head.weight"]
  if untied or unexpected:
    raise RuntimeError(f"the weight mapping is out of date with transformers "
                       f"{transformers.__version__}: missing {untied}, unexpected {unexpected}")
  marian.generation_config = transformers.GenerationConfig(**generation_config(cfg))
  return marian.eval()


def export_huggingface(workdir: str | os.PathLike, out_dir: str | os.PathLike,
                       average: bool = True) -> pathlib.Path:
  """Writes a MarianMTModel + MarianTokenizer directory (safetensors); returns its path."""
  transformers = require("transformers")
  require("safetensors")
  cfg, params, spm_path = load_workdir(workdir, average)
  out_dir = pathlib.Path(out_dir)
  marian_model(cfg, params).save_pretrained(out_dir)
  _write_tokenizer(transformers, cfg, spm_path, out_dir)
  log.info("Wrote a MarianMTModel to %s", out_dir)
  return out_dir


def _write_tokenizer(transformers: Any, cfg: configs.TransformerConfig, spm_path: str,
                     out_dir: pathlib.Path) -> None:
  """source.spm = target.spm = our shared model; vocab.json maps every id's token to it."""
  out_dir.mkdir(parents=True, exist_ok=True)
  tokens = vocabulary(spm_path, cfg.vocab_size)
  staging = out_dir / "tokenizer_staging"
  staging.mkdir(exist_ok=True)
  try:
    for name in ("source.spm", "target.spm"):
      shutil.copyfile(spm_path, staging / name)
    (staging / "vocab.json").write_text(
        json.dumps({token: i for i, token in enumerate(tokens)}, ensure_ascii=False, indent=0),
        encoding="utf-8")
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(staging / "source.spm"), target_spm=str(staging / "target.spm"),
        vocab=str(staging / "vocab.json"), source_lang=cfg.source_lang,
        target_lang=cfg.target_lang, model_max_length=cfg.max_len)
    tokenizer.save_pretrained(out_dir)
  finally:
    shutil.rmtree(staging, ignore_errors=True)


# -------------------------------------------------------------------- CTranslate2


def ctranslate2_spec(cfg: configs.TransformerConfig, params: Any, tokens: Sequence[str]) -> Any:
  """A ctranslate2 TransformerSpec holding our weights as they are (no permutation).

  CTranslate2 takes the position table and the layer-norm epsilon from the spec,
  so it gets ours; the decoder starts from <pad> (id 0) as ours does.
  """
  check_exportable(cfg)
  specs = require("ctranslate2.specs")
  spec = specs.TransformerSpec.from_config(
      cfg.num_layers, cfg.num_heads, pre_norm=False, activation=specs.Activation.RELU)
  f32 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  embedding = f32(params["embedding"]["embedding"])                      # [vocab, d_model]
  table = position_table(cfg.max_len, cfg.d_model)
  for stack in (spec.encoder, spec.decoder):
    embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
    embeddings.weight = embedding
    stack.scale_embeddings = True                                        # times sqrt(d_model)
    stack.position_encodings.encodings = table
  spec.decoder.projection.weight = embedding
  linear = lambda kernel: f32(np.asarray(kernel).reshape(cfg.d_model, -1).T)  # [out, in]

  def set_norm(norm_spec, p):
    norm_spec.gamma, norm_spec.beta = f32(p["scale"]), f32(p["bias"])

  def set_ffn(ffn_spec, p):
    for linear_spec, dense in ((ffn_spec.linear_0, p["wi"]), (ffn_spec.linear_1, p["wo"])):
      linear_spec.weight, linear_spec.bias = f32(np.asarray(dense["kernel"]).T), f32(dense["bias"])

  def out_proj(p):
    return f32(np.asarray(p["out"]["kernel"]).reshape(-1, cfg.d_model).T)

  for i, layer in enumerate(spec.encoder.layer):
    p = params["encoder"][f"layers_{i}"]
    a = p["self_attention"]
    layer.self_attention.linear[0].weight = np.concatenate(
        [linear(a[n]["kernel"]) for n in ("query", "key", "value")])
    layer.self_attention.linear[1].weight = out_proj(a)
    set_norm(layer.self_attention.layer_norm, p["norm_attention"])
    set_ffn(layer.ffn, p["ffn"])
    set_norm(layer.ffn.layer_norm, p["norm_ffn"])
  for i, layer in enumerate(spec.decoder.layer):
    p = params["decoder"][f"layers_{i}"]
    a, c = p["self_attention"], p["cross_attention"]
    layer.self_attention.linear[0].weight = np.concatenate(
        [linear(a[n]["kernel"]) for n in ("query", "key", "value")])
    layer.self_attention.linear[1].weight = out_proj(a)
    set_norm(layer.self_attention.layer_norm, p["norm_self"])
    layer.attention.linear[0].weight = linear(c["query"]["kernel"])
    layer.attention.linear[1].weight = np.concatenate(
        [linear(c[n]["kernel"]) for n in ("key", "value")])
    layer.attention.linear[2].weight = out_proj(c)
    set_norm(layer.attention.layer_norm, p["norm_cross"])
    set_ffn(layer.ffn, p["ffn"])
    set_norm(layer.ffn.layer_norm, p["norm_ffn"])

  spec.config.unk_token, spec.config.eos_token = "<unk>", "</s>"
  spec.config.bos_token = spec.config.decoder_start_token = "<pad>"
  spec.config.add_source_eos = True       # callers pass pieces; the encoder input ends with EOS
  spec.config.layer_norm_epsilon = model.LAYER_NORM_EPSILON
  spec.register_source_vocabulary(list(tokens))
  spec.register_target_vocabulary(list(tokens))
  return spec


def save_ctranslate2(spec: Any, out_dir: str | os.PathLike, quantization: Optional[str] = None,
                     force: bool = False) -> pathlib.Path:
  """Validates `spec` and writes it as a CTranslate2 model directory."""
  converters = require("ctranslate2.converters")

  class _SpecConverter(converters.Converter):
    def _load(self):
      return spec

  _SpecConverter().convert(str(out_dir), quantization=quantization, force=force)
  return pathlib.Path(out_dir)


def export_ctranslate2(workdir: str | os.PathLike, out_dir: str | os.PathLike,
                       average: bool = True, quantization: Optional[str] = None,
                       force: bool = False) -> pathlib.Path:
  """Writes a CTranslate2 model directory (`quantization`: None, "int8", ...); returns its path.

  The SentencePiece model is copied beside it as `spm.model` to make the pieces.
  """
  require("ctranslate2")
  cfg, params, spm_path = load_workdir(workdir, average)
  spec = ctranslate2_spec(cfg, params, vocabulary(spm_path, cfg.vocab_size))
  out_dir = save_ctranslate2(spec, out_dir, quantization, force)
  shutil.copyfile(spm_path, out_dir / "spm.model")
  log.info("Wrote a CTranslate2 model to %s", out_dir)
  return out_dir


EXPORTERS = {"huggingface": export_huggingface, "ctranslate2": export_ctranslate2}
