"""`t2t-shortlist`: build a work directory's lexical shortlist from parallel training text.

    t2t-shortlist --workdir runs/base                       # the run's own training data
    t2t-shortlist --workdir runs/base --train train.en,train.de --per_source 100 --frequent 100

Writes WORKDIR/vocab/shortlist.npz: for each source piece its --per_source most
associated target pieces (Dice coefficient of the sentence pairs holding both),
and the --frequent most frequent target pieces (then those the targets never use: --frequent
<vocabulary size> lists every piece), in the work directory's SentencePiece ids.
`t2t-translate --shortlist` and `t2t-serve --shortlist` then pick each batch's outputs
among those candidates, as Marian's --shortlist and CTranslate2's vocabulary map do; `t2t-export --to ctranslate2` writes it as the
model's vmap.txt. The library behind it: t2t_jax/inference/shortlist.py; docs/translating.md.
"""

from __future__ import annotations

from typing import Optional, Sequence

from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.inference import shortlist


@exits.command
def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = flags.parser("t2t-shortlist", __doc__)
  parser.add_argument("--workdir", required=True, help="the training run's work directory")
  parser.add_argument("--train", metavar="SRC,TGT",
                      help="parallel text: 'source_path,target_path' (line-aligned) or one .tsv "
                           "(default: the run's own training data)")
  parser.add_argument("--per_source", type=int, default=shortlist.PER_SOURCE,
                      help=f"candidates per source piece (default {shortlist.PER_SOURCE})")
  parser.add_argument("--frequent", type=int, default=shortlist.FREQUENT,
                      help="most frequent target pieces, candidates of every batch "
                           f"(default {shortlist.FREQUENT}; the vocabulary size: every piece, "
                           "which decodes as the whole vocabulary)")
  args = parser.parse_args(argv)
  shortlist.build_for_workdir(args.workdir, args.train, per_source=args.per_source,
                              frequent=args.frequent)


if __name__ == "__main__":
  main()
