"""inference/translator.py on a tiny random model in a temporary work directory: one line out
per line in, in input order; the averaged parameters by default (the command:
tests/cli/test_translate.py)."""

import jax
import numpy as np
import pytest

from random_run import LINES
from t2t_jax import inference


@pytest.fixture(scope="module")
def translator(random_workdir):
  return inference.Translator(random_workdir[0])


def test_every_line_gets_one_translation_in_input_order(translator):
  warnings = []
  outputs = translator.translate(LINES, warn=warnings.append)
  assert len(outputs) == len(LINES)
  assert outputs[1] == "" and outputs[5] == ""
  assert all("\n" not in out for out in outputs)
  assert sum(bool(out) for out in outputs) >= 4
  assert len(warnings) == 1 and "line 7 " in warnings[0]
  order = np.random.default_rng(0).permutation(len(LINES))
  shuffled = translator.translate([LINES[i] for i in order], warn=lambda _: None)
  assert shuffled == [outputs[i] for i in order]


def test_average_is_the_default_and_no_average_takes_the_latest(random_workdir, translator):
  workdir, first, second = random_workdir
  latest = inference.Translator(workdir, average=False).params
  for got, a, b in zip(jax.tree.leaves(translator.params), jax.tree.leaves(first),
                       jax.tree.leaves(second)):
    np.testing.assert_allclose(got, (np.asarray(a) + np.asarray(b)) / 2, rtol=1e-6)
  for got, b in zip(jax.tree.leaves(latest), jax.tree.leaves(second)):
    np.testing.assert_array_equal(got, b)


def test_from_params_translates_as_the_work_directory_does(trained_workdir):
  loaded = inference.Translator(trained_workdir)
  held = inference.Translator.from_params(loaded.cfg, loaded.params, loaded.tokenizer)
  lines = ["the small dog sleeps", "", "the old man sees the house"]
  expected = loaded.translate(lines)
  assert expected[1] == "" and all(expected[::2])
  assert held.translate(lines) == expected
  assert held.members[0].cfg == loaded.cfg.model and len(held.members) == 1


def test_int8_translates_mostly_as_float32(trained_workdir):
  """int8 products change the logits by their rounding (tests/quantization/test_quantized.py), which
  may flip a near tie: most held-out sentences, not all, must come out the same. Every
  input and key is fixed, so the count is the same at every run on one machine."""
  import trained  # pylint: disable=import-outside-toplevel  (tests/ is on sys.path)
  lines = trained.held_out_sources(16)
  float32 = inference.Translator(trained_workdir)
  int8 = inference.Translator(trained_workdir, int8=True)
  assert int8.cfg.quantization == "int8" and int8.members[0].cfg.quantization == "int8"
  assert int8.params["output_projection"].values.dtype == np.int8
  expected, got = float32.translate(lines), int8.translate(lines)
  assert all(got) and sum(a == b for a, b in zip(expected, got)) >= 12
  held = inference.Translator.from_params(int8.cfg, float32.params, float32.tokenizer)
  assert held.translate(lines) == got   # the batch `got` compiled: run, not compiled again


def test_an_int8_ensemble_quantises_every_member(trained_workdir):
  """Each member is loaded as int8; a model beside itself (row-major logits, the ensemble's
  int8 projection) translates as it does alone."""
  import trained  # pylint: disable=import-outside-toplevel  (tests/ is on sys.path)
  lines = trained.held_out_sources(4)
  pair = inference.Translator(trained_workdir, ensemble=[trained_workdir], int8=True)
  assert [m.cfg.quantization for m in pair.members] == ["int8", "int8"]
  assert all(m.params["output_projection"].values.dtype == np.int8 for m in pair.members)
  assert pair.translate(lines) == inference.Translator(trained_workdir, int8=True).translate(lines)
