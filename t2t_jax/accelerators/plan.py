"""What a training run needs on a target, before renting it: `plan(cfg, target)`.

Compiles the experiment's training step (its packed rows of the longest bucket,
its data parallelism over the target's devices, its accumulation), the eval step
and the cached decoding step for `target`, fits `max_tokens_per_device` to the
device's memory with the target's compiler (unless the config sets it), and
predicts the update's time (predict.py). The keys of the returned dict are
t2t-compile's JSON (README "Before renting an accelerator" lists them).
"""

from __future__ import annotations

import math
from typing import Any

from t2t_jax.accelerators import aot
from t2t_jax.accelerators import kernels
from t2t_jax.accelerators import predict
from t2t_jax.accelerators.targets import Target
from t2t_jax.configs import TransformerConfig
from t2t_jax.ids import bucket_lengths


def row_length(cfg: TransformerConfig) -> int:
  """The experiment's longest rows (packed rows, or the last bucket): the step compiled."""
  return bucket_lengths(max(cfg.max_source_length, cfg.max_target_length))[-1]


def micro_batch(cfg: TransformerConfig, devices: int, length: int) -> tuple[int, int, int]:
  """(rows, max_tokens_per_device, accum_steps) of the config's explicit micro-batch."""
  tokens = cfg.max_tokens_per_device
  rows = max(1, tokens // length)
  accum = max(1, math.ceil(cfg.tokens_per_batch / (devices * tokens)))
  return rows, tokens, accum


def plan(cfg: TransformerConfig, target: Target, decode: bool = True) -> dict[str, Any]:
  """t2t-compile's figures for `cfg` on `target`; every time and rate is predicted."""
  length = row_length(cfg)
  budget = int(target.memory_bytes * (1.0 - cfg.memory_margin))
  if cfg.max_tokens_per_device is None:
    fit = aot.fit(cfg, target, length, packed=cfg.packing)
    rows, tokens, accum = fit.rows, fit.max_tokens_per_device, fit.accum_steps
  else:
    rows, tokens, accum = micro_batch(cfg, target.devices, length)
  train = aot.compile_train_step(cfg, target, rows, length, packed=cfg.packing)
  try:
    guess = predict.predict(cfg, target, train.cost, rows, length, accum,
                            train.cudnn_attention_calls, train.sliced_prefetches,
                            train.all_reduce_bytes)
  except ValueError as e:  # the memory figures stand without a time prediction
    guess, why = None, str(e)
  out: dict[str, Any] = {
      "target": target.name, "device_kind": target.device_kind, "devices": target.devices,
      "dtype": cfg.dtype, "attention_impl": kernels.for_platform(cfg, target.platform).attention_impl,
      "row_length": length, "rows_per_micro_step": rows, "max_tokens_per_device": tokens,
      "micro_steps": accum, "tokens_per_batch": cfg.tokens_per_batch,
      "fits": train.memory.peak <= budget,
      "peak_bytes": train.memory.peak, "argument_bytes": train.memory.arguments,
      "temporary_bytes": train.memory.temporaries, "device_memory_bytes": target.memory_bytes,
      "memory_budget_bytes": budget,
      "cudnn_attention_calls": train.cudnn_attention_calls,
      "program_flops": train.cost.get("flops"),
      "program_bytes_accessed": train.cost.get("bytes accessed"),
      # The host's cost analysis of a GPU program has an "optimal_seconds" too: -1 s
      # per custom call (cuDNN), as libtpu's per sliced prefetch; no time of the GPU.
      "tpu_cost_model_optimal_seconds": None if target.is_gpu else train.cost.get(
          "optimal_seconds"),
      "tpu_sliced_prefetches": train.sliced_prefetches,
      "all_reduce_bytes": train.all_reduce_bytes,
      # The assumed bandwidth that prices the all-reduce (predict.ALL_REDUCE_ASSUMPTIONS).
      "interconnect_bytes_per_s": target.interconnect_bandwidth,
      "num_train_steps": cfg.num_train_steps,
  }
  if guess is None:
    out.update(prediction_basis=f"none: {why}", predicted_step_s=None)
  else:
    out.update(prediction_basis=guess.basis, prediction_assumptions=predict.assumptions(guess),
               predicted_step_s=guess.step_s,
               predicted_step_s_lower_bound=guess.lower_bound_s,
               predicted_all_reduce_s=guess.all_reduce_s,
               predicted_tokens_per_s=guess.tokens_per_s, predicted_mfu=guess.mfu,
               predicted_hours_to_num_train_steps=guess.hours_to_steps)
  evaluation = aot.compile_eval_step(cfg, target, rows, length)
  out.update(eval_compiles=True, eval_peak_bytes=evaluation.memory.peak)
  if decode:
    program = aot.compile_decode_step(cfg, target, cfg.decode_batch_size, length,
                                      length + cfg.max_decode_extra)
    out.update(decode_step_compiles=True, decode_peak_bytes=program.memory.peak)
  return out
