"""recipes/finetune.py: the parent's config under the new run's overrides, its shapes and
vocabulary enforced, its params and vocabulary handed over (the command:
tests/cli/test_train.py)."""

import jax
import pytest

from saved_states import CFG, assert_trees_equal, make_state, np_mean, save_steps
from t2t_jax.data import demo
from t2t_jax.data import vocab
from t2t_jax.recipes import finetune
from t2t_jax.runtime import averaging
from t2t_jax.runtime import workdir as workdir_lib


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
  """A run's config.json, vocabulary and checkpoints 1 and 2 (not averaged)."""
  root = tmp_path_factory.mktemp("parent")
  workdir_lib.check_or_write_config(CFG.replace(vocab_size=96), root)
  vocab.build_or_load(96, str(root / "vocab"), lambda: demo.generate(300, seed=0, max_words=12))
  save_steps(root, [1, 2])
  return root


def test_config_is_the_parents_with_the_overrides(parent):
  cfg = finetune.config(parent, {"warmup_steps": 5, "num_train_steps": 7})
  assert (cfg.warmup_steps, cfg.num_train_steps) == (5, 7)
  assert cfg.replace(warmup_steps=CFG.warmup_steps,
                     num_train_steps=CFG.num_train_steps) == CFG.replace(vocab_size=96)


def test_another_model_or_vocabulary_is_refused_naming_the_fields(parent):
  cfg = finetune.config(parent, {})
  finetune.check(cfg.replace(dropout_rate=0.3, num_train_steps=5, seed=9), parent)
  with pytest.raises(ValueError, match=r"differs \(vocab_size: 96 -> 128, d_model: 16 -> 32, "
                                       r"key_depth: 4 -> 8, value_depth: 4 -> 8\); keep"):
    finetune.check(cfg.replace(vocab_size=128, d_model=32), parent)
  # The position table's size is a shape only when it is learned.
  finetune.check(cfg.replace(max_len=cfg.max_len * 2), parent)
  learned = parent.parent / "learned"
  learned.mkdir()
  workdir_lib.check_or_write_config(cfg.replace(positional_encoding="learned"), learned)
  with pytest.raises(ValueError, match="max_len"):
    finetune.check(cfg.replace(positional_encoding="learned", max_len=cfg.max_len * 2), learned)


def test_start_copies_the_vocabulary_and_returns_the_parents_params(parent, tmp_path):
  cfg = finetune.config(parent, {"num_train_steps": 3})
  latest = finetune.start(cfg, parent, tmp_path / "child")
  assert_trees_equal(latest, jax.device_get(make_state(2).params))  # no average: the latest
  assert ((tmp_path / "child" / "vocab" / "spm.model").read_bytes()
          == (parent / "vocab" / "spm.model").read_bytes())
  averaging.average_checkpoints(parent, last=2)
  assert_trees_equal(finetune.start(cfg, parent, tmp_path / "child"), np_mean([1, 2]))
