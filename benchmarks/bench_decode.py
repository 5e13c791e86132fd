"""Beam-search decoding speed: random weights at fixed output lengths, a trained model's test set, or beside CTranslate2.

    python benchmarks/bench_decode.py [random] [--configs=demo,base] [--sentences=8]
        [--source_len=20] [--output_len=24] [--extra=50] [--beam_size=4] [--repeats=3]
        [--uncached] [--flax_wmt=DIR] [--smoke]
    python benchmarks/bench_decode.py testset --workdir=runs/demo [--repeats=2]
    ... --compare=/path/to/old/checkout [--rounds=3]   # old and new, interleaved
    ... --compare=. --old_python=/other/venv/bin/python   # this code on another JAX
    python benchmarks/bench_decode.py --ctranslate2 [--workdir=runs/demo] [--sentences=256]
        [--batch_size=64] [--beam_size=4] [--repeats=3]
    python benchmarks/bench_decode.py --ctranslate2 --configs=base --shortlist
        [--shortlist_per_source=50] [--shortlist_frequent=200]
    python benchmarks/bench_decode.py --ctranslate2 --workdir=runs/multi30k --shortlist
    python benchmarks/bench_decode.py --ctranslate2 --marian [--sentences=16] [--source_len=40]
        [--output_len=40] [--beam_size=4]         # an OPUS-MT-shaped model, imported

`random`: random parameters and source ids, decoded as `batch_decoder.decode_batch` does
(self-attention buffer of source length + `extra` positions) but with every
hypothesis running to exactly `output_len` tokens (about a WMT sentence): each
sentence's limit is `output_len` and the EOS row of the (shared) output
embedding is zero, so EOS (logit 0, about 4 standard deviations below the best
of the vocabulary's) is never among a beam's best. Rates count the sentences
and their `output_len` tokens, not the beam's other hypotheses. `--uncached`
adds the decoder that reruns every position at every step
(decoding/uncached.py), the encoder once, as the cache does. `--flax_wmt=DIR`
(the examples/wmt folder of a Flax checkout) adds the Flax WMT example's own
model and beam search (its train.py's `predict_step`) at the same size and
sentences (`measure_flax_wmt`), and the ratio of ours to it. `--smoke` shrinks
every preset to a toy model, to check that the script runs.

`testset`: the work directory's averaged parameters translate its test set
(`data/<dataset>/test.<src>`, as the demo writes it) with the config's beam,
sorted into batches as `sentence_batches.decode_ids` does; the first pass includes compilation
("cold"), the best of the later ones does not. Prints sentences/s, output
tokens/s and sacreBLEU.

`--compare=DIR` runs every `random`/`testset` measurement in fresh worker
processes, alternating this checkout and the one at DIR (each importing its own
t2t_jax through only the functions both have: `_driver`), `--rounds` times; it prints the
best of each and the ratio new / old, and for `testset` how many translations
differ.

`--ctranslate2` (needs `pip install -e .[export]`) instead runs our beam search
and CTranslate2 (float32 and int8) side by side on the same model exported with
t2t_jax.export.ctranslate2, the same sentences, beam and batch size, and prints the ratio
(ours / CTranslate2). The header names the CPU and its AMX, AVX-512 (bfloat16, VNNI)
and AVX2 flags (`kernels.choice.cpu_description`). With `--workdir`, a trained model
translates the first `--sentences` lines of its test set (the demo's, or a text run's
`--test` files; no length penalty in either engine, so both rank hypotheses the same way;
the translations are compared too); without, the first of `--configs` with random
parameters decodes random ids with EOS switched off, `--output_len` tokens each
(CTranslate2: min = max decoding length). Rows: ours as `decode_ids` runs (two batches in
flight) and, with `--workdir`, one batch at a time (`in_flight=1`); ours with int8
products (`quantization="int8"`, t2t-translate --int8) and with bfloat16 weights and
products (`quantization="bfloat16"`, t2t-translate --dtype bfloat16), the params quantised
or cast once, before timing ("same as ours" counts the outputs equal to float32's);
CTranslate2 with all cores on one batch (its usual CPU setting) and, marked xN, N
batches at once, one core each (inter_threads, the counterpart of our in_flight). The
last lines are our speed over CTranslate2's (its faster row): float32 over float32,
int8 and bfloat16 over int8. `--shortlist` adds a lexical shortlist (inference/shortlist.py)
on the same ids in both engines: with `--workdir` the work directory's table
(`t2t-shortlist`, its defaults unless built otherwise); without, a synthetic table,
seeded, of `--shortlist_per_source` random target ids for each source id and
`--shortlist_frequent` random frequent ones (the sizes CTranslate2's and Marian's users
give: 20-100 per source, 100-500 frequent). It is decoded as ours decodes it (each
batch's candidates, padded to a shortlist size) and as CTranslate2's vmap.txt
(`use_vmap=True`): rows "ours <mode> + shortlist" and "CTranslate2 ... + vmap", whose
"same as ours" counts the outputs equal to ours float32 + shortlist.

`--ctranslate2 --marian`: a transformers MarianMTModel of OPUS-MT en-de's shape (d_model
512, 6 + 6 layers, 8 heads, feed-forward 2048, swish, 58,101 pieces, 512 positions,
padding the last id) with random weights, built here and saved with `save_pretrained`
beside a MarianTokenizer, as a user holds a published model; ours decodes it imported
(`t2t-import`: export/import_marian.py), CTranslate2 converted from the same directory
by its own `ct2-transformers-converter` (its converter class, run here). Random source
pieces, every output `--output_len` tokens (EOS off in both, as the random workload).
With `--smoke` a toy of the same layout.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent.parent


def _device_line() -> str:
  import jax  # pylint: disable=import-outside-toplevel
  from t2t_jax.kernels import choice  # pylint: disable=import-outside-toplevel  (this checkout's)
  device = jax.devices()[0]
  kind = "" if device.device_kind == device.platform else f" {device.device_kind}"
  return (f"device: {device.platform}{kind} ({choice.cpu_description()}, "
          f"{os.cpu_count()} cores), "
          f"jax {jax.__version__}, load average {os.getloadavg()[0]:.1f}")


# ------------------------------------------------------------------ measurements


# --smoke: a toy model, to check that the script runs (its figures mean nothing).
SMOKE_MODEL = dict(num_layers=1, d_model=32, d_ff=64, num_heads=2, vocab_size=64)


def _config(name: str, args):
  """The preset `name`, shrunk to SMOKE_MODEL with --smoke."""
  from t2t_jax import configs  # pylint: disable=import-outside-toplevel
  return configs.get_config(name, **(SMOKE_MODEL if args.smoke else {}))


def _timed(fn, repeats: int) -> tuple[float, float, object]:
  """(first call incl. compilation, best later call) in seconds, and the first call's result."""
  start = time.perf_counter()
  result = fn()
  first = time.perf_counter() - start
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - start)
  return first, best, result


# (search, driver, model): the modules holding `_beam_decode`, `decode_ids` and
# `init_params` in each layout, newest first; the last is the layout before issue 46
# (b8fa0e0), the starting point of today's comparisons.
_LAYOUTS = (("t2t_jax.decoding.batch_decoder", "t2t_jax.decoding.sentence_batches",
             "t2t_jax.model.transformer"),
            ("t2t_jax.decoding.batch_decoder", "t2t_jax.inference.sentence_batches",
             "t2t_jax.model.transformer"))


def _driver():
  """(decode_ids, beam_decode, model) as this checkout or an older one spells them (`--compare`).

  `decode_ids(cfg, params, ids)` translates many sentences; `beam_decode(params,
  inputs, max_lens, cfg, **settings)` is one model's chunked beam search; `model`
  has `init_params`; `_LAYOUTS` lists where each checkout keeps them.
  """
  # pylint: disable=protected-access
  for names in _LAYOUTS[:-1]:
    try:
      search, driver, model = map(importlib.import_module, names)
      break
    except ImportError:
      pass
  else:
    search, driver, model = map(importlib.import_module, _LAYOUTS[-1])
  accepted = inspect.signature(search._beam_decode).parameters

  def beam_decode(params, inputs, max_lens, cfg, cached=True, **settings):
    # min_len 1: no empty translation, the default of both layouts.
    if "cached" in accepted:    # the older layout: the uncached reference behind a flag
      settings["cached"] = cached
    elif not cached:            # the uncached reference is a module of its own
      uncached = importlib.import_module("t2t_jax.decoding.uncached")
      return uncached._beam(params, inputs, max_lens, cfg=cfg.model, min_len=1, **settings)
    return search._beam_decode((params,), inputs, max_lens, models=(cfg.model,), min_len=1,
                               **settings)

  return driver.decode_ids, beam_decode, model


def measure_random(name: str, args) -> list[dict]:
  """One config on random weights: a row per decoder (cached, and uncached if asked)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from t2t_jax.ids import EOS_ID  # pylint: disable=import-outside-toplevel

  _, beam_decode, model = _driver()
  cfg = _config(name, args)
  if cfg.embeddings != "shared":
    raise ValueError(f"config {name} has embeddings={cfg.embeddings!r}; this benchmark zeroes "
                     "the shared one's EOS row")
  params = jax.jit(functools.partial(model.init_params, cfg.model))(jax.random.key(0))
  params["embedding"]["embedding"] = params["embedding"]["embedding"].at[EOS_ID].set(0.0)
  rng = np.random.default_rng(0)
  inputs = rng.integers(3, cfg.vocab_size, size=(args.sentences, args.source_len))
  inputs[:, -1] = EOS_ID
  inputs = jnp.asarray(inputs, jnp.int32)
  max_lens = jnp.full((args.sentences,), args.output_len, jnp.int32)
  rows = []
  for cached in (True, False) if args.uncached else (True,):
    run = functools.partial(
        beam_decode, params, inputs, max_lens, cfg, beam_size=args.beam_size, alpha=cfg.alpha,
        max_len=args.source_len + args.extra, n_best=1, cached=cached)
    first, best, (tokens, _) = _timed(lambda: jax.block_until_ready(run()), args.repeats)
    lengths = (np.asarray(tokens)[:, 0] != 0).sum(-1)
    if not np.all(lengths == args.output_len):
      raise RuntimeError(f"outputs of {sorted(set(lengths.tolist()))} tokens, not all "
                         f"{args.output_len}: EOS was chosen")
    rows.append({"config": name, "decoding": "cached" if cached else "uncached",
                 "compile_s": first, "run_s": best, "sentences_per_s": args.sentences / best,
                 "tokens_per_s": args.sentences * args.output_len / best,
                 "tokens": np.asarray(tokens).tolist()})
  return rows


def _flax_wmt_modules(directory: str):
  """The Flax WMT example's models.py and decode.py, imported from a checkout of it."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  modules = []
  for name in ("models", "decode"):
    path = pathlib.Path(directory) / f"{name}.py"
    if not path.is_file():
      raise FileNotFoundError(f"--flax_wmt={directory} has no {name}.py: give the examples/wmt "
                              "folder of a Flax checkout (git clone https://github.com/google/flax)")
    spec = importlib.util.spec_from_file_location(f"flax_wmt_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    modules.append(module)
  return modules


def measure_flax_wmt(name: str, args) -> dict:
  """The Flax WMT example's model and beam search (its train.py's predict_step) at our config's size.

  Random parameters (its own initialisers), the same random source ids as
  `measure_random`, beam `beam_size`, alpha 0.6; EOS is switched off (eos_id -1)
  and its cache holds output_len + 1 positions (its first is the dummy start), so
  every hypothesis decodes exactly `output_len` tokens, as ours do.
  """
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from t2t_jax.ids import EOS_ID  # pylint: disable=import-outside-toplevel

  models, decode = _flax_wmt_modules(args.flax_wmt)
  cfg = _config(name, args)
  predict_config = models.TransformerConfig(
      vocab_size=cfg.vocab_size, output_vocab_size=cfg.vocab_size,
      share_embeddings=cfg.embeddings == "shared", logits_via_embedding=cfg.embeddings == "shared",
      emb_dim=cfg.d_model, num_heads=cfg.num_heads, num_layers=cfg.num_layers,
      qkv_dim=cfg.d_model, mlp_dim=cfg.d_ff, max_len=cfg.max_len, deterministic=True,
      decode=True)
  rng = np.random.default_rng(0)
  inputs = rng.integers(3, cfg.vocab_size, size=(args.sentences, args.source_len))
  inputs[:, -1] = EOS_ID
  inputs = jnp.asarray(inputs, jnp.int32)
  max_decode_len = args.output_len + 1
  eval_model = models.Transformer(predict_config.replace(decode=False))
  params = jax.jit(eval_model.init)(jax.random.key(0), inputs, inputs)["params"]
  cache = jax.jit(models.Transformer(predict_config).init)(
      jax.random.key(0), inputs, jnp.ones((args.sentences, max_decode_len), jnp.int32))["cache"]

  @jax.jit
  def predict(params, inputs, cache):  # examples/wmt/train.py's predict_step, eos_id off
    model = models.Transformer(predict_config)
    encoded = decode.flat_batch_beam_expand(
        model.apply({"params": params}, inputs, method=models.Transformer.encode), args.beam_size)
    raw_inputs = decode.flat_batch_beam_expand(inputs, args.beam_size)

    def tokens_ids_to_logits(flat_ids, flat_cache):
      logits, new_vars = model.apply({"params": params, "cache": flat_cache}, encoded,
                                     raw_inputs, flat_ids, mutable=["cache"],
                                     method=models.Transformer.decode)
      return logits.squeeze(axis=1), new_vars["cache"]

    seqs, _ = decode.beam_search(inputs, cache, tokens_ids_to_logits, beam_size=args.beam_size,
                                 alpha=0.6, eos_id=-1, max_decode_len=max_decode_len)
    return seqs[:, -1, 1:]

  first, best, tokens = _timed(lambda: jax.block_until_ready(predict(params, inputs, cache)),
                               args.repeats)
  if tokens.shape != (args.sentences, args.output_len):
    raise RuntimeError(f"the Flax example decoded {tokens.shape} tokens, not "
                       f"{(args.sentences, args.output_len)}")
  return {"config": name, "decoding": "flax wmt", "compile_s": first, "run_s": best,
          "sentences_per_s": args.sentences / best,
          "tokens_per_s": args.sentences * args.output_len / best}


def measure_testset(args) -> list[dict]:
  """The work directory's test set: one cold pass, then the best of `repeats` warm ones."""
  from t2t_jax import configs  # pylint: disable=import-outside-toplevel
  from t2t_jax.data import vocab
  from t2t_jax.evaluation import bleu as bleu_lib
  from t2t_jax.runtime import averaging

  def read_lines(path):
    return path.read_text(encoding="utf-8").splitlines()

  workdir = pathlib.Path(args.workdir)
  fields = json.loads((workdir / "config.json").read_text())
  # An old checkout (--compare) has no from_dict (which drops retired fields).
  cfg = (configs.from_dict(fields, str(workdir)) if hasattr(configs, "from_dict")
         else configs.TransformerConfig(**fields))
  tokenizer = vocab.Tokenizer(str(workdir / "vocab" / "spm.model"))
  data = workdir / "data" / cfg.dataset
  sources = read_lines(data / f"test.{cfg.source_lang}")
  references = read_lines(data / f"test.{cfg.target_lang}")
  params = averaging.load_params(workdir)
  ids = [tokenizer.encode(line)[:-1][:cfg.max_len - 1] for line in sources]
  decode_ids, _, _ = _driver()
  first, best, outputs = _timed(lambda: decode_ids(cfg, params, ids), args.repeats)
  hyps = [tokenizer.decode(out) for out in outputs]
  bleu = bleu_lib.bleu_scores(hyps, references, cfg.target_lang)["sacrebleu"]["score"]
  out_tokens = sum(len(out) + 1 for out in outputs)  # EOS included, as in `random`
  return [{"config": f"{workdir.name} test set", "decoding": "cached",
           "compile_s": first, "run_s": best, "cold_sentences_per_s": len(ids) / first,
           "sentences_per_s": len(ids) / best, "tokens_per_s": out_tokens / best,
           "bleu": bleu, "hypotheses": hyps}]


# ------------------------------------------------------------------------ printing


def _print_rows(rows: list[dict], label: str = "") -> None:
  for r in rows:
    extra = f" cold {r['cold_sentences_per_s']:.2f} sent/s, BLEU {r['bleu']:.2f}" if "bleu" in r else ""
    print(f"{label}{r['config']:16} {r['decoding']:9} {r['compile_s']:13.2f} {r['run_s']:8.3f} "
          f"{r['sentences_per_s']:8.2f} {r['tokens_per_s']:9.1f}{extra}", flush=True)


HEADER = (f"{'config':16} {'decoding':9} {'compile+run s':>13} {'run s':>8} {'sent/s':>8} "
          f"{'tokens/s':>9}")


def _measure(args) -> list[dict]:
  if args.mode == "random":
    rows = []
    for name in args.configs.split(","):
      rows += measure_random(name, args)
      if args.flax_wmt:
        rows.append(measure_flax_wmt(name, args))
    return rows
  return measure_testset(args)


def _worker_rows(checkout: pathlib.Path, argv: list[str], python: str) -> list[dict]:
  """This script's measurement run in a fresh `python` process against `checkout`'s t2t_jax."""
  env = {**os.environ, "PYTHONPATH": str(checkout)}
  out = subprocess.run([python, __file__, *argv, "--worker"], cwd=checkout, env=env,
                       check=True, stdout=subprocess.PIPE, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def _compare(args, argv: list[str]) -> None:
  old_dir = pathlib.Path(args.compare).resolve()
  sides = (("old", old_dir, args.old_python or sys.executable), ("new", HERE, sys.executable))
  for version, checkout, python in sides:
    jax_version = subprocess.run([python, "-c", "import jax; print(jax.__version__)"],
                                 check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    print(f"{version}: {checkout} under {python} (jax {jax_version})")
  best: dict[str, dict] = {"old": {}, "new": {}}
  for round_ in range(args.rounds):
    for version, checkout, python in sides:
      rows = _worker_rows(checkout, argv, python)
      _print_rows(rows, f"round {round_ + 1} {version}: ")
      for r in rows:
        key = f"{r['config']} {r['decoding']}"
        kept = best[version].get(key)
        if kept is None or r["run_s"] < kept["run_s"]:
          best[version][key] = {**r, "compile_s": min(r["compile_s"], (kept or r)["compile_s"])}
        if "cold_sentences_per_s" in r:
          cold = max(r["cold_sentences_per_s"], (kept or r)["cold_sentences_per_s"])
          best[version][key]["cold_sentences_per_s"] = cold
  print(f"\nbest of {args.rounds} rounds; ratio = new / old")
  print(HEADER)
  for key, old in best["old"].items():
    new = best["new"][key]
    _print_rows([old], "old ")
    _print_rows([new], "new ")
    ratio = new["sentences_per_s"] / old["sentences_per_s"]
    line = f"ratio {key}: sentences/s {ratio:.2f}x, tokens/s {new['tokens_per_s'] / old['tokens_per_s']:.2f}x"
    if "cold_sentences_per_s" in old:
      line += f", cold sentences/s {new['cold_sentences_per_s'] / old['cold_sentences_per_s']:.2f}x"
    if "hypotheses" in old:
      differ = sum(a != b for a, b in zip(old["hypotheses"], new["hypotheses"]))
      line += (f", BLEU old {old['bleu']:.2f} new {new['bleu']:.2f}, "
               f"{differ} of {len(old['hypotheses'])} translations differ")
    elif "tokens" in old:
      line += f", tokens {'identical' if old['tokens'] == new['tokens'] else 'DIFFER'}"
    print(line, flush=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("mode", nargs="?", default="random", choices=["random", "testset"])
  parser.add_argument("--configs", default="demo,base")
  parser.add_argument("--sentences", type=int, default=None,
                      help="random: 8 by default; --ctranslate2 --workdir: the first 256 lines")
  parser.add_argument("--source_len", type=int, default=20, help="source ids, EOS included")
  parser.add_argument("--output_len", type=int, default=24)
  parser.add_argument("--extra", type=int, default=50,
                      help="output buffer = source_len + extra (translate_batch's max_decode_extra)")
  parser.add_argument("--beam_size", type=int, default=4)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--uncached", action=argparse.BooleanOptionalAction, default=False)
  parser.add_argument("--workdir", help="testset (default runs/demo) and --ctranslate2: a trained "
                      "work directory")
  parser.add_argument("--flax_wmt", default=os.environ.get("FLAX_WMT"),
                      help="random: also the Flax WMT example's beam search on a model of the "
                      "same size; the examples/wmt folder of a Flax checkout (default: $FLAX_WMT)")
  parser.add_argument("--compare", default=None, help="an old checkout to run interleaved")
  parser.add_argument("--old_python", default=None,
                      help="--compare: the old side's interpreter (another JAX: --compare=. "
                           "--old_python=OTHER compares two JAX versions on this code)")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--ctranslate2", action="store_true",
                      help="ours beside CTranslate2 float32 and int8 (see the docstring)")
  parser.add_argument("--batch_size", type=int, default=64,
                      help="--ctranslate2 --workdir: sentences per batch in both engines")
  parser.add_argument("--smoke", action="store_true",
                      help="random, --ctranslate2: a toy model (1 layer, 32 wide, 64 words), to "
                      "check that the script runs")
  parser.add_argument("--shortlist", action="store_true",
                      help="--ctranslate2: add ours with a lexical shortlist (--workdir: its "
                      "table; else a synthetic one) beside "
                           "CTranslate2 with the same table as its vmap.txt (use_vmap)")
  parser.add_argument("--shortlist_per_source", type=int, default=50,
                      help="--shortlist: random candidates per source id (default 50)")
  parser.add_argument("--shortlist_frequent", type=int, default=200,
                      help="--shortlist: random candidates of every batch (default 200)")
  parser.add_argument("--marian", action="store_true",
                      help="--ctranslate2: an OPUS-MT-shaped MarianMTModel (random weights), "
                           "imported beside ct2-transformers-converter's conversion")
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.sentences is None:
    args.sentences = 256 if args.ctranslate2 and args.workdir else 8
  if args.marian and (not args.ctranslate2 or args.workdir or args.shortlist):
    parser.error("--marian is a model of its own beside CTranslate2: give it with --ctranslate2, "
                 "without --workdir or --shortlist")
  if args.ctranslate2:
    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory() as args.scratch:
      ctranslate2_side_by_side(args)
    return
  if args.mode == "testset":
    args.workdir = str(pathlib.Path(args.workdir or "runs/demo").resolve())
  if args.worker:
    print(json.dumps(_measure(args)))
    return
  sys.path.insert(0, str(HERE))
  print(_device_line())
  if args.mode == "random":
    print(f"{args.sentences} sentences, {args.source_len} source ids, {args.output_len} output "
          f"tokens each, buffer {args.source_len + args.extra}, beam {args.beam_size}")
  if args.compare:
    settings = ("configs", "sentences", "source_len", "output_len", "extra", "beam_size",
                "repeats", "workdir", "flax_wmt")
    argv = [args.mode] + [f"--{name}={getattr(args, name)}" for name in settings
                          if getattr(args, name) is not None]
    _compare(args, argv + ["--uncached" if args.uncached else "--no-uncached"]
             + ["--smoke"] * args.smoke)
    return
  print(HEADER)
  rows = _measure(args)
  _print_rows(rows)
  by_config = {}
  for r in rows:
    by_config.setdefault(r["config"], {})[r["decoding"]] = r
  for name, pair in by_config.items():
    if "flax wmt" in pair:
      print(f"{name}: ours is {pair['flax wmt']['run_s'] / pair['cached']['run_s']:.2f}x the "
            "Flax WMT example's beam search")
    if "uncached" in pair:
      same = pair["cached"]["tokens"] == pair["uncached"]["tokens"]
      print(f"{name}: the cache is {pair['uncached']['run_s'] / pair['cached']['run_s']:.1f}x "
            f"faster; cached and uncached tokens {'identical' if same else 'DIFFER'}")


# ------------------------------------------ yardstick: CTranslate2 on the same exported model


@functools.cache
def _jitted_search():
  import jax  # pylint: disable=import-outside-toplevel
  from t2t_jax.decoding import batch_decoder  # pylint: disable=import-outside-toplevel
  from t2t_jax.decoding import beam_search
  from t2t_jax.decoding import uncached

  @functools.partial(jax.jit, static_argnames=("cfg", "beam_size", "output_len", "cached"))
  def search(params, inputs, shortlist=None, *, cfg, beam_size, output_len, cached):
    if cached:  # as decoding/batch_decoder.py binds one model (and a shortlist)
      cache, step_fn = batch_decoder.init_decoder([batch_decoder.Member(cfg.model, params)],
                                                  inputs, output_len, shortlist)
    else:
      cache, step_fn = uncached.uncached_decoder(cfg.model, params, inputs, output_len)
    # eos_id=-1 never matches a token: every hypothesis decodes output_len tokens.
    tokens, scores = beam_search.beam_search(step_fn, cache, beam_size=beam_size,
                                             alpha=cfg.alpha, max_len=output_len, eos_id=-1)
    if shortlist is not None:   # the search's positions in the list -> ids
      tokens = batch_decoder.vocabulary_ids(shortlist, tokens)
    return tokens, scores

  return search


def _search(params, inputs, shortlist=None, **settings):
  """One jitted `beam_search` with EOS off (the CTranslate2 side by side's random workload);
  `shortlist`: the batch's candidate ids."""
  return _jitted_search()(params, inputs, shortlist, **settings)


def _random_shortlist(args, vocab_size: int):
  """A synthetic lexical shortlist for random ids, of the size CTranslate2's and Marian's
  users give: `--shortlist_per_source` distinct random targets per source id and
  `--shortlist_frequent` random frequent ones (seeded; inference/shortlist.py's table)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from t2t_jax.inference import shortlist  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(1)
  targets = np.arange(3, vocab_size)
  per_source = np.stack([rng.choice(targets, min(args.shortlist_per_source, len(targets)),
                                    replace=False) for _ in range(vocab_size)]).astype(np.int32)
  per_source[:3] = -1                                                # no special sources
  frequent = rng.choice(targets, min(args.shortlist_frequent, len(targets)), replace=False)
  return shortlist.Shortlist(per_source, frequent.astype(np.int32))


def _best_of(fn, repeats: int):
  """(best seconds over `repeats` calls after a first untimed one, the last output)."""
  output = fn()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    output = fn()
    best = min(best, time.perf_counter() - start)
  return best, output


def _spec_export(cfg, params, tokens):
  """Writes our model into a directory with CTranslate2's spec API (export/ctranslate2.py),
  `vmap` (the text of its vocabulary map, or None) beside it."""
  def convert(directory, vmap):
    # pylint: disable-next=import-outside-toplevel
    from t2t_jax.export import ctranslate2 as ctranslate2_lib
    ctranslate2_lib.save_ctranslate2(ctranslate2_lib.ctranslate2_spec(cfg, params, tokens),
                                     directory)
    if vmap is not None:
      (pathlib.Path(directory) / ctranslate2_lib.VMAP).write_text(vmap, encoding="utf-8")
  return convert


def _ctranslate2_runs(directory, threads):
  """{label: translator} for one saved float32 model, quantised on loading (its vocabulary
  map read now, if it has one).

  Each compute type runs as CTranslate2 is usually set up on a CPU (all cores on
  one batch at a time) and, like our `in_flight`, with one batch per core at
  once (inter_threads): the faster of the two is the yardstick.
  """
  import ctranslate2  # pylint: disable=import-outside-toplevel  (the export extra)
  runs = {}
  for kind in ("float32", "int8"):
    runs[f"CTranslate2 {kind}"] = ctranslate2.Translator(
        directory, device="cpu", compute_type=kind, intra_threads=threads, inter_threads=1)
    if threads > 1:
      runs[f"CTranslate2 {kind} x{threads}"] = ctranslate2.Translator(
          directory, device="cpu", compute_type=kind, intra_threads=1, inter_threads=threads)
  return runs


def _trained_workload(args):
  """Ours and CTranslate2 translating real sentences with a trained model: run functions."""
  from t2t_jax.data import sources as sources_lib  # pylint: disable=import-outside-toplevel
  from t2t_jax.data import vocab
  from t2t_jax.decoding import batch_decoder
  from t2t_jax.decoding import sentence_batches
  from t2t_jax.export import exported_search
  from t2t_jax.export import loading
  from t2t_jax.ids import EOS_ID, strip_eos
  cfg, params, spm_path = loading.load_workdir(args.workdir)
  tokenizer = vocab.Tokenizer(spm_path)
  # The run's own test set (the demo's, or a text run's --test files).
  lines = [src for src, _ in sources_lib.get_source(cfg, args.workdir).test()][:args.sentences]
  sources = [tokenizer.encode(line)[:-1][:cfg.max_len - 1] for line in lines]
  tokens = loading.vocabulary(spm_path, cfg.vocab_size)
  # With their </s>, as a converted Marian model takes them (export/ctranslate2.py).
  pieces = [[tokens[i] for i in source + [EOS_ID]] for source in sources]
  max_length = max(exported_search.output_limits(cfg, [s + [EOS_ID] for s in sources]))
  search = batch_decoder.Search.from_config(cfg, beam_size=args.beam_size, alpha=0.0)

  def ours(shortlist=None, model=(cfg, params), in_flight=sentence_batches.IN_FLIGHT):
    """As `sentence_batches.decode_ids` (batches by length, in flight), with a shortlist."""
    members = [batch_decoder.Member(model[0].model, model[1])]

    def best(batch):
      inputs = sentence_batches.source_rows([sources[i] for i in batch], args.batch_size,
                                            cfg.max_len)
      found, _ = batch_decoder.decode_batch(members, inputs, search, shortlist=shortlist)
      return [strip_eos(row) for row in found[:, 0]]

    found = sentence_batches.by_length(best, [len(s) for s in sources],
                                       batch_size=args.batch_size, in_flight=in_flight)
    return [found[i] for i in range(len(sources))]

  def theirs(translator, use_vmap=False):
    ids = {token: i for i, token in enumerate(tokens)}
    results = translator.translate_batch(pieces, beam_size=args.beam_size, length_penalty=0.0,
                                         max_batch_size=args.batch_size,
                                         max_decoding_length=max_length, use_vmap=use_vmap)
    return [[ids[p] for p in r.hypotheses[0]] for r in results]

  description = (f"{args.workdir} (trained; vocab {cfg.vocab_size}): {len(sources)} test "
                 f"sentences, batches of {args.batch_size}, beam {args.beam_size}, no length penalty")
  return cfg, params, tokens, ours, theirs, description, _spec_export(cfg, params, tokens)


def _random_inputs(args, vocab_size=None):
  """The random workload's sources with their EOS [sentences, source_len] (seeded)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from t2t_jax.ids import EOS_ID  # pylint: disable=import-outside-toplevel
  vocab_size = vocab_size or _config(args.configs.split(",")[0], args).vocab_size
  rng = np.random.default_rng(0)
  sources = rng.integers(3, vocab_size, size=(args.sentences, args.source_len - 1))
  return np.concatenate([sources, np.full((args.sentences, 1), EOS_ID)], 1).astype(np.int32)


def _random_workload(args):
  """Random parameters and ids, EOS off: every output has args.output_len tokens."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import transformer
  cfg = _config(args.configs.split(",")[0], args)
  params = jax.jit(functools.partial(transformer.init_params, cfg.model))(jax.random.key(0))
  params = jax.device_get(params)
  inputs = jnp.asarray(_random_inputs(args, cfg.vocab_size), jnp.int32)
  sources = np.asarray(inputs)[:, :-1]
  tokens = ["<pad>", "</s>", "<unk>"] + [f"<unused{i}>" for i in range(3, cfg.vocab_size)]
  pieces = [[tokens[i] for i in row] + ["</s>"] for row in sources]   # as inputs: with EOS

  def ours(shortlist=None, model=(cfg, params)):
    candidates = None if shortlist is None else jax.device_put(shortlist.batch_ids(inputs))
    found = _search(model[1], inputs, candidates, cfg=model[0], beam_size=args.beam_size,
                    output_len=args.output_len, cached=True)
    return [list(row) for row in np.asarray(found[0][:, 0])]

  def theirs(translator, use_vmap=False):
    ids = {token: i for i, token in enumerate(tokens)}
    results = translator.translate_batch(
        pieces, beam_size=args.beam_size, length_penalty=0.0, max_batch_size=args.sentences,
        min_decoding_length=args.output_len, max_decoding_length=args.output_len,
        use_vmap=use_vmap)
    return [[ids[p] for p in r.hypotheses[0]] for r in results]

  description = (f"{args.configs.split(',')[0]} with random parameters: {args.sentences} "
                 f"sentences of {args.source_len} ids in one batch, {args.output_len} output "
                 f"tokens each, beam {args.beam_size}")
  return cfg, params, tokens, ours, theirs, description, _spec_export(cfg, params, tokens)


# OPUS-MT en-de's shape (Helsinki-NLP/opus-mt-en-de's config.json), for --marian; its toy
# of the same layout for --smoke.
OPUS_MT_EN_DE = dict(vocab_size=58101, d_model=512, layers=6, heads=8, ffn=2048)
OPUS_MT_SMOKE = dict(vocab_size=300, d_model=32, layers=1, heads=2, ffn=64)


def _marian_directory(directory: pathlib.Path, shape: dict) -> pathlib.Path:
  """A MarianMTModel of `shape` with random weights and a MarianTokenizer, saved as a published
  OPUS-MT model is: swish, a final_logits_bias, EOS 0, <unk> 1, padding (the decoder's
  start) the last id, source.spm and target.spm (small, trained on the demo corpus) under a
  vocab.json of `vocab_size` entries."""
  import json as json_lib  # pylint: disable=import-outside-toplevel
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from t2t_jax.corpora import demo  # pylint: disable=import-outside-toplevel
  torch.manual_seed(0)
  work = directory / "spm"
  work.mkdir(parents=True)
  pairs = demo.generate(2000, seed=0)
  models = []
  for side, name in ((0, "source"), (1, "target")):
    (work / f"{name}.txt").write_text("".join(pair[side] + "\n" for pair in pairs))
    spm.SentencePieceTrainer.Train(input=str(work / f"{name}.txt"), model_prefix=str(work / name),
                                   vocab_size=200, character_coverage=1.0, minloglevel=2)
    models.append(spm.SentencePieceProcessor(model_file=str(work / f"{name}.model")))
  pieces = sorted({sp.id_to_piece(i) for sp in models for i in range(3, sp.get_piece_size())})
  fillers = [f"▁w{i}" for i in range(shape["vocab_size"] - len(pieces) - 3)]
  tokens = ["</s>", "<unk>", *pieces, *fillers, "<pad>"]
  (work / "vocab.json").write_text(json_lib.dumps({t: i for i, t in enumerate(tokens)}))
  tokenizer = transformers.MarianTokenizer(
      source_spm=str(work / "source.model"), target_spm=str(work / "target.model"),
      vocab=str(work / "vocab.json"), source_lang="en", target_lang="de")
  pad = len(tokens) - 1
  config = transformers.MarianConfig(
      vocab_size=len(tokens), decoder_vocab_size=len(tokens), d_model=shape["d_model"],
      encoder_layers=shape["layers"], decoder_layers=shape["layers"],
      encoder_attention_heads=shape["heads"], decoder_attention_heads=shape["heads"],
      encoder_ffn_dim=shape["ffn"], decoder_ffn_dim=shape["ffn"], max_position_embeddings=512,
      activation_function="swish", scale_embedding=True, pad_token_id=pad, eos_token_id=0,
      decoder_start_token_id=pad)
  model = transformers.MarianMTModel(config).eval()
  with torch.no_grad():
    model.final_logits_bias.normal_(0.0, 0.1)
  model.save_pretrained(directory)
  tokenizer.save_pretrained(directory)
  return directory


def _marian_workload(args):
  """A random OPUS-MT-shaped model imported (ours) and converted by CTranslate2's own converter
  (theirs): run functions on random source pieces, every output args.output_len tokens."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from t2t_jax.export import import_marian  # pylint: disable=import-outside-toplevel
  from t2t_jax.export import loading  # pylint: disable=import-outside-toplevel
  from t2t_jax.inference import translator  # pylint: disable=import-outside-toplevel
  root = pathlib.Path(args.scratch)
  shape = OPUS_MT_SMOKE if args.smoke else OPUS_MT_EN_DE
  model_dir = _marian_directory(root / "marian", shape)
  workdir = import_marian.import_marian(model_dir, root / "imported")
  cfg, params, _ = loading.load_workdir(workdir)
  tokenizer = translator.load_tokenizer(workdir)
  rng = np.random.default_rng(0)
  ids = rng.integers(3, cfg.vocab_size, size=(args.sentences, args.source_len - 1))
  pieces = [[tokenizer.sp.id_to_piece(int(i)) for i in row] + ["</s>"] for row in ids]
  inputs = jnp.asarray(np.concatenate([ids, np.ones((args.sentences, 1), ids.dtype)], 1),
                       jnp.int32)

  def ours(shortlist=None, model=(cfg, params)):
    found = _search(model[1], inputs, shortlist, cfg=model[0], beam_size=args.beam_size,
                    output_len=args.output_len, cached=True)
    return [list(row) for row in np.asarray(found[0][:, 0])]

  def theirs(translator_, use_vmap=False):
    results = translator_.translate_batch(
        pieces, beam_size=args.beam_size, length_penalty=0.0, max_batch_size=args.sentences,
        min_decoding_length=args.output_len, max_decoding_length=args.output_len)
    return [[tokenizer.target_sp.piece_to_id(p) for p in r.hypotheses[0]] for r in results]

  def convert(directory, vmap):
    del vmap   # no shortlist here (main refuses --shortlist with --marian)
    # What the ct2-transformers-converter command runs, in this process.
    converters = loading.require("ctranslate2.converters")
    converters.TransformersConverter(str(model_dir)).convert(str(directory))

  description = (f"a MarianMTModel of OPUS-MT en-de's shape ({shape['layers']} + "
                 f"{shape['layers']} layers, d_model {shape['d_model']}, {shape['heads']} heads, "
                 f"swish, {shape['vocab_size']} pieces) with random weights, t2t-import beside "
                 f"ct2-transformers-converter: {args.sentences} sentences of {args.source_len} "
                 f"pieces in one batch, {args.output_len} output tokens each, beam "
                 f"{args.beam_size}")
  return cfg, params, [None] * cfg.target_vocab, ours, theirs, description, convert


def _shortlist_table(args, cfg):
  """--shortlist's table: the work directory's (t2t-shortlist), or a synthetic one."""
  from t2t_jax.inference import shortlist  # pylint: disable=import-outside-toplevel
  if not args.workdir:
    return _random_shortlist(args, cfg.vocab_size), (
        f"synthetic: {args.shortlist_per_source} random ids per source id + "
        f"{args.shortlist_frequent} frequent")
  table = shortlist.workdir_table(args.workdir)
  return table, (f"{args.workdir}'s (t2t-shortlist): {table.per_source.shape[1]} per source id + "
                 f"{len(table.frequent)} frequent")


# Our modes: the model's config fields and params (quantization/quantized.py) beside float32's.
MODES = ("float32", "int8", "bfloat16")


def ctranslate2_side_by_side(args) -> None:
  """Our beam search (float32, int8, bfloat16), then CTranslate2 float32 and int8 on the same
  model and sentences; with --shortlist each also shortlisted."""
  import jax  # pylint: disable=import-outside-toplevel
  from t2t_jax.inference import shortlist as shortlist_lib  # pylint: disable=import-outside-toplevel
  from t2t_jax.kernels import choice  # pylint: disable=import-outside-toplevel
  from t2t_jax.quantization import quantized  # pylint: disable=import-outside-toplevel
  workload = (_marian_workload if args.marian else _trained_workload if args.workdir
              else _random_workload)
  cfg, params, tokens, ours, theirs, description, convert = workload(args)
  threads = os.cpu_count() or 1
  print(f"device: {jax.devices()[0].platform} ({choice.cpu_description()}, {threads} cores), "
        f"jax {jax.__version__}, CTranslate2 with {threads} threads, load average "
        f"{os.getloadavg()[0]:.1f}")
  print(description)
  models = {"float32": (cfg, params)}
  for mode in MODES[1:]:   # quantised or cast once, before timing
    mode_cfg = cfg.replace(quantization=mode)
    models[mode] = (mode_cfg, quantized.quantize_params(mode_cfg.model, params))
  table, source = _shortlist_table(args, cfg) if args.shortlist else (None, "")
  rows = []        # (name, seconds, outputs, the outputs they are compared with)
  seconds, reference = _best_of(ours, args.repeats)
  rows.append(("ours (JAX, float32)", seconds, reference, reference))
  if args.workdir:  # several batches: also one at a time
    seconds, outputs = _best_of(functools.partial(ours, in_flight=1), args.repeats)
    rows.append(("ours, in_flight=1", seconds, outputs, reference))
  for mode in MODES[1:]:
    seconds, outputs = _best_of(functools.partial(ours, model=models[mode]), args.repeats)
    rows.append((f"ours (JAX, {mode})", seconds, outputs, reference))
  shortlisted = None
  if table is not None:
    for mode in MODES:
      seconds, outputs = _best_of(functools.partial(ours, table, model=models[mode]),
                                  args.repeats)
      shortlisted = shortlisted or outputs
      rows.append((f"ours {mode} + shortlist", seconds, outputs, shortlisted))
    print(f"shortlist: {source}; the shortlisted rows are compared with ours float32 + "
          "shortlist")
  with tempfile.TemporaryDirectory() as directory:
    convert(directory + "/ct2", None if table is None else
            shortlist_lib.vocabulary_map(table, tokens))
    runs = _ctranslate2_runs(directory + "/ct2", threads)
    for name, translator in runs.items():
      seconds, outputs = _best_of(functools.partial(theirs, translator), args.repeats)
      rows.append((name, seconds, outputs, reference))
      if table is not None:
        seconds, outputs = _best_of(functools.partial(theirs, translator, use_vmap=True),
                                    args.repeats)
        rows.append((name + " + vmap", seconds, outputs, shortlisted))
  print(f"{'engine':30} {'run s':>8} {'sent/s':>8} {'tokens/s':>9} {'time/ours':>11} "
        f"{'same as ours':>12}")
  for name, seconds, outputs, expected in rows:
    # Generated tokens; a trained model's outputs are listed without their EOS.
    count = sum(len(o) + bool(args.workdir) for o in outputs)
    same = sum(a == b for a, b in zip(expected, outputs))
    print(f"{name:30} {seconds:8.3f} {len(outputs) / seconds:8.1f} {count / seconds:9.0f} "
          f"{seconds / rows[0][1]:10.2f}x {same:7d}/{len(outputs)}", flush=True)
  times = {row[0]: row[1] for row in rows}

  def speed(ours_name: str, theirs_prefix: str, vmap: bool) -> None:
    """Our row's speed over the engine's faster setting (one batch, or a batch per core)."""
    theirs = min(t for name, t in times.items()
                 if name.startswith(theirs_prefix) and name.endswith(" + vmap") == vmap)
    print(f"{ours_name} / {theirs_prefix}{' + vmap' if vmap else ''}, speed (its faster "
          f"row): {theirs / times[ours_name]:.2f}x")

  for mode, yardstick in (("float32", "float32"), ("int8", "int8"), ("bfloat16", "int8")):
    speed(f"ours (JAX, {mode})", f"CTranslate2 {yardstick}", False)
  if table is not None:
    for mode, yardstick in (("float32", "float32"), ("int8", "int8"), ("bfloat16", "int8")):
      speed(f"ours {mode} + shortlist", f"CTranslate2 {yardstick}", True)


if __name__ == "__main__":
  main()
