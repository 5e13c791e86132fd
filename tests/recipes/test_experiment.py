"""recipes/experiment.py: the experiment script end to end (train, average, decode, score,
resume, refuse); fine-tuning: the parent's config under the new run's overrides, its shapes
and vocabulary enforced, its params and vocabulary handed over."""

import json
import os
import pathlib
import re
import subprocess
import sys

import jax
import pytest

import xla_flags  # tests/xla_flags.py

from saved_states import CFG, assert_trees_equal, make_state, np_mean, save_steps
from t2t_jax.corpora import demo
from t2t_jax.data import vocab
from t2t_jax.recipes import experiment
from t2t_jax.runtime import averaging
from t2t_jax.runtime import workdir as workdir_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "wmt14_ende.py"
# One dev batch evaluated: one eval program traced, not one per length bucket.
TINY = ["--config.num_layers=1", "--config.d_model=32", "--config.d_ff=64",
        "--config.num_heads=2", "--config.vocab_size=200", "--config.tokens_per_batch=512",
        "--config.max_tokens_per_device=512", "--config.eval_every_steps=3",
        "--config.num_eval_batches=1", "--config.checkpoint_every_steps=1",
        "--config.max_decode_extra=4"]


def _run(*args):
  env = dict(os.environ, XLA_FLAGS=xla_flags.with_devices(2),
             PYTHONPATH=str(ROOT))  # this checkout's package, not an installed one
  env.pop("PYTEST_CURRENT_TEST", None)
  return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                        env=env, cwd=ROOT, timeout=600, check=False)


def test_demo_run_writes_results_then_resumes_and_refuses_a_changed_model(tmp_path):
  # A small demo corpus in place, so the run does not generate the full one.
  demo.write_corpus(str(tmp_path / "data" / "demo"), num_train=600, num_dev=8,
                           num_test=12)
  first = _run("--config=demo", f"--workdir={tmp_path}", "--config.num_train_steps=3", *TINY)
  assert first.returncode == 0, first.stderr[-3000:]
  results = json.loads((tmp_path / "results.json").read_text())
  assert set(results["bleu"]) == {"sacrebleu", "sacrebleu_intl", "paper"}
  assert all(0.0 <= v <= 100.0 for v in results["bleu"].values())
  assert results["steps"] == 3 and results["num_devices"] == 2
  assert results["averaged_steps"] == [1, 2, 3]  # the demo preset averages the last 3
  assert results["dev_perplexity"] > 1.0
  hyps = (tmp_path / "test.hyp").read_text().split("\n")[:-1]
  assert len(hyps) == 12
  assert '"sacrebleu"' in first.stdout

  # Damaged outputs of the finished run: results.json and the averaged checkpoint are
  # written again (nothing reads them back), metrics.jsonl keeps its good lines.
  (tmp_path / "results.json").write_text('{"bleu": ')
  for path in (tmp_path / "averaged").rglob("*"):
    if path.is_file() and path.parent.name == "d":
      path.write_bytes(b"\0garbage")
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 3, "train_lo\n')
  # The same command with more steps continues from step 3, not from scratch.
  second = _run("--config=demo", f"--workdir={tmp_path}", "--config.num_train_steps=5", *TINY)
  assert second.returncode == 0, second.stderr[-3000:]
  assert "Resumed from step 3" in second.stderr
  steps = [json.loads(line)["step"] for line in
           (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert steps == sorted(set(steps)) and steps[-1] == 5
  assert "Dropped 1 damaged line(s)" in second.stderr
  second_results = json.loads((tmp_path / "results.json").read_text())
  assert second_results["steps"] == 5 and second_results["averaged_steps"] == [3, 4, 5]

  # A different model in the same work directory is refused with a one-line reason.
  third = _run("--config=demo", f"--workdir={tmp_path}", *TINY[:-1], "--config.d_model=64")
  assert third.returncode != 0
  assert "different config (d_model: 32 -> 64)" in third.stderr


def test_a_call_that_trains_no_step_keeps_the_training_measures_or_has_none():
  def summary(trained_steps):
    return {"trained_steps": trained_steps, "final_step": 5, "tokens_per_s": 9.0,
            "wall_time_s": 2.04}
  previous = {"steps": 5, "train_tokens_per_s": 100.0, "train_wall_time_s": 60.0}
  ours = {"train_tokens_per_s": 9.0, "train_wall_time_s": 2.0}
  assert experiment.training_measures(summary(2), previous) == ours  # trained: its own
  kept = {"train_tokens_per_s": 100.0, "train_wall_time_s": 60.0}
  assert experiment.training_measures(summary(0), previous) == kept
  # Trained before and recorded nowhere (results.json damaged, or of another step): unknown,
  # not the re-score's time.
  unknown = {"train_tokens_per_s": None, "train_wall_time_s": None}
  assert experiment.training_measures(summary(0), None) == unknown
  assert experiment.training_measures(summary(0), {**previous, "steps": 3}) == unknown


def test_previous_record_is_none_when_absent_or_damaged(tmp_path):
  path = tmp_path / "results.json"
  assert experiment.previous_record(path) is None
  for damaged in ('{"bleu": ', "[1, 2]", "\udcff"):
    path.write_text(damaged, errors="surrogateescape")
    assert experiment.previous_record(path) is None, damaged
  path.write_text('{"steps": 5}')
  assert experiment.previous_record(path) == {"steps": 5}


def test_describe_and_bad_flags():
  base = _run("--config=base", "--describe")
  assert base.returncode == 0 and "newstest2014 BLEU 27.3" in base.stdout
  assert "8 NVIDIA P100" in base.stdout and "t2t-train --config=base" in base.stdout
  enfr = subprocess.run([sys.executable, str(ROOT / "experiments" / "wmt14_enfr.py"),
                         "--config=big", "--describe"], capture_output=True, text=True,
                        env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, check=True)
  assert "preset big_enfr" in enfr.stdout and "newstest2014 BLEU 41.8" in enfr.stdout
  bad = _run("--config=nonsense")
  assert bad.returncode != 0 and "unknown --config=nonsense" in bad.stderr
  bad_field = _run("--config=demo", "--config.no_such_field=1")
  assert bad_field.returncode != 0 and "unknown config field 'no_such_field'" in bad_field.stderr


def test_describe_demo_points_at_the_section_with_its_measured_figures():
  # The demo's time and BLEU are measurements: docs/benchmarks.md holds them, describe names where.
  name = re.search(r'docs/benchmarks\.md, "([^"]+)"', experiment.describe("demo")).group(1)
  text = (ROOT / "docs" / "benchmarks.md").read_text()
  section = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", text, re.M | re.S).group(1)
  assert "| wall time |" in section and "sacreBLEU" in section


# --- fine-tuning (the command: tests/cli/test_train.py)


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
  """A run's config.json, vocabulary and checkpoints 1 and 2 (not averaged)."""
  root = tmp_path_factory.mktemp("parent")
  workdir_lib.check_or_write_config(CFG.replace(vocab_size=96), root)
  vocab.build_or_load(96, str(root / "vocab"), lambda: demo.generate(300, seed=0, max_words=12))
  save_steps(root, [1, 2])
  return root


def test_config_is_the_parents_with_the_overrides(parent):
  cfg = experiment.finetune_config(parent, {"warmup_steps": 5, "num_train_steps": 7})
  assert (cfg.warmup_steps, cfg.num_train_steps) == (5, 7)
  assert cfg.replace(warmup_steps=CFG.warmup_steps,
                     num_train_steps=CFG.num_train_steps) == CFG.replace(vocab_size=96)


def test_another_model_or_vocabulary_is_refused_naming_the_fields(parent):
  cfg = experiment.finetune_config(parent, {})
  experiment.check_finetune(cfg.replace(dropout_rate=0.3, num_train_steps=5, seed=9), parent)
  with pytest.raises(ValueError, match=r"differs \(vocab_size: 96 -> 128, d_model: 16 -> 32, "
                                       r"key_depth: 4 -> 8, value_depth: 4 -> 8\); keep"):
    experiment.check_finetune(cfg.replace(vocab_size=128, d_model=32), parent)
  # The position table's size is a shape only when it is learned.
  experiment.check_finetune(cfg.replace(max_len=cfg.max_len * 2), parent)
  learned = parent.parent / "learned"
  learned.mkdir()
  workdir_lib.check_or_write_config(cfg.replace(positional_encoding="learned"), learned)
  with pytest.raises(ValueError, match="max_len"):
    experiment.check_finetune(cfg.replace(positional_encoding="learned", max_len=cfg.max_len * 2), learned)


def test_start_copies_the_vocabulary_and_returns_the_parents_params(parent, tmp_path):
  cfg = experiment.finetune_config(parent, {"num_train_steps": 3})
  latest = experiment.finetune_params(cfg, parent, tmp_path / "child")
  assert_trees_equal(latest, jax.device_get(make_state(2).params))  # no average: the latest
  assert ((tmp_path / "child" / "vocab" / "spm.model").read_bytes()
          == (parent / "vocab" / "spm.model").read_bytes())
  averaging.average_checkpoints(parent, last=2)
  assert_trees_equal(experiment.finetune_params(cfg, parent, tmp_path / "child"), np_mean([1, 2]))
