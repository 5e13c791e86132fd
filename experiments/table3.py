"""Table 3 of the paper: variations on the base model, each trained and scored on the dev set.

  python experiments/table3.py --rows=all --workdir=runs/table3
  python experiments/table3.py --rows=A1,B2,C4 --steps=20000 --workdir=runs/table3
  python experiments/table3.py --rows=base,C1,C4,E --dataset=demo --workdir=runs/table3_demo

`--rows`: a comma-separated subset of base, A1..A4, B1, B2, C1..C7, D1..D4, E and
big, or `all`. `--steps=N` trains every row N steps (default: the preset's,
100K; big 300K). `--dataset=demo` trains on the generated corpus with the demo
preset's data and schedule settings (vocabulary, lengths, batch size, warmup,
logging) and the row's model; any other value is put in `config.dataset`
(default: WMT14 En-De, newstest2013 as the dev set). `--config.<field>=<value>`
applies to every row, after the row's own settings (a warning says when it
replaces one of them).

`--param_counts` prints our parameter count for every row beside the paper's
column instead (no training; `--config.vocab_size` sets the vocabulary, 37000
by default, as section 5.1 says).
"""

import pathlib
from typing import Any, Optional, Sequence

from t2t_jax import configs
from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.recipes import table3


@exits.command
def main(argv: Optional[Sequence[str]] = None,
         prog: str = "experiments/table3.py") -> list[dict[str, Any]]:
  rows = ", ".join(table3.ROWS)
  parser = flags.parser(prog, f"{__doc__}\n{table3.__doc__}", fields=True)
  parser.add_argument("--rows", help=f"comma-separated rows of {rows}, or all")
  parser.add_argument("--steps", type=int, help="training steps of every row "
                      "(default: the preset's)")
  parser.add_argument("--workdir", default="runs/table3", help="one subdirectory per row")
  parser.add_argument("--dataset", help="demo, or a config.dataset value (default: WMT14 En-De)")
  parser.add_argument("--param_counts", action="store_true",
                      help="print the parameter counts beside the paper's and stop")
  args = parser.parse_args(argv)
  overrides = flags.overrides(args)
  if args.param_counts:
    vocab_size = overrides.get("vocab_size", configs.get_config("base").vocab_size)
    print(f"Parameters at vocab_size={vocab_size} (docs/model.md explains the gaps)")
    print(table3.param_counts(vocab_size))
    return []
  if not args.rows:
    parser.error(f"give --rows=ROW,ROW,... or --rows=all (rows: {rows})")
  cfgs = {row: table3.row_config(row, overrides, args.dataset, args.steps)
          for row in table3.parse_rows(args.rows)}
  results = table3.run(cfgs, args.workdir)
  workdir = pathlib.Path(args.workdir)
  print(table3.markdown(results, next(iter(cfgs.values())).dataset))
  print(f"written to {workdir / 'table3.md'} and {workdir / 'table3.json'}")
  return results


if __name__ == "__main__":
  main()
