"""XLA_FLAGS for the suite's processes: the tests compile fast (`FAST_COMPILE`, set by
tests/conftest.py), and a test's subprocess with a device count of its own compiles as its
parent does (`with_devices`)."""

import importlib.metadata
import os

# The suite's time is mostly XLA compiling small programs (docs/benchmarks.md, "The test
# suite"): a third of that was LLVM optimising them, and on jaxlib 0.10 over a third of the
# rest its MLIR fusion emitters. Both off, the machine code changes, not the programs JAX
# lowers. T2T_JAX_TEST_OPTIMIZE=1 compiles as the commands do (CI's third step, and its first
# for the tests marked `exact`).
NO_LLVM_OPT = "--xla_backend_optimization_level=0"
# jaxlib 0.11 dropped the switch (its XLA aborts on a flag it does not know).
_NO_FUSION_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
_JAXLIB = tuple(int(p) for p in importlib.metadata.version("jaxlib").split(".")[:2])
FAST_COMPILE = (NO_LLVM_OPT,) + ((_NO_FUSION_EMITTERS,) if _JAXLIB < (0, 11) else ())


def with_fast_compile(xla_flags: str) -> str:
  """`xla_flags` with FAST_COMPILE's flags it lacks added."""
  present = xla_flags.split()
  return " ".join([*present, *(f for f in FAST_COMPILE if f not in present)])


def with_devices(devices: int) -> str:
  """XLA_FLAGS for a subprocess with `devices` CPU devices, compiled as this process is."""
  flags = f"--xla_force_host_platform_device_count={devices}"
  fast = NO_LLVM_OPT in os.environ.get("XLA_FLAGS", "").split()
  return with_fast_compile(flags) if fast else flags
