"""Training-step speed: step time, tokens/s and MFU of a preset on this machine's devices.

    python benchmarks/bench_train.py [--configs=demo,base,big] [--dtype=bfloat16]
        [--tokens_per_device=4096] [--length=32] [--steps=5]

The real pmapped `train_step` (dropout on, Adam update) over all local devices,
on random token ids in one bucket shape `[rows, length]` per device, so the
figures are for full, unpadded batches. The first step (compilation) is timed
apart. MFU = model FLOPs per step (t2t_jax.flops) / step time / (devices x peak);
peak comes from flops.PEAK_TFLOPS by device kind, or `--peak_tflops`.
The paper's batch is 25000 target tokens per step over 8 GPUs, i.e.
`--tokens_per_device=3125` on 8 devices.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from t2t_jax import configs, flops, optim, parallel, steps  # noqa: E402


def bench(name: str, dtype: str, tokens_per_device: int, length: int, num_steps: int,
          peak_tflops: float | None) -> dict:
  cfg = configs.get_config(name, dtype=dtype, peak_tflops=peak_tflops)
  devices = jax.local_device_count()
  rows = max(1, tokens_per_device // length)
  optimizer = optim.make_optimizer(cfg)
  state = parallel.replicate(steps.create_train_state(cfg, optimizer, jax.random.key(0)))
  rng = np.random.default_rng(0)
  shape = (devices, 1, rows, length)  # [local_devices, accum_steps, micro_batch, length]
  batch = parallel.shard_batch({
      "inputs": rng.integers(3, cfg.vocab_size, shape, dtype=np.int32),
      "targets": rng.integers(3, cfg.vocab_size, shape, dtype=np.int32)})
  step_fn = parallel.pmap_train_step(cfg, optimizer)
  key = jax.random.key(1)

  start = time.perf_counter()
  state, metrics = step_fn(state, batch, key)
  jax.block_until_ready(metrics)
  compile_s = time.perf_counter() - start
  start = time.perf_counter()
  for _ in range(num_steps):
    state, metrics = step_fn(state, batch, key)
  jax.block_until_ready(metrics)
  step_s = (time.perf_counter() - start) / num_steps

  tokens = devices * rows * length
  step_flops = devices * rows * flops.train_flops(cfg, length, length)
  kind = jax.devices()[0].device_kind
  utilisation = flops.mfu(step_flops, step_s, devices,
                          flops.peak_flops(kind, dtype, peak_tflops))
  return {"config": name, "dtype": dtype, "device": kind, "devices": devices,
          "batch": f"{devices}x[{rows},{length}]", "compile_s": compile_s, "step_s": step_s,
          "tokens_per_s": tokens / step_s, "tflops_per_s": step_flops / step_s / 1e12,
          "mfu": utilisation}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--configs", default="demo,base,big")
  parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  parser.add_argument("--tokens_per_device", type=int, default=4096)
  parser.add_argument("--length", type=int, default=32)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--peak_tflops", type=float, default=None)
  args = parser.parse_args()
  print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"jax {jax.__version__}, {jax.local_device_count()} x {jax.devices()[0].device_kind}")
  print("| config | dtype | batch (target tokens) | compile s | step s | target tokens/s "
        "| model TFLOP/s | MFU |")
  print("|---|---|---|---|---|---|---|---|")
  for name in args.configs.split(","):
    r = bench(name, args.dtype, args.tokens_per_device, args.length, args.steps,
              args.peak_tflops)
    mfu = "n/a (no peak known)" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
    print(f"| {r['config']} | {r['dtype']} | {r['batch']} | {r['compile_s']:.1f} | "
          f"{r['step_s']:.3f} | {r['tokens_per_s']:.0f} | {r['tflops_per_s']:.3f} | {mfu} |",
          flush=True)


if __name__ == "__main__":
  main()
