"""Which kind of device a command computes on: `--device cpu|gpu|tpu`.

    platform.select("cpu")   # before the first JAX computation of the process

JAX picks the accelerator when it has one; `select` makes another kind the
default device. For "cpu" it also keeps JAX from starting the accelerators at
all (their memory stays free for other processes) when called before JAX has
started any. A kind JAX does not find is a ValueError that says what it found.

    platform.cpu_without_accelerators()   # commands, before JAX starts (exits.command)

On a host with no accelerator's device file, JAX computes on the CPU anyway, but
the CUDA and TPU plugins (the `accelerators` extra, installed for t2t-compile)
still try to start and log a cuInit traceback into every command's output;
choosing the CPU before JAX starts spares that, unless JAX_PLATFORMS says otherwise.
"""

from __future__ import annotations

import glob
import logging
import os
from typing import Mapping, Optional, Sequence

import jax

PLATFORMS = ("cpu", "gpu", "tpu")
# The device files through which JAX reaches an accelerator: NVIDIA GPUs (/dev/nvidia0,
# /dev/nvidiactl), AMD GPUs (/dev/kfd), GPUs under WSL (/dev/dxg), Cloud TPUs (/dev/accel0
# on v2-v4 and v5p, /dev/vfio on v5e and later).
ACCELERATOR_FILES = ("/dev/nvidia*", "/dev/kfd", "/dev/dxg", "/dev/accel*", "/dev/vfio")


def platforms_without_accelerators(environ: Mapping[str, str], found: Sequence[str]) -> Optional[str]:
  """The JAX_PLATFORMS to set: "cpu" when neither it is set nor any of `found`
  (the accelerator device files present) exists; else None, leaving JAX's choice."""
  if environ.get("JAX_PLATFORMS") or found:
    return None
  return "cpu"


def cpu_without_accelerators() -> Optional[str]:
  """Before JAX starts: computes on the CPU (and starts no plugin) on a host without an
  accelerator's device file, unless JAX_PLATFORMS is set. The platforms chosen, or None."""
  chosen = platforms_without_accelerators(
      os.environ, [path for pattern in ACCELERATOR_FILES for path in glob.glob(pattern)])
  if chosen is not None:
    jax.config.update("jax_platforms", chosen)
    logging.getLogger(__name__).debug("no accelerator device file (%s): JAX_PLATFORMS=%s",
                                      " ".join(ACCELERATOR_FILES), chosen)
  return chosen


def select(name: str) -> jax.Device:
  """Makes the first device of kind `name` JAX's default device, and returns it."""
  if name not in PLATFORMS:
    raise ValueError(f"device {name!r}: choose one of {', '.join(PLATFORMS)}")
  if name == "cpu":
    # Read when JAX starts its backends; without effect (and harmless) once it has.
    jax.config.update("jax_platforms", "cpu")
  try:
    device = jax.devices(name)[0]
  except RuntimeError:
    found = sorted({d.platform for d in jax.devices()})
    raise ValueError(f"no {name.upper()} found (JAX sees: {', '.join(found)}); install the "
                     f"jax build for it, or choose --device {found[0]}") from None
  jax.config.update("jax_default_device", device)
  return device
