"""A trained work directory as a transformers MarianMTModel and MarianTokenizer.

    export_huggingface(workdir, "hf")         # a directory for MarianMTModel/MarianTokenizer.from_pretrained
    marian = marian_model(cfg, params)        # the model in memory
    t2t-export --workdir runs/demo --to huggingface hf      # the command (cli/export.py)

Marian runs the model of section 3 (post-norm layers, one embedding matrix
shared by both embeddings and the pre-softmax projection and scaled by
sqrt(d_model), sinusoidal positions, ReLU FFN). Where it differs from ours, and
how each difference is handled (docs/export.md):

- Marian's sinusoids are [sin | cos] halves, ours interleave them. A fixed
  permutation of the model dimension, applied to every weight that touches it,
  makes both compute the same function (`marian_permutation`).
- Marian's attention projections have biases: they are zero.
- Marian's layer norms use epsilon 1e-5 (fixed in its code), ours 1e-6. The
  residual stream is carried sqrt(10) times larger, which makes every layer norm
  but each stack's first compute ours exactly (`marian_state_dict`).
- Ids are ours (0 padding and decoder start, 1 EOS, 2 unknown); the tokenizer's
  vocabulary lists the SentencePiece pieces (export/loading.py).
"""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import shutil
from typing import Any

import numpy as np

from t2t_jax import configs
from t2t_jax import ids
from t2t_jax.decoding import beam_search
from t2t_jax.export import loading
from t2t_jax.export import weights as weights_lib
from t2t_jax.model import encoder_decoder

log = logging.getLogger(__name__)

# torch.nn.LayerNorm's default, which transformers' Marian layers use.
MARIAN_LAYER_NORM_EPSILON = 1e-5


def marian_permutation(d_model: int) -> np.ndarray:
  """Marian feature m is our feature perm[m]: our even (sine) features, then the odd (cosine).

  Our position vector is [sin f0, cos f0, sin f1, cos f1, ...], Marian's is
  [sin f0, sin f1, ..., cos f0, cos f1, ...]; `ours[perm]` is Marian's.
  """
  return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def _attention(a: weights_lib.Attention, perm: np.ndarray, scale_in: float, scale_out: float,
               prefix: str) -> dict[str, np.ndarray]:
  """Inputs arrive `scale_in` times ours; the output must leave `scale_out` times ours."""
  out = {f"{prefix}.{theirs}.weight": linear.weight[:, perm] / scale_in        # [h d_k, d_model]
         for theirs, linear in (("q_proj", a.query), ("k_proj", a.key), ("v_proj", a.value))}
  out[f"{prefix}.out_proj.weight"] = a.out.weight[perm] * scale_out          # [d_model, h d_v]
  for theirs in ("q_proj", "k_proj", "v_proj", "out_proj"):
    rows = out[f"{prefix}.{theirs}.weight"].shape[0]
    out[f"{prefix}.{theirs}.bias"] = np.zeros((rows,), np.float32)      # ours has none
  return out


def _ffn(f: weights_lib.FeedForward, perm: np.ndarray, scale: float,
         prefix: str) -> dict[str, np.ndarray]:
  return {
      f"{prefix}.fc1.weight": f.inner.weight[:, perm] / scale,           # [d_ff, d_model]
      f"{prefix}.fc1.bias": f.inner.bias,
      f"{prefix}.fc2.weight": f.outer.weight[perm] * scale,              # [d_model, d_ff]
      f"{prefix}.fc2.bias": f.outer.bias[perm] * scale,
  }


def _norm(n: weights_lib.Norm, perm: np.ndarray, scale_out: float, name: str
          ) -> dict[str, np.ndarray]:
  return {f"{name}.weight": n.scale[perm] * scale_out, f"{name}.bias": n.bias[perm] * scale_out}


def marian_state_dict(cfg: configs.TransformerConfig, params: Any,
                      layer_norm_epsilon: float = MARIAN_LAYER_NORM_EPSILON
                      ) -> dict[str, np.ndarray]:
  """Our params as a MarianMTModel state dict (float32 NumPy) computing our function.

  The model dimension is permuted (`marian_permutation`). Marian normalises with
  `layer_norm_epsilon` where we use encoder_decoder.LAYER_NORM_EPSILON; as LayerNorm(c z)
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
  w = weights_lib.from_params(cfg, params)
  perm = marian_permutation(cfg.d_model)
  c = math.sqrt(layer_norm_epsilon / encoder_decoder.LAYER_NORM_EPSILON)
  state = {"model.shared.weight": w.embedding[:, perm],
           "final_logits_bias": np.zeros((1, cfg.vocab_size), np.float32)}
  for i, (enc, dec) in enumerate(zip(w.encoder, w.decoder)):
    first = 1.0 if i == 0 else c        # scale of the stream entering layer i
    name = f"model.encoder.layers.{i}"
    state.update(_attention(enc.self_attention, perm, first, first, f"{name}.self_attn"))
    state.update(_norm(enc.self_attention_norm, perm, c, f"{name}.self_attn_layer_norm"))
    state.update(_ffn(enc.ffn, perm, c, name))
    state.update(_norm(enc.ffn_norm, perm, c, f"{name}.final_layer_norm"))
    name = f"model.decoder.layers.{i}"
    state.update(_attention(dec.self_attention, perm, first, first, f"{name}.self_attn"))
    state.update(_norm(dec.self_attention_norm, perm, c, f"{name}.self_attn_layer_norm"))
    state.update(_attention(dec.cross_attention, perm, c, c, f"{name}.encoder_attn"))
    state.update(_norm(dec.cross_attention_norm, perm, c, f"{name}.encoder_attn_layer_norm"))
    state.update(_ffn(dec.ffn, perm, c, name))
    last = 1.0 if i == cfg.num_layers - 1 else c
    state.update(_norm(dec.ffn_norm, perm, last, f"{name}.final_layer_norm"))
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
  """Defaults for `generate`: our beam; padding never generated and EOS not before
  `beam_search.MIN_LEN` tokens (min_length counts the decoder's start), as ours.

  transformers' length penalty divides by |Y|^alpha, ours by ((5 + |Y|) / 6)^alpha:
  `cfg.alpha` is the nearest setting, not the same ranking (docs/export.md).
  """
  return dict(num_beams=cfg.beam_size, length_penalty=cfg.alpha, max_length=cfg.max_len,
              min_length=beam_search.MIN_LEN + 1,
              bad_words_ids=[[ids.PAD_ID]], pad_token_id=ids.PAD_ID,
              eos_token_id=ids.EOS_ID, decoder_start_token_id=ids.PAD_ID)


def marian_model(cfg: configs.TransformerConfig, params: Any, rescale_epsilon: bool = True) -> Any:
  """A transformers MarianMTModel (eval mode) holding our params, with our generation defaults.

  `rescale_epsilon=False` leaves out the rescaling that makes up for Marian's
  layer-norm epsilon (`marian_state_dict`); only for measuring what it changes.
  """
  transformers = loading.require("transformers")
  torch = loading.require("torch")
  marian = transformers.MarianMTModel(transformers.MarianConfig(**marian_config(cfg)))
  epsilons = {m.eps for m in marian.modules() if isinstance(m, torch.nn.LayerNorm)}
  if len(epsilons) != 1:
    raise RuntimeError(f"transformers {transformers.__version__}'s Marian layer norms have "
                       f"several epsilons {sorted(epsilons)}; the export assumes one")
  epsilon = epsilons.pop() if rescale_epsilon else encoder_decoder.LAYER_NORM_EPSILON
  state = {k: torch.from_numpy(v) for k, v in marian_state_dict(cfg, params, epsilon).items()}
  missing, unexpected = marian.load_state_dict(state, strict=False)
  untied = [k for k in missing if not k.endswith(("embed_tokens.weight", "embed_positions.weight"))
            and k != "lm_head.weight"]
  if untied or unexpected:
    raise RuntimeError(f"the weight mapping is out of date with transformers "
                       f"{transformers.__version__}: missing {untied}, unexpected {unexpected}")
  marian.generation_config = transformers.GenerationConfig(**generation_config(cfg))
  return marian.eval()


def write_tokenizer(cfg: configs.TransformerConfig, spm_path: str,
                    out_dir: str | os.PathLike) -> None:
  """A MarianTokenizer in `out_dir`: our SentencePiece model and our ids.

  source.spm = target.spm = our shared model; vocab.json maps every id's token
  (export/loading.py `vocabulary`) to it. Encoding a line gives our ids, EOS-terminated.
  """
  transformers = loading.require("transformers")
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  tokens = loading.vocabulary(spm_path, cfg.vocab_size)
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


def export_huggingface(workdir: str | os.PathLike, out_dir: str | os.PathLike,
                       average: bool = True) -> pathlib.Path:
  """Writes a MarianMTModel + MarianTokenizer directory (safetensors); returns its path."""
  loading.require("transformers")
  loading.require("safetensors")
  cfg, params, spm_path = loading.load_workdir(workdir, average)
  out_dir = pathlib.Path(out_dir)
  marian_model(cfg, params).save_pretrained(out_dir)
  write_tokenizer(cfg, spm_path, out_dir)
  log.info("Wrote a MarianMTModel to %s", out_dir)
  return out_dir
