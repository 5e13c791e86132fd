"""`t2t-translate`: translate text with a trained work directory, one output line per input line.

    echo "yesterday the old man saw the small dog ." | t2t-translate --workdir runs/demo
    t2t-translate --workdir runs/base --input newstest2014.en --output test.hyp --beam_size 4

The work directory holds what training wrote: `config.json` (the config),
`vocab/spm.model` (the shared SentencePiece model) and the checkpoints; the
averaged parameters are used when present (`--no-average`: the latest
checkpoint's). Sentences are decoded in batches of similar length and written
back in input order. Every input line gives exactly one output line: an empty
line gives an empty line, and a line longer than the model's `max_len` positions
is cut to fit, with a warning naming the line. The library behind it:
t2t_jax/inference.py.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Optional, Sequence

from t2t_jax import cli
from t2t_jax import inference
from t2t_jax import textio
from t2t_jax import workdir as workdir_lib


def _write_output(path: Optional[str], lines: Sequence[str]) -> None:
  text = "".join(line + "\n" for line in lines)
  if path is None:
    sys.stdout.buffer.write(text.encode("utf-8", errors="replace"))
    sys.stdout.flush()
  else:
    with open(path, "w", encoding="utf-8", errors="replace", newline="\n") as f:
      f.write(text)


@cli.command
def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = cli.parser("t2t-translate", __doc__)
  parser.add_argument("--workdir", required=True, help="the training run's work directory")
  parser.add_argument("--input", help="source sentences, one per line (default: stdin)")
  parser.add_argument("--output", help="where to write translations (default: stdout)")
  parser.add_argument("--beam_size", type=int, help="default: the config's (4)")
  parser.add_argument("--alpha", type=float,
                      help="length penalty exponent; default: the config's (0.6)")
  parser.add_argument("--max_decode_extra", type=int,
                      help="max output length = input length + this; default: the config's (50)")
  parser.add_argument("--batch_size", type=int, help="sentences per batch; default: the config's")
  parser.add_argument("--average", action=argparse.BooleanOptionalAction, default=True,
                      help="use the averaged checkpoint if there is one (--no-average: the latest)")
  args = parser.parse_args(argv)

  if not pathlib.Path(args.workdir).is_dir():
    raise FileNotFoundError(f"work directory {args.workdir} does not exist: "
                            f"{workdir_lib.TRAIN_FIRST}")
  overrides = {name: value for name, value in (
      ("beam_size", args.beam_size), ("alpha", args.alpha),
      ("max_decode_extra", args.max_decode_extra), ("decode_batch_size", args.batch_size))
               if value is not None}
  translator = inference.Translator(args.workdir, average=args.average, **overrides)
  # Undecodable bytes become U+FFFD, so every input line still gets an output line.
  lines = textio.read_lines(args.input or sys.stdin.buffer, errors="replace")
  _write_output(args.output, translator.translate(lines))


if __name__ == "__main__":
  main()
