"""The one reader of our parameters for export: which models it refuses, and the layout it gives."""

import jax
import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.export import weights
from t2t_jax.model import transformer


def test_models_the_engines_cannot_run_are_refused_with_the_reason():
  for overrides, reason in ((dict(positional_encoding="learned"), "positional_encoding"),
                            (dict(attention_window=3), "attention_window"),
                            (dict(d_k=16), "d_k=16")):
    with pytest.raises(ValueError, match=reason):
      weights.check_exportable(configs.get_config("demo", **overrides))
  weights.check_exportable(configs.get_config("demo"))
  for mode in configs.EMBEDDINGS:   # each embedding mode is Marian's flags (export/huggingface.py)
    weights.check_exportable(configs.get_config("demo", embeddings=mode))


def test_linear_maps_are_our_kernels_as_out_by_in():
  cfg = configs.get_config("demo", num_layers=1, d_model=16, d_ff=24, num_heads=2, vocab_size=20)
  params = jax.device_get(transformer.init_params(cfg.model, jax.random.key(0)))
  w = weights.from_params(cfg, params)
  x = np.random.default_rng(0).standard_normal((3, cfg.d_model)).astype(np.float32)
  a = params["decoder"]["layers_0"]["cross_attention"]
  # x W^T (theirs) equals x . kernel (ours), heads major in the projected dimension.
  np.testing.assert_allclose(x @ w.decoder[0].cross_attention.key.weight.T,
                             np.einsum("bd,dhk->bhk", x, a["key"]["kernel"]).reshape(3, -1),
                             atol=1e-5)
  heads = np.random.default_rng(1).standard_normal((3, cfg.d_model)).astype(np.float32)
  np.testing.assert_allclose(heads @ w.decoder[0].cross_attention.out.weight.T,
                             np.einsum("bhk,hkd->bd", heads.reshape(3, 2, -1), a["out"]["kernel"]),
                             atol=1e-5)
  ffn = params["encoder"]["layers_0"]["ffn"]
  np.testing.assert_allclose(w.encoder[0].ffn.inner.weight.T, ffn["wi"]["kernel"])
  np.testing.assert_array_equal(w.encoder[0].ffn.outer.bias, ffn["wo"]["bias"])
  assert w.encoder[0].cross_attention is None and len(w.decoder) == cfg.num_layers


@pytest.mark.parametrize("options", [
    {}, dict(attention_bias=True, output_bias=True),
    dict(embeddings="shared_inputs", decoder_layers=1),
    dict(embeddings="tied_output", target_vocab_size=28, output_bias=True),
    dict(embeddings="separate", target_vocab_size=28, decoder_layers=3)],
    ids=["paper", "biases", "shared_inputs", "tied_output", "separate"])
def test_to_params_inverts_from_params(options):
  cfg = configs.get_config("demo", num_layers=2, d_model=16, d_ff=24, num_heads=2,
                           vocab_size=20, **options)
  params = jax.device_get(transformer.init_params(cfg.model, jax.random.key(0)))
  rng = np.random.default_rng(2)
  params = jax.tree.map(lambda x: x + rng.normal(size=x.shape).astype(np.float32), params)
  w = weights.from_params(cfg, params)
  assert (w.output_bias is not None) == cfg.output_bias
  assert (w.encoder[1].self_attention.value.bias is not None) == cfg.attention_bias
  assert (len(w.encoder), len(w.decoder)) == (cfg.num_layers, cfg.num_decoder_layers)
  # A role that shares another's matrix has none of its own.
  assert ((w.target_embedding is None) == (cfg.embeddings in ("shared", "shared_inputs"))
          and (w.output is None) == (cfg.embeddings in ("shared", "tied_output")))
  source, target, output = w.roles()
  assert (source.shape[0], target.shape[0], output.shape[0]) == (
      cfg.vocab_size, cfg.target_vocab, cfg.target_vocab)
  back = weights.to_params(cfg, w)
  shapes = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype), tree)
  assert shapes(back) == shapes(params)
  jax.tree.map(np.testing.assert_array_equal, back, params)
