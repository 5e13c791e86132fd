"""Export to transformers (MarianMTModel): the same function and the same search as ours.

A briefly trained model (`trained_workdir`, tests/trained.py) is exported. Its
logits in transformers equal ours on real positions, and beam search without a
length penalty finds the same translations. With a length penalty the engines
rank differently by design (docs/export.md).
"""

import sys

import numpy as np
import pytest

from export import agreement
from t2t_jax import errors
from t2t_jax.export import exported_search
from t2t_jax.export import huggingface
from t2t_jax.ids import EOS_ID
from t2t_jax.model import layers
from t2t_jax.model import transformer


def test_permutation_turns_our_sinusoids_into_marians_halves():
  d_model, length = 16, 40
  ours = np.asarray(layers.sinusoidal_positions(length, d_model))
  # Marian (transformers' MarianSinusoidalPositionalEmbedding): sines of every
  # frequency, then the cosines.
  angles = np.arange(length)[:, None] / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
  marian = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
  perm = huggingface.marian_permutation(d_model)
  assert sorted(perm) == list(range(d_model))
  np.testing.assert_allclose(ours[:, perm], marian, atol=1e-5)


def test_missing_extras_give_one_line_telling_how_to_install(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, "transformers", None)   # import now raises ImportError
  with pytest.raises(errors.MissingExtraError, match=r"pip install -e '\.\[export\]'"):
    huggingface.export_huggingface(tmp_path, tmp_path / "hf")


@pytest.fixture(scope="module")
def hf_dir(extras, trained_workdir, tmp_path_factory):
  out = tmp_path_factory.mktemp("hf")
  assert huggingface.export_huggingface(trained_workdir, out) == out
  return out


@pytest.fixture(scope="module")
def hf_model(extras, hf_dir):
  extras["torch"].set_num_threads(1)   # the tests run two processes on two cores
  return extras["transformers"].MarianMTModel.from_pretrained(hf_dir).eval()


@pytest.mark.exact
def test_transformers_loads_the_export_and_its_logits_equal_ours(extras, ours, hf_dir, hf_model):
  torch, transformers = extras["torch"], extras["transformers"]
  cfg, params, tokenizer, sources, ids, outputs = ours
  hf_tokenizer = transformers.MarianTokenizer.from_pretrained(hf_dir)
  assert hf_tokenizer(sources)["input_ids"] == ids
  inputs = agreement.padded(ids)
  targets = agreement.padded([o + [EOS_ID] for o in outputs])
  decoder_inputs = np.array(transformer.shift_right(targets))  # 0 first: Marian's decoder start
  with torch.no_grad():
    theirs = hf_model(input_ids=torch.from_numpy(inputs).long(),
                      attention_mask=torch.from_numpy(inputs != 0).long(),
                      decoder_input_ids=torch.from_numpy(decoder_inputs).long()).logits.numpy()
  ours_logits = np.asarray(agreement.forward(cfg, params, inputs, targets))
  real = targets != 0
  assert theirs.shape == ours_logits.shape
  np.testing.assert_allclose(theirs[real], ours_logits[real], atol=1e-4, rtol=0)
  # The tokenizer turns our ids back into our text.
  assert hf_tokenizer.batch_decode(outputs) == [tokenizer.decode(o) for o in outputs]


@pytest.mark.exact
def test_transformers_beam_search_finds_our_translations(ours, hf_model):
  cfg, _, _, _, ids, _ = ours
  theirs = exported_search.marian_generate(hf_model, ids, exported_search.output_limits(cfg, ids), beam_size=4,
                                   length_penalty=0.0)
  agreement.assert_same_or_tied(ours, theirs, "transformers")
