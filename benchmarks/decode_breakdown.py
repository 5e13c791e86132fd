"""Where a beam-search decoding step's time goes on this machine: measured parts of one step.

    python benchmarks/decode_breakdown.py [--config=base] [--sentences=16] [--output_len=40]
        [--beam_size=4] [--shortlist=6144] [--repeats=3] [--dtype=float32,int8,bfloat16]
    ... --smoke   # a toy model: does the script run? (figures meaningless)

bench_decode.py --ctranslate2 times whole searches; this says what bounds them. For
each of `--dtype`: float32, int8 (`quantization="int8"`, the params quantised as
`Translator(int8=True)` does) and bfloat16 (`quantization="bfloat16"`, the weights cast
once as `Translator(dtype="bfloat16")` does), over the whole vocabulary and over
`--shortlist` rows of it (a list from padding and EOS on, as a batch's candidates are),
each timed as a loop of `--output_len` steps in one program, in milliseconds per step:
  search          beam search with EOS off (bench_decode's CTranslate2 workload)
  step            the search's step function alone (`batch_decoder.model_step`: the
                  model's step and its output projection) on the beams' cache, no search
  products        the decoder's Dense products (fused QKV, the attention outputs,
                  the cross-attention query, the feed-forward pair) and the output
                  projection alone: the model's own kernels and weights, in the
                  step's order, the activations quantised per row in int8 (cast to
                  bfloat16 for bfloat16)
  self-attention  `attention.self_attention` alone over every layer's caches (bfloat16
                  caches for bfloat16)
  rest            step - products - self-attention (cross-attention, LayerNorm,
                  embeddings, the cache writes)
Random parameters and ids (seeded); the caches hold `--output_len` positions, as the
search's do. Best of `--repeats` after one untimed call; nothing else should run. The
header names the CPU and its AMX/AVX-512 flags (kernels/choice.py reads them).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from t2t_jax import configs  # noqa: E402
from t2t_jax.decoding import batch_decoder  # noqa: E402
from t2t_jax.decoding import beam_search  # noqa: E402
from t2t_jax.ids import EOS_ID  # noqa: E402
from t2t_jax.kernels import choice  # noqa: E402
from t2t_jax.quantization import int8  # noqa: E402
from t2t_jax.kernels import logits as logits_lib  # noqa: E402
from t2t_jax.model import attention, transformer  # noqa: E402
from t2t_jax.quantization import quantized  # noqa: E402

# --smoke: a toy model, to check that the script runs (its figures mean nothing).
SMOKE_MODEL = dict(num_layers=1, d_model=32, d_ff=64, num_heads=2, vocab_size=64)
PARTS = ("search", "step", "products", "self-attention")
DTYPES = ("float32", "int8", "bfloat16")


def _best_ms(fn, args, repeats: int) -> float:
  """Best wall time of `fn(*args)` over `repeats` calls after an untimed one, in ms."""
  jax.block_until_ready(fn(*args))
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - start)
  return best * 1e3


def _search(cfg, params, inputs, ids, *, beam_size: int, steps: int):
  """The search as batch_decoder binds one model (and a shortlist), EOS off."""
  cache, step_fn = batch_decoder.init_decoder([batch_decoder.Member(cfg, params)], inputs, steps,
                                              ids)
  return beam_search.beam_search(step_fn, cache, beam_size=beam_size, max_len=steps, eos_id=-1)


def _steps(cfg, params, inputs, ids, *, beam_size: int, steps: int):
  """The search's step function alone, `steps` times on the beams' tiled cache."""
  cache, step_fn = batch_decoder.init_decoder([batch_decoder.Member(cfg, params)], inputs, steps,
                                              ids)
  cache = beam_search.tile(cache, beam_size)
  rows = inputs.shape[0] * beam_size

  def body(position, carry):
    cache, total = carry
    tokens = jnp.full((rows,), 3 + position, jnp.int32)
    logits, cache = step_fn(cache, tokens, position)
    return cache, total + jnp.max(logits.logits)  # every logit used: none left out

  return jax.lax.fori_loop(0, steps, body, (cache, 0.0))[1]


def _dense(x, kernels):
  """The model's product: `int8.int8_dense` for int8 kernels, else x by the kernels side by
  side (as MultiHeadAttention fuses its QKV), each flattened to [in, out]; bfloat16 ones
  as quantization/bfloat16.py runs them (bfloat16 operands, float32 results)."""
  if isinstance(kernels[0], int8.Int8Kernel):
    return int8.int8_dense(x, kernels)
  kernels = [k.reshape(x.shape[-1], -1) for k in kernels]
  kernel = jnp.concatenate(kernels, axis=1)
  return jnp.dot(x.astype(kernel.dtype), kernel, preferred_element_type=jnp.float32)


def _products(cfg, params, hidden, ids, *, steps: int):
  """The decoder's per-step products and the output projection alone, `steps` times."""
  layers = [params["decoder"][f"layers_{i}"] for i in range(cfg.num_layers)]
  kernel = lambda layer, part, name: layer[part][name]["kernel"]
  output_layer = choice.output_layer(cfg)   # the search's output projection, as it reads it
  output = output_layer.kernel(params, transformer.output_weights(cfg, params)[0])
  if ids is not None:
    output = logits_lib.listed_rows(output, ids)

  def body(_, x):
    for layer in layers:
      qkv = _dense(x, [kernel(layer, "self_attention", n) for n in ("query", "key", "value")])
      x = x + _dense(qkv[:, :cfg.d_model], [kernel(layer, "self_attention", "out")])
      query = _dense(x, [kernel(layer, "cross_attention", "query")])
      x = x + _dense(query, [kernel(layer, "cross_attention", "out")])
      x = x + _dense(jax.nn.relu(_dense(x, [kernel(layer, "ffn", "wi")])),
                     [kernel(layer, "ffn", "wo")])
      x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1.0)  # bounded
    scores = output_layer.project(x, output, "vocab_major").logits      # [size, rows]
    # Each row's best logit, as the search reads them: every logit is computed.
    return x + 1e-6 * jnp.max(scores, axis=0)[:, None]

  return jax.lax.fori_loop(0, steps, body, hidden)


def _self_attention(keys, values, queries, holds, *, steps: int):
  """`attention.self_attention` over every layer's caches, `steps` times."""
  bias = jnp.zeros((1, 1, 1, keys[0].shape[-1]), jnp.float32)
  dtype = keys[0].dtype

  def body(_, q):
    for k, v in zip(keys, values):
      q = q + 0.01 * attention.self_attention(q.astype(dtype), k, v, holds, bias, dtype)[:, 0]
    return q

  return jax.lax.fori_loop(0, steps, body, queries)


def _inputs(args, cfg, rng):
  sources = rng.integers(3, cfg.vocab_size, size=(args.sentences, args.source_len - 1))
  eos = np.full((args.sentences, 1), EOS_ID)
  return jnp.asarray(np.concatenate([sources, eos], 1), jnp.int32)


def _attention_operands(args, cfg, rng):
  """Random self-attention caches of every layer as the search holds them, and queries."""
  rows, steps = args.sentences * args.beam_size, args.output_len
  heads, d_k = cfg.num_heads, cfg.d_model // cfg.num_heads
  dtype = jnp.bfloat16 if cfg.quantization == "bfloat16" else jnp.float32
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32).astype(dtype)
  keys = [normal(rows, heads, d_k, steps) for _ in range(cfg.num_layers)]
  values = [normal(rows, heads, steps, d_k) for _ in range(cfg.num_layers)]
  stored_in = jnp.asarray(rng.integers(0, args.beam_size, (rows, steps)), jnp.int32)
  _, holds = attention.record_position(stored_in, steps - 1, args.sentences)
  return keys, values, normal(rows, heads, d_k).astype(jnp.float32), holds


def measure(args, cfg, params, ids) -> dict[str, float]:
  """{part: ms per step} for one model (float32, int8 or bfloat16) and one set of output rows."""
  rng = np.random.default_rng(0)
  inputs = _inputs(args, cfg, rng)
  steps = args.output_len
  shape = dict(beam_size=args.beam_size, steps=steps)
  hidden = jnp.asarray(rng.standard_normal((args.sentences * args.beam_size, cfg.d_model)),
                       jnp.float32)
  runs = {
      "search": (jax.jit(functools.partial(_search, cfg, **shape)), (params, inputs, ids)),
      "step": (jax.jit(functools.partial(_steps, cfg, **shape)), (params, inputs, ids)),
      "products": (jax.jit(functools.partial(_products, cfg, steps=steps)),
                   (params, hidden, ids)),
      "self-attention": (jax.jit(functools.partial(_self_attention, steps=steps)),
                         _attention_operands(args, cfg, rng)),
  }
  ms = {part: _best_ms(fn, operands, args.repeats) / steps for part, (fn, operands) in runs.items()}
  ms["rest"] = ms["step"] - ms["products"] - ms["self-attention"]
  return ms


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="base", help="the preset")
  parser.add_argument("--sentences", type=int, default=16)
  parser.add_argument("--source_len", type=int, default=20, help="source ids, EOS included")
  parser.add_argument("--output_len", type=int, default=40)
  parser.add_argument("--beam_size", type=int, default=4)
  parser.add_argument("--shortlist", type=int, default=6144,
                      help="output rows of the shortlisted runs (0: none)")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--dtype", default=",".join(DTYPES),
                      help=f"comma-separated, of {', '.join(DTYPES)} (default: all)")
  parser.add_argument("--smoke", action="store_true", help="a toy model: does the script run?")
  args = parser.parse_args()
  dtypes = [d for d in args.dtype.split(",") if d]
  if not dtypes or set(dtypes) - set(DTYPES):
    parser.error(f"--dtype={args.dtype}: choose from {', '.join(DTYPES)}")
  run_cfg = configs.get_config(args.config, **(SMOKE_MODEL if args.smoke else {}))
  params = jax.device_get(jax.jit(functools.partial(transformer.init_params, run_cfg.model))(
      jax.random.key(0)))
  models = {}
  for name in dtypes:
    cfg = run_cfg.model if name == "float32" else run_cfg.replace(quantization=name).model
    models[name] = (cfg, params if name == "float32" else quantized.quantize_params(cfg, params))
  vocab = run_cfg.model.vocab_size
  size = min(args.shortlist, vocab - 3)     # a list shorter than the vocabulary
  outputs = {vocab: None, **({size: jnp.arange(size, dtype=jnp.int32)} if size > 0 else {})}
  print(f"device: {jax.devices()[0].platform} ({choice.cpu_description()}, {os.cpu_count()} "
        f"cores), jax {jax.__version__}, load average {os.getloadavg()[0]:.1f}")
  print(f"{args.config}{' (smoke)' if args.smoke else ''}: {args.sentences} sentences x "
        f"{args.beam_size} beams = {args.sentences * args.beam_size} rows, {args.output_len} "
        f"steps, caches of {args.output_len} positions; ms per step")
  print(f"{'model':8} {'output rows':>11} " + " ".join(f"{p:>14}" for p in (*PARTS, "rest")))
  for name, (cfg, model_params) in models.items():
    for rows, ids in outputs.items():
      ms = measure(args, cfg, model_params, ids)
      print(f"{name:8} {rows:11d} " + " ".join(f"{ms[p]:14.2f}" for p in (*PARTS, "rest")),
            flush=True)
  print(f"measured: {len(models)} models x {len(outputs)} output sizes")


if __name__ == "__main__":
  main()
