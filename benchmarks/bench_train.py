"""Training speed: step time, tokens/s and MFU of a preset, or old code against new.

    python benchmarks/bench_train.py [--configs=demo,base,big] [--dtype=bfloat16]
        [--tokens_per_device=4096] [--length=32] [--steps=5]
    python benchmarks/bench_train.py --compare=/path/to/old/checkout [--configs=demo,base]
        [--tokens_per_batch=demo:2048,base:4096] [--batches=demo:24,base:6] [--rounds=4]
        [--parallelism=pmap|shard_map] [--old_parallelism=...] [--old_python=PATH]

Step speed (default): the real pmapped `train_step` (dropout on, Adam update) over
all local devices, on random token ids in one bucket shape `[rows, length]` per
device, so the figures are for full, unpadded batches. The first step
(compilation) is timed apart. MFU = model FLOPs per step (t2t_jax.train.metrics) / step
time / (devices x peak); peak comes from metrics.PEAK_TFLOPS by device kind, or
`--peak_tflops`. The paper's batch is 25000 target tokens per step over 8 GPUs,
i.e. `--tokens_per_device=3125` on 8 devices.

Comparison (`--compare`): what a user gets, real (non-padding) target tokens per
second of whole updates, through each version's own data pipeline and train
step. Two worker processes, one per checkout (this one and the old one, e.g. a
`git worktree` of an older commit), each prepare the demo corpus with their own
code, take the first `--batches` batches of their own epoch-0 plan (the real
length mix; the old code pads to length buckets, newer code may pack) and
compile every shape among them. Each splits an update into micro-steps as its own
preset says (`max_tokens_per_device`, `unroll_micro_steps`; one micro-step where
the preset leaves it to the memory analysis). Then rounds alternate: old, new, old, new...
each timing one pass over its batches; the best round of each counts. For the
base preset the model is base (d_model 512, vocabulary 37000) on the same demo
corpus ids. Prints one line per round and a table with the ratio new / old.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)


def _mapped_update(cfg, parallelism: str = "pmap"):
  """(the state at step 0 on every device, the mapped step, the batch placement) of the
  checkout the process runs: train/step.py's `build`, or train/builder.py's in a checkout
  older than it (the comparison's old side runs this file against one)."""
  import jax  # pylint: disable=import-outside-toplevel
  try:
    from t2t_jax.train import step as step_lib  # pylint: disable=import-outside-toplevel
  except ImportError:  # the old side of --compare: a module this package no longer has
    step_lib = importlib.import_module("t2t_jax.train.builder")
  built = step_lib.build(cfg, parallelism=parallelism)
  return (built.mapped.put_state(built.init_state(jax.random.key(0))), built.mapped.train_step,
          built.mapped.put_batch)


# --- Step speed on random ids -------------------------------------------------------

def bench(name: str, dtype: str, tokens_per_device: int, length: int, num_steps: int,
          peak_tflops: float | None, parallelism: str = "pmap") -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  from t2t_jax import configs  # pylint: disable=import-outside-toplevel
  try:
    from t2t_jax.train import metrics as metrics_lib  # pylint: disable=import-outside-toplevel
  except ImportError:  # the old side of --compare
    metrics_lib = importlib.import_module("t2t_jax.train.flops")
  cfg = configs.get_config(name, dtype=dtype, peak_tflops=peak_tflops)
  devices = jax.local_device_count()
  rows = max(1, tokens_per_device // length)
  state, step_fn, put_batch = _mapped_update(cfg, parallelism)
  rng = np.random.default_rng(0)
  shape = (devices, 1, rows, length)  # [local_devices, accum_steps, micro_batch, length]
  batch = put_batch({
      "inputs": rng.integers(3, cfg.vocab_size, shape, dtype=np.int32),
      "targets": rng.integers(3, cfg.vocab_size, shape, dtype=np.int32)})
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
  step_flops = devices * rows * metrics_lib.train_flops(cfg, length, length)
  kind = jax.devices()[0].device_kind
  utilisation = metrics_lib.mfu(step_flops, step_s, devices,
                          metrics_lib.peak_flops(kind, dtype, peak_tflops))
  return {"config": name, "dtype": dtype, "device": kind, "devices": devices,
          "batch": f"{devices}x[{rows},{length}]", "compile_s": compile_s, "step_s": step_s,
          "tokens_per_s": tokens / step_s, "tflops_per_s": step_flops / step_s / 1e12,
          "mfu": utilisation}


def step_speed(args) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"jax {jax.__version__}, {jax.local_device_count()} x {jax.devices()[0].device_kind}")
  print("| config | dtype | batch (target tokens) | compile s | step s | target tokens/s "
        "| model TFLOP/s | MFU |")
  print("|---|---|---|---|---|---|---|---|")
  for name in args.configs.split(","):
    r = bench(name, args.dtype, args.tokens_per_device, args.length, args.steps,
              args.peak_tflops, args.parallelism)
    mfu = "n/a (no peak known)" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
    print(f"| {r['config']} | {r['dtype']} | {r['batch']} | {r['compile_s']:.1f} | "
          f"{r['step_s']:.3f} | {r['tokens_per_s']:.0f} | {r['tflops_per_s']:.3f} | {mfu} |",
          flush=True)


# --- Old against new: the worker -------------------------------------------------------
# Runs inside the checkout under test (PYTHONPATH), so it uses only what every
# version has: configs.get_config, dataset.prepare / accum_steps / train_iterator,
# and the mapped update (`_mapped_update`).

def worker(args) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  from t2t_jax import configs  # pylint: disable=import-outside-toplevel
  from t2t_jax.data import dataset
  # Each version splits an update into micro-steps as its own preset does (the
  # demo's unrolled micro-steps are part of what a user gets); where a preset
  # leaves that to the memory analysis (None), one micro-step.
  preset = configs.get_config(args.config)
  micro = getattr(preset, "max_tokens_per_device", None) or args.tokens_per_batch
  overrides = dict(tokens_per_batch=args.tokens_per_batch, max_tokens_per_device=micro)
  data_cfg = configs.get_config("demo", **overrides)
  ds = dataset.prepare(data_cfg, args.workdir)
  model_cfg = configs.get_config(args.config, **overrides)
  devices = jax.local_device_count()
  iterator = ds.train_iterator(devices, dataset.accum_steps(data_cfg, devices), prefetch=0)
  batches = [next(iterator) for _ in range(args.batches)]
  real = sum(int(np.count_nonzero(b["targets"])) for b in batches)
  padded = sum(int(b["targets"].size) for b in batches)
  state, step, put_batch = _mapped_update(model_cfg, args.parallelism)
  key = jax.random.key(1)
  shapes = {}
  start = time.perf_counter()
  for batch in batches:  # compile every shape once, outside the timed rounds
    shape = tuple((k, v.shape) for k, v in sorted(batch.items()))
    if shape not in shapes:
      state, metrics = step(state, put_batch(batch), key)
      jax.block_until_ready(metrics)
      shapes[shape] = batch["targets"].shape
  print(json.dumps({"ready": True, "shapes": sorted(set(shapes.values())),
                    "compile_s": time.perf_counter() - start, "jax": jax.__version__}),
        flush=True)
  for line in sys.stdin:
    if line.strip() != "run":
      break
    wall, cpu = time.perf_counter(), time.process_time()
    pending = None
    for batch in batches:  # as the training loop: read a step's metrics after the next dispatch
      state, metrics = step(state, put_batch(batch), key)
      if pending is not None:
        jax.device_get(pending)
      pending = metrics
    jax.device_get(pending)
    print(json.dumps({"seconds": time.perf_counter() - wall, "cpu_seconds":
                      time.process_time() - cpu, "real_target_tokens": real,
                      "padded_target_tokens": padded}), flush=True)


# --- Old against new: the driver ---------------------------------------------------------

def _per_config(text: str, name: str, default: int) -> int:
  values = dict(item.split(":") for item in text.split(",") if item)
  return int(values.get(name, default))


class _Worker:
  def __init__(self, label: str, root: str, config: str, tokens: int, batches: int,
               workdir: str, cache_dir: str, python: str, parallelism: str):
    env = {**os.environ, "PYTHONPATH": root, "JAX_COMPILATION_CACHE_DIR": cache_dir,
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [python, os.path.abspath(__file__), "--worker", f"--config={config}",
               f"--tokens_per_batch={tokens}", f"--batches={batches}", f"--workdir={workdir}"]
    if parallelism != "pmap":   # an old checkout's worker may not know the flag
      command.append(f"--parallelism={parallelism}")
    self.label = label
    self.process = subprocess.Popen(command, cwd=root, env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
    self.ready = self._read()

  def _read(self) -> dict:
    line = self.process.stdout.readline()
    if not line:
      raise RuntimeError(f"the {self.label} worker stopped (exit code {self.process.wait()})")
    return json.loads(line)

  def run(self) -> dict:
    self.process.stdin.write("run\n")
    self.process.stdin.flush()
    return self._read()

  def close(self) -> None:
    self.process.stdin.close()
    self.process.wait()


def compare(args) -> None:
  old_root = os.path.abspath(args.compare)
  print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"old: {old_root} ({_commit(old_root)}), new: {_ROOT} ({_commit(_ROOT)})")
  print(f"# command: {' '.join(sys.argv)}")
  rows = []
  for name in args.configs.split(","):
    tokens = _per_config(args.tokens_per_batch, name, 2048)
    batches = _per_config(args.batches, name, 12)
    workers = []
    sides = (("old", old_root, args.old_python or sys.executable,
              args.old_parallelism or args.parallelism),
             ("new", _ROOT, sys.executable, args.parallelism))
    for label, root, python, parallelism in sides:
      workdir = os.path.join(args.workdir, label)
      workers.append(_Worker(label, root, name, tokens, batches, workdir,
                             os.path.join(args.workdir, "jax_cache"), python, parallelism))
      print(f"{name} {label}: {python} (jax {workers[-1].ready.get('jax', '?')}), "
            f"{parallelism}, shapes {workers[-1].ready['shapes']}, compiled in "
            f"{workers[-1].ready['compile_s']:.0f} s", flush=True)
    best = {}
    for round_ in range(args.rounds):
      for w in workers:
        r = w.run()
        speed = r["real_target_tokens"] / r["seconds"]
        cpu_speed = r["real_target_tokens"] / r["cpu_seconds"]
        print(f"{name} round {round_ + 1} {w.label}: {speed:.0f} real target tokens/s "
              f"({r['seconds']:.1f} s wall, {cpu_speed:.0f} per CPU-second; "
              f"{r['real_target_tokens'] / r['padded_target_tokens']:.3f} of the target "
              "positions real)", flush=True)
        old = best.get(w.label)
        if old is None or speed > old[0]:
          best[w.label] = (speed, cpu_speed, r)
        else:
          best[w.label] = (old[0], max(old[1], cpu_speed), old[2])
    for w in workers:
      w.close()
    rows.append((name, tokens, batches, best))
  print("\n| config | tokens per batch | batches | old real tgt tok/s | new real tgt tok/s "
        "| new / old | old per CPU-s | new per CPU-s | new / old (CPU) |")
  print("|---|---|---|---|---|---|---|---|---|")
  for name, tokens, batches, best in rows:
    (o, oc, _), (n, nc, _) = best["old"], best["new"]
    print(f"| {name} | {tokens} | {batches} | {o:.0f} | {n:.0f} | {n / o:.2f} | {oc:.0f} | "
          f"{nc:.0f} | {nc / oc:.2f} |")


def _commit(root: str) -> str:
  try:
    return subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown commit"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--configs", default=None)
  parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  parser.add_argument("--tokens_per_device", type=int, default=4096)
  parser.add_argument("--length", type=int, default=32)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--peak_tflops", type=float, default=None)
  parser.add_argument("--compare", help="an older checkout to compare with (interleaved)")
  parser.add_argument("--parallelism", default="pmap", choices=("pmap", "shard_map"),
                      help="how the update maps over the devices (the new side's, with --compare)")
  parser.add_argument("--old_python", default=None,
                      help="--compare: the old side's interpreter (another JAX: --compare=. "
                           "--old_python=OTHER compares two JAX versions on this code)")
  parser.add_argument("--old_parallelism", default=None, choices=("pmap", "shard_map"),
                      help="--compare: the old side's parallelism (default --parallelism)")
  parser.add_argument("--tokens_per_batch", default="demo:2048,base:4096",
                      help="per config, with --compare (name:tokens,...)")
  parser.add_argument("--batches", default="demo:24,base:6",
                      help="batches per timed round, per config, with --compare")
  parser.add_argument("--rounds", type=int, default=4)
  parser.add_argument("--workdir", default="/tmp/t2t_bench_train",
                      help="where the workers prepare the demo corpus (with --compare)")
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--config", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if not args.worker:  # the worker gets its checkout through PYTHONPATH
    sys.path.insert(0, _ROOT)
  if args.worker:
    args.tokens_per_batch = int(args.tokens_per_batch)
    args.batches = int(args.batches)
    worker(args)
  elif args.compare:
    args.configs = args.configs or "demo,base"
    compare(args)
  else:
    args.configs = args.configs or "demo,base,big"
    step_speed(args)


if __name__ == "__main__":
  main()
