"""Export to transformers (MarianMTModel) and CTranslate2: the same function, the same search.

A briefly trained model (`trained_workdir`, tests/trained.py) is exported both
ways. Its logits in transformers equal ours on real positions, and beam search
without a length penalty finds the same translations in all three engines. A
translation that differs must be a tie: our model gives both the same score.
With a length penalty the engines rank differently by design (docs/export.md).
"""

import functools
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trained
from t2t_jax import (checkpoint, configs, decode, engines, export, export_cli, inference, layers,
                     model, vocab, workdir as workdir_lib)
from t2t_jax.ids import EOS_ID

NUM_SENTENCES = 32
TIE = 1e-4            # log-probability difference under which two hypotheses are tied


# ------------------------------------------------------------- without the extras


def test_permutation_turns_our_sinusoids_into_marians_halves():
  d_model, length = 16, 40
  ours = np.asarray(layers.sinusoidal_positions(length, d_model))
  # Marian (transformers' MarianSinusoidalPositionalEmbedding): sines of every
  # frequency, then the cosines.
  angles = np.arange(length)[:, None] / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
  marian = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
  perm = export.marian_permutation(d_model)
  assert sorted(perm) == list(range(d_model))
  np.testing.assert_allclose(ours[:, perm], marian, atol=1e-5)


def test_models_the_engines_cannot_run_are_refused_with_the_reason():
  for overrides, reason in ((dict(positional_encoding="learned"), "positional_encoding"),
                            (dict(share_embeddings=False), "share_embeddings"),
                            (dict(attention_window=3), "attention_window"),
                            (dict(d_k=16), "d_k=16")):
    with pytest.raises(ValueError, match=reason):
      export.check_exportable(configs.get_config("demo", **overrides))
  export.check_exportable(configs.get_config("demo"))


def test_core_modules_never_import_the_export_libraries():
  code = ("import sys; import t2t_jax.export.convert, t2t_jax.cli.translate, t2t_jax.decoding.batch, "
          "t2t_jax.runtime.checkpoint, t2t_jax.model.transformer\n"
          "loaded = {'torch', 'transformers', 'ctranslate2', 'safetensors'} & set(sys.modules)\n"
          "assert not loaded, loaded")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
  assert result.returncode == 0, result.stderr[-2000:]


def test_missing_extras_give_one_line_telling_how_to_install(monkeypatch, tmp_path, capsys):
  monkeypatch.setitem(sys.modules, "transformers", None)   # import now raises ImportError
  monkeypatch.setitem(sys.modules, "ctranslate2", None)
  with pytest.raises(export.MissingExtrasError, match=r"pip install -e \.\[export\]"):
    export.export_huggingface(tmp_path, tmp_path / "hf")
  with pytest.raises(SystemExit, match=r"error: .*pip install -e \.\[export\]"):
    export_cli.main(["--workdir", str(tmp_path), "--to", "ctranslate2", str(tmp_path / "ct2")])


def test_vocabulary_lists_the_pieces_then_placeholders(trained_workdir):
  spm = str(trained_workdir / "vocab" / "spm.model")
  pieces = vocab.Tokenizer(spm).vocab_size
  tokens = export.vocabulary(spm, pieces + 3)
  assert tokens[:3] == ["<pad>", "</s>", "<unk>"]
  assert tokens[pieces:] == [f"<unused{i}>" for i in range(pieces, pieces + 3)]
  assert len(set(tokens)) == len(tokens)
  with pytest.raises(ValueError, match="inconsistent"):
    export.vocabulary(spm, pieces - 1)


# ------------------------------------------------------------------ with the extras


@pytest.fixture(scope="module")
def extras():
  return {name: pytest.importorskip(name) for name in
          ("torch", "transformers", "safetensors", "ctranslate2")}


@pytest.fixture(scope="module")
def ours(trained_workdir):
  """Config, params, tokenizer, held-out sources and our beam-4 alpha-0 translations."""
  cfg = workdir_lib.load_config(trained_workdir)
  params = checkpoint.load_params(trained_workdir)
  tokenizer = inference.load_tokenizer(trained_workdir)
  sources = trained.held_out_sources(NUM_SENTENCES)
  ids = [tokenizer.encode(s) for s in sources]             # EOS-terminated
  outputs = batch.decode_ids(cfg, params, [i[:-1] for i in ids], beam_size=4, alpha=0.0,
                             batch_size=NUM_SENTENCES)    # one batch: one compilation
  assert sum(len(set(o)) > 2 for o in outputs) > NUM_SENTENCES // 2   # real sentences
  return cfg, params, tokenizer, sources, ids, outputs


def _padded(rows):
  out = np.zeros((len(rows), max(map(len, rows))), np.int32)
  for r, row in enumerate(rows):
    out[r, :len(row)] = row
  return out


@functools.partial(jax.jit, static_argnums=0)
def _forward(cfg, params, inputs, targets):
  return model.Transformer(cfg).apply({"params": params}, inputs, targets)


def _log_probs(cfg, params, sources, outputs):
  """Our model's log P(output + EOS | source) per row, normalised as in beam search."""
  inputs, targets = _padded(sources), _padded([o + [EOS_ID] for o in outputs])
  logits = _forward(cfg, params, inputs, targets)
  log_probs = jax.nn.log_softmax(logits, axis=-1)                    # [batch, length, vocab]
  gold = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
  return np.asarray(jnp.sum(jnp.where(targets != 0, gold, 0.0), axis=1))


def _assert_same_or_tied(ours, theirs, engine):
  """Identical translations, or ties: ours and theirs have the same log-probability."""
  cfg, params, _, _, ids, outputs = ours
  differ = [i for i, (a, b) in enumerate(zip(outputs, theirs)) if a != b]
  print(f"{engine}: {NUM_SENTENCES - len(differ)}/{NUM_SENTENCES} translations identical")
  if differ:
    sources = [ids[i] for i in differ]
    gaps = (_log_probs(cfg, params, sources, [theirs[i] for i in differ])
            - _log_probs(cfg, params, sources, [outputs[i] for i in differ]))
    for i, gap in zip(differ, gaps):
      assert abs(gap) < TIE, f"{engine} sentence {i}: {theirs[i]} vs ours {outputs[i]}, gap {gap}"
  assert len(differ) <= 2


@pytest.fixture(scope="module")
def hf_dir(extras, trained_workdir, tmp_path_factory):
  out = tmp_path_factory.mktemp("hf")
  assert export.export_huggingface(trained_workdir, out) == out
  return out


@pytest.fixture(scope="module")
def hf_model(extras, hf_dir):
  extras["torch"].set_num_threads(1)   # the tests run two processes on two cores
  return extras["transformers"].MarianMTModel.from_pretrained(hf_dir).eval()


def test_transformers_loads_the_export_and_its_logits_equal_ours(extras, ours, hf_dir, hf_model):
  torch, transformers = extras["torch"], extras["transformers"]
  cfg, params, tokenizer, sources, ids, outputs = ours
  hf_tokenizer = transformers.MarianTokenizer.from_pretrained(hf_dir)
  assert hf_tokenizer(sources)["input_ids"] == ids
  inputs = _padded(ids)
  targets = _padded([o + [EOS_ID] for o in outputs])
  decoder_inputs = np.array(model.shift_right(targets))  # 0 first: Marian's decoder start
  with torch.no_grad():
    theirs = hf_model(input_ids=torch.from_numpy(inputs).long(),
                      attention_mask=torch.from_numpy(inputs != 0).long(),
                      decoder_input_ids=torch.from_numpy(decoder_inputs).long()).logits.numpy()
  ours_logits = np.asarray(_forward(cfg, params, inputs, targets))
  real = targets != 0
  assert theirs.shape == ours_logits.shape
  np.testing.assert_allclose(theirs[real], ours_logits[real], atol=1e-4, rtol=0)
  # The tokenizer turns our ids back into our text.
  assert hf_tokenizer.batch_decode(outputs) == [tokenizer.decode(o) for o in outputs]


def test_transformers_beam_search_finds_our_translations(ours, hf_model):
  cfg, _, _, _, ids, _ = ours
  theirs = engines.marian_generate(hf_model, ids, engines.output_limits(cfg, ids), beam_size=4,
                                   length_penalty=0.0)
  _assert_same_or_tied(ours, theirs, "transformers")


def test_ctranslate2_float32_finds_our_translations_and_scores(extras, ours, trained_workdir,
                                                               tmp_path):
  ctranslate2 = extras["ctranslate2"]
  cfg, params, tokenizer, _, ids, _ = ours
  out = export.export_ctranslate2(trained_workdir, tmp_path / "ct2")
  translator = ctranslate2.Translator(str(out), device="cpu", compute_type="float32",
                                      intra_threads=1)
  tokens = export.vocabulary(tokenizer.model_path, cfg.vocab_size)
  theirs, scores = engines.ctranslate2_translate(
      translator, tokens, ids, engines.output_limits(cfg, ids), beam_size=4, length_penalty=0.0)
  _assert_same_or_tied(ours, theirs, "ctranslate2")
  assert not any(0 in output for output in theirs)   # CTranslate2 cannot forbid <pad>; unused
  # Its scores (log P, EOS included, without a length penalty) are our model's.
  np.testing.assert_allclose(scores, _log_probs(cfg, params, ids, theirs), atol=1e-3, rtol=0)
  with pytest.raises(RuntimeError, match="already exists"):
    export.export_ctranslate2(trained_workdir, out)


def test_t2t_export_command_writes_both_formats(extras, trained_workdir, tmp_path, capsys):
  ctranslate2, transformers = extras["ctranslate2"], extras["transformers"]
  export_cli.main(["--workdir", str(trained_workdir), "--to", "ctranslate2",
                   str(tmp_path / "ct2"), "--quantization", "int8"])
  translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
  result = translator.translate_batch([["▁The", "▁dog"]], beam_size=2)
  assert result[0].hypotheses[0]
  export_cli.main(["--workdir", str(trained_workdir), "--to", "huggingface", str(tmp_path / "hf")])
  assert transformers.MarianMTModel.from_pretrained(tmp_path / "hf").config.d_model == 64
  assert "Exported" in capsys.readouterr().err
  with pytest.raises(SystemExit, match="does not exist"):
    export_cli.main(["--workdir", str(tmp_path / "nowhere"), "--to", "huggingface", "x"])
  with pytest.raises(SystemExit, match="ctranslate2 only"):
    export_cli.main(["--workdir", str(trained_workdir), "--to", "huggingface", "x", "--force"])
