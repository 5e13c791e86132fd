"""Multi30k English->German (a small real corpus, fetched at run time) end to end on any CPU:
the real-corpus check of how much int8, bfloat16 and the lexical shortlist cost.

    python experiments/multi30k.py --workdir=runs/multi30k
    python experiments/multi30k.py --workdir=runs/multi30k --data_dir=data/multi30k \
        --modes=float32,int8 --config.num_train_steps=2000

Fetches the corpus into --data_dir (corpora/multi30k.py; files already there are not fetched
again), trains the `multi30k` preset with `t2t-train` (other flags go to it: resuming,
`--config.<field>=...`), then translates the test set in each of --modes and scores it
(recipes/multi30k.py): WORKDIR/modes.json, WORKDIR/test.<mode>.hyp.
"""

import argparse
import json
import os
import sys
from typing import Any, Optional, Sequence

from t2t_jax.cli import train
from t2t_jax.corpora import multi30k as multi30k_lib
from t2t_jax.recipes import multi30k


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
  parser = argparse.ArgumentParser(prog="experiments/multi30k.py", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", default="runs/multi30k")
  parser.add_argument("--data_dir", default="data/multi30k",
                      help="where the corpus is (or is fetched to)")
  parser.add_argument("--base_url", default=multi30k_lib.BASE_URL,
                      help="where the gzipped files are fetched from")
  parser.add_argument("--modes", default=",".join(multi30k.MODES),
                      help=f"comma-separated, of {', '.join(multi30k.MODES)}")
  parser.add_argument("--repeats", type=int, default=2, help="timed translations per mode")
  args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
  modes = [m for m in args.modes.split(",") if m]
  unknown = sorted(set(modes) - set(multi30k.MODES))
  if unknown:
    parser.error(f"unknown --modes {', '.join(unknown)}; choose from {', '.join(multi30k.MODES)}")
  try:
    specs = multi30k_lib.fetch(args.data_dir, args.base_url)
  except ValueError as e:
    parser.exit(2, f"experiments/multi30k.py: error: {e}\n")
  trained = train.main(multi30k.train_argv(args.workdir, specs, rest),
                       prog="experiments/multi30k.py")
  modes = multi30k.compare_modes(args.workdir, specs["test"], modes, args.repeats)
  print(json.dumps(modes, indent=2))
  print(f"written to {os.path.join(args.workdir, 'modes.json')}")
  return {"train": trained, "modes": modes}


if __name__ == "__main__":
  main()
