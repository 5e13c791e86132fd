"""Table 3 of the paper: variations on the base model, each trained and scored on the dev set.

  python experiments/table3.py --rows=all --workdir=runs/table3
  python experiments/table3.py --rows=A1,B2,C4 --steps=20000 --workdir=runs/table3
  python experiments/table3.py --rows=base,C1,C4,E --dataset=demo --workdir=runs/table3_demo
  python experiments/table3.py --param_counts

The flags: t2t_jax/cli/table3.py; the protocol, the hardware and the expected results:
t2t_jax/recipes/table3.py (or `--help` for both).
"""

from t2t_jax.cli import table3


def main(argv=None):
  return table3.main(argv, prog="experiments/table3.py")


if __name__ == "__main__":
  main()
