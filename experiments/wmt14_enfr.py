"""WMT14 English->French with the paper's Transformer.

  python experiments/wmt14_enfr.py --config=base --workdir=runs/enfr_base
  python experiments/wmt14_enfr.py --config=big  --workdir=runs/enfr_big --config.dtype=bfloat16

Same presets and flags as wmt14_ende.py; the dataset is wmt14_translate/fr-en
(36M pairs), the shared vocabulary has 32000 word-pieces, and big uses
P_drop = 0.1 (section 6.1), all overridable with `--config.<field>=<value>`.
"""

from t2t_jax.recipes import experiment


def main(argv=None):
  return experiment.main(argv, script=__file__, language_pair="fr", doc=__doc__)


if __name__ == "__main__":
  main()
