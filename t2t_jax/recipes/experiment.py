"""One experiment end to end: data, training, checkpoint averaging, test-set BLEU; fine-tuning
from another run.

`run(cfg, workdir)` is what `t2t-train` (cli/train.py, and through it the WMT14
scripts in experiments/), the parsing experiment and the notebook call. Every
stage is resumable: the vocabulary and token caches are reused, training
continues from the latest checkpoint, and a finished run only re-averages and
re-decodes. `describe` is a preset's "docstring": command, hardware, expected
time and result (the paper's figures come from recipes/paper.py; the demo's,
measured, are in docs/benchmarks.md).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import time
from typing import Any, Optional

import jax

from t2t_jax import configs
from t2t_jax.data import dataset
from t2t_jax.data import vocab
from t2t_jax.evaluation import bleu as bleu_lib
from t2t_jax.recipes import paper
from t2t_jax.runtime import averaging
from t2t_jax.runtime import multihost
from t2t_jax.runtime import workdir as workdir_lib
from t2t_jax.train import trainer

log = logging.getLogger(__name__)


def run(cfg: configs.TransformerConfig, workdir: str | os.PathLike,
        init_params: Any = None) -> dict[str, Any]:
  """Trains, averages the last `cfg.average_last` checkpoints, scores the test set.

  Writes `workdir/results.json` and `workdir/test.hyp` and returns the results (on a
  finished run, which it only re-scores, results.json keeps `TRAINING_MEASURES`);
  without a test set (dataset "text" with no test_files) the BLEU scores are
  None and no test.hyp is written. `init_params` start a new run from given
  params (fine-tuning: `finetune_params`).
  Raises ValueError if `workdir` holds a run with an incompatible config,
  workdir_lib.WorkdirBusyError if another run uses it, and
  preemption.Preempted (after saving) on SIGTERM or Ctrl-C during training. In a
  multi-process run every process calls it; process 0 writes the files.
  """
  workdir = pathlib.Path(workdir)
  run_lock = workdir_lib.lock_workdir(workdir)
  try:
    return _run(cfg, workdir, init_params)
  finally:
    run_lock.release()


def _run(cfg: configs.TransformerConfig, workdir: pathlib.Path,
         init_params: Any) -> dict[str, Any]:
  start = time.time()
  main = multihost.is_main()
  # Process 0 writes the config and builds the vocabulary and token caches; the others
  # wait, then check the config and load the caches.
  ds = multihost.main_first("prepare", lambda: (
      workdir_lib.check_or_write_config(cfg, workdir, write=main),
      dataset.prepare(cfg, str(workdir)))[1])
  summary = trainer.train_and_evaluate(cfg, workdir, ds, init_params)

  params = averaging.average_checkpoints(workdir, last=cfg.average_last)
  names = ("sacrebleu", "sacrebleu_intl", "paper")
  if ds.test_sources():
    scores = bleu_lib.decode_and_score(
        cfg, params, ds.tokenizer, ds.test_sources(), ds.test_references(),
        workdir / "test.hyp" if main else None)
  else:
    log.info("No test set (config.test_files): test BLEU skipped")
    scores = {name: {"score": None, "signature": None} for name in names}
    scores["decode"] = {"seconds": None}

  results = {
      "dataset": cfg.dataset,
      "bleu": {name: scores[name]["score"] for name in names},
      "bleu_signatures": {name: scores[name]["signature"] for name in names},
      "dev_perplexity": summary["dev_perplexity"],
      "dev_accuracy": summary["dev_accuracy"],
      "steps": summary["final_step"],
      "averaged_steps": averaging.averaged_steps(workdir),
      **training_measures(summary, previous_record(workdir / "results.json")),
      "decode_seconds": scores["decode"]["seconds"],
      "wall_time_s": round(time.time() - start, 1),
      "device_kind": jax.devices()[0].device_kind,
      "num_devices": jax.device_count(),
  }
  if main:
    workdir_lib.write_json_atomic(workdir / "results.json", results)
  return results


# What only training measures. A call that trains no step (its run had finished) only
# re-scores: these come from the record the run wrote when it trained, not from that call.
TRAINING_MEASURES = ("train_tokens_per_s", "train_wall_time_s")


def training_measures(summary: dict[str, Any], previous: Optional[dict[str, Any]]
                      ) -> dict[str, Any]:
  """`TRAINING_MEASURES` from a training summary: its own if it trained, else `previous`'s
  (the record of the run: results.json, a Table 3 row.json) if that is of the same step,
  else None (trained before, its measures recorded nowhere)."""
  if summary["trained_steps"]:
    return {"train_tokens_per_s": summary["tokens_per_s"],
            "train_wall_time_s": round(summary["wall_time_s"], 1)}
  if previous is not None and previous.get("steps") == summary["final_step"]:
    return {name: previous.get(name) for name in TRAINING_MEASURES}
  return dict.fromkeys(TRAINING_MEASURES)


def previous_record(path: str | os.PathLike) -> Optional[dict[str, Any]]:
  """The JSON object a run wrote at `path` before, or None (absent or damaged: the run
  writes it again)."""
  try:
    record = json.loads(pathlib.Path(path).read_text())
  except (OSError, ValueError, UnicodeDecodeError):
    return None
  return record if isinstance(record, dict) else None


# --- Fine-tuning ----------------------------------------------------------------------
# A new run that starts from another run's parameters and vocabulary, as fairseq's
# `--finetune-from-model` and Marian's `--pretrained-model`: the new run takes the
# parent's (averaged, if averaged) parameters and its vocabulary, and starts a fresh
# optimiser and learning-rate schedule at step 0 on whatever data its config names.
# The model must have the parent's shapes and the vocabulary must be the parent's;
# anything else is refused in one line.
#
#     cfg = finetune_config(parent, data_fields_and_overrides)
#     params = finetune_params(cfg, parent, workdir)   # checks, copies the vocabulary
#     run(cfg, workdir, init_params=params)


# The fields that decide the parameters' shapes, what they compute and how text becomes ids.
SHAPE_FIELDS = ("vocab_size", "target_vocab_size", "vocab_type", "num_layers", "decoder_layers",
                "d_model", "d_ff", "num_heads", "key_depth", "value_depth", "embeddings",
                "positional_encoding", "activation", "attention_bias", "output_bias",
                "position_layout", "layer_norm_epsilon")


def _shape(cfg: configs.TransformerConfig) -> dict[str, Any]:
  shape = {name: getattr(cfg, name) for name in SHAPE_FIELDS}
  if cfg.positional_encoding == "learned":
    shape["max_len"] = cfg.max_len  # the size of the learned position table
  return shape


def finetune_config(parent: str | os.PathLike,
                    overrides: dict[str, Any]) -> configs.TransformerConfig:
  """The parent run's config with `overrides` (data files, steps, learning rate...) on top."""
  return workdir_lib.load_config(parent).replace(**overrides)


def check_finetune(cfg: configs.TransformerConfig, parent: str | os.PathLike) -> None:
  """ValueError naming the differences if `cfg`'s model or vocabulary is not the parent's."""
  theirs, ours = _shape(workdir_lib.load_config(parent)), _shape(cfg)
  changed = [k for k in ours if theirs.get(k) != ours[k]]
  if changed:
    diffs = ", ".join(f"{k}: {theirs.get(k)!r} -> {ours[k]!r}" for k in changed)
    raise ValueError(f"cannot fine-tune from {parent}: the model or vocabulary differs "
                     f"({diffs}); keep the parent's settings for these fields")


def finetune_params(cfg: configs.TransformerConfig, parent: str | os.PathLike,
                    workdir: str | os.PathLike) -> Any:
  """Checks `cfg` against the parent, gives `workdir` its vocabulary, returns its params.

  The params are the parent's averaged ones when it has them, else its latest
  checkpoint's (FileNotFoundError when it has neither).
  """
  parent = pathlib.Path(parent)
  check_finetune(cfg, parent)
  vocab.adopt(str(parent / "vocab"), str(pathlib.Path(workdir) / "vocab"))
  params = averaging.load_params(parent, averaged=True)
  log.info("Fine-tuning from %s", parent)
  return params


# --- The presets' expectations --------------------------------------------------------

def default_workdir(preset: str) -> str:
  return os.path.join("runs", preset.lower())


def pair_preset(name: str, pair: str) -> tuple[str, dict[str, Any]]:
  """The preset and defaults a WMT14 script runs for `--config=name` on language `pair`.

  On En-Fr ("enfr"), `big` is the `big_enfr` preset; a preset without an En-Fr
  twin (a Table 3 row) gets the En-Fr data and vocabulary as defaults. The demo
  and parsing presets keep their own data.
  """
  if pair == "ende" or name in ("demo", "parsing"):
    return name, {}
  if f"{name}_{pair}" in configs.PRESETS:
    return f"{name}_{pair}", {}
  return name, dict(configs.WMT14_ENFR)


def describe(name: str) -> str:
  """The preset's 'docstring': command, hardware, expected time and result."""
  cfg = configs.get_config(name)
  command = (f"t2t-train --config={name} --workdir={default_workdir(name)}"
             if name != "parsing" else
             "python experiments/parsing_wsj.py --treebank_dir=... (section 6.3)")
  lines = [f"preset {name}: {cfg.num_layers} layers, d_model {cfg.d_model}, d_ff {cfg.d_ff}, "
           f"h {cfg.num_heads}, d_k {cfg.key_depth}, d_v {cfg.value_depth}, "
           f"P_drop {cfg.dropout_rate}, eps_ls {cfg.label_smoothing}, "
           f"{cfg.num_train_steps} steps, dataset {cfg.dataset}",
           f"command:  {command}"]
  size = name.split("_")[0]
  if name == "demo":
    lines += ["hardware: any CPU; minutes on a 2-core CPU",
              "expected: the wall time and test sacreBLEU measured in "
              'docs/benchmarks.md, "The demo and the compilation cache"']
  elif name == "multi30k":
    lines[-1] = "command:  python experiments/multi30k.py --workdir=runs/multi30k"
    section = 'docs/benchmarks.md, "Multi30k: int8, bfloat16 and the shortlist, quality and speed"'
    lines += ["hardware: any CPU; about an hour on a 2-core CPU",
              f"expected: the test sacreBLEU measured in {section}"]
  elif name == "parsing":
    lines += [f"expected: WSJ section 23 F1 {paper.PARSING_F1['wsj_only']} (WSJ only), "
              f"{paper.PARSING_F1['semi_supervised']} (semi-supervised)"]
  else:
    lines.append(f"hardware: paper: {paper.HARDWARE}; "
                 + paper.TRAINING_TIME["big" if size == "big" else "base"])
    if name in paper.TEST_BLEU:
      lines.append(f"expected: newstest2014 BLEU {paper.TEST_BLEU[name]} "
                   f"(paper, tokenised; averaged last {cfg.average_last} checkpoints)")
    if name in paper.DEV:
      ppl, bleu = paper.DEV[name]
      lines.append(f"expected: newstest2013 dev PPL {ppl}, BLEU {bleu} "
                   "(Table 3: beam search, no checkpoint averaging)")
  return "\n".join(lines)
