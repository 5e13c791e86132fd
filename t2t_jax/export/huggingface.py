"""A work directory as a transformers MarianMTModel and MarianTokenizer, and the mapping back.

    export_huggingface(workdir, "hf")         # a directory for MarianMTModel/MarianTokenizer.from_pretrained
    marian = marian_model(cfg, params)        # the model in memory
    t2t-export --workdir runs/demo --to huggingface hf      # the command (cli/export.py)
    w = marian_weights(state)                 # a Marian state dict as our Weights (the import's)

Marian runs the model of section 3 (post-norm layers, one embedding matrix
shared by both embeddings and the pre-softmax projection and scaled by
sqrt(d_model), sinusoidal positions). Where a model trained here differs from it,
and how each difference is handled (docs/export.md):

- Marian's sinusoids are [sin | cos] halves, ours (`position_layout="interleaved"`)
  interleave them. A fixed permutation of the model dimension, applied to every
  weight that touches it, makes both compute the same function (`marian_permutation`).
- Marian's attention projections have biases: they are zero (ours has none).
- Marian's layer norms use epsilon 1e-5 (fixed in its code), ours 1e-6. The
  residual stream is carried sqrt(10) times larger, which makes every layer norm
  but each stack's first compute ours exactly (`marian_state_dict`).
- Ids are ours (0 padding and decoder start, 1 EOS, 2 unknown); the tokenizer's
  vocabulary lists the SentencePiece pieces (export/loading.py).

A model imported from Marian (export/import_marian.py) has Marian's options
(halves, epsilon 1e-5, biases, its activation): none of the above applies, and its
export puts its ids back in Marian's order (`MarianIds`) and writes its own
tokenizer files, so that the weights and the tokenizer are the original ones.
`_LAYER_PARTS`, `_ATTENTION` and `_FFN` name Marian's parameters for both directions.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import shutil
from typing import Any, NamedTuple, Optional

import numpy as np

from t2t_jax import configs
from t2t_jax import ids
from t2t_jax.data import vocab
from t2t_jax.decoding import beam_search
from t2t_jax.export import loading
from t2t_jax.export import weights as weights_lib

log = logging.getLogger(__name__)

# torch.nn.LayerNorm's default, which transformers' Marian layers use.
MARIAN_LAYER_NORM_EPSILON = 1e-5
# transformers' activation_function for each of ours (configs.ACTIVATIONS).
ACTIVATIONS = {"relu": "relu", "swish": "swish", "gelu": "gelu"}

# Marian's names. A layer's parts (weights.Layer's fields) under model.<stack>.layers.<i>
# ("" for the feed-forward layer, whose fc1 and fc2 sit there); an attention's and the
# feed-forward layer's linear maps.
_LAYER_PARTS = {
    "encoder": (("self_attention", "self_attn"), ("self_attention_norm", "self_attn_layer_norm"),
                ("ffn", ""), ("ffn_norm", "final_layer_norm")),
    "decoder": (("self_attention", "self_attn"), ("self_attention_norm", "self_attn_layer_norm"),
                ("cross_attention", "encoder_attn"),
                ("cross_attention_norm", "encoder_attn_layer_norm"),
                ("ffn", ""), ("ffn_norm", "final_layer_norm")),
}
_ATTENTION = (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj"), ("out", "out_proj"))
_FFN = (("inner", "fc1"), ("outer", "fc2"))
EMBEDDING = "model.shared.weight"
OUTPUT_BIAS = "final_logits_bias"


def _prefix(stack: str, i: int, theirs: str) -> str:
  return ".".join(filter(None, (f"model.{stack}.layers.{i}", theirs)))


class MarianIds(NamedTuple):
  """An imported model's ids as Marian had them: `order[i]` is the Marian id of our id i;
  Marian's padding (its decoder start), EOS and unknown ids."""
  order: np.ndarray
  pad: int
  eos: int
  unk: int


# In an imported vocabulary's `vocab.IMPORTED` directory, beside Marian's tokenizer files.
IDS_FILE = "ids.json"
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")


def imported_ids(workdir: str | os.PathLike) -> Optional[MarianIds]:
  """The Marian ids of an imported work directory (or of a run fine-tuned from one); None
  for a model trained here."""
  path = pathlib.Path(workdir) / "vocab" / vocab.IMPORTED / IDS_FILE
  if not path.is_file():
    return None
  record = json.loads(path.read_text())
  return MarianIds(np.asarray(record["order"], np.int64), record["pad"], record["eos"],
                   record["unk"])


def write_ids(marian_ids: MarianIds, directory: str | os.PathLike) -> None:
  """`imported_ids`'s record, written into an imported vocabulary's `vocab.IMPORTED`."""
  record = {"order": [int(i) for i in marian_ids.order], "pad": marian_ids.pad,
            "eos": marian_ids.eos, "unk": marian_ids.unk}
  (pathlib.Path(directory) / IDS_FILE).write_text(json.dumps(record))


def marian_permutation(d_model: int) -> np.ndarray:
  """Marian feature m is our feature perm[m]: our even (sine) features, then the odd (cosine).

  Our position vector is [sin f0, cos f0, sin f1, cos f1, ...], Marian's is
  [sin f0, sin f1, ..., cos f0, cos f1, ...]; `ours[perm]` is Marian's.
  """
  return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def _features(cfg: configs.TransformerConfig) -> np.ndarray:
  """Marian feature m is our feature perm[m]: `marian_permutation` for our interleaved
  sinusoids, none for a model with Marian's halves."""
  if cfg.position_layout == "halves":
    return np.arange(cfg.d_model)
  return marian_permutation(cfg.d_model)


def _bias(linear: weights_lib.Linear) -> np.ndarray:
  return linear.bias if linear.bias is not None else np.zeros(linear.weight.shape[:1], np.float32)


def _attention(a: weights_lib.Attention, perm: np.ndarray, scale_in: float, scale_out: float,
               prefix: str) -> dict[str, np.ndarray]:
  """Inputs arrive `scale_in` times ours; the output must leave `scale_out` times ours.
  Biases where ours has none are zero."""
  out = {}
  for ours, theirs in _ATTENTION:
    linear = getattr(a, ours)
    if ours == "out":
      out[f"{prefix}.{theirs}.weight"] = linear.weight[perm] * scale_out   # [d_model, h d_v]
      out[f"{prefix}.{theirs}.bias"] = _bias(linear)[perm] * scale_out
    else:
      out[f"{prefix}.{theirs}.weight"] = linear.weight[:, perm] / scale_in  # [h d_k, d_model]
      out[f"{prefix}.{theirs}.bias"] = _bias(linear)
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
                      layer_norm_epsilon: float = MARIAN_LAYER_NORM_EPSILON,
                      marian_ids: Optional[MarianIds] = None) -> dict[str, np.ndarray]:
  """Our params as a MarianMTModel state dict (float32 NumPy) computing our function.

  The model dimension is permuted (`marian_permutation`) unless the model has
  Marian's halves. Marian normalises with `layer_norm_epsilon` where we use the
  config's; as LayerNorm(c z) with epsilon c^2 eps equals LayerNorm(z) with eps, the
  residual stream after each stack's first layer norm is carried c =
  sqrt(layer_norm_epsilon / ours) times larger: the gain and bias of every layer
  norm times c (but the decoder's last, which feeds the tied output projection),
  every later sub-layer's input projections divided by c and its output projection
  times c. Only the first layer norm of each stack still sees the other epsilon:
  its input holds transformers' own position table, which the export cannot scale
  (docs/export.md measures the effect); with the same epsilon (an imported model)
  c is 1. `marian_ids`: the vocabulary rows go back to Marian's order. The tied
  copies of the embedding and the position tables are left to transformers.
  """
  w = weights_lib.from_params(cfg, params)
  perm = _features(cfg)
  c = math.sqrt(layer_norm_epsilon / cfg.layer_norm_epsilon)
  rows = np.arange(cfg.vocab_size) if marian_ids is None else np.argsort(marian_ids.order)
  output_bias = np.zeros((cfg.vocab_size,), np.float32) if w.output_bias is None else w.output_bias
  state = {EMBEDDING: w.embedding[rows][:, perm], OUTPUT_BIAS: output_bias[rows][None]}
  for i, (enc, dec) in enumerate(zip(w.encoder, w.decoder)):
    first = 1.0 if i == 0 else c        # scale of the stream entering layer i
    last = 1.0 if i == cfg.num_layers - 1 else c
    # Each part's (scale in, scale out), in _LAYER_PARTS's order.
    scales = {"encoder": ((first, first), c, c, c),
              "decoder": ((first, first), c, (c, c), c, c, last)}
    for stack, layer in (("encoder", enc), ("decoder", dec)):
      for (ours, theirs), scale in zip(_LAYER_PARTS[stack], scales[stack]):
        part, name = getattr(layer, ours), _prefix(stack, i, theirs)
        if ours.endswith("attention"):
          state.update(_attention(part, perm, *scale, name))
        elif ours == "ffn":
          state.update(_ffn(part, perm, scale, name))
        else:
          state.update(_norm(part, perm, scale, name))
  return {k: np.ascontiguousarray(v, np.float32) for k, v in state.items()}


def marian_weights(cfg: configs.TransformerConfig, state: dict[str, np.ndarray]) -> weights_lib.Weights:
  """`marian_state_dict` inverted for a model with Marian's options (halves, its epsilon: no
  permutation, no scale): a MarianMTModel's state dict (NumPy) as our `Weights`, its
  vocabulary rows in Marian's order. KeyError names a missing weight."""
  linear = lambda name: weights_lib.Linear(state[f"{name}.weight"], state[f"{name}.bias"])
  read = {
      "attention": lambda name: weights_lib.Attention(
          *(linear(f"{name}.{theirs}") for _, theirs in _ATTENTION)),
      "ffn": lambda name: weights_lib.FeedForward(*(linear(f"{name}.{theirs}") for _, theirs in _FFN)),
      "norm": lambda name: weights_lib.Norm(state[f"{name}.weight"], state[f"{name}.bias"]),
  }
  stacks = {}
  for stack, parts in _LAYER_PARTS.items():
    stacks[stack] = []
    for i in range(cfg.num_layers):
      fields = dict.fromkeys(weights_lib.Layer._fields)
      for ours, theirs in parts:
        kind = "attention" if ours.endswith("attention") else "ffn" if ours == "ffn" else "norm"
        fields[ours] = read[kind](_prefix(stack, i, theirs))
      stacks[stack].append(weights_lib.Layer(**fields))
  bias = state[OUTPUT_BIAS].reshape(-1) if OUTPUT_BIAS in state else None
  return weights_lib.Weights(state[EMBEDDING], stacks["encoder"], stacks["decoder"], bias)


def _special(marian_ids: Optional[MarianIds]) -> tuple[int, int]:
  """(padding and decoder start, EOS): ours, or an imported model's Marian ids."""
  return (ids.PAD_ID, ids.EOS_ID) if marian_ids is None else (marian_ids.pad, marian_ids.eos)


def marian_config(cfg: configs.TransformerConfig,
                  marian_ids: Optional[MarianIds] = None) -> dict[str, Any]:
  """MarianConfig fields for our architecture and token ids (an imported model's: Marian's)."""
  pad, eos = _special(marian_ids)
  return dict(
      vocab_size=cfg.vocab_size, decoder_vocab_size=cfg.vocab_size, d_model=cfg.d_model,
      encoder_layers=cfg.num_layers, decoder_layers=cfg.num_layers,
      encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff,
      encoder_attention_heads=cfg.num_heads, decoder_attention_heads=cfg.num_heads,
      max_position_embeddings=cfg.max_len, activation_function=ACTIVATIONS[cfg.activation],
      dropout=cfg.dropout_rate, attention_dropout=cfg.attention_dropout_rate,
      activation_dropout=0.0, scale_embedding=True,
      share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
      pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad,
      forced_eos_token_id=None, bos_token_id=None)


def generation_config(cfg: configs.TransformerConfig,
                      marian_ids: Optional[MarianIds] = None) -> dict[str, Any]:
  """Defaults for `generate`: our beam; padding never generated and EOS not before
  `beam_search.MIN_LEN` tokens (min_length counts the decoder's start), as ours.

  transformers' length penalty divides by |Y|^alpha, ours by ((5 + |Y|) / 6)^alpha:
  `cfg.alpha` is the nearest setting, not the same ranking (docs/export.md).
  """
  pad, eos = _special(marian_ids)
  return dict(num_beams=cfg.beam_size, length_penalty=cfg.alpha, max_length=cfg.max_len,
              min_length=beam_search.MIN_LEN + 1, bad_words_ids=[[pad]], pad_token_id=pad,
              eos_token_id=eos, decoder_start_token_id=pad)


def marian_model(cfg: configs.TransformerConfig, params: Any, rescale_epsilon: bool = True,
                 marian_ids: Optional[MarianIds] = None) -> Any:
  """A transformers MarianMTModel (eval mode) holding our params, with our generation defaults.

  `rescale_epsilon=False` leaves out the rescaling that makes up for Marian's
  layer-norm epsilon (`marian_state_dict`); only for measuring what it changes.
  `marian_ids`: an imported model's ids, which its export puts back.
  """
  transformers = loading.require("transformers")
  torch = loading.require("torch")
  marian = transformers.MarianMTModel(transformers.MarianConfig(**marian_config(cfg, marian_ids)))
  epsilons = {m.eps for m in marian.modules() if isinstance(m, torch.nn.LayerNorm)}
  if len(epsilons) != 1:
    raise RuntimeError(f"transformers {transformers.__version__}'s Marian layer norms have "
                       f"several epsilons {sorted(epsilons)}; the export assumes one")
  epsilon = epsilons.pop() if rescale_epsilon else cfg.layer_norm_epsilon
  state = {k: torch.from_numpy(v)
           for k, v in marian_state_dict(cfg, params, epsilon, marian_ids).items()}
  missing, unexpected = marian.load_state_dict(state, strict=False)
  untied = [k for k in missing if not k.endswith(("embed_tokens.weight", "embed_positions.weight"))
            and k != "lm_head.weight"]
  if untied or unexpected:
    raise RuntimeError(f"the weight mapping is out of date with transformers "
                       f"{transformers.__version__}: missing {untied}, unexpected {unexpected}")
  marian.generation_config = transformers.GenerationConfig(**generation_config(cfg, marian_ids))
  return marian.eval()


def write_tokenizer(cfg: configs.TransformerConfig, spm_path: str,
                    out_dir: str | os.PathLike) -> None:
  """A MarianTokenizer in `out_dir`: our SentencePiece model and our ids.

  source.spm = target.spm = our shared model; vocab.json maps every id's token
  (export/loading.py `vocabulary`) to it. Encoding a line gives our ids, EOS-terminated.
  An imported model's vocabulary directory holds its own files (`vocab.IMPORTED`),
  which are written instead (`export_huggingface`).
  """
  transformers = loading.require("transformers")
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  tokens = loading.vocabulary(spm_path, cfg.vocab_size)
  staging = out_dir / "tokenizer_staging"
  staging.mkdir(exist_ok=True)
  imported = pathlib.Path(spm_path).parent / vocab.IMPORTED
  try:
    if (imported / IDS_FILE).is_file():
      for name in TOKENIZER_FILES:
        shutil.copyfile(imported / name, staging / name)
    else:
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
  """Writes a MarianMTModel + MarianTokenizer directory (safetensors); returns its path.

  An imported model (or one fine-tuned from it) gets its Marian ids and tokenizer back.
  """
  loading.require("transformers")
  loading.require("safetensors")
  cfg, params, spm_path = loading.load_workdir(workdir, average)
  out_dir = pathlib.Path(out_dir)
  marian_model(cfg, params, marian_ids=imported_ids(workdir)).save_pretrained(out_dir)
  write_tokenizer(cfg, spm_path, out_dir)
  log.info("Wrote a MarianMTModel to %s", out_dir)
  return out_dir
