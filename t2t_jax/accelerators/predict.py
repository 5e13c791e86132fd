"""Predicted step time, throughput and MFU of a compiled program: predictions, not measurements.

TPU: XLA's own cost model, which libtpu's compiler attaches to the program as
`optimal_seconds` (its estimate of the program's run time on the chip), with
one correction (`SLICED_PREFETCH_NOTE`): on v5e the model prices each sliced
prefetch at -1 s, so those are priced at 0.
GPU: no cost model is exposed, so a roofline from the program's totals
(`cost_analysis()`: "flops", "bytes accessed") against the device's peak and
HBM bandwidth, under the assumptions `GPU_ASSUMPTIONS` states (t2t-compile
prints them); on several GPUs (`8xh100`) plus the gradient all-reduce, once per
update, at the interconnect's bandwidth (`ALL_REDUCE_ASSUMPTIONS`). The same
roofline prices a program this process runs (`t2t-compile --measure`) on a
device whose peak and bandwidth are given. Model FLOPs (for MFU) are
train/metrics.py's count, not the program's.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from t2t_jax.accelerators.targets import Target
from t2t_jax.configs import TransformerConfig
from t2t_jax.train import metrics as metrics_lib

GPU_ASSUMPTIONS = (
    "GPU roofline (no cost model is exposed for GPUs): predicted time = the program's FLOPs at "
    "the dense bf16 peak + its bytes accessed at the HBM bandwidth, i.e. no overlap of compute "
    "and memory traffic (an upper bound of a per-kernel roofline; the lower bound, max of the "
    "two, is printed beside it); cuDNN attention kernels count at the FLOPs train/metrics.py gives "
    "them (their custom calls report none); no launch overheads; on several GPUs, the all-reduce "
    "as the assumptions below price it")

ALL_REDUCE_ASSUMPTIONS = (
    "all-reduce: the gradient all-reduce runs once per update after the micro-steps (no "
    "overlap with the backward pass), as a ring: each device sends and receives 2 (n-1)/n "
    "times the bytes the program's all-reduce instructions reduce, at the interconnect "
    "bandwidth per device and direction (H100 SXM5: NVLink 4, 450 GB/s each way, through "
    "NVSwitch to every GPU of the board; NCCL reaches less in practice), no latency term")


@dataclasses.dataclass(frozen=True)
class Prediction:
  """One update's predicted figures on one target (every field is a prediction)."""
  step_s: float              # one update: accum_steps micro-steps and the optimizer
  micro_step_s: float
  lower_bound_s: float       # GPU: max(compute, memory) roofline; TPU: = micro_step_s
  all_reduce_s: float        # the gradient all-reduce, once per update (GPUs; 0 on one)
  tokens_per_s: float        # target tokens of full rows, all devices
  mfu: float                 # model FLOPs / (step time x devices x peak)
  hours_to_steps: float      # to cfg.num_train_steps updates
  basis: str  # "xla_tpu_cost_model[+sliced_prefetch_correction]", "[gpu_]roofline[+all_reduce]"


def assumptions(prediction: Prediction) -> list[str]:
  """The stated assumptions behind `prediction` (none for a TPU's cost model)."""
  # A CPU's roofline (t2t-compile --measure with given figures) assumes what a GPU's does.
  out = [GPU_ASSUMPTIONS] if "roofline" in prediction.basis else []
  return out + ([ALL_REDUCE_ASSUMPTIONS] if prediction.all_reduce_s else [])


def model_flops_per_row(cfg: TransformerConfig, length: int) -> float:
  """Training FLOPs of one row of `length` source and `length` target tokens, its
  attention over the whole row (what the kernels compute for a packed row)."""
  return float(metrics_lib.train_flops(cfg, length, length))


def attention_flops_per_row(cfg: TransformerConfig, length: int) -> float:
  """Training FLOPs of a row's attention scores and weighted sums (one attention an encoder
  layer, two a decoder layer)."""
  h = cfg.num_heads * (cfg.key_depth + cfg.value_depth)
  attentions = cfg.num_layers + 2 * cfg.num_decoder_layers
  return 3.0 * attentions * 2 * length * length * h


SLICED_PREFETCH_NOTE = (
    "TPU cost model correction: libtpu's cost model prices each sliced prefetch (a "
    "ConcatBitcast custom call joining the async slices in which memory-space assignment "
    "copies a weight into on-chip memory; emitted for v5e) at -1 s, hence the negative "
    "optimal_seconds of v5e programs; the prediction adds 1 s back per ConcatBitcast, i.e. "
    "prices the join (a bitcast) at 0 and keeps the model's price of the slices' copies. "
    "Check: the same programs compiled with sliced prefetch off "
    "(xla_tpu_sliced_prefetch_max_slices=0) get a positive optimal_seconds a little above "
    'the corrected one (docs/benchmarks.md, "Accelerators", v5e)')


def tpu_seconds(cost: dict[str, float], sliced_prefetches: int = 0) -> tuple[float, str]:
  """(predicted seconds, basis) of a TPU program from libtpu's cost model, its
  sliced prefetches (aot.Program.sliced_prefetches) priced at 0, not at -1 s each."""
  raw = cost.get("optimal_seconds")
  if raw is None:
    raise ValueError("the TPU cost model gave no valid time (the program's cost analysis has "
                     "no optimal_seconds); no step time can be predicted")
  seconds = raw + sliced_prefetches
  if seconds <= 0:
    raise ValueError(f"the TPU cost model gave no valid time (optimal_seconds={raw:g} with "
                     f"{sliced_prefetches} sliced prefetches priced at -1 s each); no step "
                     f"time can be predicted")
  basis = "xla_tpu_cost_model"
  return seconds, basis + ("+sliced_prefetch_correction" if sliced_prefetches else "")


def micro_step_seconds(cost: dict[str, float], target: Target, extra_flops: float = 0.0,
                       sliced_prefetches: int = 0) -> tuple[float, float, str]:
  """(predicted seconds, lower bound, basis) of one compiled micro-step on one device:
  a TPU's cost model, or anything else's roofline (its peak and bandwidth)."""
  if target.platform == "tpu":
    seconds, basis = tpu_seconds(cost, sliced_prefetches)
    return seconds, seconds, basis
  if target.peak_bf16_flops is None:
    raise ValueError(f"no peak FLOPS is known for {target.device_kind!r} (train/metrics.py's "
                     "table); give one with --config.peak_tflops")
  compute = (cost.get("flops", 0.0) + extra_flops) / target.peak_bf16_flops
  memory = cost.get("bytes accessed", 0.0) / target.memory_bandwidth
  basis = "gpu_roofline" if target.is_gpu else "roofline"
  return compute + memory, max(compute, memory), basis


def all_reduce_seconds(target: Target, reduced_bytes: int) -> float:
  """A ring all-reduce of `reduced_bytes` over `target`'s devices (ALL_REDUCE_ASSUMPTIONS)."""
  n = target.devices
  if n == 1 or not reduced_bytes:
    return 0.0
  if target.interconnect_bandwidth is None:
    raise ValueError(f"{target.name} has {n} devices but no interconnect bandwidth to price "
                     "its all-reduce")
  return 2.0 * (n - 1) / n * reduced_bytes / target.interconnect_bandwidth


def predict(cfg: TransformerConfig, target: Target, cost: dict[str, float], rows: int,
            length: int, accum_steps: int, cudnn_attention_calls: int = 0,
            sliced_prefetches: int = 0, all_reduce_bytes: int = 0) -> Prediction:
  """Figures for updates of `accum_steps` micro-steps of [rows, length] per device,
  from the cost of one compiled micro-step (`cost`, per device) and, on several GPUs,
  the bytes its all-reduces reduce (aot.Program.all_reduce_bytes)."""
  # cuDNN custom calls report no FLOPs: add the attention's model FLOPs when they run it.
  extra = rows * attention_flops_per_row(cfg, length) if cudnn_attention_calls else 0.0
  micro, lower, basis = micro_step_seconds(cost, target, extra, sliced_prefetches)
  # A TPU's cost model prices its collectives inside optimal_seconds.
  reduce = 0.0 if target.platform == "tpu" else all_reduce_seconds(target, all_reduce_bytes)
  if reduce:
    basis += "+all_reduce"
  step = micro * accum_steps + reduce
  tokens = rows * length * target.devices * accum_steps
  model = model_flops_per_row(cfg, length) * rows * target.devices * accum_steps
  mfu: Optional[float] = metrics_lib.mfu(model, step, target.devices, target.peak_bf16_flops)
  return Prediction(step_s=step, micro_step_s=micro, lower_bound_s=lower * accum_steps + reduce,
                    all_reduce_s=reduce, tokens_per_s=tokens / step, mfu=float(mfu or 0.0),
                    hours_to_steps=step * cfg.num_train_steps / 3600.0, basis=basis)
