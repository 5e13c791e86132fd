"""The training and decoding programs timed on this process's own devices, beside the prediction.

    report = measure.measure(cfg, steps=10)        # t2t-compile --measure
    report["step_s"], report["predicted"]["step_s"], report["measured_over_predicted"]

The training step is the training loop's own (train/step.py's: the
config's parallelism over every local device, its micro-steps, dtype and
kernels, the state donated), compiled here for the devices the process has (a
GPU, a TPU, or the CPU), fed synthetic full rows as t2t-compile's prediction
assumes (`plan.row_length` tokens a row, one segment each when packing, the
micro-batch that `max_tokens_per_device` or the device's memory gives),
warmed up, then timed over N updates dispatched back to back as the loop
dispatches them. The prediction beside it is predict.py's, made from the cost
analysis of the very program that ran, for the target of this device kind
(`local_target`): the measured figures and the predicted ones differ only by
what the prediction leaves out. Decoding: the config's beam search (beam
`DECODE_BEAM`) of a fixed batch of random source ids, every sentence decoded
to its full limit, with random weights (no checkpoint needed).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Optional

import jax
import numpy as np

from t2t_jax.accelerators import aot
from t2t_jax.accelerators import plan
from t2t_jax.accelerators import predict
from t2t_jax.accelerators import targets
from t2t_jax.configs import TransformerConfig
from t2t_jax.decoding import batch_decoder
from t2t_jax.ids import EOS_ID, SEGMENT_KEYS
from t2t_jax.model import transformer
from t2t_jax.train import metrics as metrics_lib
from t2t_jax.train import memory
from t2t_jax.train import step as step_lib

DECODE_BEAM = 4
# Source sentence of the decoding batch, EOS included: about a WMT14 En-De sentence in
# 37k-piece subwords (newstest2014: 2737 sentences, ~27 pieces each on the English side).
DECODE_SOURCE_LENGTH = 28
FIRST_ID = 3  # ids below are padding, EOS and the tokenizer's unknown piece


def local_target(cfg: TransformerConfig, memory_bandwidth: Optional[float] = None
                 ) -> targets.Target:
  """The target whose figures predict this process's devices.

  targets.TARGETS' entry of the local device kind (the one with as many devices
  if there are several, else one of its kind with the local count), else one
  made of `cfg.peak_tflops` (or train/metrics_lib.py's table) and `memory_bandwidth`
  (bytes/s; on a host's CPU devices, which share its memory, the all-reduce's
  bandwidth too). Raises ValueError when a figure is missing.
  """
  device = jax.local_devices()[0]
  count = jax.local_device_count()
  kin = [t for t in targets.TARGETS.values() if t.device_kind == device.device_kind]
  if kin:
    exact = [t for t in kin if t.devices == count]
    linked = [t for t in kin if t.interconnect_bandwidth] if count > 1 else []
    target = (exact or linked or kin)[0]
    return dataclasses.replace(target, devices=count, peak_tflops=cfg.peak_tflops)
  peak = metrics_lib.peak_flops(device.device_kind, "bfloat16", cfg.peak_tflops)
  if peak is None or memory_bandwidth is None:
    raise ValueError(
        f"no datasheet figures for device kind {device.device_kind!r} (targets.py, "
        f"train/metrics_lib.py): the roofline needs its peak (--config.peak_tflops, "
        f"{'missing' if peak is None else 'known'}) and memory bandwidth "
        f"(--memory_bandwidth_gbs, {'missing' if memory_bandwidth is None else 'given'})")
  return targets.Target(f"local {device.device_kind}", device.platform, device.device_kind,
                        count, memory.device_memory(device), memory_bandwidth,
                        interconnect_bandwidth=memory_bandwidth if count > 1 else None,
                        peak_tflops=cfg.peak_tflops)


def synthetic_batch(cfg: TransformerConfig, devices: int, accum_steps: int, rows: int,
                    length: int, seed: int = 0) -> dict[str, np.ndarray]:
  """Full rows of random ids, [devices, accum_steps, rows, length] int32, one segment a row."""
  rng = np.random.default_rng(seed)
  shape = (devices, accum_steps, rows, length)
  batch = {name: rng.integers(FIRST_ID, cfg.vocab_size, shape, dtype=np.int32)
           for name in ("inputs", "targets")}
  if cfg.packing:
    batch.update({name: np.ones(shape, np.int32) for name in SEGMENT_KEYS})
  return batch


def _peak_bytes(device: jax.Device) -> Optional[int]:
  """The allocator's high-water mark on `device` since the process started; None on CPU."""
  try:
    stats = device.memory_stats() or {}
  except Exception:  # backends without memory stats raise instead of returning None
    stats = {}
  return stats.get("peak_bytes_in_use")


def time_updates(cfg: TransformerConfig, steps_timed: int, warmup: int
                 ) -> tuple[dict[str, Any], aot.Program, tuple[int, int, int]]:
  """(measured figures, the compiled program's analysis, (rows, length, accum_steps))."""
  count = jax.local_device_count()
  length = plan.row_length(cfg)
  cfg = memory.resolve_max_tokens_per_device(cfg, count, length, packed=cfg.packing)
  rows, tokens, accum = plan.micro_batch(cfg, count, length)
  built = step_lib.build(cfg)
  devices = built.mapped
  state = devices.put_state(built.init_state(jax.random.key(cfg.seed)))
  batch = devices.put_batch(synthetic_batch(cfg, count, accum, rows, length))
  key = jax.random.key(cfg.seed + 1)
  start = time.perf_counter()
  compiled = devices.train_step.lower(state, batch, key).compile()
  compile_s = time.perf_counter() - start
  program = aot.analyse(compiled)
  for _ in range(warmup):
    state, metrics = compiled(state, batch, key)
  jax.block_until_ready((state, metrics) if warmup else state)
  start = time.perf_counter()
  for _ in range(steps_timed):
    state, metrics = compiled(state, batch, key)
  jax.block_until_ready((state, metrics))
  step_s = (time.perf_counter() - start) / steps_timed
  device = jax.local_devices()[0]
  update_tokens = rows * length * count * accum
  model_flops = predict.model_flops_per_row(cfg, length) * rows * count * accum
  peak = _peak_bytes(device)
  figures = {
      "step_s": step_s, "tokens_per_s": update_tokens / step_s,
      "mfu": metrics_lib.mfu(model_flops, step_s, count,
                       metrics_lib.peak_flops(device.device_kind, cfg.dtype, cfg.peak_tflops)),
      "peak_bytes": program.memory.peak if peak is None else peak,
      # The allocator's high-water mark where the device keeps one (GPU, TPU); on the
      # CPU, which keeps none, the compiler's analysis of the program that ran.
      "peak_bytes_source": "compiler_memory_analysis" if peak is None else "device_memory_stats",
      "compile_s": compile_s, "warmup_updates": warmup, "timed_updates": steps_timed,
      "final_loss": float(np.asarray(devices.fetch(metrics)["loss"])),
      "rows_per_micro_step": rows, "row_length": length, "micro_steps": accum,
      "max_tokens_per_device": tokens, "tokens_per_update": update_tokens,
  }
  return figures, program, (rows, length, accum)


def predicted(cfg: TransformerConfig, program: aot.Program, rows: int, length: int,
              accum: int, memory_bandwidth: Optional[float] = None) -> dict[str, Any]:
  """predict.py's figures for `program` on this device kind's target (keys as measured)."""
  target = local_target(cfg, memory_bandwidth)
  guess = predict.predict(cfg, target, program.cost, rows, length, accum,
                          program.cudnn_attention_calls, program.sliced_prefetches,
                          program.all_reduce_bytes)
  return {"target": target.name, "basis": guess.basis,
          "assumptions": predict.assumptions(guess), "step_s": guess.step_s,
          "tokens_per_s": guess.tokens_per_s, "mfu": guess.mfu,
          "peak_bytes": program.memory.peak, "all_reduce_s": guess.all_reduce_s}


def decode_speed(cfg: TransformerConfig, sentences: int, repeats: int = 3,
                 source_length: int = DECODE_SOURCE_LENGTH) -> dict[str, Any]:
  """Beam search of `sentences` random sources of `source_length` ids (EOS included) on
  one device, each decoded to exactly `source_length` target tokens: the first run
  (with its compilation) apart, the best of `repeats` later runs."""
  source_length = min(source_length, cfg.max_len)
  params = jax.jit(functools.partial(transformer.init_params, cfg.model))(jax.random.key(cfg.seed))
  rng = np.random.default_rng(1)
  inputs = rng.integers(FIRST_ID, cfg.vocab_size, (sentences, source_length), dtype=np.int32)
  inputs[:, -1] = EOS_ID
  # Each output's limit is its source's length (max_len_a=1, no extra), and no EOS comes
  # before it (min_len): random weights would otherwise stop at random lengths.
  search = batch_decoder.Search.from_config(cfg, beam_size=DECODE_BEAM, max_len_a=1.0,
                                         max_decode_extra=0, min_len=source_length)
  members = [batch_decoder.Member(cfg.model, params)]
  run = functools.partial(batch_decoder.decode_batch, members, inputs, search)
  seconds = []
  for _ in range(1 + repeats):  # the first compiles
    start = time.perf_counter()
    tokens, _ = run()  # NumPy: the search has finished
    seconds.append(time.perf_counter() - start)
  best = min(seconds[1:])
  target_tokens = int(np.count_nonzero(tokens[:, 0]))
  return {"devices": 1, "sentences": sentences, "beam_size": DECODE_BEAM,
          "source_tokens": source_length,
          "target_tokens": target_tokens, "first_run_s": seconds[0], "run_s": best,
          "sentences_per_s": sentences / best, "target_tokens_per_s": target_tokens / best}


def ratios(measured: dict[str, Any], guess: dict[str, Any]) -> dict[str, Optional[float]]:
  """measured / predicted for each figure both have (None where either is missing)."""
  out = {}
  for name in ("step_s", "tokens_per_s", "mfu", "peak_bytes"):
    a, b = measured.get(name), guess.get(name)
    out[name] = a / b if a is not None and b else None
  return out


def measure(cfg: TransformerConfig, steps_timed: int = 10, warmup: int = 2,
            decode_sentences: Optional[int] = None,
            memory_bandwidth: Optional[float] = None) -> dict[str, Any]:
  """t2t-compile --measure's report: measured training and decoding on the local devices,
  the prediction for the same program and target, and measured / predicted."""
  if steps_timed < 1 or warmup < 0:
    raise ValueError(f"steps={steps_timed} must be >= 1 and warmup={warmup} >= 0")
  device = jax.local_devices()[0]
  figures, program, (rows, length, accum) = time_updates(cfg, steps_timed, warmup)
  report: dict[str, Any] = {
      "measured": True, "platform": device.platform, "device_kind": device.device_kind,
      "devices": jax.local_device_count(), "jax_version": jax.__version__, "dtype": cfg.dtype,
      "parallelism": cfg.parallelism, "tokens_per_batch": cfg.tokens_per_batch,
      "cudnn_attention_calls": program.cudnn_attention_calls,
      "all_reduce_bytes": program.all_reduce_bytes, **figures,
  }
  try:
    guess = predicted(cfg, program, rows, length, accum, memory_bandwidth)
    report.update(predicted=guess, prediction_unavailable=None,
                  measured_over_predicted=ratios(figures, guess))
  except ValueError as e:  # the measurement stands without a prediction
    report.update(predicted=None, prediction_unavailable=str(e), measured_over_predicted=None)
  report["decode"] = decode_speed(cfg, decode_sentences or cfg.decode_batch_size)
  return report
