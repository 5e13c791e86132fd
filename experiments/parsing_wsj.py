"""English constituency parsing as translation (section 6.3, Table 4) on your Penn Treebank.

  python experiments/parsing_wsj.py --treebank_dir=/data/wsj --workdir=runs/parsing
  python experiments/parsing_wsj.py --train=02-21.mrg --dev=22.mrg --test=23.mrg \\
      --workdir=runs/parsing --config.num_train_steps=50000

The flags: t2t_jax/cli/constituency_parsing.py; the treebank layouts, the pipeline, the
outputs and the expected F1: t2t_jax/recipes/parsing.py (or `--help` for both).
"""

from t2t_jax.cli import constituency_parsing


def main(argv=None):
  return constituency_parsing.main(argv, prog="experiments/parsing_wsj.py")


if __name__ == "__main__":
  main()
