"""train_and_evaluate on a small slice of the generated demo corpus, with a tiny model.

The 8-device/1-device comparison runs in two subprocesses (a process cannot change
its device count): the same 20 steps with dropout off must log the same training
loss at every step, although one splits each batch over 8 devices (with
`parallelism="shard_map"`) and the other accumulates it over 4 micro-steps on 1
device (with the default pmap), and is moreover killed (simulated) and resumed
half-way.
"""

import dataclasses
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

import xla_flags  # tests/xla_flags.py

from t2t_jax import configs
from t2t_jax.data import dataset
from t2t_jax.corpora import demo
from t2t_jax.runtime import checkpoint
from t2t_jax.train import metrics as metrics_lib
from t2t_jax.train import memory
from t2t_jax.train import trainer as trainer_lib

REPO = pathlib.Path(__file__).resolve().parents[2]

# 1 layer; pairs of at most 8 tokens (about 550 of the 10000: one batch shape, so
# one compilation); 512 tokens per update, at most 128 per device and micro-step,
# so one device accumulates 4 micro-steps where 8 devices need 1.
TINY = dict(vocab_size=1000, num_layers=1, d_model=32, d_ff=64, num_heads=2, dropout_rate=0.0,
            max_len=16, max_source_length=8, max_target_length=8, tokens_per_batch=512,
            max_tokens_per_device=128, warmup_steps=100, log_every_steps=1,
            eval_every_steps=1000, checkpoint_every_steps=1000, num_eval_batches=1)

_SCRIPT = """
import json, shutil, sys
from t2t_jax import configs
from t2t_jax.train import memory
from t2t_jax.train import trainer
plan = json.loads(sys.argv[1])
for i, run in enumerate(plan["runs"]):
  summary = trainer.train_and_evaluate(configs.get_config("demo", **run), sys.argv[2])
  if i == 0:
    for step in plan.get("then_delete_checkpoints", []):
      shutil.rmtree(f"{sys.argv[2]}/checkpoints/{step}")
print("SUMMARY " + json.dumps(summary))
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """A work directory holding a 10000-pair demo corpus and its vocabulary.

  Each test copies `data/demo` (where dataset.prepare looks before generating the
  full corpus) and `vocab` (so SentencePiece is trained once) into its own.
  """
  workdir = tmp_path_factory.mktemp("corpus")
  demo.write_corpus(str(workdir / "data" / "demo"), num_train=10000, num_dev=64,
                           num_test=16)
  dataset.prepare(configs.get_config("demo", **TINY), str(workdir))
  return workdir


def _workdir(tmp_path, corpus, name):
  workdir = tmp_path / name
  shutil.copytree(corpus / "data" / "demo", workdir / "data" / "demo")
  shutil.copytree(corpus / "vocab", workdir / "vocab")
  return workdir


def _metrics(workdir):
  return [json.loads(line) for line in (workdir / metrics_lib.METRICS_FILE).read_text().splitlines()]


def _start(workdir, devices, plan):
  # The persistent compilation cache spares the resumed run a second compilation.
  env = dict(os.environ, XLA_FLAGS=xla_flags.with_devices(devices),
             JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO),
             JAX_COMPILATION_CACHE_DIR=str(workdir.parent / "jax_cache"))
  return subprocess.Popen([sys.executable, "-c", _SCRIPT, json.dumps(plan), str(workdir)],
                          env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _summary(process):
  out, err = process.communicate(timeout=600)
  assert process.returncode == 0, err[-3000:]
  line = [l for l in out.splitlines() if l.startswith("SUMMARY ")][-1]
  return json.loads(line[len("SUMMARY "):])


def test_eight_devices_log_the_same_losses_as_one_and_the_loss_falls(tmp_path, corpus):
  runs = {n: _workdir(tmp_path, corpus, f"devices{n}") for n in (8, 1)}
  whole = {**TINY, "num_train_steps": 20}
  # The two ways to map the step over devices (config.parallelism) must train alike:
  # the 8-device run uses shard_map, the 1-device run the default pmap.
  eight = {**whole, "parallelism": "shard_map"}
  # The 1-device run stops at step 12 with checkpoints at 8 and 12; deleting 12
  # leaves what a kill just before that save would: metrics.jsonl lines 9-12 that
  # the resumed run (from step 8) must replace, not duplicate.
  first = {**whole, "num_train_steps": 12, "checkpoint_every_steps": 8}
  processes = {8: _start(runs[8], 8, {"runs": [eight]}),
               1: _start(runs[1], 1, {"runs": [first, whole],
                                      "then_delete_checkpoints": [12]})}
  summaries = {n: _summary(p) for n, p in processes.items()}

  assert summaries[8]["num_devices"] == 8 and summaries[8]["accum_steps"] == 1
  assert summaries[1]["num_devices"] == 1 and summaries[1]["accum_steps"] == 4
  eight, one = _metrics(runs[8]), _metrics(runs[1])
  assert [r["step"] for r in eight] == [r["step"] for r in one] == list(range(1, 21))
  np.testing.assert_allclose([r["train_loss"] for r in eight], [r["train_loss"] for r in one],
                             rtol=1e-4)
  np.testing.assert_allclose([r["learning_rate"] for r in eight],
                             [r["learning_rate"] for r in one], rtol=1e-6)

  losses = [r["train_loss"] for r in eight]
  assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.5, losses
  summary = summaries[8]
  assert summary["final_step"] == 20
  assert summary["train_loss"] == pytest.approx(losses[-1])
  assert np.isfinite(summary["dev_loss"]) and summary["dev_perplexity"] > 1
  assert 0 <= summary["dev_accuracy"] <= 1 and summary["tokens_per_s"] > 0
  last = eight[-1]
  assert {"eval_loss", "eval_perplexity", "eval_accuracy", "tokens_per_s",
          "padded_tokens_per_s", "step_time_s"} <= set(last)
  assert last["padded_tokens_per_s"] >= last["tokens_per_s"]
  # TensorBoard events where tensorboardX (the wmt extra) is installed, none where it is not
  # (a GPU image): metrics.jsonl, read above, has every record either way.
  tensorboard = importlib.util.find_spec("tensorboardX") is not None
  assert (runs[8] / metrics_lib.TENSORBOARD_DIR).is_dir() == tensorboard


def test_divergence_stops_naming_the_step_and_saves_no_bad_state(tmp_path, corpus):
  workdir = _workdir(tmp_path, corpus, "diverge")
  # A learning rate near 1e36: the first update is finite, the next forward overflows.
  cfg = configs.get_config("demo", **{**TINY, "learning_rate_scale": 1e38,
                                      "checkpoint_every_steps": 1, "num_train_steps": 6})
  with pytest.raises(FloatingPointError, match=r"diverged at step \d+") as error:
    trainer_lib.train_and_evaluate(cfg, workdir)
  bad_step = int(str(error.value).split("diverged at step ")[1].split(":")[0])
  assert 1 < bad_step <= 6
  saved = checkpoint.Checkpointer(workdir, cfg).all_steps()
  assert max(saved, default=0) < bad_step, (saved, bad_step)
  assert max(r["step"] for r in _metrics(workdir)) < bad_step



def test_out_of_device_memory_names_the_setting_to_lower(tmp_path, corpus, monkeypatch):
  workdir = _workdir(tmp_path, corpus, "oom")
  cfg = configs.get_config("demo", **{**TINY, "num_train_steps": 2})

  def exhausted(*args):
    raise jax.errors.JaxRuntimeError(
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17.00GiB.\ndetails")

  with trainer_lib.Trainer(cfg, workdir) as trainer:
    monkeypatch.setattr(trainer, "devices", dataclasses.replace(trainer.devices,
                                                                train_step=exhausted))
    with pytest.raises(memory.DeviceMemoryError) as error:
      trainer.run()
  now = cfg.max_tokens_per_device
  assert str(error.value) == (
      "out of device memory (RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
      f"17.00GiB.); lower --config.max_tokens_per_device (now {now}; try {now // 2}: each "
      f"update still holds tokens_per_batch={cfg.tokens_per_batch} tokens, in more "
      "accumulation steps)")
