"""Attention maps of a trained model, as in the paper's appendix (Figures 3-5).

`attention_maps` runs the model once on a (source, target) pair and collects the
attention probabilities the model's own forward pass sows into its
`intermediates` collection: no second implementation of attention lives here.
The plotting functions take plain arrays, so they work on any attention weights:

  plot_heads                one panel per head of one layer  [heads, q, k]
  plot_token_across_heads   one query token's attention, one colour per head
                            (Figure 3's view of "making ... more difficult")
  plot_alignment            decoder-encoder attention as an alignment matrix
  token_labels              readable tick labels for token ids

They build `matplotlib.figure.Figure` objects without pyplot, so nothing global
is left behind and any backend (Agg in tests, inline in notebooks) can show them.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

# The three kinds of attention `attention_maps` returns, and where model/transformer.py sows each
# (per layer: intermediates[stack]["layers_<i>"][module]["attention_weights"]).
SOWN_AT = {"encoder_self": ("encoder", "self_attention"),
           "decoder_self": ("decoder", "self_attention"),
           "encoder_decoder": ("decoder", "cross_attention")}


# --- Attention weights from the model ----------------------------------------------------

def attention_maps(cfg: Any, params: Any, source_ids: Sequence[int],
                   target_ids: Sequence[int]) -> dict[str, np.ndarray]:
  """Every layer's and head's attention probabilities for one (source, target) pair.

  Runs the model's teacher-forced forward pass once with the `intermediates`
  collection mutable and reads back what each attention layer sowed.

  Args:
    cfg: the model's `TransformerConfig`.
    params: its parameters (e.g. `averaging.load_params(workdir)`).
    source_ids, target_ids: token ids of one sentence each, normally ending
      with EOS (1) and without padding.

  Returns:
    {"encoder_self": [layers, heads, src, src],
     "decoder_self": [layers, heads, tgt, tgt],
     "encoder_decoder": [layers, heads, tgt, src]} as float32 NumPy arrays.
    Decoder row t is the step that outputs target token t (its input is
    token t-1: the decoder sees the target shifted right).
  """
  # JAX only here: the plotting functions need nothing but NumPy and matplotlib.
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from t2t_jax.kernels import choice  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import transformer  # pylint: disable=import-outside-toplevel

  source = np.asarray(source_ids, dtype=np.int32)
  target = np.asarray(target_ids, dtype=np.int32)
  for name, ids in (("source_ids", source), ("target_ids", target)):
    if ids.ndim != 1 or ids.size == 0 or (ids == 0).any():
      raise ValueError(f"{name} must be a non-empty 1-D list of ids without padding (0), "
                       f"got {ids.tolist()}")
  model = transformer.Transformer(cfg.model, choice.plugins(cfg.model))
  forward = jax.jit(lambda p, s, t: model.apply(
      {"params": p}, s, t, train=False, mutable=["intermediates"])[1]["intermediates"])
  sown = forward(params, jnp.asarray(source[None]), jnp.asarray(target[None]))

  def stack(stack_name: str, module: str) -> np.ndarray:
    layers = cfg.num_layers if stack_name == "encoder" else cfg.num_decoder_layers
    per_layer = [sown[stack_name][f"layers_{i}"][module]["attention_weights"][0][0]
                 for i in range(layers)]                               # [heads, q, k] each
    return np.stack([np.asarray(w, dtype=np.float32) for w in per_layer])

  return {kind: stack(*where) for kind, where in SOWN_AT.items()}


# --- Plots ---------------------------------------------------------------------------

def _check(weights: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str],
           what: str) -> np.ndarray:
  weights = np.asarray(weights, dtype=np.float32)
  if weights.ndim != 3:
    raise ValueError(f"{what}: weights must be [heads, q_length, kv_length], got shape "
                     f"{weights.shape}; pick one layer (and one example) first")
  if weights.shape[1:] != (len(q_tokens), len(k_tokens)):
    raise ValueError(f"{what}: weights of shape {weights.shape} do not match "
                     f"{len(q_tokens)} query tokens and {len(k_tokens)} key tokens")
  return weights


def plot_heads(weights: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str],
               title: Optional[str] = None, columns: int = 4, vmax: Optional[float] = 1.0,
               panel_size: float = 3.0) -> Figure:
  """One heat map per head: rows are queries, columns the keys they attend to.

  Args:
    weights: [heads, q_length, kv_length] probabilities of one layer.
    vmax: colour scale top; 1.0 compares heads on one scale, None scales each panel.
  """
  weights = _check(weights, q_tokens, k_tokens, "plot_heads")
  heads = weights.shape[0]
  columns = max(1, min(columns, heads))
  rows = -(-heads // columns)
  fig = Figure(figsize=(panel_size * columns, panel_size * rows + 0.6), layout="constrained")
  axes = fig.subplots(rows, columns, squeeze=False)
  fontsize = _token_fontsize(max(len(q_tokens), len(k_tokens)), panel_size)
  for head, ax in enumerate(axes.flat):
    if head >= heads:
      ax.axis("off")
      continue
    image = ax.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto",
                      interpolation="nearest")
    ax.set_title(f"head {head}", fontsize=9)
    ax.set_xticks(range(len(k_tokens)), k_tokens, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(q_tokens)), q_tokens, fontsize=fontsize)
  fig.colorbar(image, ax=axes, shrink=0.6, label="attention")
  if title:
    fig.suptitle(title)
  return fig


def plot_token_across_heads(weights: np.ndarray, q_tokens: Sequence[str], query_index: int,
                            k_tokens: Optional[Sequence[str]] = None,
                            heads: Optional[Sequence[int]] = None, min_weight: float = 0.02,
                            title: Optional[str] = None) -> Figure:
  """Lines from one query token (left column) to the key tokens (right), one colour per head.

  A line's opacity and width grow with its attention weight; weights below
  `min_weight` are not drawn. The query token is shown in bold.

  Args:
    weights: [heads, q_length, kv_length] probabilities of one layer.
    k_tokens: defaults to `q_tokens` (self-attention).
    heads: which heads to draw (default all).
  """
  k_tokens = q_tokens if k_tokens is None else k_tokens
  weights = _check(weights, q_tokens, k_tokens, "plot_token_across_heads")
  if not 0 <= query_index < len(q_tokens):
    raise ValueError(f"query_index={query_index} is outside the {len(q_tokens)} query tokens")
  heads = list(range(weights.shape[0])) if heads is None else list(heads)
  bad = [h for h in heads if not 0 <= h < weights.shape[0]]
  if bad:
    raise ValueError(f"heads {bad} do not exist: this layer has {weights.shape[0]} heads")

  length = max(len(q_tokens), len(k_tokens))
  fig = Figure(figsize=(5.0, 0.28 * length + 1.2), layout="constrained")
  ax = fig.subplots()
  colours = colormaps["tab10" if len(heads) <= 10 else "tab20"]
  y_q = lambda i: len(q_tokens) - 1 - i  # first token at the top
  y_k = lambda j: len(k_tokens) - 1 - j
  for i, token in enumerate(q_tokens):
    ax.text(0.0, y_q(i), token, ha="right", va="center", fontsize=9,
            fontweight="bold" if i == query_index else "normal")
  for j, token in enumerate(k_tokens):
    ax.text(1.0, y_k(j), token, ha="left", va="center", fontsize=9)
  # Heads' lines start side by side so that overlapping heads stay visible.
  offsets = np.linspace(-0.2, 0.2, len(heads)) if len(heads) > 1 else [0.0]
  for colour_index, (head, offset) in enumerate(zip(heads, offsets)):
    colour = colours(colour_index % colours.N)
    row = weights[head, query_index]
    for j, w in enumerate(row):
      if w < min_weight:
        continue
      ax.plot([0.03, 0.97], [y_q(query_index) + offset, y_k(j)], color=colour,
              alpha=float(min(1.0, 0.15 + w)), linewidth=0.5 + 4.0 * float(w))
    ax.plot([], [], color=colour, linewidth=3, label=f"head {head}")
  ax.set_xlim(-0.6, 1.6)
  ax.set_ylim(-1, length)
  ax.axis("off")
  ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(4, len(heads)),
            fontsize=8, frameon=False)
  ax.set_title(title or f"attention from {q_tokens[query_index]!r}", fontsize=10)
  return fig


def plot_alignment(weights: np.ndarray, source_tokens: Sequence[str],
                   target_tokens: Sequence[str], head: Optional[int] = None,
                   title: Optional[str] = None) -> Figure:
  """Decoder-encoder attention as an alignment matrix (rows: target, columns: source).

  Args:
    weights: [heads, target_length, source_length] (one layer) or an already
      reduced [target_length, source_length].
    head: plot this head; None averages over heads.
  """
  weights = np.asarray(weights, dtype=np.float32)
  if weights.ndim == 2:
    weights = weights[None]
  weights = _check(weights, target_tokens, source_tokens, "plot_alignment")
  if head is None:
    matrix, which = weights.mean(axis=0), f"mean of {weights.shape[0]} heads"
  elif 0 <= head < weights.shape[0]:
    matrix, which = weights[head], f"head {head}"
  else:
    raise ValueError(f"head={head} does not exist: the weights have {weights.shape[0]} heads")
  fig = Figure(figsize=(0.3 * len(source_tokens) + 3.0, 0.3 * len(target_tokens) + 2.2),
               layout="constrained")
  ax = fig.subplots()
  image = ax.imshow(matrix, cmap="Greys", vmin=0.0, vmax=max(float(matrix.max()), 1e-6),
                    interpolation="nearest")
  ax.set_xticks(range(len(source_tokens)), source_tokens, rotation=90, fontsize=9)
  ax.set_yticks(range(len(target_tokens)), target_tokens, fontsize=9)
  ax.set_xlabel("source")
  ax.set_ylabel("target")
  fig.colorbar(image, ax=ax, shrink=0.7, label="attention")
  ax.set_title(title or f"decoder-encoder attention ({which})", fontsize=10)
  return fig


def _token_fontsize(length: int, panel_size: float) -> float:
  return float(np.clip(panel_size * 72 / max(length, 1) * 0.7, 4, 9))


def token_labels(tokenizer: Any, ids: Sequence[int]) -> list[str]:
  """One label per id: the SentencePiece piece (with its word-start mark), `</s>` for EOS.

  `tokenizer` is a `vocab.Tokenizer` or a `sentencepiece.SentencePieceProcessor`.
  """
  processor = getattr(tokenizer, "sp", tokenizer)
  labels = []
  for i in map(int, ids):
    if i == 1:
      labels.append("</s>")
    elif i == 0:
      labels.append("<pad>")
    else:
      labels.append(processor.id_to_piece(i))
  return labels
