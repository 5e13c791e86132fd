"""Peak device memory of one training micro-step, from XLA's own analysis, and what fits.

    stats = memory.step_memory(cfg, rows=16, length=256)   # bytes on one device
    cfg = memory.resolve_max_tokens_per_device(cfg, num_global_devices, length=256)

The training loop calls `resolve_max_tokens_per_device` at setup. An explicit
`max_tokens_per_device` is kept as it is; None (the default) is replaced by the
largest micro-batch whose compiled step fits in the device's memory with
`cfg.memory_margin` to spare, and the gradient accumulation follows from it
(`accum_steps`). No out-of-memory by trial and error: the compiler says what a
step needs before the first one runs (on any backend, CPU included).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Callable, Optional

import jax

from t2t_jax import errors
from t2t_jax.configs import TransformerConfig
from t2t_jax.runtime import multihost
from t2t_jax.train import step as step_lib

log = logging.getLogger(__name__)

GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class StepMemory:
  """Bytes of one device's compiled train step (XLA's `memory_analysis`)."""
  arguments: int      # state + batch + key
  outputs: int        # new state + metrics
  aliased: int        # outputs written into donated arguments (the state)
  temporaries: int    # activations, gradients, optimizer temporaries

  @property
  def peak(self) -> int:
    """Everything live at once, counted once: an upper bound on the step's footprint."""
    return self.arguments + self.outputs - self.aliased + self.temporaries


def step_memory(cfg: TransformerConfig, rows: int, length: int, packed: bool = False,
                device: Optional[jax.Device] = None) -> StepMemory:
  """Compiles (does not run) the train step for one micro-batch [rows, length] on `device`.

  The step is the training loop's own (train/step.py's: state donated, Adam
  update included), pmapped over that one device, traced on shapes only: nothing
  is allocated.
  """
  device = device or jax.local_devices()[0]
  built = step_lib.build(cfg, devices=[device], parallelism="pmap")
  stats = built.lower(rows, length, packed=packed).compile().memory_analysis()
  return StepMemory(stats.argument_size_in_bytes, stats.output_size_in_bytes,
                    stats.alias_size_in_bytes, stats.temp_size_in_bytes)


def device_memory(device: Optional[jax.Device] = None) -> int:
  """Bytes one device may use: the allocator's limit, or on CPU the host's RAM / devices.

  An accelerator that reports no limit is an error, never the host's RAM: fitting a
  GPU or TPU step to the host's memory would pick a micro-batch that cannot run.
  """
  device = device or jax.local_devices()[0]
  try:
    stats = device.memory_stats() or {}
  except Exception:  # backends without memory stats raise instead of returning None
    stats = {}
  if "bytes_limit" in stats:
    return int(stats["bytes_limit"])
  if device.platform != "cpu":
    raise ValueError(
        f"the {device.platform} device {device.device_kind!r} reports no memory size, so "
        "the micro-batch that fits cannot be chosen; set --config.max_tokens_per_device "
        "(t2t-compile --target=... prints the largest that fits)")
  host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  return host // max(1, jax.local_device_count())


def fit_rows(measure: Callable[[int], int], length: int, budget: int, max_rows: int) -> int:
  """The most rows of `length` tokens, at most `max_rows`, whose step fits in `budget` bytes.

  `measure(rows)` is the step's peak bytes per device for `rows` rows (a compile).
  Memory is affine in the rows (fixed state, activations per row), so two
  compiles give the line and a third confirms the choice. Raises ValueError
  when not even one row fits.
  """
  high = max(1, max_rows)
  high_bytes = measure(high)
  if high_bytes <= budget:
    return high
  low = max(1, high // 4)
  low_bytes = measure(low) if low < high else high_bytes
  while low_bytes > budget:
    if low == 1:
      raise ValueError(
          f"one row of {length} tokens needs {low_bytes / GiB:.2f} GiB per device for the "
          f"training step, more than the {budget / GiB:.2f} GiB available; shorten "
          "max_source_length/max_target_length, use dtype=bfloat16 or a smaller model")
    high, high_bytes = low, low_bytes
    low = max(1, low // 4)
    low_bytes = measure(low)
  per_row = max(1.0, (high_bytes - low_bytes) / (high - low))
  rows = min(high - 1, low + int((budget - low_bytes) / per_row))
  while rows > low and measure(rows) > budget:
    rows = max(low, int(rows * 0.9))
  return rows


def resolve_max_tokens_per_device(cfg: TransformerConfig, num_global_devices: int,
                                  length: int, packed: bool = False,
                                  device: Optional[jax.Device] = None) -> TransformerConfig:
  """`cfg` with `max_tokens_per_device` set: kept if given, else the largest that fits.

  `length` is the longest row the batches will have (the last bucket, or the
  packed row length): the worst case for memory at a given token count. The
  micro-batch is chosen through the number of micro-steps, so that the
  resulting `max_tokens_per_device` splits the update evenly.
  """
  if cfg.max_tokens_per_device is not None:
    return cfg
  # Process 0 decides for all: every process must cut the same number of micro-steps.
  tokens = int(multihost.agree("max_tokens_per_device", lambda: str(
      _fit_tokens(cfg, num_global_devices, length, packed, device))))
  return cfg.replace(max_tokens_per_device=tokens)


@dataclasses.dataclass(frozen=True)
class Fit:
  """The largest micro-step that fits, and the update it gives."""
  rows: int                   # of the longest length, per device and micro-step
  max_tokens_per_device: int
  accum_steps: int            # micro-steps per update of cfg.tokens_per_batch tokens
  budget: int                 # bytes per device the step had to fit in


def fit_tokens(cfg: TransformerConfig, num_global_devices: int, length: int, limit: int,
               measure: Callable[[int], int]) -> Fit:
  """The `max_tokens_per_device` whose step, `measure(rows)` peak bytes, fits in
  `limit` bytes less `cfg.memory_margin`, chosen through the micro-steps per update
  so that the update splits evenly."""
  budget = int(limit * (1.0 - cfg.memory_margin))
  global_rows = max(1, cfg.tokens_per_batch // length)     # rows of the longest batches
  max_rows = math.ceil(global_rows / num_global_devices)   # one micro-step per update
  rows = fit_rows(measure, length, budget, max_rows)
  accum = math.ceil(global_rows / (num_global_devices * rows))
  tokens = math.ceil(cfg.tokens_per_batch / (num_global_devices * accum))
  while tokens > 1 and math.ceil(cfg.tokens_per_batch / (num_global_devices * tokens)) < accum:
    tokens -= 1  # rounding must not give back a micro-step (accum_steps recomputes it)
  return Fit(rows, tokens, accum, budget)


def _fit_tokens(cfg: TransformerConfig, num_global_devices: int, length: int, packed: bool,
                device: Optional[jax.Device]) -> int:
  device = device or jax.local_devices()[0]
  limit = device_memory(device)
  fit = fit_tokens(cfg, num_global_devices, length, limit,
                   lambda rows: step_memory(cfg, rows, length, packed, device).peak)
  log.info("Memory: %.2f GiB per device (%s); a micro-step of %d rows x %d tokens fits "
           "with a %.0f%% margin: max_tokens_per_device=%d, %d micro-step(s) per update",
           limit / GiB, device.device_kind, fit.rows, length, 100 * cfg.memory_margin,
           fit.max_tokens_per_device, fit.accum_steps)
  return fit.max_tokens_per_device


class DeviceMemoryError(MemoryError):
  """A training or eval step needed more device memory than there is; says what to lower."""


def out_of_memory_message(cfg: TransformerConfig, error: BaseException) -> str:
  """One line: what ran out, and the setting to lower with a value to try."""
  what = errors.one_line(error)[:200]
  now = cfg.max_tokens_per_device
  if now is None:
    advice = "set --config.max_tokens_per_device to fewer tokens per device"
  else:
    advice = (f"lower --config.max_tokens_per_device (now {now}; try {max(now // 2, 1)}: "
              f"each update still holds tokens_per_batch={cfg.tokens_per_batch} tokens, "
              "in more accumulation steps)")
  return f"out of device memory ({what}); {advice}"
