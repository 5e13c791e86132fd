"""Gives the C heap's free pages back to the system (glibc `malloc_trim`).

    heap.release()     # after compiling: XLA's compiler leaves most of its peak free but held

Compiling a decoding program peaks at hundreds of MiB that glibc keeps in its
arenas once freed, so a long-lived process (t2t-serve) would hold its warm-up's
high-water mark; trimming returns what is free. Does nothing where the C library
is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _trim():
  name = ctypes.util.find_library("c")
  try:
    return ctypes.CDLL(name).malloc_trim if name else None
  except (OSError, AttributeError):   # not glibc
    return None


def release() -> bool:
  """True if the heap gave memory back to the system."""
  trim = _trim()
  return bool(trim(0)) if trim is not None else False
