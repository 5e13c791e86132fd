"""Compiles the training, eval and decoding steps for an accelerator this host lacks, and
predicts what a run there needs (t2t-compile; accelerators/plan.py).

    t2t-compile --target=h100 --config=base --config.dtype=bfloat16
    t2t-compile --target=v5p-8 --config=big --config.dtype=bfloat16 --config.max_tokens_per_device=12800
    t2t-compile --target=8xh100 --config=big --config.dtype=bfloat16   # the paper's 8 GPUs

Run it before renting a machine: it says whether the experiment's step fits in
the device's memory, the largest --config.max_tokens_per_device that does and
the micro-steps the 25000-token update then takes, and the predicted step time,
tokens/s, MFU and hours to the config's num_train_steps. Every time and rate is
PREDICTED by the compiler on this host (TPU: XLA's cost model; GPU: a roofline,
and on 8xh100 the gradient all-reduce at an assumed NVLink bandwidth, the
assumptions printed), never measured. The last line on stdout is
one JSON object with these figures. Needs the compilers: pip install -e '.[accelerators]'.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import jax

from t2t_jax.accelerators import plan as plan_lib
from t2t_jax.accelerators import predict
from t2t_jax.accelerators import targets
from t2t_jax.cli import flags as cli
from t2t_jax.train.memory import GiB


def _parser():
  parser = cli.parser("t2t-compile", __doc__, config="base")
  parser.add_argument("--target", required=True, type=targets.get,
                      help=f"one of {', '.join(targets.TARGETS)}")
  parser.add_argument("--decode", action="store_true", default=True,
                      help="also compile the cached decoding step (the default)")
  parser.add_argument("--no-decode", dest="decode", action="store_false")
  return parser


def _summary(report: dict) -> list[str]:
  r = report
  lines = [
      f"{r['target']} ({r['devices']} x {r['device_kind']}), dtype {r['dtype']}, attention "
      f"{r['attention_impl']} ({r['cudnn_attention_calls']} cuDNN attention calls)",
      f"memory per device: peak {r['peak_bytes'] / GiB:.2f} GiB of "
      f"{r['device_memory_bytes'] / GiB:.2f} GiB (budget {r['memory_budget_bytes'] / GiB:.2f}): "
      + ("fits" if r["fits"] else "DOES NOT FIT"),
      f"micro-step: {r['rows_per_micro_step']} rows x {r['row_length']} tokens "
      f"(max_tokens_per_device={r['max_tokens_per_device']}), {r['micro_steps']} micro-step(s) "
      f"per update of {r['tokens_per_batch']} tokens",
  ]
  if r["predicted_step_s"] is None:
    lines.append(f"no step time predicted ({r['prediction_basis']})")
  else:
    lines.append(
        f"PREDICTED ({r['prediction_basis']}, not measured): {r['predicted_step_s']:.3f} s per "
        f"update, {r['predicted_tokens_per_s']:,.0f} tokens/s, MFU {100 * r['predicted_mfu']:.1f}%, "
        f"{r['predicted_hours_to_num_train_steps']:.1f} h to {r['num_train_steps']} steps"
        + (f", of which the all-reduce of {r['all_reduce_bytes'] / 2**20:.0f} MiB "
           f"{r['predicted_all_reduce_s']:.4f} s" if r["predicted_all_reduce_s"] else ""))
    lines.extend(r["prediction_assumptions"])
  if r["tpu_sliced_prefetches"]:
    lines.append(f"{r['tpu_sliced_prefetches']} sliced prefetches, raw optimal_seconds "
                 f"{r['tpu_cost_model_optimal_seconds']:g}: {predict.SLICED_PREFETCH_NOTE}")
  return lines


@cli.command
def main(argv: Optional[Sequence[str]] = None) -> dict:
  args = _parser().parse_args(argv)
  # The host only traces and compiles: its own backend is the CPU, even on a machine
  # with a GPU or TPU (which would otherwise be opened, and its memory taken).
  jax.config.update("jax_platforms", "cpu")
  cfg = cli.config(args)
  problem = targets.missing_compiler(args.target)
  if problem:
    raise RuntimeError(problem)
  report = plan_lib.plan(cfg, args.target, decode=args.decode)
  for line in _summary(report):
    print(line)
  print(json.dumps(report), flush=True)
  return report


if __name__ == "__main__":
  main()
