"""Each CPU-tuned choice compiled for an H100 and a TPU both ways: compiler predictions.

    python benchmarks/compiled_choices.py [--targets=h100,v5p-8] [--layers=2] [--rows=16]
                                          [--choices=dropout,attention,packing,decode,topk]
                                          [--smoke]

Nothing runs: each variant's program is compiled for the target on this host
(accelerators/aot.py) and compared by what the compiler says. TPU: XLA's cost
model time (`optimal_seconds`). GPU: FLOPs, bytes accessed and peak memory of
the optimized program, and the roofline time predict.py derives from them.
Prints a Markdown table for docs/benchmarks.md ("compiler predictions").
Reduced model (--layers, base width, 8000-word vocabulary) so that the TPU
compiles stay short (the whole base step's take minutes here: docs/benchmarks.md,
"Accelerators"). `--smoke`: every program at a toy size (64 wide,
one layer, rows of 32, 512 words), to check that the script runs; its figures
mean nothing.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from t2t_jax import configs  # noqa: E402
from t2t_jax.accelerators import aot, predict, targets  # noqa: E402
from t2t_jax.kernels import logits as logits_lib  # noqa: E402


CHOICES = ("dropout", "attention", "packing", "decode", "topk")


def _row(target, name, variant, program, extra_flops=0.0):
  # A custom call the cost analysis cannot see (GPU top-k) reports negative figures.
  if min(program.cost.get("flops", 0), program.cost.get("bytes accessed", 0)) < 0:
    return f"| {target.name} | {name} | {variant} | no cost (custom call) | | | |"
  seconds, _, _ = predict.micro_step_seconds(program.cost, target, extra_flops,
                                             program.sliced_prefetches)
  return (f"| {target.name} | {name} | {variant} | {seconds * 1e3:.3f} | "
          f"{program.cost.get('flops', 0) / 1e9:.1f} | "
          f"{program.cost.get('bytes accessed', 0) / 1e9:.2f} | "
          f"{program.memory.peak / 2**30:.2f} |")


def _top_k_program(target, fn, rows, vocab):
  one = jax.sharding.NamedSharding(
      jax.sharding.Mesh(np.array(targets.topology(target).devices[:1]), ("x",)),
      jax.sharding.PartitionSpec())
  x = jax.ShapeDtypeStruct((rows, vocab), jnp.float32, sharding=one)
  return aot._program(jax.jit(fn).lower(x))  # pylint: disable=protected-access


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--targets", default="h100,v5p-8")
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--rows", type=int, default=16)
  parser.add_argument("--choices", default=",".join(CHOICES),
                      help="which comparisons to compile (a TPU train compile takes minutes)")
  parser.add_argument("--smoke", action="store_true", help="toy sizes: does the script run?")
  args = parser.parse_args()
  choices = args.choices.split(",")
  unknown = set(choices) - set(CHOICES)
  if unknown:
    parser.error(f"unknown --choices {sorted(unknown)}; choose from {','.join(CHOICES)}")
  cfg = configs.get_config("base", num_layers=args.layers, vocab_size=8000, dtype="bfloat16")
  length = 256
  # The decode step at full size (6 layers, 37000 words), 64 sentences of 64 ids.
  decode_cfg = cfg.replace(num_layers=6, vocab_size=37000)
  decode_shape = dict(sentences=64, source_length=64, max_decode_len=114)
  top_k_rows, top_k_vocab = 256, 37000
  if args.smoke:
    cfg = cfg.replace(num_layers=1, d_model=64, d_ff=128, num_heads=2, vocab_size=512)
    length, decode_cfg, top_k_rows, top_k_vocab = 32, cfg, 4, 2000
    decode_shape = dict(sentences=2, source_length=8, max_decode_len=12)
  print("| target | choice | variant | predicted ms | GFLOP | GB accessed | peak GiB |")
  print("|---|---|---|---|---|---|---|")
  for target in map(targets.get, args.targets.split(",")):
    train = functools.partial(aot.compile_train_step, target=target, rows=args.rows,
                              length=length)
    extra = args.rows * predict.attention_flops_per_row(cfg, length)
    cudnn_flops = lambda p: extra if p.cudnn_attention_calls else 0
    if "dropout" in choices:
      for variant in ("hash", "threefry"):
        p = train(cfg.replace(dropout_generator=variant))
        print(_row(target, "dropout masks", variant, p, cudnn_flops(p)), flush=True)
    if "attention" in choices:
      for variant in ("core", "reference") + (("cudnn",) if target.is_gpu else ("core_recompute",)):
        p = train(cfg.replace(attention_impl=variant))
        print(_row(target, "attention (train)", variant, p, cudnn_flops(p)), flush=True)
    if "packing" in choices:
      for packed in (True, False):
        p = train(cfg.replace(packing=packed), packed=packed)
        print(_row(target, "packing (same rows)", "packed" if packed else "unpacked", p,
                   cudnn_flops(p)), flush=True)
    if "decode" in choices:
      for variant in ("vocab_major", "row_major"):
        p = aot.compile_decode_step(decode_cfg, target, **decode_shape, logits_layout=variant)
        print(_row(target, f"decode step logits ({decode_shape['sentences']} x beam 4)",
                   variant.replace("_", "-"), p), flush=True)
    if "topk" in choices:
      for variant, fn in (("blocked", lambda x: logits_lib.blocked_top_k(x, 8)),
                          ("lax.top_k", lambda x: jax.lax.top_k(x, 8))):
        print(_row(target, f"top-k 8 of {top_k_vocab}, {top_k_rows} rows", variant,
                   _top_k_program(target, fn, top_k_rows, top_k_vocab)), flush=True)
      for variant, fn in (("blocked", lambda x: logits_lib.blocked_best_columns(x, 8, 0)),
                          ("reference", lambda x: logits_lib.best_columns(x, 8, 0))):
        print(_row(target, f"best 8 of {top_k_vocab}, {top_k_rows} vocabulary-major columns",
                   variant, _top_k_program(target, fn, top_k_vocab, top_k_rows)), flush=True)


if __name__ == "__main__":
  main()
