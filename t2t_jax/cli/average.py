"""`t2t-average-checkpoints --workdir W [--last N]`: average a run's last N checkpoints.

Writes the float32 mean of their params to WORKDIR/averaged (section 6.1: the
last 5 checkpoints for base models, 20 for big), where `t2t-translate` and the
experiment scripts look first. The library behind it: runtime/checkpoint.py.
"""

from __future__ import annotations

import pathlib
from typing import Optional, Sequence

import jax

from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.runtime import averaging
from t2t_jax.runtime import checkpoint
from t2t_jax.runtime import workdir as workdir_lib


@exits.command
def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = flags.parser("t2t-average-checkpoints", __doc__)
  parser.add_argument("--workdir", required=True, help="the training run's work directory")
  parser.add_argument("--last", type=int, default=None,
                      help="how many checkpoints to average (default: the run's "
                           "config.json average_last, else 5)")
  args = parser.parse_args(argv)
  last = args.last
  if last is None:
    has_config = (pathlib.Path(args.workdir) / workdir_lib.CONFIG_FILE).exists()
    last = workdir_lib.load_config(args.workdir).average_last if has_config else 5
  if last < 1:
    parser.error(f"--last={last} must be at least 1")
  params = averaging.average_checkpoints(args.workdir, last=last)
  steps = averaging.averaged_steps(args.workdir)
  directory = pathlib.Path(args.workdir).absolute() / checkpoint.AVERAGED_DIR / str(steps[-1])
  count = sum(x.size for x in jax.tree.leaves(params))
  print(f"Averaged steps {steps} ({count:,} parameters) into {directory}")


if __name__ == "__main__":
  main()
