"""Where a beam-search decoding step's time goes on this machine: measured parts of one step.

    python benchmarks/decode_breakdown.py [--config=base] [--sentences=16] [--output_len=40]
        [--beam_size=4] [--shortlist=6144] [--repeats=3]
    ... --smoke   # a toy model: does the script run? (figures meaningless)

bench_decode.py --ctranslate2 times whole searches; this says what bounds them. For
float32 and int8 (`quantization="int8"`, the params quantised as `Translator(int8=True)`
does), over the whole vocabulary and over `--shortlist` rows of it, each timed as a loop
of `--output_len` steps in one program, in milliseconds per step:
  search          beam search with EOS off (bench_decode's CTranslate2 workload)
  step            `transformer.decode_step` alone on the beams' cache, no search
  products        the decoder's Dense products (fused QKV, the attention outputs,
                  the cross-attention query, the feed-forward pair) and the output
                  projection alone: the model's own kernels and weights, in the
                  step's order, the activations quantised per row in int8
  self-attention  `attention.self_attention` alone over every layer's caches
  rest            step - products - self-attention (cross-attention, LayerNorm,
                  embeddings, the cache writes)
Random parameters and ids (seeded); the caches hold `--output_len` positions, as the
search's do. Best of `--repeats` after one untimed call; nothing else should run.
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
from t2t_jax.decoding import beam_search  # noqa: E402
from t2t_jax.ids import EOS_ID  # noqa: E402
from t2t_jax.kernels import int8  # noqa: E402
from t2t_jax.kernels import logits as logits_lib  # noqa: E402
from t2t_jax.model import attention, decode_cache, quantized, transformer  # noqa: E402
from t2t_jax.decoding import beam_search

# --smoke: a toy model, to check that the script runs (its figures mean nothing).
SMOKE_MODEL = dict(num_layers=1, d_model=32, d_ff=64, num_heads=2, vocab_size=64)
PARTS = ("search", "step", "products", "self-attention")


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
  cache = transformer.init_cache(cfg, params, inputs, steps)
  step_fn = functools.partial(transformer.decode_step, cfg, params, logits_layout="vocab_major",
                              shortlist=ids)
  return beam_search.beam_search(step_fn, cache, beam_size=beam_size, max_len=steps, eos_id=-1)


def _steps(cfg, params, inputs, ids, *, beam_size: int, steps: int):
  """decode_step alone, `steps` times on the beams' tiled cache (what the search feeds it)."""
  cache = beam_search.tile(transformer.init_cache(cfg, params, inputs, steps), beam_size)
  rows = inputs.shape[0] * beam_size

  def body(position, carry):
    cache, total = carry
    tokens = jnp.full((rows,), 3 + position, jnp.int32)
    logits, cache = transformer.decode_step(cfg, params, cache, tokens, position, "vocab_major",
                                            ids)
    return cache, total + jnp.max(logits.logits)  # every logit used: none left out

  return jax.lax.fori_loop(0, steps, body, (cache, 0.0))[1]


def _dense(x, kernels):
  """The model's product: `int8.int8_dense` for int8 kernels, else x by the float32 kernels
  side by side (as MultiHeadAttention fuses its float32 QKV), each flattened to [in, out]."""
  if isinstance(kernels[0], int8.Int8Kernel):
    return int8.int8_dense(x, kernels)
  kernels = [k.reshape(x.shape[-1], -1) for k in kernels]
  return jnp.dot(x, jnp.concatenate(kernels, axis=1))


def _products(cfg, params, hidden, ids, *, steps: int):
  """The decoder's per-step products and the output projection alone, `steps` times."""
  layers = [params["decoder"][f"layers_{i}"] for i in range(cfg.num_layers)]
  kernel = lambda layer, part, name: layer[part][name]["kernel"]
  output = (params["output_projection"] if cfg.quantization == "int8"
            else params["embedding"]["embedding"])

  def body(_, x):
    for layer in layers:
      qkv = _dense(x, [kernel(layer, "self_attention", n) for n in ("query", "key", "value")])
      x = x + _dense(qkv[:, :cfg.d_model], [kernel(layer, "self_attention", "out")])
      query = _dense(x, [kernel(layer, "cross_attention", "query")])
      x = x + _dense(query, [kernel(layer, "cross_attention", "out")])
      x = x + _dense(jax.nn.relu(_dense(x, [kernel(layer, "ffn", "wi")])),
                     [kernel(layer, "ffn", "wo")])
      x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1.0)  # bounded
    project = int8.project_logits if cfg.quantization == "int8" else logits_lib.project_logits
    scores = project(x, output, "vocab_major", ids).logits                 # [size, rows]
    # Each row's best logit, as the search reads them: every logit is computed.
    return x + 1e-6 * jnp.max(scores, axis=0)[:, None]

  return jax.lax.fori_loop(0, steps, body, hidden)


def _self_attention(keys, values, queries, holds, *, steps: int):
  """`attention.self_attention` over every layer's caches, `steps` times."""
  bias = jnp.zeros((1, 1, 1, keys[0].shape[-1]), jnp.float32)

  def body(_, q):
    for k, v in zip(keys, values):
      q = q + 0.01 * attention.self_attention(q, k, v, holds, bias, jnp.float32)[:, 0]
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
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
  keys = [normal(rows, heads, d_k, steps) for _ in range(cfg.num_layers)]
  values = [normal(rows, heads, steps, d_k) for _ in range(cfg.num_layers)]
  stored_in = jnp.asarray(rng.integers(0, args.beam_size, (rows, steps)), jnp.int32)
  _, holds = attention.record_position(stored_in, steps - 1, args.sentences)
  return keys, values, normal(rows, heads, d_k), holds


def measure(args, cfg, params, ids) -> dict[str, float]:
  """{part: ms per step} for one model (float32 or int8) and one set of output rows."""
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
  parser.add_argument("--smoke", action="store_true", help="a toy model: does the script run?")
  args = parser.parse_args()
  run_cfg = configs.get_config(args.config, **(SMOKE_MODEL if args.smoke else {}))
  params = jax.device_get(jax.jit(functools.partial(transformer.init_params, run_cfg.model))(
      jax.random.key(0)))
  int8_cfg = run_cfg.replace(quantization="int8").model
  models = {"float32": (run_cfg.model, params),
            "int8": (int8_cfg, quantized.quantize_params(int8_cfg, params))}
  vocab = run_cfg.model.vocab_size
  size = min(args.shortlist, vocab - 3)
  outputs = {vocab: None, **({size: jnp.arange(3, 3 + size, dtype=jnp.int32)} if size > 0 else {})}
  print(f"device: {jax.devices()[0].platform} ({os.cpu_count()} cores), jax {jax.__version__}, "
        f"load average {os.getloadavg()[0]:.1f}")
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
