"""One experiment end to end: data, training, checkpoint averaging, test-set BLEU.

`run(cfg, workdir)` is what the WMT14 scripts (`experiments/wmt14_ende.py`,
`wmt14_enfr.py`, through `main`), the parsing experiment and the notebook
call. Every stage is resumable: the vocabulary and token caches are reused,
training continues from the latest checkpoint, and a finished run only
re-averages and re-decodes. `describe` is a preset's "docstring": command,
hardware, expected time and result.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import time
from typing import Any, Optional, Sequence

import jax

from t2t_jax import configs
from t2t_jax.cli import flags as cli
from t2t_jax.data import dataset as data
from t2t_jax.inference import bleu as evaluate
from t2t_jax.runtime import checkpoint
from t2t_jax.runtime import compile_cache
from t2t_jax.runtime import multihost
from t2t_jax.runtime import preemption
from t2t_jax.runtime import workdir as workdir_lib
from t2t_jax.train import trainer as train

# Per language pair: the dataset and vocabulary the paper used (section 5.1).
_LANGUAGE_DEFAULTS = {
    "de": dict(dataset="wmt14_translate/de-en", target_lang="de", vocab_size=37000),
    "fr": dict(dataset="wmt14_translate/fr-en", target_lang="fr", vocab_size=32000),
}

# The paper's figures each preset is expected to reproduce (PAPER.md, Tables 2 and 3).
_PAPER_TEST_BLEU = {("base", "de"): 27.3, ("big", "de"): 28.4,
                    ("base", "fr"): 38.1, ("big", "fr"): 41.8}


def run(cfg: configs.TransformerConfig, workdir: str | os.PathLike) -> dict[str, Any]:
  """Trains, averages the last `cfg.average_last` checkpoints, scores the test set.

  Writes `workdir/results.json` and `workdir/test.hyp` and returns the results.
  Raises ValueError if `workdir` holds a run with an incompatible config,
  workdir_lock.WorkdirBusyError if another run uses it, and
  preemption.Preempted (after saving) on SIGTERM or Ctrl-C during training. In a
  multi-process run every process calls it; process 0 writes the files.
  """
  workdir = pathlib.Path(workdir)
  lock = train.lock_workdir(workdir)
  try:
    return _run(cfg, workdir)
  finally:
    lock.release()


def _run(cfg: configs.TransformerConfig, workdir: pathlib.Path) -> dict[str, Any]:
  start = time.time()
  main = multihost.is_main()
  # Process 0 writes the config and builds the vocabulary and token caches; the others
  # wait, then check the config and load the caches.
  ds = multihost.main_first("prepare", lambda: (
      workdir_lib.check_or_write_config(cfg, workdir, write=main),
      data.prepare(cfg, str(workdir)))[1])
  summary = train.train_and_evaluate(cfg, workdir, ds)

  params = checkpoint.average_checkpoints(workdir, last=cfg.average_last)
  scores = evaluate.decode_and_score(
      cfg, params, ds.tokenizer, ds.test_sources(), ds.test_references(),
      workdir / "test.hyp" if main else None)

  names = ("sacrebleu", "sacrebleu_intl", "paper")
  results = {
      "dataset": cfg.dataset,
      "bleu": {name: scores[name]["score"] for name in names},
      "bleu_signatures": {name: scores[name]["signature"] for name in names},
      "dev_perplexity": summary["dev_perplexity"],
      "dev_accuracy": summary["dev_accuracy"],
      "steps": summary["final_step"],
      "averaged_steps": checkpoint.averaged_steps(workdir),
      "train_tokens_per_s": summary["tokens_per_s"],
      "train_wall_time_s": round(summary["wall_time_s"], 1),
      "decode_seconds": scores["decode"]["seconds"],
      "wall_time_s": round(time.time() - start, 1),
      "device_kind": jax.devices()[0].device_kind,
      "num_devices": jax.device_count(),
  }
  if main:
    workdir_lib.write_json_atomic(workdir / "results.json", results)
  return results


# --- The WMT14 experiment scripts ---------------------------------------------------------

def preset_defaults(name: str, language_pair: str) -> dict[str, Any]:
  """Script-level defaults applied between the preset and the command line."""
  if name in ("demo", "parsing"):
    return {}
  defaults = dict(_LANGUAGE_DEFAULTS[language_pair])
  if name == "big" and language_pair == "fr":
    defaults["dropout_rate"] = 0.1  # section 6.1: big En-Fr used P_drop = 0.1
  return defaults


def default_workdir(name: str, language_pair: str) -> str:
  prefix = "" if language_pair == "de" or name in ("demo", "parsing") else "enfr_"
  return os.path.join("runs", prefix + name.lower())


def describe(name: str, script: str, language_pair: str) -> str:
  """The preset's 'docstring': command, hardware, expected time and result."""
  cfg = configs.get_config(name, **preset_defaults(name, language_pair))
  command = (f"python {os.path.relpath(script)} --config={name} "
             f"--workdir={default_workdir(name, language_pair)}")
  lines = [f"preset {name}: {cfg.num_layers} layers, d_model {cfg.d_model}, d_ff {cfg.d_ff}, "
           f"h {cfg.num_heads}, d_k {cfg.key_depth}, d_v {cfg.value_depth}, "
           f"P_drop {cfg.dropout_rate}, eps_ls {cfg.label_smoothing}, "
           f"{cfg.num_train_steps} steps, dataset {cfg.dataset}",
           f"command:  {command}"]
  if name == "demo":
    lines += ["hardware: any CPU; 5.1-5.4 minutes measured on a 2-core VM (README, Results)",
              "expected: test sacreBLEU 92.9 measured there (the target was >= 60)"]
  elif name == "parsing":
    lines += ["command:  python experiments/parsing_wsj.py --treebank_dir=... (section 6.3)",
              "expected: WSJ section 23 F1 91.3 (WSJ only), 92.7 (semi-supervised)"]
  else:
    big = name == "big"
    lines.append("hardware: paper: one machine with 8 NVIDIA P100; "
                 + ("1.0 s/step, 300k steps, 3.5 days" if big else
                    "0.4 s/step, 100k steps, 12 hours"))
    if (name, language_pair) in _PAPER_TEST_BLEU:
      lines.append(f"expected: newstest2014 BLEU {_PAPER_TEST_BLEU[name, language_pair]} "
                   f"(paper, tokenised; averaged last {cfg.average_last} checkpoints)")
    if language_pair == "de" and name in configs.PAPER_DEV:
      ppl, bleu = configs.PAPER_DEV[name]
      lines.append(f"expected: newstest2013 dev PPL {ppl}, BLEU {bleu} "
                   "(Table 3: beam search, no checkpoint averaging)")
  return "\n".join(lines)


@cli.command
def main(argv: Optional[Sequence[str]], script: str, language_pair: str,
         doc: Optional[str] = None) -> dict[str, Any]:
  """The command line of a WMT14 script: `--config=`, `--config.<field>=`, `--workdir=`, ..."""
  parser = cli.parser(os.path.basename(script), doc, config="demo")
  parser.add_argument("--workdir", help="where the run lives (default: runs/<preset>); "
                      "the same command on the same workdir resumes")
  parser.add_argument("--describe", action="store_true",
                      help="print the preset's command, hardware, expected time and BLEU")
  cli.add_process_flags(parser)
  args = parser.parse_args(argv)
  if args.describe:
    print(describe(args.config, script, language_pair))
    return {}
  cfg = cli.config(args, preset_defaults(args.config, language_pair))
  compile_cache.enable(cfg.compilation_cache)  # before anything compiles
  workdir = args.workdir or default_workdir(args.config, language_pair)
  if cli.joins_processes(args):
    # Before anything touches JAX's devices.
    multihost.initialize(args.coordinator_address, args.num_processes, args.process_id,
                         on_peer_failure=cli.stop_for_peer)
    if not multihost.is_main():
      logging.getLogger().setLevel(logging.WARNING)  # process 0 tells the story
  # A failure in one process ends them all (cli.command); a preemption stops every
  # process after the same step.
  results = run(cfg, workdir)
  if multihost.is_main():
    print(json.dumps({k: results[k] for k in ("bleu", "dev_perplexity", "steps",
                                              "wall_time_s")}, indent=2))
    print(f"results written to {os.path.join(workdir, 'results.json')}")
  return results
