"""`t2t-train`: train a Transformer on any corpus, average its checkpoints, score its test set.

    t2t-train --config=demo --workdir=runs/demo            # the generated corpus, minutes on a CPU
    t2t-train --train=train.en,train.de --dev=dev.en,dev.de --test=test.en,test.de \\
        --workdir=runs/mine --config.num_train_steps=20000
    t2t-train --train=train.tsv --dev=dev.tsv --workdir=runs/mine  # no --test: no test BLEU
    t2t-train --config=base --workdir=runs/base --config.dtype=bfloat16   # WMT14 En-De (tfds)
    t2t-train --config=big_enfr --workdir=runs/big_enfr                   # WMT14 En-Fr (tfds)
    t2t-train --finetune_from=runs/mine --train=indomain.en,indomain.de --dev=... \\
        --workdir=runs/mine-ft --config.num_train_steps=2000

Data: `--train`/`--dev`/`--test` are your files, each "source_path,target_path"
(line-aligned, one sentence per line) or one .tsv file of "source<TAB>target"
lines; `--train` and `--dev` are required with them, and without `--test` the
run trains and averages but skips test BLEU. Otherwise the preset's dataset is
used: `demo`, or a tensorflow-datasets name (`--config.dataset=...`, e.g.
wmt14_translate/de-en; `--config.data_dir` says where tfds keeps it). A shared
SentencePiece vocabulary of `--config.vocab_size` pieces is built from the
training data into WORKDIR/vocab the first time.

Outputs in WORKDIR: config.json, vocab/, checkpoints/, averaged/ (the last
`average_last` checkpoints averaged), metrics.jsonl, results.json and test.hyp.
The same command on the same WORKDIR resumes where it stopped; a finished run
only re-averages and re-scores.

Fine-tuning (`--finetune_from=PARENT`, a work directory): the new run starts
from the parent's averaged parameters (its latest checkpoint's if it averaged
none) with the parent's vocabulary and config, a fresh optimiser and
learning-rate schedule at step 0, on the data given here; `--config.<field>`
changes what may change (steps, learning rate, warmup, data...). A different
model shape or vocabulary is refused. `--config=` does not apply: the config
is the parent's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import textwrap
from typing import Any, Optional, Sequence

from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.recipes import experiment
from t2t_jax.runtime import averaging
from t2t_jax.runtime import platform
from t2t_jax.runtime import multihost
from t2t_jax.runtime import workdir as workdir_lib


def _resumable() -> str:
  return textwrap.fill("Resuming (the same command on the same --workdir): these fields may differ from "
          "the run's config.json, the others must not: "
          + ", ".join(sorted(workdir_lib.RESUMABLE_FIELDS))
          + ". E.g. --config.num_train_steps=200000 trains a finished 100k-step run longer.", 79)


def _parser(prog: str, doc: Optional[str], pair: str) -> argparse.ArgumentParser:
  parser = flags.parser(prog, doc, config="demo",
                      resolve=lambda name: experiment.pair_preset(name, pair))
  parser.epilog = _resumable()
  parser.add_argument("--workdir", help="where the run lives (default: runs/<preset>); "
                      "the same command on the same workdir resumes")
  data = parser.add_argument_group("your own data (instead of the preset's dataset)")
  for split, required in (("train", "required"), ("dev", "required"), ("test", "optional")):
    data.add_argument(f"--{split}", metavar="SRC,TGT|TSV",
                      help=f"{split} pairs: 'source_path,target_path' or a .tsv path ({required})")
  parser.add_argument("--finetune_from", metavar="WORKDIR",
                      help="start from this run's (averaged) params and vocabulary, with a "
                           "fresh optimiser and schedule")
  parser.add_argument("--describe", action="store_true",
                      help="print the preset's command, hardware, expected time and BLEU")
  flags.add_process_flags(parser)
  return parser


def data_fields(args: argparse.Namespace) -> dict[str, Any]:
  """The config fields --train/--dev/--test set ({} when none is given)."""
  if args.train is None and args.dev is None and args.test is None:
    return {}
  if args.train is None or args.dev is None:
    raise ValueError("--train and --dev are both required with your own files "
                     "(--test is optional: without it, test BLEU is skipped)")
  return {"dataset": "text", "train_files": args.train, "dev_files": args.dev,
          "test_files": args.test}


def _config_given(argv: Sequence[str]) -> bool:
  return any(arg == "--config" or arg.startswith("--config=") for arg in argv)


@exits.command
def main(argv: Optional[Sequence[str]] = None, prog: str = "t2t-train", pair: str = "ende",
         doc: Optional[str] = __doc__) -> dict[str, Any]:
  """`pair` ("ende", "enfr") is the WMT14 scripts' language pair (experiment.pair_preset)."""
  argv = list(sys.argv[1:] if argv is None else argv)
  parser = _parser(prog, doc, pair)
  args = parser.parse_args(argv)
  preset, defaults = experiment.pair_preset(args.config, pair)
  if args.describe:
    print(experiment.describe(preset))
    return {}
  fields = {**data_fields(args), **flags.overrides(args)}
  init_params = None
  if args.finetune_from is not None:
    if _config_given(argv):
      parser.error("--config=<preset> does not apply with --finetune_from (the config is "
                   "the parent run's); change fields with --config.<field>=<value>")
    if args.workdir is None:
      parser.error("--finetune_from needs --workdir (a new work directory for the new run)")
    cfg = experiment.finetune_config(args.finetune_from, fields)
  else:
    cfg = flags.config(args, {**defaults, **fields}, preset=preset)
  platform.enable_compilation_cache(cfg.compilation_cache)  # before anything compiles
  workdir = args.workdir or experiment.default_workdir(preset)
  if flags.joins_processes(args):
    # Before anything touches JAX's devices.
    multihost.initialize(args.coordinator_address, args.num_processes, args.process_id,
                         on_peer_failure=exits.stop_for_peer)
    if not multihost.is_main():
      logging.getLogger().setLevel(logging.WARNING)  # process 0 tells the story
  # Reads checkpoints (JAX's backend starts): after joining the processes.
  source = averaging.written_source(workdir) if args.finetune_from is None else None
  if source is not None:
    raise ValueError(f"{workdir} holds params written whole ({source}), not a run to resume: "
                     f"fine-tune them into a new work directory, t2t-train --finetune_from "
                     f"{workdir} --workdir NEW --train SRC,TGT --dev SRC,TGT")
  if args.finetune_from is not None:  # loads params: after joining the processes
    init_params = experiment.finetune_params(cfg, args.finetune_from, workdir)
  # A failure in one process ends them all (exits.command); a preemption stops every
  # process after the same step.
  results = experiment.run(cfg, workdir, init_params)
  if multihost.is_main():
    print(json.dumps({k: results[k] for k in ("bleu", "dev_perplexity", "steps",
                                              "wall_time_s")}, indent=2))
    print(f"results written to {os.path.join(workdir, 'results.json')}")
  return results


if __name__ == "__main__":
  main()
