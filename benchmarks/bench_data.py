"""How fast the input pipeline delivers batches, beside what training consumes.

    python benchmarks/bench_data.py [--workdir=/tmp/t2t_bench_data] [--batches=2000]
        [--devices=8] [--consumed_steps_per_second=3.33] [--train_pairs=N]

Prepares the demo dataset (generation, SentencePiece and the token cache are
built on the first run and reused afterwards; their times are printed), then
times the training iterator alone, prefetch thread included. Training
consumption is an estimate unless given: the demo preset's target of 1200
steps of `tokens_per_batch` tokens in 6 minutes (3.33 steps/s). `--train_pairs`:
a generated corpus of that many training pairs (and a 300-piece vocabulary)
instead of the demo's 200000, for a quick check that the script runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from t2t_jax import configs  # noqa: E402
from t2t_jax.data import dataset
from t2t_jax.corpora import demo


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", default="/tmp/t2t_bench_data")
  parser.add_argument("--batches", type=int, default=2000)
  parser.add_argument("--devices", type=int, default=8)
  parser.add_argument("--consumed_steps_per_second", type=float, default=1200 / 360,
                      help="training steps per second to compare with (default: the demo "
                           "target, 1200 steps in 6 minutes)")
  parser.add_argument("--train_pairs", type=int, default=None,
                      help="a generated corpus of this many pairs instead of the demo's")
  args = parser.parse_args()
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  cfg = configs.get_config("demo")
  if args.train_pairs is not None:
    paths = demo.write_corpus(os.path.join(args.workdir, "corpus"), num_train=args.train_pairs,
                              num_dev=20, num_test=20)
    cfg = cfg.replace(dataset="text", vocab_size=300,
                      **{f"{split}_files": ",".join(pair) for split, pair in paths.items()})

  start = time.perf_counter()
  ds = dataset.prepare(cfg, args.workdir)
  print(f"prepare: {time.perf_counter() - start:.1f} s "
        f"(tokenisation when not cached: {ds.counts.get('pairs_per_second', 0):.0f} pairs/s)")

  tokenizer = ds.tokenizer
  sample = ds.test_sources() + ds.test_references()
  start = time.perf_counter()
  tokenizer.encode_batch(sample * 20)
  rate = 20 * len(sample) / (time.perf_counter() - start)
  print(f"SentencePiece encode: {rate:.0f} sentences/s")

  it = ds.train_iterator(args.devices, dataset.accum_steps(cfg, args.devices))
  next(it)  # start the prefetch thread and the first epoch's plan
  real = padded = 0
  start = time.perf_counter()
  for _ in range(args.batches):
    batch = next(it)
    targets = batch["targets"]
    real += int(np.count_nonzero(targets))
    padded += targets.size
  seconds = time.perf_counter() - start
  it.close()
  consumed = args.consumed_steps_per_second * cfg.tokens_per_batch
  print(f"iterator: {args.batches / seconds:.0f} batches/s, "
        f"{real / seconds:,.0f} real target tokens/s ({padded / seconds:,.0f} padded)")
  print(f"training consumes ~{consumed:,.0f} padded target tokens/s "
        f"({args.consumed_steps_per_second:.2f} steps/s x {cfg.tokens_per_batch}); "
        f"the pipeline delivers {padded / seconds / consumed:.0f}x that")


if __name__ == "__main__":
  main()
