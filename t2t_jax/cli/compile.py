"""Compiles the training, eval and decoding steps for an accelerator this host lacks, and
predicts what a run there needs (t2t-compile; accelerators/plan.py), or with --measure
times them on this host's own devices beside the prediction (accelerators/measure.py).

    t2t-compile --target=h100 --config=base --config.dtype=bfloat16
    t2t-compile --target=v5p-8 --config=big --config.dtype=bfloat16 --config.max_tokens_per_device=12800
    t2t-compile --target=8xh100 --config=big --config.dtype=bfloat16   # the paper's 8 GPUs
    t2t-compile --measure --config=base --config.dtype=bfloat16        # on this host's devices

Run it before renting a machine: it says whether the experiment's step fits in
the device's memory, the largest --config.max_tokens_per_device that does and
the micro-steps the 25000-token update then takes, and the predicted step time,
tokens/s, MFU and hours to the config's num_train_steps. Every time and rate is
PREDICTED by the compiler on this host (TPU: XLA's cost model; GPU: a roofline,
and on 8xh100 the gradient all-reduce at an assumed NVLink bandwidth, the
assumptions printed), never measured. The last line on stdout is
one JSON object with these figures. Needs the compilers: pip install -e '.[accelerators]'.

`--measure` instead runs the same training step on the devices this process
has (a GPU, a TPU, or the CPU) and times `--measure_steps` updates after
`--measure_warmup`, then the beam search of a fixed batch: MEASURED figures
(`step_s`, `tokens_per_s`, `mfu`, `peak_bytes`, `"measured": true`), beside
the prediction for the program that ran on this device kind (`predicted`, or
null and why: `prediction_unavailable`) and `measured_over_predicted`
(accelerators/measure.py). It needs no compiler extra.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import jax

from t2t_jax import errors
from t2t_jax.accelerators import measure as measure_lib
from t2t_jax.accelerators import plan as plan_lib
from t2t_jax.accelerators import predict
from t2t_jax.accelerators import targets
from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.train.memory import GiB


def _parser():
  parser = flags.parser("t2t-compile", __doc__, config="base")
  parser.add_argument("--target", type=targets.get,
                      help=f"one of {', '.join(targets.TARGETS)} (or --measure)")
  parser.add_argument("--measure", action="store_true",
                      help="time the training and decoding steps on this process's devices")
  parser.add_argument("--measure_steps", type=int, default=10, help="updates timed")
  parser.add_argument("--measure_warmup", type=int, default=2, help="updates run before")
  parser.add_argument("--memory_bandwidth_gbs", type=float, default=None,
                      help="--measure on a device kind without datasheet figures (a CPU): "
                           "its memory bandwidth in GB/s, which with --config.peak_tflops "
                           "gives the roofline prediction")
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


def _measured_summary(report: dict) -> list[str]:
  r, d = report, report["decode"]
  lines = [
      f"MEASURED on {r['devices']} x {r['device_kind']} ({r['platform']}, jax "
      f"{r['jax_version']}), dtype {r['dtype']}: {r['micro_steps']} micro-step(s) of "
      f"{r['rows_per_micro_step']} rows x {r['row_length']} tokens per device",
      f"training: {r['step_s']:.4f} s per update (mean of {r['timed_updates']} after "
      f"{r['warmup_updates']} warm-up), {r['tokens_per_s']:,.0f} tokens/s, MFU "
      + ("n/a (no peak known)" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%")
      + f", peak {r['peak_bytes'] / GiB:.3f} GiB ({r['peak_bytes_source']})",
      f"decoding: beam {d['beam_size']}, {d['sentences']} sentences of {d['source_tokens']} "
      f"tokens: {d['sentences_per_s']:.1f} sentences/s, {d['target_tokens_per_s']:,.0f} target "
      f"tokens/s (best of the runs after the first, {d['first_run_s']:.1f} s with compilation)",
  ]
  g = r["predicted"]
  if g is None:
    return lines + [f"no prediction: {r['prediction_unavailable']}"]
  ratio = r["measured_over_predicted"]["step_s"]
  return lines + [
      f"PREDICTED for {g['target']} ({g['basis']}): {g['step_s']:.4f} s per update; "
      f"measured / predicted step time {ratio:.2f}"] + g["assumptions"]


def _measure(args) -> dict:
  cfg = flags.config(args)
  bandwidth = None if args.memory_bandwidth_gbs is None else args.memory_bandwidth_gbs * 1e9
  report = measure_lib.measure(cfg, args.measure_steps, args.measure_warmup,
                               memory_bandwidth=bandwidth)
  for line in _measured_summary(report):
    print(line)
  print(json.dumps(report), flush=True)
  return report


@exits.command
def main(argv: Optional[Sequence[str]] = None) -> dict:
  parser = _parser()
  args = parser.parse_args(argv)
  if args.measure == (args.target is not None):
    parser.error("give --target=NAME (predict for an accelerator) or --measure (time this "
                 "process's devices), one of them")
  if args.measure:
    return _measure(args)
  # The host only traces and compiles: its own backend is the CPU, even on a machine
  # with a GPU or TPU (which would otherwise be opened, and its memory taken).
  jax.config.update("jax_platforms", "cpu")
  cfg = flags.config(args)
  problem = targets.missing_compiler(args.target)
  if problem:
    raise errors.MissingExtraError(problem)
  report = plan_lib.plan(cfg, args.target, decode=args.decode)
  for line in _summary(report):
    print(line)
  print(json.dumps(report), flush=True)
  return report


if __name__ == "__main__":
  main()
