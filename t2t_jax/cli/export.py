"""`t2t-export`: write a trained work directory as a transformers or CTranslate2 model.

    t2t-export --workdir runs/demo --to huggingface runs/demo-hf
    t2t-export --workdir runs/demo --to ctranslate2 runs/demo-ct2 [--quantization int8]

Needs the export extras (`pip install -e .[export]`). What is written, how it
matches our model and how to call it: docs/export.md. The library behind it:
t2t_jax/export/ (huggingface.py, ctranslate2.py).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Optional, Sequence

from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.export import ctranslate2 as ctranslate2_lib
from t2t_jax.export import huggingface

FORMATS = ("huggingface", "ctranslate2")


@exits.command
def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = flags.parser("t2t-export", __doc__)
  parser.add_argument("--workdir", required=True, help="the training run's work directory")
  parser.add_argument("--to", required=True, choices=FORMATS, help="target format")
  parser.add_argument("out", help="output directory")
  parser.add_argument("--average", action=argparse.BooleanOptionalAction, default=True,
                      help="use the averaged checkpoint if there is one (--no-average: the latest)")
  parser.add_argument("--quantization", help="ctranslate2 only: int8, int8_float32, float16, ...")
  parser.add_argument("--force", action="store_true",
                      help="ctranslate2 only: overwrite an existing output directory")
  args = parser.parse_args(argv)
  if args.to != "ctranslate2" and (args.quantization or args.force):
    parser.error("--quantization and --force apply to --to ctranslate2 only")
  if not pathlib.Path(args.workdir).is_dir():
    raise FileNotFoundError(f"work directory {args.workdir} does not exist")
  if args.to == "ctranslate2":
    out = ctranslate2_lib.export_ctranslate2(args.workdir, args.out, average=args.average,
                                        quantization=args.quantization, force=args.force)
    print(f"Exported {args.workdir} to {out} (ctranslate2): {ctranslate2_lib.USAGE}", file=sys.stderr)
  else:
    out = huggingface.export_huggingface(args.workdir, args.out, average=args.average)
    print(f"Exported {args.workdir} to {out} ({args.to})", file=sys.stderr)


if __name__ == "__main__":
  main()
