"""WMT14 English->French with the paper's Transformer: `t2t-train` with the En-Fr presets.

  python experiments/wmt14_enfr.py --config=base --workdir=runs/base_enfr
  python experiments/wmt14_enfr.py --config=big  --workdir=runs/big_enfr --config.dtype=bfloat16

`--config=base` and `--config=big` run the `base_enfr` and `big_enfr` presets of
t2t_jax/configs.py (the same as `t2t-train --config=big_enfr`): the dataset is
wmt14_translate/fr-en (36M pairs), the shared vocabulary has 32000 word-pieces,
and big uses P_drop = 0.1 (section 6.1). Table 3's rows get the same En-Fr data.
Everything is overridable with `--config.<field>=<value>`.
"""

from t2t_jax.cli import train


def main(argv=None):
  return train.main(argv, prog="experiments/wmt14_enfr.py", pair="enfr", doc=__doc__)


if __name__ == "__main__":
  main()
