"""Our parameters as the engines store them: the one reader of the parameter tree for export.

    check_exportable(cfg)                  # ValueError naming what the engines cannot run
    w = from_params(cfg, params)           # Weights: NumPy float32, [out, in] like torch.nn.Linear
    w.encoder[0].self_attention.query.weight       # [heads * depth, d_model]
    w.decoder[1].cross_attention.out.weight        # [d_model, heads * depth]

Both formats (export/huggingface.py, export/ctranslate2.py) build their models
from `Weights` and never read `params` themselves, so a change of our layout
is one edit here; the attention projections come from the model's own
`MultiHeadAttention.weights`. transformers and
CTranslate2 both store a linear map as `weight` [out, in] and `bias` [out], the
transpose of our kernels [in, ...]; the attention heads are the major part of the
projected dimension in both layouts, so a reshape keeps them apart.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from t2t_jax import configs
from t2t_jax.model import attention


class Linear(NamedTuple):
  weight: np.ndarray              # [out, in]
  bias: Optional[np.ndarray]      # [out]; None where ours has no bias


class Norm(NamedTuple):
  scale: np.ndarray               # [d_model]
  bias: np.ndarray                # [d_model]


class Attention(NamedTuple):
  query: Linear                   # [heads * depth, d_model]
  key: Linear
  value: Linear
  out: Linear                     # [d_model, heads * depth]


class FeedForward(NamedTuple):
  inner: Linear                   # [d_ff, d_model], then ReLU
  outer: Linear                   # [d_model, d_ff]


class Layer(NamedTuple):
  """One post-norm layer (section 3.1): each sub-layer, then LayerNorm(x + sub-layer(x))."""
  self_attention: Attention
  self_attention_norm: Norm
  cross_attention: Optional[Attention]    # decoder layers only
  cross_attention_norm: Optional[Norm]
  ffn: FeedForward
  ffn_norm: Norm


class Weights(NamedTuple):
  embedding: np.ndarray           # [vocab, d_model]: both embeddings and the output projection
  encoder: list[Layer]
  decoder: list[Layer]


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


def _f32(x: Any) -> np.ndarray:
  return np.ascontiguousarray(np.asarray(x, np.float32))


def _attention(p: Any) -> Attention:
  """One attention's projections, read through the model's own `MultiHeadAttention.weights`."""
  w = attention.MultiHeadAttention.weights(p)              # x @ W, heads major: W [in, out]
  return Attention(*(Linear(_f32(np.asarray(w[name]).T), None)
                     for name in ("query", "key", "value", "out")))


def _dense(p: Any) -> Linear:
  return Linear(_f32(np.asarray(p["kernel"]).T), _f32(p["bias"]))


def _norm(p: Any) -> Norm:
  return Norm(_f32(p["scale"]), _f32(p["bias"]))


def _ffn(p: Any) -> FeedForward:
  return FeedForward(_dense(p["wi"]), _dense(p["wo"]))


def from_params(cfg: configs.TransformerConfig, params: Any) -> Weights:
  """Our params (a trained model's or freshly initialised) as `Weights`."""
  check_exportable(cfg)
  encoder, decoder = [], []
  for i in range(cfg.num_layers):
    p = params["encoder"][f"layers_{i}"]
    encoder.append(Layer(_attention(p["self_attention"]), _norm(p["norm_attention"]), None, None,
                         _ffn(p["ffn"]), _norm(p["norm_ffn"])))
    p = params["decoder"][f"layers_{i}"]
    decoder.append(Layer(_attention(p["self_attention"]), _norm(p["norm_self"]),
                         _attention(p["cross_attention"]), _norm(p["norm_cross"]),
                         _ffn(p["ffn"]), _norm(p["norm_ffn"])))
  return Weights(_f32(params["embedding"]["embedding"]), encoder, decoder)
