"""Command line of the experiment scripts: flags, per-preset notes, logging."""

from __future__ import annotations

import logging
import os
import sys

from t2t_jax import configs

# Per language pair: the dataset and vocabulary the paper used (section 5.1).
_LANGUAGE_DEFAULTS = {
    "de": dict(dataset="wmt14_translate/de-en", target_lang="de", vocab_size=37000),
    "fr": dict(dataset="wmt14_translate/fr-en", target_lang="fr", vocab_size=32000),
}

# The paper's figures each preset is expected to reproduce (PAPER.md, Tables 2 and 3).
_PAPER_TEST_BLEU = {("base", "de"): 27.3, ("big", "de"): 28.4,
                    ("base", "fr"): 38.1, ("big", "fr"): 41.8}


def preset_defaults(name: str, language_pair: str) -> dict:
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
    lines += ["hardware: any CPU; 9.5 minutes measured on a 2-core VM (README, Results)",
              "expected: test sacreBLEU 83.8 measured there (the target was >= 60)"]
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


def main(argv: list[str], script: str, language_pair: str) -> None:
  """Parses `--config=...`, `--config.<field>=...`, `--workdir=...` and runs."""
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                      stream=sys.stderr)
  # Orbax reports every save step at INFO through absl; keep its warnings only.
  logging.getLogger("absl").setLevel(logging.WARNING)
  logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "no TPU" notices
  name = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), "demo")
  if name not in configs.PRESETS:
    raise SystemExit(f"unknown --config={name}; choose one of {', '.join(configs.PRESETS)}")
  workdir, describe_only, multihost, rest = None, False, False, []
  for arg in argv:
    if arg.startswith("--workdir="):
      workdir = arg.split("=", 1)[1]
    elif arg == "--describe":
      describe_only = True
    elif arg == "--multihost":
      multihost = True
    elif arg.startswith("--config"):
      rest.append(arg)
    elif arg in ("-h", "--help"):
      print(sys.modules["__main__"].__doc__ or "")
      return
    else:
      raise SystemExit(f"unknown argument {arg!r}; see {os.path.basename(script)} --help")
  if describe_only:
    print(describe(name, script, language_pair))
    return
  try:
    cfg, _ = configs.from_args(rest, default=name, defaults=preset_defaults(name, language_pair))
  except ValueError as e:
    raise SystemExit(f"error: {e}") from None
  if workdir is None:
    workdir = default_workdir(name, language_pair)
  if multihost:
    import jax  # pylint: disable=g-import-not-at-top
    jax.distributed.initialize()  # reads the cluster from the environment (SLURM, TPU, ...)

  from t2t_jax import experiment  # pylint: disable=g-import-not-at-top
  results = experiment.run(cfg, workdir)
  import json  # pylint: disable=g-import-not-at-top
  print(json.dumps({k: results[k] for k in ("bleu", "dev_perplexity", "steps", "wall_time_s")},
                   indent=2))
  print(f"results written to {os.path.join(workdir, 'results.json')}")
