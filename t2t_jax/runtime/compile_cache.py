"""JAX's persistent compilation cache, on by default in a per-user directory.

A run that compiles what an earlier run (the demo, a test, a restart) already
compiled reads the executable from disk instead. Entry points call `enable()`
before anything is compiled:

    compile_cache.enable()            # ~/.cache/t2t_jax/jax (or $XDG_CACHE_HOME/t2t_jax/jax)

Switches, strongest first: `enable(False)` (the config field
`compilation_cache=false`), the environment variable T2T_JAX_COMPILATION_CACHE
("off" to disable, or a directory), JAX's own JAX_COMPILATION_CACHE_DIR (kept
as set). The directory may be deleted at any time; it only costs recompiling.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import jax

log = logging.getLogger(__name__)

ENV = "T2T_JAX_COMPILATION_CACHE"
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


def enable(enabled: bool = True, directory: Optional[str] = None) -> Optional[str]:
  """Turns the persistent cache on (unless switched off); returns its directory or None.

  Must run before the first compilation of the process to take effect for it.
  """
  env = os.environ.get(ENV, "").strip()
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
