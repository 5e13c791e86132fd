"""`t2t-translate`: translate text with trained models, one output per input line.

    echo "yesterday the old man saw the small dog ." | t2t-translate --workdir runs/demo
    t2t-translate --workdir runs/base --input newstest2014.en --output test.hyp --beam_size 4
    t2t-translate --workdir runs/demo --input in.en --nbest 4 --alignments
    t2t-translate --workdir runs/a --ensemble runs/b runs/c/checkpoints/90000 --input in.en
    t2t-translate --workdir runs/de-en --input mono.de --sample --top_k 10 --seed 1

The work directory holds what training wrote: `config.json` (the config),
`vocab/spm.model` (the shared SentencePiece model) and the checkpoints; the
averaged parameters are used when present (`--no-average`: the latest
checkpoint's). `--workdir` and `--ensemble` also take one checkpoint,
WORKDIR/checkpoints/<step> or WORKDIR/averaged/<step>; an ensemble's models
must share the vocabulary, and their probabilities are averaged at every step.

Lines are read and translated as they arrive, `--window` lines at a time in
batches of similar length (`--in_flight` of them decoding at once), and written
in input order, so a file of any length works (a progress bar on stderr counts
the lines of an --input file). Every input line gives one output: an empty line
gives an empty line, and a line longer than the model's `max_len` positions is
cut to fit, with a warning naming the line.

Output lines (tab-separated; a tab inside a translation becomes a space):
  default        translation
  --alignments   translation TAB alignment
  --nbest N      index TAB hypothesis TAB score [TAB alignment]   N lines per input line
index is the 0-based input line; score the length-penalised log-probability
that ranks beam search's hypotheses (for --sample, the model's log-probability
of the sample); alignment is "i-j ..." pairs of 0-based whitespace words,
source word i to output word j (the fast_align / Moses format), from the
encoder-decoder attention of --alignment_layer averaged over its heads. The
library behind it: t2t_jax/inference/translator.py, t2t_jax/inference/streaming.py.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys
from typing import BinaryIO, Iterator, Optional, Sequence

import tqdm

from t2t_jax.cli import flags as cli
from t2t_jax.data import textio
from t2t_jax.decoding import in_flight
from t2t_jax.inference import streaming
from t2t_jax.inference import translator as inference
from t2t_jax.runtime import compile_cache
from t2t_jax.runtime import workdir as workdir_lib


def _parser() -> argparse.ArgumentParser:
  parser = cli.parser("t2t-translate", __doc__)
  parser.add_argument("--workdir", required=True,
                      help="the training run's work directory (or one of its checkpoints)")
  parser.add_argument("--input", help="source sentences, one per line (default: stdin)")
  parser.add_argument("--output", help="where to write translations (default: stdout)")
  cli.add_search_flags(parser)
  parser.add_argument("--batch_size", type=int, help="sentences per batch; default: the config's")
  parser.add_argument("--average", action=argparse.BooleanOptionalAction, default=True,
                      help="use the averaged checkpoint if there is one (--no-average: the latest)")
  parser.add_argument("--nbest", type=int, metavar="N",
                      help="write N hypotheses per line: index TAB hypothesis TAB score")
  parser.add_argument("--alignments", action="store_true",
                      help="append TAB and the word alignment (i-j pairs) to each output line")
  parser.add_argument("--alignment_layer", type=int, default=-1,
                      help="decoder layer whose attention aligns (default -1: the last)")
  parser.add_argument("--alignment_head", type=int,
                      help="one attention head (default: the mean of the layer's heads)")
  parser.add_argument("--ensemble", nargs="+", default=[], metavar="PATH",
                      help="more work directories or checkpoints decoded with --workdir's")
  parser.add_argument("--sample", action="store_true",
                      help="sample instead of beam search (--nbest N: N samples per line)")
  parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
  parser.add_argument("--top_k", type=int, default=0,
                      help="sample among the k most probable tokens (default 0: all)")
  parser.add_argument("--seed", type=int, default=0, help="sampling seed")
  parser.add_argument("--window", type=int,
                      help="lines held in memory at once (default: 16 batches)")
  parser.add_argument("--in_flight", type=int, default=in_flight.DEFAULT, metavar="N",
                      help=f"batches decoded at once (default {in_flight.DEFAULT}; 1: one at a time)")
  parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="progress bar on stderr (default: for an --input file, on a terminal)")
  return parser


@contextlib.contextmanager
def _output(path: Optional[str]) -> Iterator[BinaryIO]:
  if path is None:
    yield sys.stdout.buffer
    sys.stdout.buffer.flush()
  else:
    with open(path, "wb") as f:
      yield f


def _progress(translations, args: argparse.Namespace):
  show = args.progress if args.progress is not None else (args.input is not None
                                                          and sys.stderr.isatty())
  if not show:
    return translations
  total = textio.count_lines(args.input) if args.input is not None else None
  return tqdm.tqdm(translations, total=total, unit=" lines", file=sys.stderr, mininterval=1.0)


@cli.command
def main(argv: Optional[Sequence[str]] = None) -> None:
  args = _parser().parse_args(argv)
  if not pathlib.Path(args.workdir).is_dir():
    raise FileNotFoundError(f"work directory {args.workdir} does not exist: "
                            f"{workdir_lib.TRAIN_FIRST}")
  overrides = cli.search_overrides(args)
  if args.batch_size is not None:
    overrides["decode_batch_size"] = args.batch_size
  compile_cache.enable()  # before anything compiles; T2T_JAX_COMPILATION_CACHE=off disables
  translator = inference.Translator(args.workdir, average=args.average, ensemble=args.ensemble,
                                    **overrides)
  alignments = (streaming.Alignments(args.alignment_layer, args.alignment_head)
                if args.alignments else None)
  # Undecodable bytes become U+FFFD, so every input line still gets an output line.
  lines = textio.iter_lines(args.input or sys.stdin.buffer, errors="replace")
  translations = translator.translate_stream(
      lines, n_best=args.nbest or 1, alignments=alignments, sample=args.sample,
      temperature=args.temperature, top_k=args.top_k, seed=args.seed, window=args.window,
      in_flight=args.in_flight)
  with _output(args.output) as out:
    for t in _progress(translations, args):
      rows = (streaming.format_nbest(t, bool(alignments)) if args.nbest is not None
              else [streaming.format_line(t, bool(alignments))])
      out.write("".join(row + "\n" for row in rows).encode("utf-8", errors="replace"))


if __name__ == "__main__":
  main()
