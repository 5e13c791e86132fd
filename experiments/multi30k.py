"""Multi30k English->German (a small real corpus, fetched at run time): train, then score the
test set translated in float32, int8, with the lexical shortlist and with both.

  python experiments/multi30k.py --workdir=runs/multi30k [--data_dir=data/multi30k]

The command is t2t_jax/cli/multi30k.py (its --help says every flag).
"""

from t2t_jax.cli import multi30k

if __name__ == "__main__":
  multi30k.main()
