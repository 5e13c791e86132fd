"""accelerators/: kernel choice by target, deviceless compiles for H100 and TPU, predictions.

The compile tests need the `accelerators` extra (jax[cuda12], jax[tpu]); without
it they skip, saying so. They compile reduced models (2 layers, short rows or a
narrow width): a full-size base step takes 30-45 s to compile for an H100 and
about 3 minutes for a TPU on a 2-core CPU, so the full-size figures come from
t2t-compile (docs/benchmarks.md). Memory at the paper's size is checked on the
H100 by compiling 1 and 2 full-width layers at the paper's rows and extending
the line to 6 (memory is affine in the layers: state and activations per layer,
the output layer once).
"""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import layers
from t2t_jax.train import memory, parallel
from t2t_jax.accelerators import aot, kernels, predict, targets

import extras as extras_lib


def _needs_compiler(platform: str) -> pytest.MarkDecorator:
  """Skips without `platform`'s compiler (the accelerators extra), saying how to install it."""
  reason = extras_lib.missing("accelerators", (targets.COMPILER_PACKAGES[platform],))
  return pytest.mark.skipif(reason is not None, reason=reason or "")


NO_CUDA = _needs_compiler("cuda")
NO_TPU = _needs_compiler("tpu")

SMALL = configs.get_config("base", num_layers=2, d_model=128, d_ff=256, num_heads=4,
                           vocab_size=512, max_len=64, dtype="bfloat16")


# --------------------------------------------------------------- without the compilers


def test_attention_kernel_follows_the_target_not_this_process():
  assert jax.default_backend() == "cpu"
  assert kernels.for_platform(SMALL, "cuda").attention_impl == "cudnn"
  assert kernels.for_platform(SMALL, "tpu").attention_impl == "core_recompute"  # 16-bit probabilities
  assert kernels.for_platform(SMALL.replace(dtype="float32"), "tpu").attention_impl == "core"
  assert kernels.for_platform(SMALL, "cpu").attention_impl == "core"
  # float32, or layers the fused path never takes, keep the config's choice.
  assert kernels.for_platform(SMALL.replace(dtype="float32"), "cuda").attention_impl == "core"
  assert kernels.for_platform(SMALL.replace(attention_dropout_rate=0.1),
                              "cuda").attention_impl == "fused"
  assert kernels.for_platform(SMALL.replace(attention_impl="reference"),
                              "cuda").attention_impl == "reference"


def test_cudnn_that_cannot_be_built_names_the_layer():
  attention = attention_lib.MultiHeadAttention(num_heads=2, d_k=8, d_v=8, d_model=16,
                                        dtype=jnp.bfloat16, implementation="cudnn")
  x = jnp.ones((1, 4, 16))
  mask = layers.Mask(jnp.ones((1, 4), jnp.int32), jnp.ones((1, 4), jnp.int32))
  with pytest.raises(ValueError, match=r"attention layer .*cudnn attention cannot be built"):
    attention.init(jax.random.key(0), x, bias=mask)  # no cuDNN on this CPU


def test_an_accelerator_without_a_memory_figure_is_an_error():
  class Device:
    platform, device_kind = "tpu", "TPU v5"

    def memory_stats(self):
      return None

  with pytest.raises(ValueError, match="--config.max_tokens_per_device"):
    memory.device_memory(Device())


@pytest.mark.parametrize("parallelism", ["pmap", "shard_map"])
def test_metrics_are_read_by_a_transfer_without_a_device_op(parallelism, monkeypatch):
  from t2t_jax.train import optim  # pylint: disable=import-outside-toplevel
  cfg = SMALL.replace(parallelism=parallelism)
  devices = parallel.data_parallel(cfg, optim.make_optimizer(cfg))
  placed = devices.put_state({"loss": np.float32(2.5)})  # placed as the step's metrics are
  # A device op on the metrics (e.g. indexing [0]) would queue behind the next step,
  # so reading step t's metrics would wait for step t + 1 (the trainer's read_metrics).
  monkeypatch.setattr(type(placed["loss"]), "__getitem__",
                      lambda *a: pytest.fail("indexed on the device"))
  host = devices.fetch(placed)
  assert isinstance(host["loss"], (np.ndarray, np.generic)) and float(host["loss"]) == 2.5


def test_roofline_adds_compute_and_memory_time():
  h100 = targets.get("h100")
  cost = {"flops": h100.peak_bf16_flops, "bytes accessed": 2 * h100.memory_bandwidth}
  seconds, lower, basis = predict.micro_step_seconds(cost, h100)
  assert (seconds, lower, basis) == (pytest.approx(3.0), pytest.approx(2.0), "gpu_roofline")
  v5p = targets.get("v5p-8")
  assert predict.micro_step_seconds({"optimal_seconds": 0.5}, v5p)[0] == 0.5
  with pytest.raises(ValueError, match="no valid time"):
    predict.micro_step_seconds({"flops": 1.0}, v5p)
  with pytest.raises(ValueError, match="no valid time"):  # what libtpu's v5e model gave
    predict.micro_step_seconds({"optimal_seconds": -672.0}, v5p)


def test_sliced_prefetches_are_priced_at_zero_not_minus_one_second():
  v5e = targets.get("v5e-8")
  # libtpu's v5e answer for a program with one sliced prefetch (the FFN gradient below).
  seconds, lower, basis = predict.micro_step_seconds({"optimal_seconds": -0.99995}, v5e,
                                                     sliced_prefetches=1)
  assert seconds == lower == pytest.approx(5e-5) and basis.endswith("sliced_prefetch_correction")
  assert predict.micro_step_seconds({"optimal_seconds": 0.5}, v5e)[2] == "xla_tpu_cost_model"
  with pytest.raises(ValueError, match="672 sliced prefetches priced at -1 s"):
    predict.micro_step_seconds({"optimal_seconds": -673.5}, v5e, sliced_prefetches=672)


def test_prediction_scales_with_the_micro_steps():
  v5p = targets.get("v5p-8")
  one = predict.predict(SMALL, v5p, {"optimal_seconds": 0.1}, rows=4, length=32, accum_steps=1)
  three = predict.predict(SMALL, v5p, {"optimal_seconds": 0.1}, rows=4, length=32,
                          accum_steps=3)
  assert three.step_s == pytest.approx(3 * one.step_s)
  assert three.mfu == pytest.approx(one.mfu) and 0 < one.mfu
  assert one.hours_to_steps == pytest.approx(0.1 * SMALL.num_train_steps / 3600)


def test_compile_command_without_the_compilers_says_what_to_install(monkeypatch, capsys):
  from t2t_jax.cli import compile as compile_cli  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(targets, "available", lambda platform: False)
  with pytest.raises(SystemExit, match=r"needs .* pip install -e '\.\[accelerators\]'"):
    compile_cli.main(["--target=h100", "--config=base"])


# -------------------------------------------------------------------- with the compilers


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
def test_compile_command_prints_the_figures_last(capsys):
  from t2t_jax.cli import compile as compile_cli  # pylint: disable=import-outside-toplevel
  compile_cli.main(["--target=h100", "--config=base", "--config.num_layers=1",
                    "--config.d_model=128", "--config.d_ff=256", "--config.num_heads=4",
                    "--config.vocab_size=512", "--config.dtype=bfloat16",
                    "--config.max_source_length=32", "--config.max_target_length=32",
                    "--config.tokens_per_batch=256"])
  out = capsys.readouterr().out.strip().splitlines()
  report = json.loads(out[-1])
  assert report["fits"] and report["cudnn_attention_calls"] == 6
  assert report["peak_bytes"] < report["device_memory_bytes"]
  assert report["predicted_step_s"] > 0 and report["decode_step_compiles"]
  assert report["tpu_cost_model_optimal_seconds"] is None  # not a GPU figure
  assert any(line.startswith("PREDICTED") for line in out)
  assert any("roofline" in line for line in out[:-1])


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


def test_all_reduce_is_priced_as_a_ring_on_several_gpus_only():
  eight = targets.get("8xh100")
  assert predict.all_reduce_seconds(eight, 450_000_000) == pytest.approx(2 * 7 / 8 * 1e-3)
  assert predict.all_reduce_seconds(targets.get("h100"), 450_000_000) == 0.0
  cost = {"flops": 1e12, "bytes accessed": 1e9}
  one = predict.predict(SMALL, eight, cost, rows=4, length=32, accum_steps=2)
  reduced = predict.predict(SMALL, eight, cost, rows=4, length=32, accum_steps=2,
                            all_reduce_bytes=450_000_000)
  # Once per update, not per micro-step.
  assert reduced.step_s == pytest.approx(one.step_s + 2 * 7 / 8 * 1e-3)
  assert reduced.basis == "gpu_roofline+all_reduce" and one.basis == "gpu_roofline"
  assert any("NVLink" in a for a in predict.assumptions(reduced))
  assert not any("NVLink" in a for a in predict.assumptions(one))


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


@NO_CUDA
def test_compile_command_prices_the_all_reduce_of_eight_gpus(capsys):
  from t2t_jax.cli import compile as compile_cli  # pylint: disable=import-outside-toplevel
  compile_cli.main(["--target=8xh100", "--config=base", "--config.num_layers=1",
                    "--config.d_model=64", "--config.d_ff=128", "--config.num_heads=4",
                    "--config.vocab_size=256", "--config.dtype=bfloat16", "--no-decode",
                    "--config.max_source_length=32", "--config.max_target_length=32",
                    "--config.tokens_per_batch=2048"])
  report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert report["devices"] == 8 and report["rows_per_micro_step"] == 8  # 2048 / 8 / 32
  assert report["prediction_basis"] == "gpu_roofline+all_reduce"
  assert report["interconnect_bytes_per_s"] == 450e9
  assert report["predicted_all_reduce_s"] == pytest.approx(
      2 * 7 / 8 * report["all_reduce_bytes"] / 450e9)
  assert any("NVLink" in a for a in report["prediction_assumptions"])
