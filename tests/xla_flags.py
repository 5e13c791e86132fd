"""XLA_FLAGS for the suite's processes: the tests compile with LLVM's optimisations off
(`NO_LLVM_OPT`, set by tests/conftest.py), and a test's subprocess with a device count of its
own compiles as its parent does (`with_devices`)."""

import os

# The suite's time is mostly XLA compiling small programs, a third of that LLVM optimising
# them (docs/benchmarks.md, "The test suite"): off, the machine code changes, not the
# programs JAX lowers. T2T_JAX_TEST_OPTIMIZE=1 compiles as the commands do (CI's third step,
# and its first for the tests marked `exact`).
NO_LLVM_OPT = "--xla_backend_optimization_level=0"


def with_devices(devices: int) -> str:
  """XLA_FLAGS for a subprocess with `devices` CPU devices, optimised as this process is."""
  flags = f"--xla_force_host_platform_device_count={devices}"
  return f"{flags} {NO_LLVM_OPT}" if NO_LLVM_OPT in os.environ.get("XLA_FLAGS", "").split() else flags
