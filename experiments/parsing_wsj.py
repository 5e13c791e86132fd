"""English constituency parsing as translation (section 6.3, Table 4) on your Penn Treebank:
a treebank to a parser, its F1.

  python experiments/parsing_wsj.py --treebank_dir=/data/wsj --workdir=runs/parsing
  python experiments/parsing_wsj.py --train=02-21.mrg --dev=22.mrg --test=23.mrg \\
      --workdir=runs/parsing --config.num_train_steps=50000

`--treebank_dir` is a directory laid out as recipes/parsing.py says (below, in
--help); `--train`, `--dev` and `--test` name the tree files instead.
`--config.<field>=<value>` overrides any field of t2t_jax/configs.py.
"""

import json
from typing import Any, Optional, Sequence

from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.recipes import paper
from t2t_jax.recipes import parsing


@exits.command
def main(argv: Optional[Sequence[str]] = None,
         prog: str = "experiments/parsing_wsj.py") -> dict[str, Any]:
  parser = flags.parser(prog, f"{__doc__}\n{parsing.__doc__}", config="parsing",
                      defaults=parsing.SCRIPT_DEFAULTS)
  parser.add_argument("--workdir", default="runs/parsing", help="where the run lives")
  parser.add_argument("--treebank_dir", help="your Penn Treebank (see above)")
  for split in parsing.SPLITS:
    parser.add_argument(f"--{split}", help=f"comma-separated {split} tree files "
                        "(instead of --treebank_dir)")
  args = parser.parse_args(argv)
  if args.treebank_dir:
    files = parsing.find_treebank_files(args.treebank_dir)
  elif all(getattr(args, s) for s in parsing.SPLITS):
    files = {s: getattr(args, s).split(",") for s in parsing.SPLITS}
  else:
    parser.error("give --treebank_dir=DIR or all of --train=, --dev= and --test= "
                 "(your own Penn Treebank files: it is licensed and not shipped)")
  out = parsing.run(flags.config(args, parsing.SCRIPT_DEFAULTS), args.workdir, files)
  test = out["test"]
  print(f"Section-23-style test set: labelled F1 {test['f1']:.2f} (precision "
        f"{test['precision']:.2f}, recall {test['recall']:.2f}, {test['sentences']} sentences); "
        f"paper, WSJ only: {paper.PARSING_F1['wsj_only']}")
  print(json.dumps(test, indent=2))
  return out


if __name__ == "__main__":
  main()
