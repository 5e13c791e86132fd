"""Peak memory of one training micro-step, from XLA's memory analysis (no step is run).

    python benchmarks/bench_memory.py [--configs=base,big] [--tokens=4096,8192,12500,25000]
        [--length=256] [--dtype=float32,bfloat16]

For each preset and tokens per device: the train step (pmapped, state donated,
Adam update included) compiled for one device and one micro-batch of
`tokens // length` rows of `length` tokens, the longest rows the batches have
(the worst case at a given token count). Peak = arguments + outputs - aliased
(the donated state) + temporaries, as `t2t_jax.train.memory.StepMemory` counts it; this
is what `memory.resolve_max_tokens_per_device` fits into a device. The figures
are the compiler's for the backend it runs on: a GPU's compiler fuses and
schedules differently, so run it there for that device's numbers.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402

from t2t_jax import configs  # noqa: E402
from t2t_jax.train import memory

GiB = 1 << 30


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--configs", default="base,big")
  parser.add_argument("--tokens", default="4096,8192,12500,25000")
  parser.add_argument("--length", type=int, default=256)
  parser.add_argument("--dtype", default="float32")
  parser.add_argument("--packed", action="store_true", help="with segment ids (packed rows)")
  args = parser.parse_args()
  print(f"# {platform.processor() or platform.machine()}, jax {jax.__version__}, "
        f"compiled for {jax.devices()[0].device_kind}; rows of {args.length} tokens")
  print("| config | dtype | tokens per device | micro-batch | state (params + Adam) GiB "
        "| temporaries GiB | peak GiB | compile s |")
  print("|---|---|---|---|---|---|---|---|")
  for name in args.configs.split(","):
    for dtype in args.dtype.split(","):
      cfg = configs.get_config(name, dtype=dtype)
      for tokens in map(int, args.tokens.split(",")):
        rows = max(1, tokens // args.length)
        start = time.perf_counter()
        m = memory.step_memory(cfg, rows, args.length, packed=args.packed)
        seconds = time.perf_counter() - start
        print(f"| {name} | {dtype} | {tokens} | [{rows}, {args.length}] | "
              f"{m.aliased / GiB:.2f} | {m.temporaries / GiB:.2f} | {m.peak / GiB:.2f} | "
              f"{seconds:.0f} |", flush=True)


if __name__ == "__main__":
  main()
