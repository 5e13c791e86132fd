"""accelerators/aot.py: deviceless compiles for H100 and TPU, and what is read from a program.

The compile tests need the `accelerators` extra (jax[cuda12], jax[tpu]); without
it they skip, saying so. They compile reduced models (2 layers, short rows or a
narrow width): a full-size base step takes 30-45 s to compile for an H100 and
about 3 minutes for a TPU on a 2-core CPU, so the full-size figures come from
t2t-compile (docs/benchmarks.md). Memory at the paper's size is checked on the
H100 by compiling 1 and 2 full-width layers at the paper's rows and extending
the line to 6 (memory is affine in the layers: state and activations per layer,
the output layer once).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compilers import NO_CUDA, NO_TPU, SMALL
from t2t_jax import configs
from t2t_jax.accelerators import aot, predict, targets


def test_all_reduce_bytes_are_read_from_the_program():
  devices = jax.devices()
  if len(devices) < 2:
    pytest.skip("needs several devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
  mesh = jax.sharding.Mesh(np.array(devices), ("x",))
  reduce = jax.jit(jax.shard_map(lambda a, b: jax.lax.psum((a, b), "x"), mesh=mesh,
                                 in_specs=jax.sharding.PartitionSpec(),
                                 out_specs=jax.sharding.PartitionSpec()))
  compiled = reduce.lower(jnp.ones((3, 5), jnp.float32), jnp.ones((7,), jnp.int16)).compile()
  # (A bfloat16 operand would be reduced in float32 by the CPU backend: the program's bytes count.)
  assert aot.analyse(compiled).all_reduce_bytes == 3 * 5 * 4 + 7 * 2


def test_an_asynchronous_all_reduce_counts_its_results_once():
  # As the CUDA plugin of JAX 0.12 writes one: the start typed (operands, results).
  hlo = """
  %all-reduce-start = ((f32[724996]{0}), f32[724996]{0}) all-reduce-start(%concatenate), channel_id=1
  %all-reduce-done = f32[724996]{0} all-reduce-done(%all-reduce-start), metadata={}
  ROOT %all-reduce.1 = (f32[3,5]{1,0}, s16[7]{0}) all-reduce(%a, %b), to_apply=%sum
  """
  assert aot.all_reduce_bytes(hlo) == 724996 * 4 + 3 * 5 * 4 + 7 * 2


@NO_CUDA
def test_h100_programs_compile_with_cudnn_attention():
  h100 = targets.get("h100")
  train = aot.compile_train_step(SMALL, h100, rows=4, length=32)
  # Per layer pair: encoder self, decoder self and cross attention, forward and backward.
  assert train.cudnn_attention_calls == 6 * SMALL.num_layers
  assert 0 < train.memory.peak < h100.memory_bytes and train.cost["flops"] > 0
  assert aot.compile_eval_step(SMALL, h100, rows=4, length=32).cudnn_attention_calls == (
      3 * SMALL.num_layers)
  decode = aot.compile_decode_step(SMALL, h100, sentences=2, source_length=16,
                                   max_decode_len=24)
  assert 0 < decode.memory.peak < h100.memory_bytes


@NO_TPU
def test_tpu_programs_compile_with_a_cost_model_time():
  v5p = targets.get("v5p-8")
  train = aot.compile_train_step(SMALL, v5p, rows=4, length=32, accum_steps=2)
  assert train.cudnn_attention_calls == 0 and train.cost["optimal_seconds"] > 0
  decode = aot.compile_decode_step(SMALL, v5p, sentences=2, source_length=16,
                                   max_decode_len=24)
  assert decode.memory.peak > 0


@NO_TPU
def test_v5e_sliced_prefetch_is_counted_and_its_time_recovered():
  # The smallest program we found where libtpu's v5e cost model goes negative: a weight
  # gradient of a float32 FFN used in bfloat16 (its weight is prefetched in slices).
  def loss(x, w1, w2):
    return (jax.nn.relu(x @ w1.astype(jnp.bfloat16)) @ w2.astype(jnp.bfloat16)).sum()

  v5e = targets.get("v5e-4")
  one = jax.sharding.NamedSharding(
      jax.sharding.Mesh(np.array(targets.topology(v5e).devices[:1]), ("x",)),
      jax.sharding.PartitionSpec())
  shapes = [jax.ShapeDtypeStruct(s, t, sharding=one) for s, t in (
      ((256, 512), jnp.bfloat16), ((512, 2048), jnp.float32), ((2048, 512), jnp.float32))]
  lowered = jax.jit(jax.grad(loss, argnums=(1, 2))).lower(*shapes)
  program = aot._program(lowered)  # pylint: disable=protected-access
  assert program.sliced_prefetches >= 1 and program.cost["optimal_seconds"] < 0
  seconds = predict.micro_step_seconds(program.cost, v5e,
                                       sliced_prefetches=program.sliced_prefetches)[0]
  # The same program without sliced prefetch: the cost model prices it whole.
  plain = lowered.compile(compiler_options={"xla_tpu_sliced_prefetch_max_slices": 0})
  cost = plain.cost_analysis()
  plain_seconds = (cost[0] if isinstance(cost, (list, tuple)) else cost)["optimal_seconds"]
  assert 0.5 * plain_seconds < seconds <= plain_seconds


def _peak_at_paper_depth(cfg, target, rows, length):
  """Peak bytes of `cfg` at its depth, from compiles of 1 and 2 layers (affine in layers)."""
  one, two = (aot.compile_train_step(cfg.replace(num_layers=n), target, rows, length)
              .memory.peak for n in (1, 2))
  return one + (cfg.num_layers - 1) * (two - one)


SLOW_TPU = pytest.mark.skipif(
    not os.environ.get("T2T_JAX_SLOW_COMPILE_TESTS"),
    reason="a full-width TPU layer takes ~90 s to compile on a 2-core CPU; set "
           "T2T_JAX_SLOW_COMPILE_TESTS=1 (t2t-compile --target=v5p-8 gives the full figure)")


@pytest.mark.parametrize("target", [pytest.param("h100", marks=NO_CUDA),
                                    pytest.param("v5p-8", marks=[NO_TPU, SLOW_TPU])])
@pytest.mark.parametrize("preset", ["base", "big"])
def test_paper_models_fit_at_the_paper_budget(preset, target):
  target = targets.get(target)
  cfg = configs.get_config(preset, dtype="bfloat16")
  length = 256                                   # the experiment's packed rows
  rows = -(-(cfg.tokens_per_batch // length) // target.devices)  # one micro-step per update
  peak = _peak_at_paper_depth(cfg, target, rows, length)
  assert peak <= target.memory_bytes * (1 - cfg.memory_margin), peak / 2**30


@NO_CUDA
def test_eight_h100_program_all_reduces_the_gradients():
  from t2t_jax.model import transformer  # pylint: disable=import-outside-toplevel
  eight = targets.get("8xh100")
  train = aot.compile_train_step(SMALL, eight, rows=4, length=32)
  params = jax.eval_shape(lambda: transformer.init_params(SMALL.model, jax.random.key(0)))
  gradient_bytes = sum(x.size * 4 for x in jax.tree.leaves(params))  # float32 gradients
  # The gradients, and the loss sums beside them (a few scalars).
  assert gradient_bytes <= train.all_reduce_bytes <= gradient_bytes + 64
  assert train.cudnn_attention_calls == 6 * SMALL.num_layers
  assert 0 < train.memory.peak < eight.memory_bytes

