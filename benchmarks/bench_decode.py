"""Beam-search decoding speed, with the incremental cache and without it; or beside CTranslate2.

    python benchmarks/bench_decode.py [--configs=demo,base] [--sentences=8] [--source_len=20]
        [--output_len=24] [--beam_size=4] [--repeats=3] [--no-uncached]
    python benchmarks/bench_decode.py --ctranslate2 [--workdir=runs/demo] [--sentences=256]
        [--batch_size=64] [--beam_size=4] [--repeats=3]

Random parameters, random source ids. A random model's first choice is often
EOS, which would time a one-step search; so EOS is switched off here and every
hypothesis runs to exactly `output_len` tokens (about a WMT sentence), which is
the work of a trained model's typical sentence. Compilation is timed apart;
the rates are the best of `repeats` runs: sentences/s and target tokens/s
(one sentence = one output of `output_len` tokens; the beam's extra hypotheses
are not counted). "uncached" reruns the whole decoder over all output positions
at every step (`decode.uncached_decoder`), the encoder once, as the cache does.

`--ctranslate2` (needs `pip install -e .[export]`) instead runs our beam search
and CTranslate2 (float32 and int8) side by side on the same model exported with
t2t_jax.export, the same sentences, beam and batch size, and prints the ratio
(ours / CTranslate2). With `--workdir`, a trained model translates the first
`--sentences` lines of its demo test set (no length penalty in either engine, so
both rank hypotheses the same way; the translations are compared too); without,
the first of `--configs` with random parameters decodes random ids with EOS
switched off, `--output_len` tokens each (CTranslate2: min = max decoding length).
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import platform
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from t2t_jax import configs, decode, engines, export, model, vocab  # noqa: E402
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
  parser.add_argument("--ctranslate2", action="store_true",
                      help="ours beside CTranslate2 float32 and int8 (see the docstring)")
  parser.add_argument("--workdir", help="--ctranslate2: a trained work directory")
  parser.add_argument("--batch_size", type=int, default=64,
                      help="--ctranslate2 --workdir: sentences per batch in both engines")
  args = parser.parse_args()
  if args.ctranslate2:
    ctranslate2_side_by_side(args)
    return

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


# ------------------------------------------ yardstick: CTranslate2 on the same exported model


def _best_of(fn, repeats: int):
  """(best seconds over `repeats` calls after a first untimed one, the last output)."""
  output = fn()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    output = fn()
    best = min(best, time.perf_counter() - start)
  return best, output


def _ctranslate2_runs(spec, directory, threads):
  """{compute type: translator} for one saved float32 model, quantised on loading."""
  import ctranslate2  # pylint: disable=import-outside-toplevel  (the export extra)
  export.save_ctranslate2(spec, directory)
  return {kind: ctranslate2.Translator(directory, device="cpu", compute_type=kind,
                                       intra_threads=threads, inter_threads=1)
          for kind in ("float32", "int8")}


def _trained_workload(args):
  """Ours and CTranslate2 translating real sentences with a trained model: run functions."""
  cfg, params, spm_path = export.load_workdir(args.workdir)
  tokenizer = vocab.Tokenizer(spm_path)
  lines = (pathlib.Path(args.workdir) / "data" / "demo" / "test.en").read_text(
      encoding="utf-8").splitlines()[:args.sentences]
  sources = [tokenizer.encode(line)[:-1][:cfg.max_len - 1] for line in lines]
  tokens = export.vocabulary(spm_path, cfg.vocab_size)
  pieces = [[tokens[i] for i in source] for source in sources]
  max_length = max(engines.output_limits(cfg, [s + [EOS_ID] for s in sources]))

  def ours():
    return decode.decode_ids(cfg, params, sources, batch_size=args.batch_size,
                             beam_size=args.beam_size, alpha=0.0)

  def theirs(translator):
    ids = {token: i for i, token in enumerate(tokens)}
    results = translator.translate_batch(pieces, beam_size=args.beam_size, length_penalty=0.0,
                                         max_batch_size=args.batch_size,
                                         max_decoding_length=max_length)
    return [[ids[p] for p in r.hypotheses[0]] for r in results]

  description = (f"{args.workdir} (trained; vocab {cfg.vocab_size}): {len(sources)} test "
                 f"sentences, batches of {args.batch_size}, beam {args.beam_size}, no length penalty")
  return cfg, params, tokens, ours, theirs, description


def _random_workload(args):
  """Random parameters and ids, EOS off: every output has args.output_len tokens."""
  cfg = configs.get_config(args.configs.split(",")[0])
  params = jax.jit(functools.partial(model.init_params, cfg))(jax.random.key(0))
  params = jax.device_get(params)
  rng = np.random.default_rng(0)
  sources = rng.integers(3, cfg.vocab_size, size=(args.sentences, args.source_len - 1))
  inputs = jnp.asarray(np.concatenate([sources, np.full((args.sentences, 1), EOS_ID)], 1),
                       jnp.int32)
  tokens = ["<pad>", "</s>", "<unk>"] + [f"<unused{i}>" for i in range(3, cfg.vocab_size)]
  pieces = [[tokens[i] for i in row] for row in sources]

  def ours():
    found = _search(params, inputs, cfg=cfg, beam_size=args.beam_size,
                    output_len=args.output_len, cached=True)
    return [list(row) for row in np.asarray(found[0][:, 0])]

  def theirs(translator):
    ids = {token: i for i, token in enumerate(tokens)}
    results = translator.translate_batch(
        pieces, beam_size=args.beam_size, length_penalty=0.0, max_batch_size=args.sentences,
        min_decoding_length=args.output_len, max_decoding_length=args.output_len)
    return [[ids[p] for p in r.hypotheses[0]] for r in results]

  description = (f"{args.configs.split(',')[0]} with random parameters: {args.sentences} "
                 f"sentences of {args.source_len} ids in one batch, {args.output_len} output "
                 f"tokens each, beam {args.beam_size}")
  return cfg, params, tokens, ours, theirs, description


def ctranslate2_side_by_side(args) -> None:
  """Our beam search, then CTranslate2 float32 and int8 on the same model and sentences."""
  workload = _trained_workload if args.workdir else _random_workload
  cfg, params, tokens, ours, theirs, description = workload(args)
  threads = os.cpu_count() or 1
  device = jax.devices()[0]
  print(f"device: {device.platform} ({_cpu_name()}, {threads} cores), jax {jax.__version__}, "
        f"CTranslate2 with {threads} threads, load average {os.getloadavg()[0]:.1f}")
  print(description)
  print(f"{'engine':22} {'run s':>8} {'sent/s':>8} {'tokens/s':>9} {'ours/engine':>11} "
        f"{'same as ours':>12}")
  seconds, reference = _best_of(ours, args.repeats)
  rows = [("ours (JAX, float32)", seconds, reference)]
  with tempfile.TemporaryDirectory() as directory:
    spec = export.ctranslate2_spec(cfg, params, tokens)
    for kind, translator in _ctranslate2_runs(spec, directory + "/ct2", threads).items():
      seconds, outputs = _best_of(functools.partial(theirs, translator), args.repeats)
      rows.append((f"CTranslate2 {kind}", seconds, outputs))
  for name, seconds, outputs in rows:
    # Generated tokens; a trained model's outputs are listed without their EOS.
    count = sum(len(o) + bool(args.workdir) for o in outputs)
    same = sum(a == b for a, b in zip(reference, outputs))
    print(f"{name:22} {seconds:8.3f} {len(outputs) / seconds:8.1f} {count / seconds:9.0f} "
          f"{seconds / rows[0][1]:10.2f}x {same:7d}/{len(outputs)}", flush=True)


if __name__ == "__main__":
  main()
