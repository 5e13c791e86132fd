"""Attention plots on synthetic weights, and attention maps taken from the model itself."""

import io

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib import colors

from t2t_jax.inference import visualize


def _weights(heads, q, k, seed=0):
  logits = np.random.default_rng(seed).normal(size=(heads, q, k)) * 2
  e = np.exp(logits - logits.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _renders(fig):
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=40)
  return buffer.getvalue()[:4] == b"\x89PNG"


def test_plot_heads_one_panel_per_head_with_its_weights():
  w = _weights(6, 3, 5)
  q, k = ["a", "b", "c"], ["v", "w", "x", "y", "z"]
  fig = visualize.plot_heads(w, q, k, title="layer 2", columns=4)
  panels = [ax for ax in fig.axes if ax.images and ax.get_title().startswith("head")]
  assert [ax.get_title() for ax in panels] == [f"head {h}" for h in range(6)]
  for h, ax in enumerate(panels):
    np.testing.assert_allclose(ax.images[0].get_array(), w[h], rtol=1e-6)
    assert [t.get_text() for t in ax.get_xticklabels()] == k
    assert [t.get_text() for t in ax.get_yticklabels()] == q
  assert _renders(fig)
  with pytest.raises(ValueError, match="do not match"):
    visualize.plot_heads(w, q, k[:-1])
  with pytest.raises(ValueError, match="heads, q_length, kv_length"):
    visualize.plot_heads(w[0], q, k)


def test_plot_token_across_heads_draws_one_colour_per_head_weighted_by_attention():
  w = _weights(4, 5, 5, seed=1)
  tokens = ["the", "law", "will", "never", "be"]
  query, min_weight = 1, 0.05
  fig = visualize.plot_token_across_heads(w, tokens, query, min_weight=min_weight)
  ax = fig.axes[0]
  drawn = [line for line in ax.lines if len(line.get_xdata()) == 2]
  per_head = {}
  for line in drawn:
    per_head.setdefault(colors.to_hex(line.get_color()), []).append(line)
  assert len(per_head) == 4  # distinct colours
  expected_counts = sorted(int((w[h, query] >= min_weight).sum()) for h in range(4))
  assert sorted(len(lines) for lines in per_head.values()) == expected_counts
  # Wider lines for larger weights, and each line ends at the key it belongs to.
  for h, lines in zip(range(4), per_head.values()):
    keys = [j for j in range(5) if w[h, query, j] >= min_weight]
    ends = [int(round(len(tokens) - 1 - line.get_ydata()[1])) for line in lines]
    assert ends == keys
    widths = [line.get_linewidth() for line in lines]
    order = np.argsort([w[h, query, j] for j in keys])
    assert np.all(np.diff(np.asarray(widths)[order]) >= 0)
  bold = [t.get_text() for t in ax.texts if t.get_fontweight() == "bold"]
  assert bold == ["law"]
  assert _renders(fig)
  with pytest.raises(ValueError, match="query_index"):
    visualize.plot_token_across_heads(w, tokens, 7)
  with pytest.raises(ValueError, match="heads \\[9\\]"):
    visualize.plot_token_across_heads(w, tokens, 0, heads=[9])


def test_plot_alignment_averages_heads_or_shows_one():
  w = _weights(4, 3, 6, seed=2)
  source, target = list("abcdef"), list("xyz")
  fig = visualize.plot_alignment(w, source, target)
  np.testing.assert_allclose(fig.axes[0].images[0].get_array(), w.mean(0), rtol=1e-6)
  assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == source
  fig = visualize.plot_alignment(w, source, target, head=2)
  np.testing.assert_allclose(fig.axes[0].images[0].get_array(), w[2], rtol=1e-6)
  assert _renders(fig)
  with pytest.raises(ValueError, match="head=4"):
    visualize.plot_alignment(w, source, target, head=4)


def test_attention_maps_are_the_models_own_probabilities():
  import functools

  import jax

  from t2t_jax import configs
  from t2t_jax.model import transformer

  cfg = configs.get_config("demo", num_layers=2, d_model=32, d_ff=64, num_heads=4,
                           vocab_size=40, dropout_rate=0.0)
  # Random parameters of the model's shapes (no compile for init): peaked attention.
  shapes = jax.eval_shape(functools.partial(transformer.init_params, cfg.model), jax.random.key(0))
  rng = np.random.default_rng(3)
  params = jax.tree_util.tree_map(
      lambda s: (0.3 * rng.normal(size=s.shape)).astype(np.float32), shapes)
  source, target = [5, 9, 12, 7, 1], [8, 3, 1]
  maps = visualize.attention_maps(cfg, params, source, target)
  assert maps["encoder_self"].shape == (2, 4, 5, 5)
  assert maps["decoder_self"].shape == (2, 4, 3, 3)
  assert maps["encoder_decoder"].shape == (2, 4, 3, 5)
  for w in maps.values():
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
  # Causal: decoder step t never looks at later positions.
  np.testing.assert_array_less(np.triu(maps["decoder_self"], k=1), 1e-6)
  # NumPy reference for the first encoder layer: softmax(Q K^T / sqrt(d_k)) of the
  # scaled embeddings plus sinusoids (interleaved sin/cos).
  d = cfg.d_model
  x = params["embedding"]["embedding"][source] * np.sqrt(d)
  angles = np.arange(len(source))[:, None] / 10000.0 ** (np.arange(0, d, 2) / d)
  x = x + np.stack([np.sin(angles), np.cos(angles)], -1).reshape(len(source), d)
  attention = params["encoder"]["layers_0"]["self_attention"]
  q = np.einsum("ld,dhk->hlk", x, attention["query"]["kernel"])
  k = np.einsum("ld,dhk->hlk", x, attention["key"]["kernel"])
  logits = q @ k.transpose(0, 2, 1) / np.sqrt(cfg.key_depth)
  expected = np.exp(logits - logits.max(-1, keepdims=True))
  expected /= expected.sum(-1, keepdims=True)
  np.testing.assert_allclose(maps["encoder_self"][0], expected, atol=1e-5)
  with pytest.raises(ValueError, match="without padding"):
    visualize.attention_maps(cfg, params, [5, 1, 0], target)


def test_token_labels_name_eos_and_padding():
  class Pieces:
    def id_to_piece(self, i):
      return f"\u2581w{i}"

  assert visualize.token_labels(Pieces(), [5, 7, 1]) == ["\u2581w5", "\u2581w7", "</s>"]
  wrapped = type("Tokenizer", (), {"sp": Pieces()})()
  assert visualize.token_labels(wrapped, np.array([3, 1, 0])) == ["\u2581w3", "</s>", "<pad>"]
