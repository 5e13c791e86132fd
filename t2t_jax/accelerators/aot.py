"""The training, eval and decoding steps compiled for an accelerator this host does not have.

    target = targets.get("h100")
    program = aot.compile_train_step(cfg, target, rows=97, length=256)
    program.memory.peak, program.cost["flops"], program.cudnn_attention_calls

Each step is the one the training loop (or the translator) runs, traced on
shapes only and compiled by the target's own compiler on compile-only devices
(targets.topology): the train step is train/step.py's under jit+shard_map,
data parallel over the target's devices with the state donated (the pmap step's
tested twin), with its gradient accumulation and packed rows; the model's
kernels are those of the target's platform (`kernels.for_platform`). Nothing is
allocated and nothing runs.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from t2t_jax import model as model_lib
from t2t_jax.accelerators import kernels
from t2t_jax.accelerators.targets import Target, topology
from t2t_jax.configs import TransformerConfig
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import beam_search
from t2t_jax.kernels import choice
from t2t_jax.train import memory
from t2t_jax.train import step as step_lib

# The custom call XLA's GPU compiler emits for a cuDNN fused attention (forward or backward).
_CUDNN_ATTENTION = re.compile(r'custom_call_target="__cudnn\$fmha[^"]*"')
# The custom call that joins the slices of a sliced prefetch (XLA's memory-space
# assignment copying a weight into the TPU's on-chip memory in pieces; libtpu emits
# them for v5e, not v5p). predict.py prices each at 0: libtpu's cost model says -1 s.
_SLICED_PREFETCH = re.compile(r'custom_call_target="ConcatBitcast"')
# An all-reduce instruction (synchronous, or the end of an asynchronous one) and its
# result type: one array or a tuple of them ("(f32[512,2048]{1,0}, f32[512]{0})"). The
# start of an asynchronous one is not read: newer XLA types it (operands, results), which
# would count its bytes twice.
_ALL_REDUCE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+all-reduce(?:-done)?\(",
                         re.MULTILINE)
_ARRAY = re.compile(r"\b(pred|[suf]8|[suf]16|bf16|[suf]32|[suf]64)\[([\d,]*)\]")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
          "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}


@dataclasses.dataclass(frozen=True)
class Program:
  """One compiled step: what its compiler says about memory and cost, per device."""
  memory: memory.StepMemory
  cost: dict[str, float]          # compiled.cost_analysis(): "flops", "bytes accessed", ...
  cudnn_attention_calls: int      # cuDNN fused-attention kernels in the program
  sliced_prefetches: int = 0      # TPU: ConcatBitcast custom calls (predict.micro_step_seconds)
  all_reduce_bytes: int = 0       # what the all-reduces of one run of the program reduce
  hlo: str = dataclasses.field(repr=False, default="")


def optimized_cost(compiled) -> dict[str, float]:
  """XLA's cost analysis of the optimized program, as its compiler built it.

  libtpu attaches it (with its cost model's `optimal_seconds`); the CUDA plugin
  attaches none, so its optimized module goes through XLA's target-independent
  `HloCostAnalysis` (run by the host's backend): FLOPs of every dot and
  elementwise op, bytes of every kernel's operands and results after fusion.
  cuBLAS/cuDNN custom calls count no FLOPs there (predict.py adds cuDNN's).
  """
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost  # older JAX: one dict per program
  if cost:
    return cost
  from jaxlib import _jax  # pylint: disable=import-outside-toplevel
  module, = compiled.runtime_executable().hlo_modules()
  return _jax.hlo_module_cost_analysis(jax.devices("cpu")[0].client, module)


def all_reduce_bytes(hlo: str) -> int:
  """Bytes of the results of the all-reduces in an optimized HLO module's text.

  Each is counted once, as the program text has it (an all-reduce inside a loop
  body would count once, not once per iteration; the train step reduces its
  accumulated gradients once, after the micro-steps' loop).
  """
  total = 0
  for result in _ALL_REDUCE.findall(hlo):
    for dtype, dims in _ARRAY.findall(result):
      total += _BYTES[dtype] * int(np.prod([int(d) for d in dims.split(",") if d]))
  return total


def analyse(compiled) -> Program:
  """What the compiler says about a compiled program (`lowered.compile()`), per device."""
  stats = compiled.memory_analysis()
  cost = optimized_cost(compiled)
  hlo = compiled.as_text()
  return Program(memory.StepMemory(stats.argument_size_in_bytes, stats.output_size_in_bytes,
                                   stats.alias_size_in_bytes, stats.temp_size_in_bytes),
                 {k: float(v) for k, v in (cost or {}).items()},
                 len(_CUDNN_ATTENTION.findall(hlo)), len(_SLICED_PREFETCH.findall(hlo)),
                 all_reduce_bytes(hlo), hlo)


def _program(lowered) -> Program:
  # Compile-only executables cannot be read back from JAX's persistent cache (no
  # client to load them into), so none is written there: no compile is slow enough.
  name = "jax_persistent_cache_min_compile_time_secs"
  previous = getattr(jax.config, name)
  jax.config.update(name, float("inf"))
  try:
    compiled = lowered.compile()
  finally:
    jax.config.update(name, previous)
  return analyse(compiled)


def mesh(target: Target) -> jax.sharding.Mesh:
  """A 1-D "batch" mesh over `target`'s compile-only devices, as train/step.py's."""
  return step_lib.data_mesh(topology(target).devices)


def _placed(tree: Any, sharding: NamedSharding) -> Any:
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


@functools.lru_cache(maxsize=16)  # fitting compiles a few sizes; the plan reuses its choice
def compile_train_step(cfg: TransformerConfig, target: Target, rows: int, length: int,
                       accum_steps: int = 1, packed: bool = True) -> Program:
  """The training loop's update for micro-batches of [rows, length] on each device.

  `accum_steps` micro-steps per update (lax.scan: one is compiled, so memory does
  not grow with them; time does).
  """
  cfg = kernels.for_platform(cfg, target.platform)
  built = step_lib.build(cfg, devices=topology(target).devices, parallelism="shard_map")
  return _program(built.lower(rows, length, accum_steps, packed))


def compile_eval_step(cfg: TransformerConfig, target: Target, rows: int, length: int) -> Program:
  """The dev-set evaluation of [rows, length] unpacked rows per device."""
  cfg = kernels.for_platform(cfg, target.platform)
  m = mesh(target)
  params = jax.eval_shape(functools.partial(model_lib.init_params, cfg.model), jax.random.key(0))
  batch = {n: jax.ShapeDtypeStruct((target.devices, 1, rows, length), jnp.int32,
                                   sharding=NamedSharding(m, P(step_lib.AXIS)))
           for n in ("inputs", "targets")}
  step = step_lib.jit_shard_map_eval_step(cfg, m)
  return _program(step.lower(_placed(params, NamedSharding(m, P())), batch))


def compile_decode_step(cfg: TransformerConfig, target: Target, sentences: int,
                        source_length: int, max_decode_len: int,
                        logits_layout: str = "vocab_major") -> Program:
  """One cached beam-search position for `sentences` x `cfg.beam_size` rows on one device,
  as decode.py runs it (vocabulary-major logits, unordered self-attention cache)."""
  cfg = kernels.for_platform(cfg, target.platform)
  one = NamedSharding(jax.sharding.Mesh(np.array(topology(target).devices[:1]), ("x",)), P())
  params = jax.eval_shape(functools.partial(model_lib.init_params, cfg.model), jax.random.key(0))
  inputs = jax.ShapeDtypeStruct((sentences, source_length), jnp.int32)
  cache = jax.eval_shape(
      functools.partial(model_lib.init_cache, cfg.model, max_decode_len=max_decode_len,
                        plugins=choice.plugins(cfg.model)), params, inputs)
  rows = sentences * cfg.beam_size
  # The search keeps the per-position parts once per hypothesis (beam_search.tile).
  cache = jax.eval_shape(lambda c: beam_search.tile(c, cfg.beam_size), cache)
  tokens = jax.ShapeDtypeStruct((rows,), jnp.int32)
  position = jax.ShapeDtypeStruct((), jnp.int32)
  step = jax.jit(lambda params, cache, tokens, position: batch_decoder.model_step(
      batch_decoder.Member(cfg.model, params), logits_layout)(cache, tokens, position))
  args = (_placed(params, one), _placed(cache, one), _placed(tokens, one), _placed(position, one))
  return _program(step.lower(*args))


def fit(cfg: TransformerConfig, target: Target, length: int, packed: bool = True
        ) -> memory.Fit:
  """train/memory.py's fitting of `max_tokens_per_device`, measured by `target`'s compiler
  against its device memory (less `cfg.memory_margin`)."""
  measure: Callable[[int], int] = lambda rows: compile_train_step(
      cfg, target, rows, length, packed=packed).memory.peak
  return memory.fit_tokens(cfg, target.devices, length, target.memory_bytes, measure)
