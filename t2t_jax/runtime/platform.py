"""Which kind of device a command computes on: `--device cpu|gpu|tpu`.

    platform.select("cpu")   # before the first JAX computation of the process

JAX picks the accelerator when it has one; `select` makes another kind the
default device. For "cpu" it also keeps JAX from starting the accelerators at
all (their memory stays free for other processes) when called before JAX has
started any. A kind JAX does not find is a ValueError that says what it found.
"""

from __future__ import annotations

import jax

PLATFORMS = ("cpu", "gpu", "tpu")


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
