"""`t2t-export`: write a trained work directory as a transformers or CTranslate2 model.

    t2t-export --workdir runs/demo --to huggingface runs/demo-hf
    t2t-export --workdir runs/demo --to ctranslate2 runs/demo-ct2 [--quantization int8]

Needs the export extras (`pip install -e .[export]`). What is written, and how
it matches our model: docs/export.md.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Optional, Sequence

from t2t_jax.cli import flags as cli
from t2t_jax.export import convert as export


def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = cli.parser("t2t-export", __doc__)
  parser.add_argument("--workdir", required=True, help="the training run's work directory")
  parser.add_argument("--to", required=True, choices=sorted(export.EXPORTERS), help="target format")
  parser.add_argument("out", help="output directory")
  parser.add_argument("--average", action=argparse.BooleanOptionalAction, default=True,
                      help="use the averaged checkpoint if there is one (--no-average: the latest)")
  parser.add_argument("--quantization", help="ctranslate2 only: int8, int8_float32, float16, ...")
  parser.add_argument("--force", action="store_true",
                      help="ctranslate2 only: overwrite an existing output directory")
  args = parser.parse_args(argv)
  if not pathlib.Path(args.workdir).is_dir():
    raise SystemExit(f"error: work directory {args.workdir} does not exist")
  options = {"average": args.average}
  if args.to == "ctranslate2":
    options.update(quantization=args.quantization, force=args.force)
  elif args.quantization or args.force:
    raise SystemExit("error: --quantization and --force apply to --to ctranslate2 only")
  cli.setup_logging()
  cli.apply_log_level(args)
  try:
    out = export.EXPORTERS[args.to](args.workdir, args.out, **options)
  except (export.MissingExtrasError, OSError, ValueError, RuntimeError) as e:
    raise SystemExit(f"error: {e}") from None
  print(f"Exported {args.workdir} to {out} ({args.to})", file=sys.stderr)


if __name__ == "__main__":
  main()
