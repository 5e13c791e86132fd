"""The accelerators t2t-compile builds programs for, as data: one entry per target.

    target = targets.get("h100")
    topology = targets.topology(target)        # compile-only devices, on any host

A target is what a user rents: a GPU (`h100`), one host of several GPUs
(`8xh100`, the paper's 8 GPUs: the data-parallel program with its gradient
all-reduce, over NVLink) or a Cloud TPU slice (`v5e-8`, `v5p-8`), whose topology
JAX's TPU compiler takes by name. Its
figures are the vendors' datasheet numbers per JAX device; they drive the
predictions of predict.py, never a measurement. Adding a target is one entry
of `TARGETS` (a GPU also needs its `_GPU_SPECS` text).

GPU programs are compiled by the CUDA plugin (`jax[cuda12]`) against a
`GpuTargetConfigProto` text (XLA's `device_description.proto`; XLA keeps the
same figures in xla/backends/gpu/target_config/specs/), TPU programs by libtpu
(`jax[tpu]`); both work without the device. `available()` says which compilers
this process has.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from typing import Optional

import jax

from t2t_jax import errors
from t2t_jax.train import metrics as metrics_lib
from t2t_jax.train.memory import GiB


@dataclasses.dataclass(frozen=True)
class Target:
  """One accelerator, per JAX device (a GPU, or a TPU chip under megacore)."""
  name: str
  platform: str                 # "cuda" or "tpu": the compiler that builds its programs
  device_kind: str              # as jax.Device.device_kind reports it (metrics_lib.peak_flops)
  devices: int                  # JAX devices in the slice; the programs are data parallel over them
  memory_bytes: int             # HBM one device's programs may use
  memory_bandwidth: float       # HBM bytes/s, one device
  topology: str = ""            # TPU: the name get_topology_desc takes ("v5p:2x2x1")
  # Bytes/s one device sends (and receives) to the others in an all-reduce; None: one device,
  # or a TPU slice (whose cost model prices its collectives).
  interconnect_bandwidth: Optional[float] = None
  peak_tflops: Optional[float] = None  # overrides train/metrics_lib.py's table (a local CPU, say)

  @property
  def is_gpu(self) -> bool:
    return self.platform == "cuda"

  @property
  def peak_bf16_flops(self) -> float:
    """Dense 16-bit matmul peak of one device: train/metrics_lib.py's table, the one the trainer's MFU uses."""
    return metrics_lib.peak_flops(self.device_kind, "bfloat16", self.peak_tflops)


# Memory and bandwidth: NVIDIA datasheets (H100 SXM5 80GB: 3.35 TB/s; A100 SXM4 80GB:
# 2.04 TB/s; the byte counts as XLA's GPU spec files) and Google Cloud's TPU system
# architecture pages (v5e: 16 GiB, 819 GB/s per chip; v5p: 95 GiB, 2765 GB/s). Peaks
# come from metrics_lib.PEAK_TFLOPS by device kind. A v5p chip is one JAX device (megacore):
# "v5p-8" counts TensorCores, 4 chips; "v5e-8" is 8 chips. NVLink: an H100 SXM5 has 18
# NVLink 4 links, 900 GB/s in both directions together, so 450 GB/s each way; in an HGX
# H100 8-GPU board every GPU reaches every other through NVSwitch at that rate.
NVLINK_H100_BYTES_PER_S = 450e9
TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("h100", "cuda", "NVIDIA H100 80GB HBM3", 1, 84_942_979_072, 3.35232e12),
    Target("8xh100", "cuda", "NVIDIA H100 80GB HBM3", 8, 84_942_979_072, 3.35232e12,
           interconnect_bandwidth=NVLINK_H100_BYTES_PER_S),
    Target("a100", "cuda", "NVIDIA A100-SXM4-80GB", 1, 85_100_068_864, 2.03904e12),
    Target("v5e-8", "tpu", "TPU v5 lite", 8, 16 * GiB, 819e9, topology="v5e:2x4"),
    Target("v5e-4", "tpu", "TPU v5 lite", 4, 16 * GiB, 819e9, topology="v5e:2x2"),
    Target("v5p-8", "tpu", "TPU v5", 4, 95 * GiB, 2.765e12, topology="v5p:2x2x1"),
)}

# GpuTargetConfigProto text per GPU target (the fields jax 0.10.2's XLA reads). Memory,
# bandwidth, cores and clock as XLA's own spec files; cuDNN 9.8, the oldest that
# jax[cuda12]==0.10.2 accepts, so that no kernel needs a newer one than a user may have.
_GPU_SPEC = """gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: {smem_core}
  threads_per_core_limit: 2048
  core_count: {cores}
  fpus_per_core: {fpus}
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {bandwidth}
  l2_cache_size: {l2}
  clock_rate_ghz: {clock}
  device_memory_size: {memory}
  shared_memory_per_block_optin: {smem_optin}
  cuda_compute_capability {{ major: {cc_major} minor: {cc_minor} }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 8 patch: 0 }}
device_description_str: "{kind}"
"""

_GPU_SPECS: dict[str, dict] = {  # by device kind
    "NVIDIA H100 80GB HBM3": dict(
        smem_core=233472, cores=132, fpus=128, bandwidth=3352320000000, l2=52428800,
        clock=1.98, memory=84942979072, smem_optin=232448, cc_major=9, cc_minor=0),
    "NVIDIA A100-SXM4-80GB": dict(
        smem_core=167936, cores=108, fpus=64, bandwidth=2039040000000, l2=41943040,
        clock=1.41, memory=85100068864, smem_optin=166912, cc_major=8, cc_minor=0),
}


def get(name: str) -> Target:
  if name not in TARGETS:
    raise ValueError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}")
  return TARGETS[name]


def gpu_target_config(target: Target) -> str:
  """The `GpuTargetConfigProto` text the CUDA compiler builds `target`'s programs for."""
  return _GPU_SPEC.format(kind=target.device_kind, **_GPU_SPECS[target.device_kind])


# The package that brings each platform's compiler (the `accelerators` extra of setup.py).
COMPILER_PACKAGES = {"cuda": "jax_cuda12_plugin", "tpu": "libtpu"}


def available(platform: str) -> bool:
  """Whether this process can compile for `platform` ("cuda", "tpu") without its device."""
  return importlib.util.find_spec(COMPILER_PACKAGES[platform]) is not None


def missing_compiler(target: Target) -> Optional[str]:
  """None if `target`'s compiler is installed, else one line saying what to install."""
  if available(target.platform):
    return None
  return (f"compiling for {target.name} needs {COMPILER_PACKAGES[target.platform]}, which is "
          f"not installed: {errors.install('accelerators')} (see README)")


@functools.cache
def topology(target: Target) -> jax.experimental.topologies.TopologyDescription:
  """Compile-only devices of `target`, on this host; the CUDA plugin and libtpu
  build programs for them without the hardware."""
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  problem = missing_compiler(target)
  if problem:
    raise errors.MissingExtraError(problem)
  if target.is_gpu:
    # The plugin otherwise refuses to load without a driver to check versions against.
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    return topologies.get_topology_desc(platform="cuda", topology=f"1x1x{target.devices}",
                                        target_config=gpu_target_config(target))
  # Compile-only: no chip is opened, so libtpu's one-process-per-host lock (which would
  # fail a second compiling process, e.g. a parallel test worker) does not apply.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  return topologies.get_topology_desc(target.topology, "tpu")
