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

JAX's persistent compilation cache, on by default in a per-user directory: a run that
compiles what an earlier run (the demo, a test, a restart) already compiled reads the
executable from disk instead. Entry points call `enable_compilation_cache()` before
anything is compiled (~/.cache/t2t_jax/jax, or $XDG_CACHE_HOME/t2t_jax/jax).
Switches, strongest first: `enable_compilation_cache(False)` (the config field
`compilation_cache=false`), the environment variable T2T_JAX_COMPILATION_CACHE ("off"
to disable, or a directory), JAX's own JAX_COMPILATION_CACHE_DIR (kept as set). The
directory may be deleted at any time; it only costs recompiling.
"""

from __future__ import annotations

import glob
import logging
import os
from typing import Mapping, Optional, Sequence

import jax

log = logging.getLogger(__name__)

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


# ------------------------------------------------------------- the compilation cache

CACHE_ENV = "T2T_JAX_COMPILATION_CACHE"
_OFF = ("0", "off", "false", "no", "none")
# Compilations faster than this are not worth a disk entry (JAX's default is 1 s,
# which would leave out most of our small test and demo steps: docs/benchmarks.md,
# "The demo and the compilation cache").
MIN_COMPILE_SECONDS = 0.2
# Least recently used entries go beyond this. A size limit also makes JAX take a
# file lock around reads and writes, so concurrent runs (pytest -n 2, a demo
# beside a test) never read a half-written entry.
MAX_BYTES = 4 << 30


def default_directory() -> str:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "t2t_jax", "jax")


def enable_compilation_cache(enabled: bool = True, directory: Optional[str] = None) -> Optional[str]:
  """Turns the persistent cache on (unless switched off); returns its directory or None.

  Must run before the first compilation of the process to take effect for it.
  """
  env = os.environ.get(CACHE_ENV, "").strip()
  if not enabled or env.lower() in _OFF:
    return None
  current = jax.config.jax_compilation_cache_dir
  if current and directory is None and not env:
    return current  # set by JAX_COMPILATION_CACHE_DIR or by the caller: keep its settings
  directory = os.path.expanduser(directory or env or default_directory())
  try:
    os.makedirs(directory, exist_ok=True)
  except OSError as e:
    log.warning("compilation cache disabled: cannot create %s (%s)", directory, e.strerror)
    return None
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
  jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
  return directory
