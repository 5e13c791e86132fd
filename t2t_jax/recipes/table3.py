"""Table 3 of the paper: variations on the base model, each trained and scored on the dev set.

The rows are base, A1..A4, B1, B2, C1..C7, D1..D4, E and big (Table 3's rows in
the paper's order; presets in t2t_jax/configs.py). The command and its flags
(`--rows`, `--steps`, `--dataset`, `--param_counts`): `python experiments/table3.py`.

Each row trains in `<workdir>/<row>` with the paper's Table 3 protocol: dev
perplexity per word-piece (unsmoothed) from the final evaluation, dev BLEU with
beam search on the last checkpoint (no checkpoint averaging). Rows share one
vocabulary and token cache (`<workdir>/vocab`, `<workdir>/data`). Rerunning
resumes: finished rows are read back from `<workdir>/<row>/row.json`, others
continue from their latest checkpoint. After every row `<workdir>/table3.md`
and `<workdir>/table3.json` hold the table so far, ours beside the paper's.

Hardware and time (paper): 8 P100 GPUs, 0.4 s/step for base: 100K steps take 12 h
per row. Expected: the paper's columns of the table (base: PPL 4.92, BLEU 25.8).
"""

from __future__ import annotations

import logging
import os
import pathlib
from typing import Any, Optional, Sequence

from t2t_jax import configs
from t2t_jax.data import dataset as dataset_lib
from t2t_jax.evaluation import bleu as bleu_lib
from t2t_jax.recipes import experiment
from t2t_jax.recipes import paper
from t2t_jax.runtime import averaging
from t2t_jax.runtime import workdir as workdir_lib
from t2t_jax.train import trainer

ROWS = ("base", *configs.TABLE3_ROWS, "big")
# Fields that define a row's model (Table 3's columns); `--dataset=demo` keeps
# these from the row and takes everything else the demo preset sets.
_MODEL_FIELDS = {"num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v", "dropout_rate",
                 "label_smoothing", "positional_encoding", "average_last"}
_LABELS = {"num_layers": "N", "num_heads": "h", "dropout_rate": "P_drop",
           "label_smoothing": "eps_ls", "num_train_steps": "steps"}
log = logging.getLogger(__name__)


def parse_rows(text: str) -> list[str]:
  names = list(ROWS) if text == "all" else [r.strip() for r in text.split(",") if r.strip()]
  unknown = [r for r in names if r not in ROWS]
  if unknown or not names:
    raise ValueError(f"unknown --rows {unknown or text!r}; choose from {', '.join(ROWS)} or all")
  return names


def dataset_defaults(dataset: Optional[str]) -> dict[str, Any]:
  """Settings between a row's preset and the command line for `--dataset`."""
  if dataset is None:
    return {}
  if dataset == "demo":
    return {k: v for k, v in configs.PRESETS["demo"].items() if k not in _MODEL_FIELDS}
  return {"dataset": dataset}


def row_config(row: str, overrides: dict[str, Any], dataset: Optional[str],
               steps: Optional[int]) -> configs.TransformerConfig:
  """The row's preset, then the dataset's settings and `steps`, then `overrides` (--config.*)."""
  defaults = dataset_defaults(dataset)
  if steps is not None:
    defaults["num_train_steps"] = steps
  own = configs.PRESETS[row]
  for field, value in overrides.items():
    if field in own and value != own[field]:
      log.warning("--config.%s=%r replaces row %s's own %s=%r", field, value, row, field,
                  own[field])
  return configs.get_config(row, **{**defaults, **overrides})


def describe_row(row: str) -> str:
  """The row's change from base, in Table 3's column names (e.g. `h=1 d_k=512 d_v=512`)."""
  changes = {k: v for k, v in configs.PRESETS[row].items() if k in _MODEL_FIELDS | {"num_train_steps"}
             and k != "average_last"}
  if row == "base":
    return "base"
  if changes.get("positional_encoding") == "learned":
    return "learned positional embedding"
  return " ".join(f"{_LABELS.get(k, k)}={v}" for k, v in changes.items())


def _share(workdir: pathlib.Path, row_dir: pathlib.Path) -> None:
  """Points the row's vocab/ and data/ at the table's, so every row uses the same ones."""
  for name in ("vocab", "data"):
    (workdir / name).mkdir(parents=True, exist_ok=True)
    link = row_dir / name
    if not link.exists() and not link.is_symlink():
      os.symlink(os.path.join("..", name), link, target_is_directory=True)


def run_row(row: str, cfg: configs.TransformerConfig, workdir: pathlib.Path) -> dict[str, Any]:
  """Trains one row (or resumes it), then decodes the dev set with its last checkpoint."""
  row_dir = workdir / row
  result_path = row_dir / "row.json"
  done = experiment.previous_record(result_path)
  if done is not None and done.get("config") == configs.to_dict(cfg):
    log.info("Row %s: already done (%s)", row, result_path)
    return done
  row_dir.mkdir(parents=True, exist_ok=True)
  _share(workdir, row_dir)
  workdir_lib.check_or_write_config(cfg, row_dir)
  log.info("Row %s (%s): training %d steps in %s", row, describe_row(row),
           cfg.num_train_steps, row_dir)
  ds = dataset_lib.prepare(cfg, str(row_dir))
  summary = trainer.train_and_evaluate(cfg, row_dir, ds)
  params = averaging.load_params(row_dir, averaged=False)  # Table 3: no averaging
  bleu = bleu_lib.decode_and_score(cfg, params, ds.tokenizer, ds.dev_sources(),
                                   ds.dev_references(), row_dir / "dev.hyp")
  paper_ppl, paper_bleu = paper.DEV[row]
  result = {
      "row": row, "change": describe_row(row), "steps": summary["final_step"],
      "params_m": configs.count_params(cfg) / 1e6,
      "paper_params_m": paper.PARAMS_M.get(row),
      "dev_perplexity": summary["dev_perplexity"], "paper_dev_perplexity": paper_ppl,
      "dev_bleu": bleu["paper"]["score"], "paper_dev_bleu": paper_bleu,
      "dev_sacrebleu": bleu["sacrebleu"]["score"],
      "bleu_signatures": {k: bleu[k]["signature"] for k in ("paper", "sacrebleu")},
      # A row trained before and now only decoded (a decoding field changed) keeps its
      # training's time.
      **experiment.training_measures(summary, done), "num_devices": summary["num_devices"],
      "device_kind": summary["device_kind"], "config": configs.to_dict(cfg),
  }
  workdir_lib.write_json_atomic(result_path, result)
  return result


def _cell(value: Optional[float], digits: int) -> str:
  return "-" if value is None else f"{value:.{digits}f}"


def markdown(results: Sequence[dict[str, Any]], dataset: str) -> str:
  """The table: our numbers beside the paper's (newstest2013, 100K steps on 8 P100)."""
  lines = [
      f"# Table 3: variations on the Transformer (ours on {dataset}; paper on newstest2013)",
      "",
      "Dev perplexity is per word-piece; dev BLEU uses beam search on the last checkpoint "
      "(no averaging), tokenised as the paper's script does; sacreBLEU is detokenised. The "
      "paper trained 100K steps (big: 300K) on WMT14 En-De; its blank params cells are '-'.",
      "",
      "| row | change | steps | params (M) | paper params (M) | dev PPL | paper PPL "
      "| dev BLEU | paper BLEU | dev sacreBLEU |",
      "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for r in results:
    lines.append(
        f"| {r['row']} | {r['change']} | {r['steps']} | {_cell(r['params_m'], 1)} "
        f"| {_cell(r['paper_params_m'], 0)} | {_cell(r['dev_perplexity'], 2)} "
        f"| {_cell(r['paper_dev_perplexity'], 2)} | {_cell(r['dev_bleu'], 1)} "
        f"| {_cell(r['paper_dev_bleu'], 1)} | {_cell(r['dev_sacrebleu'], 1)} |")
  return "\n".join(lines) + "\n"


def write_table(results: Sequence[dict[str, Any]], workdir: pathlib.Path, dataset: str) -> None:
  table = [{k: v for k, v in r.items() if k != "config"} for r in results]
  workdir_lib.write_json_atomic(workdir / "table3.json", {"dataset": dataset, "rows": table})
  (workdir / "table3.md").write_text(markdown(results, dataset))


def run(cfgs: dict[str, configs.TransformerConfig], workdir: str | os.PathLike
        ) -> list[dict[str, Any]]:
  """Runs the rows {row: config} in order in `workdir`, writing the table after each."""
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  dataset = next(iter(cfgs.values())).dataset
  results = []
  for row, cfg in cfgs.items():
    results.append(run_row(row, cfg, workdir))
    write_table(results, workdir, dataset)
  return results


def param_counts(vocab_size: int = 37000) -> str:
  """Our parameter count beside Table 3's column for base, every row and big."""
  lines = [f"{'row':<5} {'ours (M)':>9} {'paper (M)':>10} {'diff':>7}"]
  for name in ROWS:
    ours = configs.count_params(configs.get_config(name, vocab_size=vocab_size)) / 1e6
    theirs = paper.PARAMS_M.get(name)
    if theirs is None:
      lines.append(f"{name:<5} {ours:>9.1f} {'-':>10} {'-':>7}")
    else:
      lines.append(f"{name:<5} {ours:>9.1f} {theirs:>10.0f} {(ours - theirs) / theirs:>+7.1%}")
  return "\n".join(lines)
