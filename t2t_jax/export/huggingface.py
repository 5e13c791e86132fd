"""A work directory as a transformers MarianMTModel and MarianTokenizer, and the mapping back.

    export_huggingface(workdir, "hf")         # a directory for MarianMTModel/MarianTokenizer.from_pretrained
    marian = marian_model(cfg, params)        # the model in memory
    t2t-export --workdir runs/demo --to huggingface hf      # the command (cli/export.py)
    encoder, decoder = marian_layers(cfg, state)   # a Marian state dict's layers (the import's)

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
- Our `embeddings` modes are Marian's two flags (`EMBEDDING_FLAGS`); decoder depth and
  target vocabulary size are MarianConfig's `decoder_layers` and `decoder_vocab_size`.

A model imported from Marian (export/import_marian.py) has Marian's options
(halves, epsilon 1e-5, biases, its activation): none of the above applies, and its
export puts its ids back in Marian's order (`MarianIds`, each side's) and writes its own
tokenizer files, embedding flags, generation settings and unread weights (`Original`), so
that the weights, the tokenizer and the settings are the original ones.
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
# The embeddings: the one matrix of shared embeddings, each stack's own, the output layer's.
EMBEDDING = "model.shared.weight"
ENCODER_EMBEDDING = "model.encoder.embed_tokens.weight"
DECODER_EMBEDDING = "model.decoder.embed_tokens.weight"
OUTPUT = "lm_head.weight"
OUTPUT_BIAS = "final_logits_bias"
# MarianConfig's (share_encoder_decoder_embeddings, tie_word_embeddings) for each of our
# `embeddings` modes (configs.EMBEDDINGS).
EMBEDDING_FLAGS = {"shared": (True, True), "shared_inputs": (True, False),
                   "tied_output": (False, True), "separate": (False, False)}


def _prefix(stack: str, i: int, theirs: str) -> str:
  return ".".join(filter(None, (f"model.{stack}.layers.{i}", theirs)))


class MarianIds(NamedTuple):
  """An imported model's ids as Marian had them: `order[i]` is the Marian id of our id i;
  Marian's padding (its decoder start), EOS and unknown ids. `target`: the target side's,
  where it has a vocabulary of its own (separate vocabularies), else None."""
  order: np.ndarray
  pad: int
  eos: int
  unk: int
  target: Optional["MarianIds"] = None

  @property
  def target_side(self) -> "MarianIds":
    return self if self.target is None else self.target


class Original(NamedTuple):
  """What an imported model's export gives back that our config does not hold: its
  MarianConfig's embedding flags (`EMBEDDING_FLAGS`), its generation settings (as
  generation_config.json held them, or else config.json) and the weights the model does
  not read (Marian's rows, by name: a shared matrix that untied stacks leave unused)."""
  share_encoder_decoder_embeddings: bool
  tie_word_embeddings: bool
  generation: dict[str, Any]
  unread: dict[str, np.ndarray]


# In an imported vocabulary's `vocab.IMPORTED` directory, beside Marian's tokenizer files:
# its ids, and the rest of `Original`.
IDS_FILE = "ids.json"
ORIGINAL_FILE = "original.json"
UNREAD_FILE = "unread.npz"
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
TARGET_VOCABULARY = "target_vocab.json"     # the target side's, with separate vocabularies


def _imported(workdir: str | os.PathLike) -> pathlib.Path:
  return pathlib.Path(workdir) / "vocab" / vocab.IMPORTED


def _ids_record(ids: MarianIds) -> dict[str, Any]:
  record = {"order": [int(i) for i in ids.order], "pad": ids.pad, "eos": ids.eos, "unk": ids.unk}
  return {**record, "target": _ids_record(ids.target)} if ids.target is not None else record


def _ids(record: dict[str, Any]) -> MarianIds:
  target = _ids(record["target"]) if "target" in record else None
  return MarianIds(np.asarray(record["order"], np.int64), record["pad"], record["eos"],
                   record["unk"], target)


def imported_ids(workdir: str | os.PathLike) -> Optional[MarianIds]:
  """The Marian ids of an imported work directory (or of a run fine-tuned from one); None
  for a model trained here."""
  path = _imported(workdir) / IDS_FILE
  return _ids(json.loads(path.read_text())) if path.is_file() else None


def imported_original(workdir: str | os.PathLike) -> Optional[Original]:
  """An imported work directory's `Original`; None for a model trained here (or imported
  before it was kept)."""
  path = _imported(workdir) / ORIGINAL_FILE
  if not path.is_file():
    return None
  record = json.loads(path.read_text())
  unread = {}
  if (path.parent / UNREAD_FILE).is_file():
    with np.load(path.parent / UNREAD_FILE) as f:
      unread = {name: f[name] for name in f.files}
  return Original(record["share_encoder_decoder_embeddings"], record["tie_word_embeddings"],
                  record["generation"], unread)


def write_imported(marian_ids: MarianIds, original: Original,
                   directory: str | os.PathLike) -> None:
  """`imported_ids`' and `imported_original`'s records, written into an imported
  vocabulary's `vocab.IMPORTED`."""
  directory = pathlib.Path(directory)
  (directory / IDS_FILE).write_text(json.dumps(_ids_record(marian_ids)))
  (directory / ORIGINAL_FILE).write_text(json.dumps(
      {"share_encoder_decoder_embeddings": original.share_encoder_decoder_embeddings,
       "tie_word_embeddings": original.tie_word_embeddings,
       "generation": original.generation}))
  if original.unread:
    np.savez(directory / UNREAD_FILE, **original.unread)


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


def _embedding_state(w: weights_lib.Weights, flags: tuple[bool, bool], source_rows: np.ndarray,
                     target_rows: np.ndarray, perm: np.ndarray) -> dict[str, np.ndarray]:
  """The embeddings under the names a MarianMTModel of `flags` (share_encoder_decoder_embeddings,
  tie_word_embeddings) reads: the shared matrix, each stack's, the output layer's."""
  share, tie = flags
  source, target, output = w.roles()
  if (tie and w.output is not None) or (share and tie and w.target_embedding is not None):
    raise ValueError(f"a MarianMTModel with share_encoder_decoder_embeddings={share}, "
                     f"tie_word_embeddings={tie} cannot hold these weights' embeddings")
  source, target = source[source_rows][:, perm], target[target_rows][:, perm]
  if share and tie:
    return {EMBEDDING: source}
  # transformers 5 ties nothing when tie_word_embeddings is false: each stack reads its own.
  state = {ENCODER_EMBEDDING: source, DECODER_EMBEDDING: target}
  if share:
    state[EMBEDDING] = source
  if not tie:
    state[OUTPUT] = output[target_rows][:, perm]
  return state


def marian_state_dict(cfg: configs.TransformerConfig, params: Any,
                      layer_norm_epsilon: float = MARIAN_LAYER_NORM_EPSILON,
                      marian_ids: Optional[MarianIds] = None,
                      flags: Optional[tuple[bool, bool]] = None) -> dict[str, np.ndarray]:
  """Our params as a MarianMTModel state dict (float32 NumPy) computing our function.

  The model dimension is permuted (`marian_permutation`) unless the model has
  Marian's halves. Marian normalises with `layer_norm_epsilon` where we use the
  config's; as LayerNorm(c z) with epsilon c^2 eps equals LayerNorm(z) with eps, the
  residual stream after each stack's first layer norm is carried c =
  sqrt(layer_norm_epsilon / ours) times larger: the gain and bias of every layer
  norm times c (but the decoder's last, which feeds the output projection),
  every later sub-layer's input projections divided by c and its output projection
  times c. Only the first layer norm of each stack still sees the other epsilon:
  its input holds transformers' own position table, which the export cannot scale
  (docs/export.md measures the effect); with the same epsilon (an imported model)
  c is 1. `marian_ids`: the vocabulary rows go back to Marian's order (each side's).
  `flags`: the MarianConfig's (share_encoder_decoder_embeddings, tie_word_embeddings)
  whose embeddings to write (default: the config's `embeddings`, `EMBEDDING_FLAGS`);
  tied copies and the position tables are left to transformers.
  """
  w = weights_lib.from_params(cfg, params)
  perm = _features(cfg)
  c = math.sqrt(layer_norm_epsilon / cfg.layer_norm_epsilon)
  source_rows, target_rows = (
      (np.arange(cfg.vocab_size), np.arange(cfg.target_vocab)) if marian_ids is None else
      (np.argsort(marian_ids.order), np.argsort(marian_ids.target_side.order)))
  output_bias = (np.zeros((cfg.target_vocab,), np.float32) if w.output_bias is None
                 else w.output_bias)
  state = {**_embedding_state(w, flags or EMBEDDING_FLAGS[cfg.embeddings], source_rows,
                              target_rows, perm),
           OUTPUT_BIAS: output_bias[target_rows][None]}
  for stack, layers in (("encoder", w.encoder), ("decoder", w.decoder)):
    for i, layer in enumerate(layers):
      first = 1.0 if i == 0 else c        # scale of the stream entering layer i
      last = 1.0 if i == len(layers) - 1 else c
      # Each part's (scale in, scale out), in _LAYER_PARTS's order.
      scales = {"encoder": ((first, first), c, c, c),
                "decoder": ((first, first), c, (c, c), c, c, last)}[stack]
      for (ours, theirs), scale in zip(_LAYER_PARTS[stack], scales):
        part, name = getattr(layer, ours), _prefix(stack, i, theirs)
        if ours.endswith("attention"):
          state.update(_attention(part, perm, *scale, name))
        elif ours == "ffn":
          state.update(_ffn(part, perm, scale, name))
        else:
          state.update(_norm(part, perm, scale, name))
  return {k: np.ascontiguousarray(v, np.float32) for k, v in state.items()}


def marian_layers(cfg: configs.TransformerConfig, state: dict[str, np.ndarray]
                  ) -> tuple[list[weights_lib.Layer], list[weights_lib.Layer]]:
  """`marian_state_dict` inverted for the layers of a model with Marian's options (halves,
  its epsilon: no permutation, no scale): a MarianMTModel's state dict (NumPy) as our
  encoder's and decoder's `weights.Layer`s. KeyError names a missing weight."""
  linear = lambda name: weights_lib.Linear(state[f"{name}.weight"], state[f"{name}.bias"])
  read = {
      "attention": lambda name: weights_lib.Attention(
          *(linear(f"{name}.{theirs}") for _, theirs in _ATTENTION)),
      "ffn": lambda name: weights_lib.FeedForward(*(linear(f"{name}.{theirs}") for _, theirs in _FFN)),
      "norm": lambda name: weights_lib.Norm(state[f"{name}.weight"], state[f"{name}.bias"]),
  }
  stacks = {}
  for (stack, parts), depth in zip(_LAYER_PARTS.items(),
                                   (cfg.num_layers, cfg.num_decoder_layers)):
    stacks[stack] = []
    for i in range(depth):
      fields = dict.fromkeys(weights_lib.Layer._fields)
      for ours, theirs in parts:
        kind = "attention" if ours.endswith("attention") else "ffn" if ours == "ffn" else "norm"
        fields[ours] = read[kind](_prefix(stack, i, theirs))
      stacks[stack].append(weights_lib.Layer(**fields))
  return stacks["encoder"], stacks["decoder"]


def _special(marian_ids: Optional[MarianIds]) -> tuple[int, int]:
  """(padding and decoder start, EOS) of the target side: ours, or an imported model's Marian
  ids."""
  if marian_ids is None:
    return ids.PAD_ID, ids.EOS_ID
  return marian_ids.target_side.pad, marian_ids.target_side.eos


def marian_config(cfg: configs.TransformerConfig, marian_ids: Optional[MarianIds] = None,
                  original: Optional[Original] = None) -> dict[str, Any]:
  """MarianConfig fields for our architecture and token ids (an imported model's: Marian's,
  and its `original` embedding flags and forced EOS)."""
  pad, eos = _special(marian_ids)
  share, tie = (EMBEDDING_FLAGS[cfg.embeddings] if original is None else
                (original.share_encoder_decoder_embeddings, original.tie_word_embeddings))
  return dict(
      vocab_size=cfg.vocab_size, decoder_vocab_size=cfg.target_vocab, d_model=cfg.d_model,
      encoder_layers=cfg.num_layers, decoder_layers=cfg.num_decoder_layers,
      encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff,
      encoder_attention_heads=cfg.num_heads, decoder_attention_heads=cfg.num_heads,
      max_position_embeddings=cfg.max_len, activation_function=ACTIVATIONS[cfg.activation],
      dropout=cfg.dropout_rate, attention_dropout=cfg.attention_dropout_rate,
      activation_dropout=0.0, scale_embedding=True,
      share_encoder_decoder_embeddings=share, tie_word_embeddings=tie,
      pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad,
      forced_eos_token_id=None if original is None else original.generation.get(
          "forced_eos_token_id"), bos_token_id=None)


def generation_config(cfg: configs.TransformerConfig,
                      marian_ids: Optional[MarianIds] = None) -> dict[str, Any]:
  """Defaults for `generate`: our beam; padding never generated and EOS not before
  `beam_search.MIN_LEN` tokens (min_length counts the decoder's start), as ours.

  transformers' length penalty divides by |Y|^alpha, ours by ((5 + |Y|) / 6)^alpha:
  `cfg.alpha` is the nearest setting, not the same ranking (docs/export.md). An imported
  model's export writes its original settings instead (`Original.generation`).
  """
  pad, eos = _special(marian_ids)
  return dict(num_beams=cfg.beam_size, length_penalty=cfg.alpha, max_length=cfg.max_len,
              min_length=beam_search.MIN_LEN + 1, bad_words_ids=[[pad]], pad_token_id=pad,
              eos_token_id=eos, decoder_start_token_id=pad)


def marian_model(cfg: configs.TransformerConfig, params: Any, rescale_epsilon: bool = True,
                 marian_ids: Optional[MarianIds] = None,
                 original: Optional[Original] = None) -> Any:
  """A transformers MarianMTModel (eval mode) holding our params, with our generation defaults.

  `rescale_epsilon=False` leaves out the rescaling that makes up for Marian's
  layer-norm epsilon (`marian_state_dict`); only for measuring what it changes.
  `marian_ids`, `original`: an imported model's ids, embedding flags, generation settings
  and unread weights, which its export puts back.
  """
  transformers = loading.require("transformers")
  torch = loading.require("torch")
  marian = transformers.MarianMTModel(
      transformers.MarianConfig(**marian_config(cfg, marian_ids, original)))
  epsilons = {m.eps for m in marian.modules() if isinstance(m, torch.nn.LayerNorm)}
  if len(epsilons) != 1:
    raise RuntimeError(f"transformers {transformers.__version__}'s Marian layer norms have "
                       f"several epsilons {sorted(epsilons)}; the export assumes one")
  epsilon = epsilons.pop() if rescale_epsilon else cfg.layer_norm_epsilon
  flags = None if original is None else (original.share_encoder_decoder_embeddings,
                                         original.tie_word_embeddings)
  state = {**marian_state_dict(cfg, params, epsilon, marian_ids, flags),
           **({} if original is None else original.unread)}
  missing, unexpected = marian.load_state_dict(
      {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}, strict=False)
  untied = [k for k in missing if not k.endswith(("embed_tokens.weight", "embed_positions.weight"))
            and k != OUTPUT]
  if untied or unexpected:
    raise RuntimeError(f"the weight mapping is out of date with transformers "
                       f"{transformers.__version__}: missing {untied}, unexpected {unexpected}")
  marian.generation_config = transformers.GenerationConfig(
      **(generation_config(cfg, marian_ids) if original is None else original.generation))
  return marian.eval()


def write_tokenizer(cfg: configs.TransformerConfig, spm_path: str,
                    out_dir: str | os.PathLike) -> None:
  """A MarianTokenizer in `out_dir`: our SentencePiece model and our ids.

  source.spm = target.spm = our shared model; vocab.json maps every id's token
  (export/loading.py `vocabulary`) to it (and target_vocab.json the target side's ids,
  where the model has more of them: `target_vocab_size`). Encoding a line gives our ids,
  EOS-terminated. An imported model's vocabulary directory holds its own files
  (`vocab.IMPORTED`), which are written instead (`export_huggingface`).
  """
  transformers = loading.require("transformers")
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  staging = out_dir / "tokenizer_staging"
  staging.mkdir(exist_ok=True)
  imported = pathlib.Path(spm_path).parent / vocab.IMPORTED
  write = lambda name, size: (staging / name).write_text(json.dumps(
      {token: i for i, token in enumerate(loading.vocabulary(spm_path, size))},
      ensure_ascii=False, indent=0), encoding="utf-8")
  try:
    if (imported / IDS_FILE).is_file():
      for name in (*TOKENIZER_FILES, TARGET_VOCABULARY):
        if (imported / name).is_file():
          shutil.copyfile(imported / name, staging / name)
    else:
      for name in ("source.spm", "target.spm"):
        shutil.copyfile(spm_path, staging / name)
      write("vocab.json", cfg.vocab_size)
      if cfg.target_vocab != cfg.vocab_size:
        write(TARGET_VOCABULARY, cfg.target_vocab)
    separate = (staging / TARGET_VOCABULARY).is_file()
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(staging / "source.spm"), target_spm=str(staging / "target.spm"),
        vocab=str(staging / "vocab.json"), source_lang=cfg.source_lang,
        target_lang=cfg.target_lang, model_max_length=cfg.max_len, separate_vocabs=separate,
        target_vocab_file=str(staging / TARGET_VOCABULARY) if separate else None)
    tokenizer.save_pretrained(out_dir)
  finally:
    shutil.rmtree(staging, ignore_errors=True)


def export_huggingface(workdir: str | os.PathLike, out_dir: str | os.PathLike,
                       average: bool = True) -> pathlib.Path:
  """Writes a MarianMTModel + MarianTokenizer directory (safetensors); returns its path.

  An imported model (or one fine-tuned from it) gets its Marian ids, tokenizer, embedding
  flags, generation settings and unread weights back.
  """
  loading.require("transformers")
  loading.require("safetensors")
  cfg, params, spm_path = loading.load_workdir(workdir, average)
  out_dir = pathlib.Path(out_dir)
  marian_model(cfg, params, marian_ids=imported_ids(workdir),
               original=imported_original(workdir)).save_pretrained(out_dir)
  write_tokenizer(cfg, spm_path, out_dir)
  log.info("Wrote a MarianMTModel to %s", out_dir)
  return out_dir
