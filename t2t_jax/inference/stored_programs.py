"""Compiled programs kept in a work directory, so that a new process loads them instead of
tracing and compiling them.

    programs = stored_programs.Store("runs/demo/programs")   # WORKDIR/`DIRECTORY`
    out = programs.call(jitted_fn, *args, **static)    # == jitted_fn(*args, **static)
    compiled = programs.load_or_compile(key, lower)    # key: JSON-able dict; lower() -> Lowered
    programs.loaded, programs.compiled                 # what it did (counts)

The decoding programs take one as `store=` (decoding/batch_decoder.py's
`decode_batch` and `compile_beam_programs`, inference/streaming.py);
`inference.Translator(workdir, programs=True)` keeps one in WORKDIR/programs.

`call` names the program by what it is: the function's module and name, its
static arguments (dataclasses such as `configs.ModelConfig` as their fields),
the shapes, dtypes and tree structure of its other arguments, and the JAX
settings that change a trace (x64, matmul precision); never by the lines its
source sits on. A program is looked up in memory, then on disk, and only then
traced and compiled (and written, unless the store is read-only). Each program
is two files under DIRECTORY/<platform>/: `<digest>.bin`, the executable as
`jax.experimental.serialize_executable` writes it with its argument and result
trees, and `<digest>.json`, its manifest: the key, the payload's sha256, and
what the executable was made for (`fingerprint`: platform, device kind, jax
and jaxlib versions, the CPU's feature flags, XLA_FLAGS, and a digest of the
t2t_jax sources programs are traced from: model/, decoding/, configs.py,
ids.py). A program made for anything else, or a file that
cannot be read, is compiled as without a store (and written over), with one
log line per store and reason. Files are written to a temporary name and
renamed, manifest last, so a reader (another process) sees a whole program or
none; a read-only directory is logged once and only costs the compilations.
Through `call`, a program read from disk runs once and is waited for before it
is trusted: one that loads but fails is compiled again, with one log line.

A stored program is machine code and pickled trees: load only work directories
you trust, as with any model file that runs code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import pathlib
import pickle
import platform as platform_lib
import secrets
import threading
from typing import Any, Callable, Optional

import jax
import jaxlib
from jax.experimental import serialize_executable

from t2t_jax import errors
from t2t_jax.runtime import workdir

log = logging.getLogger(__name__)

# A work directory's programs: WORKDIR/programs/<platform>/.
DIRECTORY = "programs"
# What the stored programs are traced from, relative to the t2t_jax package: an
# edit there may change a program, so it makes every stored program stale.
TRACED_FROM = ("model", "decoding", "kernels", "quantization", "inference/sampling.py",
               "configs.py", "ids.py", "decode_cache.py")
# Manifest format; a change makes older manifests stale.
FORMAT = 1
# An executable that JAX's persistent compilation cache returned, serialized again,
# fails on its first call (XLA:CPU, jax 0.10.2: "Function ..._fusion not found"). A
# program to store is therefore compiled afresh: this debug option (how many buffers
# an allocation error lists) is part of the cache key and changes no code, so a
# random value misses the cache; `_no_cache_writes` keeps the entry out of it.
_CACHE_MISS_OPTION = "xla_debug_buffer_assignment_show_max"
_MIN_COMPILE_TIME = "jax_persistent_cache_min_compile_time_secs"
_writes_held = [0]   # compilations inside `_no_cache_writes` now, in every thread
_writes_lock = threading.Lock()


@contextlib.contextmanager
def _no_cache_writes():
  """JAX's persistent cache writes nothing while any thread is inside (JAX's own context
  manager for this is private); a compilation of another thread meanwhile is only not
  cached."""
  with _writes_lock:
    if _writes_held[0] == 0:
      _writes_held.append(getattr(jax.config, _MIN_COMPILE_TIME))
      jax.config.update(_MIN_COMPILE_TIME, float("inf"))
    _writes_held[0] += 1
  try:
    yield
  finally:
    with _writes_lock:
      _writes_held[0] -= 1
      if _writes_held[0] == 0:
        jax.config.update(_MIN_COMPILE_TIME, _writes_held.pop())


@functools.cache
def _cpu_flags() -> str:
  """The CPU's feature flags (Linux /proc/cpuinfo), else the processor's name."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith(("flags", "Features")):   # x86, ARM
          return " ".join(sorted(line.split(":", 1)[1].split()))
  except OSError:
    pass
  return platform_lib.processor() or platform_lib.machine()


@functools.cache
def source_digest() -> str:
  """sha256 of the t2t_jax sources the programs are traced from (`TRACED_FROM`)."""
  package = pathlib.Path(__file__).resolve().parent.parent
  digest = hashlib.sha256()
  for part in TRACED_FROM:
    path = package / part
    for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
      digest.update(str(file.relative_to(package)).encode() + b"\0" + file.read_bytes())
  return digest.hexdigest()


def fingerprint(device: jax.Device) -> dict[str, str]:
  """What a program compiled for `device` in this process was made for: loading one made
  for anything else may fail or, for another CPU, run instructions this one lacks."""
  flags = " ".join(sorted(flag for flag in os.environ.get("XLA_FLAGS", "").split()
                          # Host devices only split the CPU: a program runs on one of them.
                          if not flag.startswith("--xla_force_host_platform_device_count")))
  return {
      "format": str(FORMAT),
      "platform": device.platform,
      "platform_version": device.client.platform_version,
      "device_kind": device.device_kind,
      "jax": jax.__version__,
      "jaxlib": jaxlib.__version__,
      "cpu": hashlib.sha256(_cpu_flags().encode()).hexdigest()[:16],
      "xla_flags": flags,
      "t2t_jax_sources": source_digest()[:16],
  }


def _jsonable(value: Any) -> Any:
  """Static arguments as JSON: dataclasses by their fields (and class), tuples as lists."""
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    fields = {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return {"__class__": f"{type(value).__module__}.{type(value).__qualname__}", **fields}
  if isinstance(value, (tuple, list)):
    return [_jsonable(v) for v in value]
  if isinstance(value, dict):
    return {str(k): _jsonable(v) for k, v in sorted(value.items())}
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  raise TypeError(f"static argument {value!r} ({type(value).__name__}) has no stable name "
                  "for a stored program; pass ints, floats, strings, tuples or dataclasses")


def _avals(args: tuple) -> tuple[Any, tuple]:
  leaves, tree = jax.tree_util.tree_flatten(args)
  return tree, tuple((tuple(x.shape), str(x.dtype), bool(getattr(x, "weak_type", False)))
                     for x in map(jax.typeof, leaves))


def _signature(args: tuple) -> tuple[Any, tuple]:
  """`_avals` as the arrays give them, uncanonicalised: cheaper, for the in-memory lookup
  that every call makes (a beam state has dozens of leaves)."""
  leaves, tree = jax.tree_util.tree_flatten(args)
  return tree, tuple((x.shape, x.dtype, getattr(x, "weak_type", False)) for x in leaves)


def program_key(fn: Callable, args: tuple, static: dict[str, Any]) -> dict[str, Any]:
  """What `fn(*args, **static)` compiles to, as JSON: see the module docstring."""
  tree, avals = _avals(args)
  target = getattr(fn, "__wrapped__", fn)
  return _as_read({
      "function": f"{target.__module__}.{target.__qualname__}",
      "static": _jsonable(dict(static)),
      "arguments": str(tree),
      "avals": [list(a) for a in avals],
      "x64": bool(jax.config.jax_enable_x64),
      "matmul_precision": str(jax.config.jax_default_matmul_precision),
  })


def _as_read(key: dict[str, Any]) -> dict[str, Any]:
  """`key` as a manifest gives it back (tuples as lists), to compare with one."""
  return json.loads(json.dumps(key, sort_keys=True))


def _digest(key: dict[str, Any]) -> str:
  return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


class Store:
  """Compiled programs in `directory` (e.g. WORKDIR/programs), loaded before compiled.

  `writable=False`: only loads (what it compiles stays in memory). Thread-safe:
  threads asking for one program wait for the one that loads or compiles it.
  `loaded` and `compiled` count what this store did (programs found in memory
  are neither).
  """

  def __init__(self, directory: str | os.PathLike, writable: bool = True,
               device: Optional[jax.Device] = None):
    self.directory = pathlib.Path(directory)
    self.writable = writable
    self.device = device
    self.loaded = self.compiled = 0
    self._memory: dict[Any, jax.stages.Compiled] = {}
    self._locks: dict[Any, threading.Lock] = {}
    self._lock = threading.Lock()
    self._said: set[str] = set()

  def _device(self) -> jax.Device:
    return self.device or jax.config.jax_default_device or jax.devices()[0]

  def _say_once(self, reason: str, message: str, *args: Any) -> None:
    with self._lock:
      if reason in self._said:
        return
      self._said.add(reason)
    log.info(message, *args)

  # ------------------------------------------------------------------ the API

  def call(self, fn: Callable, *args: Any, **static: Any) -> Any:
    """`fn(*args, **static)` for a `jax.jit` function whose keyword arguments are its static
    ones, through the stored program."""
    memo = (fn, tuple(sorted(static.items())), *_signature(args))
    compiled = self._memory.get(memo)
    if compiled is not None:
      return compiled(*args)
    with self._lock:
      lock = self._locks.setdefault(memo, threading.Lock())
    with lock:
      compiled = self._memory.get(memo)
      if compiled is not None:
        return compiled(*args)
      key, lower = program_key(fn, args, static), lambda: fn.lower(*args, **static)
      compiled, loaded = self._load_or_compile(key, lower)
      try:
        out = compiled(*args)
        if loaded:
          jax.block_until_ready(out)   # a failure shows when the results are read
      except jax.errors.JaxRuntimeError as e:
        if not loaded:
          raise
        # One that loads but fails to run (written by a broken serializer) is compiled.
        self._say_once("run", "A stored program failed on its first call (%s): compiling it",
                       errors.one_line(e))
        self.loaded -= 1
        compiled = self._compile_and_save(key, lower)
        out = compiled(*args)
      self._memory[memo] = compiled
      return out

  def load_or_compile(self, key: dict[str, Any],
                      lower: Callable[[], jax.stages.Lowered]) -> jax.stages.Compiled:
    """The program named by `key` (JSON-able; `program_key`), from disk if stored for this
    machine, else `lower().compile()` (then stored)."""
    return self._load_or_compile(_as_read(key), lower)[0]

  def _load_or_compile(self, key: dict[str, Any], lower: Callable[[], jax.stages.Lowered]
                       ) -> tuple[jax.stages.Compiled, bool]:
    """The program and whether it was loaded (else compiled and stored)."""
    device = self._device()
    compiled = self._load(self._base(key, device), key, fingerprint(device), device)
    if compiled is not None:
      self.loaded += 1
      return compiled, True
    return self._compile_and_save(key, lower), False

  def _base(self, key: dict[str, Any], device: jax.Device) -> pathlib.Path:
    return self.directory / device.platform / _digest(key)

  def _compile_and_save(self, key: dict[str, Any],
                        lower: Callable[[], jax.stages.Lowered]) -> jax.stages.Compiled:
    compiled = self._compile(lower)
    self.compiled += 1
    if self.writable:
      device = self._device()
      self._save(self._base(key, device), key, fingerprint(device), compiled)
    return compiled

  def _compile(self, lower: Callable[[], jax.stages.Lowered]) -> jax.stages.Compiled:
    if not self.writable:
      return lower().compile()
    with _no_cache_writes():
      return lower().compile({_CACHE_MISS_OPTION: 1000 + secrets.randbelow(1 << 30)})

  # ------------------------------------------------------------------ disk

  def _load(self, base: pathlib.Path, key: dict[str, Any], expected: dict[str, str],
            device: jax.Device) -> Optional[jax.stages.Compiled]:
    manifest_path = base.with_suffix(".json")
    if not manifest_path.exists():
      return None
    try:
      manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
      made_for = manifest["fingerprint"]
      if manifest["key"] != key:
        raise ValueError("its key differs from the program's (a digest collision?)")
    except (OSError, ValueError, KeyError, TypeError) as e:
      self._say_once("manifest", "Stored program %s unreadable (%s): compiling it",
                      manifest_path, e)
      return None
    differ = [f"{name} {made_for.get(name)!r}, here {value!r}"
              for name, value in expected.items() if made_for.get(name) != value]
    if differ:
      self._say_once("made_for:" + ";".join(sorted(d.split()[0] for d in differ)),
                     "Stored programs in %s were made for another machine or code (%s): "
                     "compiling them", self.directory, "; ".join(differ))
      return None
    try:
      data = base.with_suffix(".bin").read_bytes()
      if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        raise ValueError("its sha256 differs from the manifest's")
      payload, in_tree, out_tree = pickle.loads(data)
      return serialize_executable.deserialize_and_load(
          payload, in_tree, out_tree, backend=device.client, execution_devices=[device])
    except Exception as e:  # pylint: disable=broad-except  (any damage: compile instead)
      self._say_once("payload", "Stored program %s unreadable (%s: %s): compiling it",
                      base.with_suffix(".bin"), type(e).__name__, e)
      return None

  def _save(self, base: pathlib.Path, key: dict[str, Any], made_for: dict[str, str],
            compiled: jax.stages.Compiled) -> None:
    try:
      data = pickle.dumps(serialize_executable.serialize(compiled))
    except (ValueError, NotImplementedError, pickle.PicklingError, TypeError) as e:
      self._say_once("serialize", "A program cannot be stored (%s): it is compiled in each "
                     "process", e)
      return
    manifest = {"key": key, "fingerprint": made_for, "sha256": hashlib.sha256(data).hexdigest(),
                "bytes": len(data)}
    try:
      base.parent.mkdir(parents=True, exist_ok=True)
      workdir.write_bytes_atomic(base.with_suffix(".bin"), data)
      workdir.write_bytes_atomic(base.with_suffix(".json"),
                    (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    except OSError as e:
      self._say_once("write", "Compiled programs not stored in %s (%s): they are compiled "
                     "again in the next process", self.directory, e.strerror or e)
