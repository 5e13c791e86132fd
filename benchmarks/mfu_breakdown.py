"""Where a training step's predicted time goes on a target: per layer pair vs the rest.

    python benchmarks/mfu_breakdown.py [--target=v5p-8] [--rows=100] [--presets=base,big]
    python benchmarks/mfu_breakdown.py --ops [--target=v5p-8] [--rows=100] [--vocab=8000]
    ... --smoke   # toy sizes: does the script run? (figures meaningless)

Compiles the packed bf16 training step with 1 and 2 layers (full width, the
given rows of 256 tokens per device) for the target and splits the compiler's
predicted time (TPU cost model; GPU roofline) into one encoder+decoder layer
pair (the difference) and everything else (embeddings, output projection with
the loss over the 37000-word vocabulary, the optimizer update: the 1-layer step
less one pair). Each part's MFU is its model FLOPs (train/metrics.py) over its time at
the device's peak. Compiler predictions, not measurements.

`--ops` (TPU only) goes below the layer pair: libtpu writes its cost model's
`estimated_cycles` into each top-level instruction's backend_config in the
compiled program's text; the 1-layer step's instructions are summed by what
their metadata names (a fusion is charged to its root op, so an elementwise op
XLA fused into a matmul is charged to the matmul) and scaled to the program's
`optimal_seconds` (their sum is not exactly the program's time: copies overlap).
A smaller vocabulary (--vocab) shortens the compile; the layer pair's ops do not
depend on it.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from t2t_jax import configs  # noqa: E402
from t2t_jax.accelerators import aot, predict, targets  # noqa: E402


_INSTRUCTION = re.compile(r'^\s*(?:ROOT )?%\S+ = .*"estimated_cycles":"(-?\d+)"', re.M)
_OP_NAME = re.compile(r'op_name="([^"]*)"')

# (part, pattern of the op's metadata name), first match wins; "bwd" if under transpose(.
_PARTS = (
    ("dropout masks", r"dropout|threefry|random_bits"),
    ("attention q k^T", r"bhqd,bhkd->bhqk"),
    ("attention probs x v", r"bhqk,bhkd->bhqd|bhqk,bhqd->bhkd"),
    ("attention softmax, mask", r"_fused_attention|attention_core|softmax"),
    ("attention projections q k v o", r"/(query|key|value|out)/|project_kv"),
    ("ffn matmuls", r"/ffn/.*dot_general"),
    ("ffn relu, bias", r"/ffn/"),
    ("layer norms", r"/norm_"),
)


def _part(op_name: str) -> str:
  if "layers_" not in op_name:
    if "_embed" in op_name:
      return "outside the layers: embeddings, positions"
    return "outside the layers: output layer + loss, optimizer, other"
  way = " bwd" if "transpose(" in op_name else " fwd"
  for part, pattern in _PARTS:
    if re.search(pattern, op_name):
      return part + way
  return "other in the layer (residual adds, converts)" + way


def op_table(hlo: str, seconds: float) -> list[tuple[str, int, float]]:
  """(part, estimated cycles, predicted seconds) of a compiled TPU program, largest first."""
  cycles: collections.Counter = collections.Counter()
  for line in hlo.splitlines():
    found = _INSTRUCTION.match(line)
    if found and "fused_computation" not in line.split(" = ")[0]:
      name = _OP_NAME.search(line)
      cycles[_part(name.group(1) if name else "")] += int(found.group(1))
  total = sum(cycles.values()) or 1
  return [(part, c, seconds * c / total) for part, c in cycles.most_common()]


def print_ops(target, cfg, rows: int, length: int) -> None:
  small = cfg.replace(num_layers=1)
  p = aot.compile_train_step(small, target, rows, length)
  seconds = predict.micro_step_seconds(p.cost, target, 0.0, p.sliced_prefetches)[0]
  table = op_table(p.hlo, seconds)
  pair = sum(s for part, _, s in table if not part.startswith("outside"))
  print(f"| part ({cfg.d_model}-wide, {rows} x {length} tokens) | estimated cycles | "
        "predicted ms | share of the layer pair |")
  print("|---|---|---|---|")
  for part, c, s in table:
    share = "" if part.startswith("outside") else f"{100 * s / pair:.1f}%"
    print(f"| {part} | {c:,} | {s * 1e3:.3f} | {share} |")
  print(f"| one layer pair | | {pair * 1e3:.3f} | 100% |")
  print(f"| whole 1-layer step (optimal_seconds) | | {seconds * 1e3:.3f} | |")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--target", default="v5p-8")
  parser.add_argument("--rows", type=int, default=100)
  parser.add_argument("--presets", default="base,big")
  parser.add_argument("--ops", action="store_true",
                      help="per-operation split of one layer pair (TPU cost model cycles)")
  parser.add_argument("--vocab", type=int, default=None, help="--ops: vocabulary size")
  parser.add_argument("--smoke", action="store_true",
                      help="toy sizes (64 wide, 512 words, rows of 32): does the script run?")
  args = parser.parse_args()
  target, length = targets.get(args.target), 256
  toy = {}
  if args.smoke:
    length, toy = 32, dict(d_model=64, d_ff=128, num_heads=2, vocab_size=512)
  if args.ops:
    for preset in args.presets.split(","):
      overrides = {**toy, **({"vocab_size": args.vocab} if args.vocab else {})}
      print_ops(target, configs.get_config(preset, dtype="bfloat16", **overrides),
                args.rows, length)
    return
  print("| target | model | part | predicted ms | share of step | part MFU |")
  print("|---|---|---|---|---|---|")
  for preset in args.presets.split(","):
    cfg = configs.get_config(preset, dtype="bfloat16", **toy)
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
