"""A trained work directory as a CTranslate2 model, called as a converted Marian model is.

    export_ctranslate2(workdir, "ct2")        # a ctranslate2.Translator directory + its tokenizer
    t2t-export --workdir runs/demo --to ctranslate2 ct2     # the command (cli/export.py)

    tokenizer = transformers.MarianTokenizer.from_pretrained("ct2")
    source = tokenizer.convert_ids_to_tokens(tokenizer.encode(line))   # pieces + "</s>"
    ctranslate2.Translator("ct2").translate_batch([source])

The model is built with CTranslate2's spec API from our weights as they are: it
takes our position table and layer-norm epsilon from the spec, so it needs
neither Marian's permutation nor its rescaling. It follows CTranslate2's
documented recipe for a model converted from transformers' Marian
(`ct2-transformers-converter`): the caller passes the source pieces *with* the
final `</s>` (the config does not add one), and padding is never generated (that
converter drops the padding row; ours is also the decoder's start, so its logit
gets a large negative bias instead). docs/export.md says what differs from ours.
"""

from __future__ import annotations

import logging
import os
import pathlib
import shutil
from typing import Any, Optional, Sequence

import numpy as np

from t2t_jax import configs
from t2t_jax import ids
from t2t_jax.inference import shortlist as shortlist_lib
from t2t_jax.data import vocab
from t2t_jax.export import huggingface
from t2t_jax.export import loading
from t2t_jax.export import weights as weights_lib
from t2t_jax.model import layers
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

# The padding logit's bias: exp(-1e4) is 0 in every compute type, and -1e4 fits float16.
PAD_LOGIT_BIAS = -1e4
USAGE = ("pass each line's pieces ending with </s>, as MarianTokenizer gives them: "
         "tokenizer.convert_ids_to_tokens(tokenizer.encode(line))")
# CTranslate2's vocabulary map file in a model directory (read with use_vmap=True).
VMAP = "vmap.txt"


def position_table(length: int, d_model: int) -> np.ndarray:
  """[length, d_model] float32: our interleaved sinusoids (`layers.sinusoidal_positions`)."""
  return np.asarray(layers.sinusoidal_positions(length, d_model), np.float32)


def _set_attention(spec: Any, a: weights_lib.Attention, fused: Sequence[Sequence[str]]) -> None:
  """spec.linear[j] gets the projections named in fused[j], stacked along their outputs."""
  for linear_spec, names in zip(spec.linear, fused):
    linear_spec.weight = np.concatenate([getattr(a, name).weight for name in names])


def _set_norm(spec: Any, n: weights_lib.Norm) -> None:
  spec.gamma, spec.beta = n.scale, n.bias


def _set_ffn(spec: Any, f: weights_lib.FeedForward) -> None:
  for linear_spec, linear in ((spec.linear_0, f.inner), (spec.linear_1, f.outer)):
    linear_spec.weight, linear_spec.bias = linear.weight, linear.bias


# The model options of published models (an imported Marian model's) that this export does
# not write: such a model goes to transformers and through CTranslate2's own converter.
_PAPERS_ONLY = ("activation", "attention_bias", "output_bias", "position_layout",
                "layer_norm_epsilon", "embeddings", "target_vocab_size", "decoder_layers")


def check_supported(cfg: configs.TransformerConfig, separate_vocabularies: bool = False) -> None:
  """ValueError naming the options this export does not write (an imported model's), and the
  way that runs the model."""
  paper = configs.TransformerConfig()
  other = [f"{name}={getattr(cfg, name)!r}" for name in _PAPERS_ONLY
           if getattr(cfg, name) != getattr(paper, name)]
  if separate_vocabularies:
    # ct2-transformers-converter registers MarianTokenizer's source vocabulary for both sides.
    raise ValueError(f"the CTranslate2 export writes the paper's model, not one with "
                     f"{', '.join(other + ['separate source and target vocabularies'])}, which "
                     "CTranslate2's Marian converter does not carry either: t2t-translate and "
                     "t2t-serve --engine jax run it")
  if other:
    raise ValueError(f"the CTranslate2 export writes the paper's model, not one with "
                     f"{', '.join(other)}: t2t-translate and t2t-serve --engine jax run it; for "
                     "CTranslate2, export it with --to huggingface and convert that with "
                     "ct2-transformers-converter")


def ctranslate2_spec(cfg: configs.TransformerConfig, params: Any, tokens: Sequence[str]) -> Any:
  """A ctranslate2 TransformerSpec holding our weights (no permutation), as a converted Marian model.

  The decoder starts from <pad> (id 0) as ours does; the source pieces come with
  their `</s>` (`add_source_eos` off); <pad> is never generated (its logit biased
  by PAD_LOGIT_BIAS, which leaves every other token's order unchanged).
  """
  check_supported(cfg)
  specs = loading.require("ctranslate2.specs")
  w = weights_lib.from_params(cfg, params)
  spec = specs.TransformerSpec.from_config(
      cfg.num_layers, cfg.num_heads, pre_norm=False, activation=specs.Activation.RELU)
  table = position_table(cfg.max_len, cfg.d_model)
  for stack in (spec.encoder, spec.decoder):
    embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
    embeddings.weight = w.embedding
    stack.scale_embeddings = True                                        # times sqrt(d_model)
    stack.position_encodings.encodings = table
  spec.decoder.projection.weight = w.embedding
  bias = np.zeros((cfg.vocab_size,), np.float32)
  bias[ids.PAD_ID] = PAD_LOGIT_BIAS
  spec.decoder.projection.bias = bias

  for layer, ours in zip(spec.encoder.layer, w.encoder):
    _set_attention(layer.self_attention, ours.self_attention, (("query", "key", "value"), ("out",)))
    _set_norm(layer.self_attention.layer_norm, ours.self_attention_norm)
    _set_ffn(layer.ffn, ours.ffn)
    _set_norm(layer.ffn.layer_norm, ours.ffn_norm)
  for layer, ours in zip(spec.decoder.layer, w.decoder):
    _set_attention(layer.self_attention, ours.self_attention, (("query", "key", "value"), ("out",)))
    _set_norm(layer.self_attention.layer_norm, ours.self_attention_norm)
    _set_attention(layer.attention, ours.cross_attention, (("query",), ("key", "value"), ("out",)))
    _set_norm(layer.attention.layer_norm, ours.cross_attention_norm)
    _set_ffn(layer.ffn, ours.ffn)
    _set_norm(layer.ffn.layer_norm, ours.ffn_norm)

  spec.config.unk_token, spec.config.eos_token = "<unk>", "</s>"
  spec.config.bos_token = spec.config.decoder_start_token = "<pad>"
  spec.config.add_source_eos = False       # the caller's pieces end with </s> (USAGE)
  spec.config.layer_norm_epsilon = cfg.layer_norm_epsilon
  spec.register_source_vocabulary(list(tokens))
  spec.register_target_vocabulary(list(tokens))
  return spec


def save_ctranslate2(spec: Any, out_dir: str | os.PathLike, quantization: Optional[str] = None,
                     force: bool = False) -> pathlib.Path:
  """Validates `spec` and writes it as a CTranslate2 model directory."""
  converters = loading.require("ctranslate2.converters")

  class _SpecConverter(converters.Converter):
    def _load(self):
      return spec

  _SpecConverter().convert(str(out_dir), quantization=quantization, force=force)
  return pathlib.Path(out_dir)


def write_ctranslate2(cfg: configs.TransformerConfig, params: Any, spm_path: str,
                      out_dir: str | os.PathLike, quantization: Optional[str] = None,
                      force: bool = False,
                      shortlist: Optional[shortlist_lib.Shortlist] = None) -> pathlib.Path:
  """The model directory, with the tokenizer that makes its source pieces beside it.

  MarianTokenizer's files (export/huggingface.py `write_tokenizer`) and our
  SentencePiece model as `spm.model` (`sp.encode(line, out_type=str) + ["</s>"]`).
  `shortlist`: written as the model's vocabulary map (`VMAP`), which
  `translate_batch(..., use_vmap=True)` reads.
  """
  tokens = loading.vocabulary(spm_path, cfg.vocab_size)
  spec = ctranslate2_spec(cfg, params, tokens)
  out_dir = save_ctranslate2(spec, out_dir, quantization, force)
  huggingface.write_tokenizer(cfg, spm_path, out_dir)
  shutil.copyfile(spm_path, out_dir / "spm.model")
  if shortlist is not None:
    (out_dir / VMAP).write_text(shortlist_lib.vocabulary_map(shortlist, tokens), "utf-8")
  return out_dir


def export_ctranslate2(workdir: str | os.PathLike, out_dir: str | os.PathLike,
                       average: bool = True, quantization: Optional[str] = None,
                       force: bool = False) -> pathlib.Path:
  """Writes a CTranslate2 model directory (`quantization`: None, "int8", ...); returns its path.

  The work directory's lexical shortlist, when it has one (`t2t-shortlist`), becomes
  the model's vocabulary map (`VMAP`).
  """
  loading.require("ctranslate2")
  loading.require("transformers")
  check_supported(workdir_lib.load_config(workdir),
                  vocab.own_target_vocabulary(pathlib.Path(workdir) / "vocab"))
  cfg, params, spm_path = loading.load_workdir(workdir, average)
  table_path = pathlib.Path(workdir) / shortlist_lib.FILE
  table = (shortlist_lib.load(table_path, vocab.Tokenizer(spm_path)) if table_path.is_file()
           else None)
  out_dir = write_ctranslate2(cfg, params, spm_path, out_dir, quantization, force, table)
  log.info("Wrote a CTranslate2 model to %s; %s", out_dir, USAGE)
  return out_dir
