"""What a training run reports: model FLOPs and their utilisation (MFU), and where the metrics
go (`metrics.jsonl`, TensorBoard events and a log line per record).

FLOPs. Counted: every matrix multiply of the forward pass at 2 FLOPs per multiply-add,
for one sentence pair of S source and T target tokens (docs/training.md has the
formula). Training is 3x the forward pass (the backward pass computes gradients with
respect to both activations and weights: two matmuls per forward matmul). Not counted:
embedding lookups, softmax, layer norm, dropout, the loss, the optimiser. Decoder
self-attention is counted over the full T x T scores although half are masked,
because that is what the hardware computes.

The writer.

    writer = MetricsWriter(workdir, start_step)   # a resumed run drops the lines after it
    writer.write({"step": 100, "train_loss": 2.5, ...})
    writer.close()

Only the main process writes (`enabled=False` elsewhere makes every call a no-op).
`metrics.jsonl` holds one JSON object per record; TensorBoard events go to
`workdir/tb`, one scalar per field, where tensorboardX is installed (a plain JAX GPU
host may lack it: then a warning, and metrics.jsonl alone).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import sys
from typing import Any, Optional

import numpy as np

from t2t_jax.configs import TransformerConfig

log = logging.getLogger("t2t_jax.train.trainer")  # the log lines belong to the training run

# ------------------------------------------------------------------------------ FLOPs


def forward_flops(cfg: TransformerConfig, source_length, target_length):
  """Forward-pass matmul FLOPs for sentence pairs of the given lengths (scalars or arrays)."""
  s = np.asarray(source_length, np.float64)
  t = np.asarray(target_length, np.float64)
  d, f, h = cfg.d_model, cfg.d_ff, cfg.num_heads
  qk, v = h * cfg.key_depth, h * cfg.value_depth  # widths of all heads together
  projections = 2 * d * (2 * qk + 2 * v)           # W^Q, W^K, W^V, W^O for one token
  ffn = 4 * d * f
  encoder = s * (projections + ffn) + 2 * s * s * (qk + v)
  decoder_self = t * projections + 2 * t * t * (qk + v)
  # Cross-attention: queries/outputs per target token, keys/values per source token.
  decoder_cross = t * 2 * d * (qk + v) + s * 2 * d * (qk + v) + 2 * t * s * (qk + v)
  decoder = decoder_self + decoder_cross + t * ffn
  output = 2 * t * d * cfg.target_vocab
  return cfg.num_layers * encoder + cfg.num_decoder_layers * decoder + output


def train_flops(cfg: TransformerConfig, source_length, target_length):
  """Training FLOPs (forward + backward = 3x forward) per pair, elementwise."""
  return 3.0 * forward_flops(cfg, source_length, target_length)


def train_flops_per_token(cfg: TransformerConfig, source_length: float,
                          target_length: float) -> float:
  """Training FLOPs per target token for pairs of S source and T target tokens."""
  return float(train_flops(cfg, source_length, target_length) / target_length)


def batch_train_flops(cfg: TransformerConfig, inputs: np.ndarray, targets: np.ndarray,
                      inputs_segments: np.ndarray | None = None,
                      targets_segments: np.ndarray | None = None) -> float:
  """Model FLOPs of one update on a host batch of ids `[..., length]`, padding excluded.

  Each sentence pair costs `train_flops` at its real (non-zero) source and target
  lengths: a row, or with segment ids (packed rows) each segment of a row.
  """
  if targets_segments is None:
    s = np.count_nonzero(inputs, axis=-1).ravel()
    t = np.count_nonzero(targets, axis=-1).ravel()
  else:
    slots = int(max(inputs_segments.max(initial=0), targets_segments.max(initial=0))) + 1
    s, t = (_segment_lengths(seg, slots) for seg in (inputs_segments, targets_segments))
  return float(np.sum(train_flops(cfg, s, t)[t > 0]))


def _segment_lengths(segments: np.ndarray, slots: int) -> np.ndarray:
  """Tokens per (row, segment id) for ids below `slots`; segment 0 (padding) counts 0."""
  rows = segments.reshape(-1, segments.shape[-1]).astype(np.int64)
  keys = np.arange(len(rows))[:, None] * slots + rows
  return np.bincount(keys[rows > 0], minlength=len(rows) * slots)


# Dense (no sparsity) peak TFLOPS per JAX device, as (16-bit, float32).
# "float32" is what a float32 matmul runs at under JAX's default precision: TF32
# tensor cores on Ampere and later GPUs, one bfloat16 pass on TPUs. GPUs without
# bfloat16 (P100, V100) list their float16 peak as the 16-bit number. Matched in
# order against `jax.Device.device_kind`, lower-cased, first hit wins.
PEAK_TFLOPS: tuple[tuple[str, float, float], ...] = (
    # Paper section 6.1 uses 9.5 for P100 (datasheet: 9.3 PCIe, 10.6 SXM2); fp16 is 2x.
    ("p100", 19.0, 9.5),
    # NVIDIA V100 datasheet: SXM2 125 fp16 tensor / 15.7 fp32; PCIe 112 / 14.
    ("v100-pcie", 112.0, 14.0),
    ("v100", 125.0, 15.7),
    # NVIDIA A100 datasheet (SXM and PCIe alike): 312 bf16, 156 tf32.
    ("a100", 312.0, 156.0),
    # NVIDIA H100 datasheet, dense: SXM 989 bf16 / 494.7 tf32; NVL 835 / 418; PCIe 756 / 378.
    ("h100 nvl", 835.0, 418.0),
    ("h100 pcie", 756.0, 378.0),
    ("h100", 989.0, 494.7),
    # NVIDIA H200 datasheet, dense: SXM as H100 SXM; NVL 835 / 418.
    ("h200 nvl", 835.0, 418.0),
    ("h200", 989.0, 494.7),
    # Google Cloud TPU system architecture pages, bf16 per chip. v2 and v3 show
    # each of a chip's two TensorCores as a JAX device, so half a chip each.
    ("tpu v2", 22.5, 22.5),      # 45 per chip
    ("tpu v3", 61.5, 61.5),      # 123 per chip
    ("tpu v4", 275.0, 275.0),
    ("tpu v5 lite", 197.0, 197.0),  # v5e
    ("tpu v5e", 197.0, 197.0),
    ("tpu v5", 459.0, 459.0),    # v5p
    ("tpu v6 lite", 918.0, 918.0),  # v6e (Trillium)
    ("tpu v6e", 918.0, 918.0),
)


def peak_flops(device_kind: str, dtype: str = "float32",
               override: Optional[float] = None) -> Optional[float]:
  """Peak FLOPS of one device for matmuls in `dtype`; None when unknown (e.g. CPU).

  `override` (TFLOPS, e.g. cfg.peak_tflops) wins over the table.
  """
  if dtype not in ("float32", "bfloat16"):
    raise ValueError(f"dtype={dtype!r}: use 'float32' or 'bfloat16'")
  if override is not None:
    if override <= 0:
      raise ValueError(f"peak_tflops={override} must be positive (or None to look it up)")
    return override * 1e12
  kind = device_kind.lower()
  for pattern, half, single in PEAK_TFLOPS:
    if pattern in kind:
      return (half if dtype == "bfloat16" else single) * 1e12
  return None


def mfu(flops_per_step: float, step_seconds: float, num_devices: int,
        peak: Optional[float]) -> Optional[float]:
  """Model FLOPs utilisation: achieved model FLOPS over the devices' total peak."""
  if peak is None or step_seconds <= 0:
    return None
  return flops_per_step / step_seconds / (num_devices * peak)


# ----------------------------------------------------------------------------- writer

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tb"


def truncate(path: str | os.PathLike, last_step: int) -> None:
  """Keeps the lines of steps <= last_step, so a resumed run has no duplicate steps.

  A line cut short by a kill mid-write is dropped too.
  """
  path = pathlib.Path(path)
  if not path.exists():
    return
  kept, damaged = [], 0
  for line in path.read_text(errors="replace").splitlines():
    try:
      if json.loads(line)["step"] <= last_step:
        kept.append(line)
    except (ValueError, KeyError, TypeError):
      damaged += 1
  if damaged:
    log.warning("Dropped %d damaged line(s) of %s (a write cut short by a kill, or a "
                "damaged file); the others are kept", damaged, path)
  tmp = path.with_suffix(".jsonl.tmp")
  tmp.write_text("".join(line + "\n" for line in kept))
  os.replace(tmp, path)


def _summary_writer(directory: str, purge_step: int | None) -> Any:
  """tensorboardX's SummaryWriter, imported without torch; None without tensorboardX.

  tensorboardX imports torch whenever it is installed, only to accept torch
  tensors; this package writes Python floats and never imports torch (seconds
  of start-up, and not our dependency). Imported here, when a run starts
  writing, so that importing the training code stays cheap.
  """
  hidden = "torch" not in sys.modules
  if hidden:
    sys.modules["torch"] = None  # makes `import torch` raise ImportError
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
  except ImportError:
    log.warning("tensorboardX is not installed: no TensorBoard events, metrics go to %s "
                "alone (pip install tensorboardX for them)", METRICS_FILE)
    return None
  finally:
    if hidden:
      del sys.modules["torch"]
  return SummaryWriter(directory, purge_step=purge_step)


class MetricsWriter:
  """Appends records to `workdir/metrics.jsonl` and TensorBoard, and logs each one."""

  def __init__(self, workdir: str | os.PathLike, start_step: int = 0, enabled: bool = True):
    """`start_step`: the step the run resumes from (0: a fresh run; later lines are dropped)."""
    self.path = pathlib.Path(workdir) / METRICS_FILE
    self._enabled = enabled
    self._tb = None
    if enabled:
      truncate(self.path, start_step)
      self._tb = _summary_writer(str(pathlib.Path(workdir) / TENSORBOARD_DIR),
                                 start_step + 1 if start_step else None)

  def write(self, record: dict[str, Any]) -> None:
    """One record: "step" (int) and named numbers."""
    if not self._enabled:
      return
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")
    if self._tb is not None:
      for name, value in record.items():
        if name != "step":
          self._tb.add_scalar(name, value, record["step"])
      self._tb.flush()
    text = ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "step")
    log.info("step %d: %s", record["step"], text)

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
      self._tb = None
