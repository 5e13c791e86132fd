"""Model FLOPs of training, device peak FLOPS, and model FLOPs utilisation (MFU).

Counted: every matrix multiply of the forward pass at 2 FLOPs per multiply-add,
for one sentence pair of S source and T target tokens (docs/training.md has the
formula). Training is 3x the forward pass (the backward pass computes gradients
with respect to both activations and weights: two matmuls per forward matmul).
Not counted: embedding lookups, softmax, layer norm, dropout, the loss, the
optimiser. Decoder self-attention is counted over the full T x T scores although
half are masked, because that is what the hardware computes.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from t2t_jax.configs import TransformerConfig


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
  output = 2 * t * d * cfg.vocab_size
  return cfg.num_layers * (encoder + decoder) + output


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
