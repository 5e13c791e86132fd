"""heap.release gives freed heap pages back on glibc."""

import ctypes
import ctypes.util
import platform

import pytest

from t2t_jax.serve import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_release_gives_back_freed_heap_pages():
  libc = ctypes.CDLL(ctypes.util.find_library("c"))
  libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
  blocks = [libc.malloc(16 << 10) for _ in range(4000)]   # 64 MiB below the mmap threshold
  for block in blocks:
    ctypes.memset(block, 1, 16 << 10)
  for block in blocks:
    libc.free(block)
  assert heap.release()
