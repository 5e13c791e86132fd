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
