"""WMT14 English->German with the paper's Transformer (or the offline demo): `t2t-train`.

  python experiments/wmt14_ende.py --config=demo --workdir=runs/demo
  python experiments/wmt14_ende.py --config=base --workdir=runs/base
  python experiments/wmt14_ende.py --config=big  --workdir=runs/big --config.dtype=bfloat16
  python experiments/wmt14_ende.py --config=C4   --workdir=runs/c4 --config.num_train_steps=20000

The same as `t2t-train` with the same flags (t2t_jax/cli/train.py): `--config=<preset>`
is base, big, a Table 3 row (A1..A4, B1, B2, C1..C7, D1..D4, E), parsing or demo
(the default: the generated corpus, minutes on a CPU); `--config.<field>=<value>`
overrides any field of t2t_jax/configs.py; `--describe` prints the preset's
command, hardware, expected time and BLEU. Running the same command again on
the same --workdir resumes where it stopped.
"""

from t2t_jax.cli import train


def main(argv=None):
  return train.main(argv, prog="experiments/wmt14_ende.py", pair="ende", doc=__doc__)


if __name__ == "__main__":
  main()
