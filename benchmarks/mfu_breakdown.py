"""Where a training step's predicted time goes on a target: per layer pair vs the rest.

    python benchmarks/mfu_breakdown.py [--target=v5p-8] [--rows=100] [--presets=base,big]

Compiles the packed bf16 training step with 1 and 2 layers (full width, the
given rows of 256 tokens per device) for the target and splits the compiler's
predicted time (TPU cost model; GPU roofline) into one encoder+decoder layer
pair (the difference) and everything else (embeddings, output projection with
the loss over the 37000-word vocabulary, the optimizer update: the 1-layer step
less one pair). Each part's MFU is its model FLOPs (flops.py) over its time at
the device's peak. Compiler predictions, not measurements.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from t2t_jax import configs  # noqa: E402
from t2t_jax.accelerators import aot, predict, targets  # noqa: E402


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--target", default="v5p-8")
  parser.add_argument("--rows", type=int, default=100)
  parser.add_argument("--presets", default="base,big")
  args = parser.parse_args()
  target, length = targets.get(args.target), 256
  print("| target | model | part | predicted ms | share of step | part MFU |")
  print("|---|---|---|---|---|---|")
  for preset in args.presets.split(","):
    cfg = configs.get_config(preset, dtype="bfloat16")
    seconds = {}
    for n in (1, 2):
      small = cfg.replace(num_layers=n)
      p = aot.compile_train_step(small, target, args.rows, length)
      extra = args.rows * predict.attention_flops_per_row(small, length)
      seconds[n] = predict.micro_step_seconds(p.cost, target,
                                              extra if p.cudnn_attention_calls else 0,
                                              p.sliced_prefetches)[0]
    pair = seconds[2] - seconds[1]
    rest = seconds[1] - pair
    step = rest + cfg.num_layers * pair
    flops_pair = args.rows * (predict.model_flops_per_row(cfg.replace(num_layers=2), length)
                              - predict.model_flops_per_row(cfg.replace(num_layers=1), length))
    flops_rest = args.rows * predict.model_flops_per_row(cfg, length) - cfg.num_layers * flops_pair
    peak = target.peak_bf16_flops
    for part, t, f in ((f"{cfg.num_layers} layer pairs", cfg.num_layers * pair,
                        cfg.num_layers * flops_pair),
                       ("embeddings, output layer + loss, optimizer", rest, flops_rest),
                       ("whole step", step, flops_pair * cfg.num_layers + flops_rest)):
      print(f"| {target.name} | {preset} | {part} | {t * 1e3:.2f} | {100 * t / step:.0f}% | "
            f"{100 * f / (t * peak):.0f}% |")
    sys.stdout.flush()


if __name__ == "__main__":
  main()
