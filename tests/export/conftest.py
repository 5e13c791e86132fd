"""Fixtures of the export tests: our translations of held-out sentences (`extras`: tests/conftest.py)."""

import pytest

from export import agreement
import trained
from t2t_jax.decoding import sentence_batches
from t2t_jax.inference import translator
from t2t_jax.runtime import averaging
from t2t_jax.runtime import workdir as workdir_lib


@pytest.fixture(scope="session")
def ours(extras, trained_workdir):  # pylint: disable=unused-argument
  """Config, params, tokenizer, held-out sources and our beam-4 alpha-0 translations.

  Every test that compares them needs the export extra: without it they skip here,
  before the model is trained (if no other test has) and the sentences decoded."""
  n = agreement.NUM_SENTENCES
  cfg = workdir_lib.load_config(trained_workdir)
  params = averaging.load_params(trained_workdir)
  tokenizer = translator.load_tokenizer(trained_workdir)
  sources = trained.held_out_sources(n)
  ids = [tokenizer.encode(s) for s in sources]             # EOS-terminated
  outputs = sentence_batches.decode_ids(cfg, params, [i[:-1] for i in ids], beam_size=4,
                                        alpha=0.0, batch_size=n)   # one batch: one compilation
  assert sum(len(set(o)) > 2 for o in outputs) > n // 2   # real sentences
  return cfg, params, tokenizer, sources, ids, outputs
