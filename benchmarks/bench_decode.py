"""Beam-search decoding speed, with the incremental cache and without it.

    python benchmarks/bench_decode.py [--configs=demo,base] [--sentences=8] [--source_len=20]
        [--output_len=24] [--beam_size=4] [--repeats=3] [--no-uncached]

Random parameters, random source ids. A random model's first choice is often
EOS, which would time a one-step search; so EOS is switched off here and every
hypothesis runs to exactly `output_len` tokens (about a WMT sentence), which is
the work of a trained model's typical sentence. Compilation is timed apart;
the rates are the best of `repeats` runs: sentences/s and target tokens/s
(one sentence = one output of `output_len` tokens; the beam's extra hypotheses
are not counted). "uncached" reruns the whole decoder over all output positions
at every step (`decode.uncached_decoder`), the encoder once, as the cache does.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from t2t_jax import configs, decode, model  # noqa: E402
from t2t_jax.ids import EOS_ID  # noqa: E402


@functools.partial(jax.jit, static_argnames=("cfg", "beam_size", "output_len", "cached"))
def _search(params, inputs, *, cfg, beam_size, output_len, cached):
  if cached:
    cache = model.init_cache(cfg, params, inputs, output_len)
    step_fn = functools.partial(model.decode_step, cfg, params)
  else:
    cache, step_fn = decode.uncached_decoder(cfg, params, inputs, output_len)
  # eos_id=-1 never matches a token: every hypothesis decodes output_len tokens.
  return decode.beam_search(step_fn, cache, beam_size=beam_size, alpha=cfg.alpha,
                            max_len=output_len, eos_id=-1)


def _time(fn, repeats: int) -> tuple[float, float, np.ndarray]:
  """(first call incl. compilation, best later call) in seconds, and the output tokens."""
  start = time.perf_counter()
  tokens = np.asarray(jax.block_until_ready(fn())[0])
  first = time.perf_counter() - start
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    best = min(best, time.perf_counter() - start)
  return first, best, tokens


def _cpu_name() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--configs", default="demo,base")
  parser.add_argument("--sentences", type=int, default=8)
  parser.add_argument("--source_len", type=int, default=20,
                      help="source ids per sentence, EOS included")
  parser.add_argument("--output_len", type=int, default=24)
  parser.add_argument("--beam_size", type=int, default=4)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--uncached", action=argparse.BooleanOptionalAction, default=True)
  args = parser.parse_args()

  device = jax.devices()[0]
  print(f"device: {device.platform} {device.device_kind} ({_cpu_name()}, {os.cpu_count()} cores), "
        f"jax {jax.__version__}, load average {os.getloadavg()[0]:.1f}")
  print(f"{args.sentences} sentences, {args.source_len} source ids, {args.output_len} output "
        f"tokens each, beam {args.beam_size}")
  print(f"{'config':8} {'decoding':9} {'compile+run s':>13} {'run s':>8} {'sent/s':>8} "
        f"{'tokens/s':>9} {'speed-up':>8}")
  for name in args.configs.split(","):
    cfg = configs.get_config(name)
    params = jax.jit(functools.partial(model.init_params, cfg))(jax.random.key(0))
    rng = np.random.default_rng(0)
    inputs = rng.integers(3, cfg.vocab_size, size=(args.sentences, args.source_len))
    inputs[:, -1] = EOS_ID
    inputs = jnp.asarray(inputs, jnp.int32)
    results = {}
    for cached in (True, False) if args.uncached else (True,):
      run = functools.partial(_search, params, inputs, cfg=cfg, beam_size=args.beam_size,
                              output_len=args.output_len, cached=cached)
      first, best, tokens = _time(run, args.repeats)
      results[cached] = (best, tokens)
      # How many times faster the cache is (on the uncached row).
      speed_up = "" if cached else f"{best / results[True][0]:.1f}x"
      print(f"{name:8} {'cached' if cached else 'uncached':9} {first:13.2f} {best:8.3f} "
            f"{args.sentences / best:8.2f} {args.sentences * args.output_len / best:9.1f} "
            f"{speed_up:>8}", flush=True)
    if False in results:
      same = np.array_equal(results[True][1], results[False][1])
      print(f"{name:8} cached and uncached tokens {'identical' if same else 'DIFFER'}")


if __name__ == "__main__":
  main()
