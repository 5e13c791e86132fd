"""`python -m t2t_jax.cli.bleu bleu`: the three BLEU scores of a hypothesis file.

    python -m t2t_jax.cli.bleu bleu --hyp HYP --ref REF --lang de

prints one JSON object with the three scores and their signatures. The library
behind it, and how each score is computed: evaluation/bleu.py.
"""

from __future__ import annotations

import json
import sys
from typing import Optional, Sequence

from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.data import textio
from t2t_jax.evaluation import bleu as bleu_lib


@exits.command
def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = flags.parser("python -m t2t_jax.cli.bleu", f"{__doc__}\n{bleu_lib.__doc__}")
  commands = parser.add_subparsers(dest="command", required=True)
  bleu = commands.add_parser("bleu", help="score a hypothesis file against a reference file")
  bleu.add_argument("--hyp", required=True, help="detokenised hypotheses, one per line")
  bleu.add_argument("--ref", required=True, help="detokenised references, one per line")
  bleu.add_argument("--lang", required=True, help="target language, e.g. de or fr")
  args = parser.parse_args(argv)
  scores = bleu_lib.bleu_scores(textio.read_lines(args.hyp), textio.read_lines(args.ref),
                                args.lang)
  json.dump(scores, sys.stdout, indent=2, ensure_ascii=False)
  sys.stdout.write("\n")


if __name__ == "__main__":
  main()
