"""`t2t-score`: the log-probability of given translations under trained or imported models.

    t2t-score --workdir runs/opus-en-de --input test.en,test.de > scores.txt
    t2t-score --workdir runs/demo --input pairs.tsv --per_token --output scores.txt

--input holds the pairs as `t2t-train --train` reads them: 'source_path,target_path'
(line-aligned files) or one .tsv (source TAB target). One output line per pair, in
order: the sum of the natural-log probabilities of the target's pieces and of its EOS
under the model, teacher-forced (the model reads the source and the target's previous
pieces), with 6 decimals; with --per_token, a TAB and then each piece's log-probability
(6 decimals, space-separated, in order, EOS last). An empty target scores EOS alone. As
Marian's scorer, fairseq's --score-reference and CTranslate2's score_batch, for
filtering a corpus, reranking n-best lists or checking a converted model.

The softmax is over the whole target vocabulary, as the search's (--shortlist is
refused: a shortlist's candidates give no probability of the model). --int8 and
--dtype bfloat16 score with those products, as t2t-translate decodes with them;
--workdir takes a checkpoint too, and --no-average the latest checkpoint; --ensemble:
each piece's log((1/M) sum_m p_m), the distribution the ensemble's beam search follows.
A pair with a side longer than the model's positions (max_len, EOS included) is refused
in one line naming its line: no pair is cut. The library behind it:
t2t_jax/inference/scoring.py (`Translator.score` from Python).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Optional, Sequence

from t2t_jax import inference
from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.data import sources
from t2t_jax.inference import scoring
from t2t_jax.runtime import platform
from t2t_jax.runtime import workdir as workdir_lib


def _parser() -> argparse.ArgumentParser:
  parser = flags.parser("t2t-score", __doc__)
  parser.add_argument("--workdir", required=True,
                      help="the model's work directory (or one of its checkpoints)")
  parser.add_argument("--input", required=True, metavar="SRC,TGT",
                      help="the pairs: 'source_path,target_path' (line-aligned) or one .tsv")
  parser.add_argument("--output", help="where to write the scores (default: stdout)")
  parser.add_argument("--per_token", action="store_true",
                      help="append a TAB and each target piece's log-probability, EOS last")
  parser.add_argument("--ensemble", nargs="+", default=[], metavar="PATH",
                      help="more work directories or checkpoints: each piece's log of the "
                           "models' mean probability")
  parser.add_argument("--average", action=argparse.BooleanOptionalAction, default=True,
                      help="use the averaged checkpoint if there is one (--no-average: the latest)")
  parser.add_argument("--batch_size", type=int,
                      help="pairs per batch (default: the config's decode_batch_size)")
  parser.add_argument("--dtype", choices=("float32", "bfloat16"),
                      help="bfloat16: score with bfloat16 products, as t2t-translate --dtype "
                           "decodes (default: the config's)")
  parser.add_argument("--int8", action="store_true",
                      help="score with int8 products, as t2t-translate --int8 decodes")
  parser.add_argument("--device", choices=platform.PLATFORMS,
                      help="compute on this kind of device (default: JAX's choice)")
  parser.add_argument("--shortlist", action="store_true", help=argparse.SUPPRESS)
  return parser


@exits.command
def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = _parser()
  args = parser.parse_args(argv)
  if args.shortlist:
    parser.error("--shortlist: scores are over the whole vocabulary; a shortlist's candidates "
                 "give no probability of the model (score without it)")
  if args.batch_size is not None and args.batch_size < 1:
    parser.error(f"--batch_size={args.batch_size}: give a positive number of pairs")
  if not pathlib.Path(args.workdir).is_dir():
    raise FileNotFoundError(f"work directory {args.workdir} does not exist: "
                            f"{workdir_lib.TRAIN_FIRST}")
  if args.device is not None:
    platform.select(args.device)  # before anything runs on a device
  platform.enable_compilation_cache()
  pairs = sources.read_pairs(args.input)
  translator = inference.Translator(args.workdir, average=args.average, ensemble=args.ensemble,
                                    dtype=args.dtype, int8=args.int8)
  found = translator.score([s for s, _ in pairs], [t for _, t in pairs], per_token=True,
                           batch_size=args.batch_size)
  text = "".join(scoring.format_line(log_probs, args.per_token) + "\n" for log_probs in found)
  if args.output is None:
    sys.stdout.write(text)
  else:
    pathlib.Path(args.output).write_text(text, encoding="utf-8")


if __name__ == "__main__":
  main()
