"""Our parameters as the engines store them: the one reader of the parameter tree for export.

    check_exportable(cfg)                  # ValueError naming what the engines cannot run
    w = from_params(cfg, params)           # Weights: NumPy float32, [out, in] like torch.nn.Linear
    w.encoder[0].self_attention.query.weight       # [heads * depth, d_model]
    w.decoder[1].cross_attention.out.weight        # [d_model, heads * depth]
    params = to_params(cfg, w)             # the other way (an imported model: export/import_marian.py)

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

import jax
import numpy as np

from t2t_jax import configs
from t2t_jax.model import attention
from t2t_jax.model import transformer


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
  """The embeddings as the config's `embeddings` ties them: a matrix of a role that shares
  another's is None."""
  embedding: np.ndarray           # [vocab, d_model]: the source embedding (the paper's: all three)
  encoder: list[Layer]
  decoder: list[Layer]
  output_bias: Optional[np.ndarray] = None    # [target vocab]; None where ours has none (the paper's)
  target_embedding: Optional[np.ndarray] = None   # [target vocab, d_model]; None: `embedding`
  output: Optional[np.ndarray] = None   # [target vocab, d_model] pre-softmax; None: the target's

  def roles(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The source embedding, the target embedding and the output projection, shared or not."""
    target = self.embedding if self.target_embedding is None else self.target_embedding
    return self.embedding, target, target if self.output is None else self.output


def check_exportable(cfg: configs.TransformerConfig) -> None:
  """Raises ValueError naming the setting when the engines cannot run this model."""
  problems = []
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


_PROJECTIONS = ("query", "key", "value", "out")


def _attention(p: Any) -> Attention:
  """One attention's projections, read through the model's own `MultiHeadAttention.weights`
  (and `.biases`, None where it has none)."""
  w = attention.MultiHeadAttention.weights(p)              # x @ W, heads major: W [in, out]
  b = attention.MultiHeadAttention.biases(p)
  return Attention(*(Linear(_f32(np.asarray(w[name]).T), None if b is None else _f32(b[name]))
                     for name in _PROJECTIONS))


def _dense(p: Any) -> Linear:
  return Linear(_f32(np.asarray(p["kernel"]).T), _f32(p["bias"]))


def _norm(p: Any) -> Norm:
  return Norm(_f32(p["scale"]), _f32(p["bias"]))


def _ffn(p: Any) -> FeedForward:
  return FeedForward(_dense(p["wi"]), _dense(p["wo"]))


def _embedding_names(cfg: configs.TransformerConfig) -> tuple[str, Optional[str], Optional[str]]:
  """The params of the source embedding, of the target embedding and of the output projection
  (`transformer.EMBEDDING_PARAMS`); None for a role that reads the previous role's."""
  names = transformer.EMBEDDING_PARAMS[cfg.embeddings]
  return (names["source"], names["target"] if names["target"] != names["source"] else None,
          names["output"] if names["output"] != names["target"] else None)


def from_params(cfg: configs.TransformerConfig, params: Any) -> Weights:
  """Our params (a trained model's or freshly initialised) as `Weights`."""
  check_exportable(cfg)
  encoder, decoder = [], []
  for i in range(cfg.num_layers):
    p = params["encoder"][f"layers_{i}"]
    encoder.append(Layer(_attention(p["self_attention"]), _norm(p["norm_attention"]), None, None,
                         _ffn(p["ffn"]), _norm(p["norm_ffn"])))
  for i in range(cfg.num_decoder_layers):
    p = params["decoder"][f"layers_{i}"]
    decoder.append(Layer(_attention(p["self_attention"]), _norm(p["norm_self"]),
                         _attention(p["cross_attention"]), _norm(p["norm_cross"]),
                         _ffn(p["ffn"]), _norm(p["norm_ffn"])))
  output_bias = _f32(params["output_bias"]) if "output_bias" in params else None
  source, target, output = (None if name is None else _f32(params[name]["embedding"])
                            for name in _embedding_names(cfg))
  return Weights(source, encoder, decoder, output_bias, target, output)


# ------------------------------------------------------------------------- the other way


def _attention_params(a: Attention, cfg: configs.TransformerConfig) -> dict[str, Any]:
  """`_attention` inverted: [out, in] maps -> the module's kernels [d, heads, depth] and
  [heads, depth, d] (and biases [heads, depth], [d])."""
  heads = cfg.num_heads
  out = {name: {"kernel": getattr(a, name).weight.T.reshape(cfg.d_model, heads, -1)}
         for name in ("query", "key", "value")}
  out["out"] = {"kernel": a.out.weight.T.reshape(heads, -1, cfg.d_model)}
  for name in _PROJECTIONS:
    if getattr(a, name).bias is not None:
      out[name]["bias"] = getattr(a, name).bias.reshape(out[name]["kernel"].shape[-2:]
                                                        if name != "out" else (cfg.d_model,))
  return out


def _dense_params(linear: Linear) -> dict[str, np.ndarray]:
  return {"kernel": _f32(linear.weight.T), "bias": _f32(linear.bias)}


def _norm_params(n: Norm) -> dict[str, np.ndarray]:
  return {"scale": _f32(n.scale), "bias": _f32(n.bias)}


def to_params(cfg: configs.TransformerConfig, w: Weights) -> dict[str, Any]:
  """`from_params` inverted: `Weights` as the params of the model `cfg` builds (NumPy float32).

  The caller checks the result's shapes against the model's (`transformer.init_params`).
  """
  check_exportable(cfg)
  ffn = lambda f: {"wi": _dense_params(f.inner), "wo": _dense_params(f.outer)}
  params: dict[str, Any] = {"encoder": {}, "decoder": {}}
  for name, matrix in zip(_embedding_names(cfg), (w.embedding, w.target_embedding, w.output)):
    if (name is None) != (matrix is None):
      raise ValueError(f"the weights' embedding matrices are not those of embeddings="
                       f"{cfg.embeddings!r} (docs/model.md)")
    if name is not None:
      params[name] = {"embedding": _f32(matrix)}
  for i, enc in enumerate(w.encoder):
    params["encoder"][f"layers_{i}"] = {
        "self_attention": _attention_params(enc.self_attention, cfg),
        "norm_attention": _norm_params(enc.self_attention_norm),
        "ffn": ffn(enc.ffn), "norm_ffn": _norm_params(enc.ffn_norm)}
  for i, dec in enumerate(w.decoder):
    params["decoder"][f"layers_{i}"] = {
        "self_attention": _attention_params(dec.self_attention, cfg),
        "norm_self": _norm_params(dec.self_attention_norm),
        "cross_attention": _attention_params(dec.cross_attention, cfg),
        "norm_cross": _norm_params(dec.cross_attention_norm),
        "ffn": ffn(dec.ffn), "norm_ffn": _norm_params(dec.ffn_norm)}
  if w.output_bias is not None:
    params["output_bias"] = _f32(w.output_bias)
  return jax.tree.map(_f32, params)
