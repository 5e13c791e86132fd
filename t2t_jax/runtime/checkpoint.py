"""Checkpoints: periodic saving, resuming after a kill, averaging the last N (section 6.1).

Layout of a work directory:
  checkpoints/<step>/state    TrainState pytree (StandardSave; host NumPy arrays)
  checkpoints/<step>/meta     JSON: the caller's `extras` (data iterator position, ...)
  averaged/<step>/params      mean of the last N checkpoints' params (float32)
  averaged/<step>/info        JSON: which steps were averaged

Orbax writes every step into `<step>.orbax-checkpoint-tmp` and renames it when
complete, so a run killed mid-save leaves only finished checkpoints behind; the
next `Checkpointer` deletes the leftover temporary directory. Arrays are stored
unreplicated and without sharding, so a checkpoint restores onto any number of
devices and processes. In a multi-process run every process takes part in each
save and restore (orbax needs them all; every process holds the same state,
and process 0 writes it); every process restores the same step, which they decide
together (`Checkpointer.restore_latest`). The dropout
key is not saved: it is derived from `cfg.seed` and the step (docs/training.md).
Averaging and loading saved parameters for inference: runtime/averaging.py; its
console script `t2t-average-checkpoints` is cli/average.py.

What a failed read means: damaged files, a read that failed now, or neither
(`classify`). Only evidence that the files themselves are damaged may set a
checkpoint aside (docs/checkpoints.md has the rule and what `restore_latest` does
with each kind). Orbax has no error types of its own for these cases; the kinds
come from Python's exception types, errno and tensorstore's status codes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import errno
import json
import logging
import os
import pathlib
import re
import shutil
import time
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence

import jax
import numpy as np
import orbax.checkpoint as ocp

from t2t_jax import configs
from t2t_jax.runtime import multihost

CHECKPOINT_DIR = "checkpoints"
AVERAGED_DIR = "averaged"
CORRUPT_SUFFIX = ".corrupt"
# Waits before each new attempt at a checkpoint that could not be read: a flaky
# network file system or a memory spike often passes within seconds to a minute.
RETRY_DELAYS_S = (2.0, 10.0, 30.0)

log = logging.getLogger(__name__)

PyTree = Any


# ------------------------------------------------------------- what a failed read means


def describe(error: BaseException) -> str:
  """One line: the type and the message, without tensorstore's spec, its ends if too long."""
  text = str(error).splitlines()[0] if str(error) else ""
  text = re.sub(r"\s*\[tensorstore_spec='[^']*'\]", "", text)
  if len(text) > 300:  # the cause (e.g. "Permission denied") is at the end
    text = f"{text[:80]} ... {text[-200:]}"
  return f"{type(error).__name__}: {text}"


# What one attempt to restore a step found.
DAMAGED = "damaged"  # the files are wrong or missing: set the step aside, use an older one
UNREADABLE = "unreadable"  # reading failed now (I/O, permissions, memory): retry, then stop
INCOMPATIBLE = "incompatible"  # anything else, e.g. the state's structure or shapes changed

# tensorstore, which reads orbax's arrays, raises ValueError with the absl status code
# first. These codes describe the bytes on disk (missing, short, undecodable) ...
_DAMAGE_CODES = ("DATA_LOSS", "NOT_FOUND", "OUT_OF_RANGE")
# ... and these a read that failed now (EACCES, EIO, EAGAIN, timeouts, ENOMEM, ENOSPC).
_TROUBLE_CODES = ("PERMISSION_DENIED", "UNAVAILABLE", "DEADLINE_EXCEEDED",
                  "RESOURCE_EXHAUSTED", "ABORTED", "CANCELLED")
_STATUS = re.compile(r"\b(" + "|".join(_DAMAGE_CODES + _TROUBLE_CODES) + r"): ")
_FILE = re.compile(r'local file "([^"]+)"')
_OS_ERROR = re.compile(r"os_error_code='(\d+)'")  # tensorstore's errno, where it has one
_MISSING = (errno.ENOENT, errno.ENOTDIR)


def _chain(error: BaseException) -> Iterator[BaseException]:
  while error is not None:
    yield error
    error = error.__cause__ or error.__context__


def classify(error: BaseException) -> str:
  """DAMAGED, UNREADABLE or INCOMPATIBLE (see above) for an error raised by a restore.

  Only evidence about the files counts as damage: a missing file (ENOENT), a
  JSON metadata file that does not decode (as UTF-8 or as JSON), a missing
  item, tensorstore's DATA_LOSS, NOT_FOUND or OUT_OF_RANGE (a truncated array
  file). Any other OSError (also
  one tensorstore reports with its errno), a MemoryError or a timeout is
  UNREADABLE: retried, never set aside.
  """
  for e in _chain(error):
    if isinstance(e, (MemoryError, TimeoutError, concurrent.futures.TimeoutError)):
      return UNREADABLE
    if isinstance(e, OSError):
      missing = isinstance(e, (FileNotFoundError, NotADirectoryError)) or e.errno in _MISSING
      return DAMAGED if missing else UNREADABLE
    if isinstance(e, (json.JSONDecodeError, UnicodeDecodeError)):
      return DAMAGED  # a metadata file that is not JSON, or not even text (garbled bytes)
    if isinstance(e, KeyError) and "was not found in the checkpoint" in str(e):
      return DAMAGED  # orbax: an item directory (e.g. `meta`) is missing
    os_error = _OS_ERROR.search(str(e))
    if isinstance(e, ValueError) and os_error:
      return DAMAGED if int(os_error.group(1)) in _MISSING else UNREADABLE
    status = _STATUS.search(str(e))
    if isinstance(e, ValueError) and status:
      return DAMAGED if status.group(1) in _DAMAGE_CODES else UNREADABLE
  return INCOMPATIBLE


def culprit(error: BaseException, step_dir: pathlib.Path) -> str:
  """The file an error names (the most specific one tensorstore mentions), else `step_dir`."""
  for e in _chain(error):
    if isinstance(e, OSError) and e.filename:
      return str(e.filename)
    files = _FILE.findall(str(e))
    if files:
      return files[-1]
  return str(step_dir)


@dataclasses.dataclass(frozen=True)
class Failure:
  """Why one step did not restore, as every process agrees on it (JSON-able fields)."""
  kind: str
  file: str
  cause: str
  attempts: int
  process: Optional[int] = None  # set in a multi-process run

  def where(self) -> str:
    return "" if self.process is None else f"process {self.process}: "


def pooled(name: str, failure: Optional[Failure]) -> Optional[Failure]:
  """Every process's outcome pooled into one, the same on every process.

  None when every process restored; else the failure that weighs most (a read
  that failed now, then an incompatible state, then damage), the lowest process first.
  """
  mine = json.dumps(None if failure is None else dataclasses.asdict(failure))
  outcomes = [json.loads(text) for text in multihost.gather(name, mine)]
  failures = [(i, f) for i, f in enumerate(outcomes) if f is not None]
  if not failures:
    return None
  weight = {UNREADABLE: 0, INCOMPATIBLE: 1, DAMAGED: 2}
  process, worst = min(failures, key=lambda f: (weight[f[1]["kind"]], f[0]))
  return Failure(**{**worst, "process": process if len(outcomes) > 1 else None})


# ------------------------------------------------------------------------ checkpoints


class CheckpointWarning(UserWarning):
  """A checkpoint was skipped or set aside; the message names it."""


class CheckpointUnreadableError(OSError):
  """A checkpoint could not be read now (I/O, permissions, memory); nothing was moved."""


def _host_copy(tree: PyTree) -> PyTree:
  """Owned NumPy copies of every leaf.

  Not views: on CPU `np.asarray` aliases the device buffer, and the async save
  may still be reading it when the next train step (which donates the state) runs.
  """
  def copy(x):
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      raise ValueError("typed PRNG keys cannot be stored in a checkpoint; derive the key "
                       "from the config's seed instead")
    return np.array(x, copy=True)
  return jax.tree.map(copy, jax.device_get(tree))


def _shape_mismatch(restored: PyTree, target: PyTree) -> str:
  """The first array whose saved shape is not the target's, said in words; "" if none.

  Orbax restores an array of another shape into a target without a word (a run
  resumed with another d_model would fail later, inside the model), so the
  shapes are compared here.
  """
  leaves = jax.tree_util.tree_leaves_with_path(target)
  for (path, want), got in zip(leaves, jax.tree.leaves(restored)):
    if tuple(np.shape(got)) != tuple(want.shape):
      return (f"{jax.tree_util.keystr(path)} is {tuple(np.shape(got))} there, "
              f"{tuple(want.shape)} in the given state")
  return ""


def _abstract(tree: PyTree) -> PyTree:
  """Shape/dtype-only target without sharding, so that restoring yields host arrays."""
  def spec(x):
    if not hasattr(x, "shape"):
      x = np.asarray(x)
    return jax.ShapeDtypeStruct(x.shape, x.dtype)
  return jax.tree.map(spec, tree)


def _json_clean(obj: Any, what: str) -> Any:
  """A plain-JSON copy of `obj` (NumPy scalars and arrays become numbers and lists)."""
  def default(x):
    if isinstance(x, (np.generic, np.ndarray)):
      return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON-serialisable")
  try:
    return json.loads(json.dumps(obj, default=default))
  except (TypeError, ValueError) as e:
    raise ValueError(f"{what} must be JSON-serialisable: {e}") from None


def handler_registry(tree_handler: type[ocp.CheckpointHandler]) -> Any:
  """Handlers of a training checkpoint's items and of an averaged one's.

  Writing and restoring a whole training state use StandardCheckpointHandler;
  reading params uses PyTreeCheckpointHandler (same files), which can restore
  them without the optimiser state.
  """
  return ocp.handlers.create_default_handler_registry(
      state=tree_handler(), meta=ocp.JsonCheckpointHandler(), params=tree_handler(),
      info=ocp.JsonCheckpointHandler())


def read_manager(directory: pathlib.Path,
                  tree_handler: type[ocp.CheckpointHandler] = ocp.PyTreeCheckpointHandler
                  ) -> ocp.CheckpointManager:
  """A manager for reading only, on this process alone; items restore in parts.

  Alone: orbax ends every restore at a barrier of all processes, so a process
  whose read fails (and skips the barrier) would leave the others waiting there;
  each process reads by itself and the processes agree on the outcome afterwards
  (`Checkpointer.restore_latest`). Not `read_only=True`, which only adds log
  noise: this manager never saves, and without `cleanup_tmp_directories` it
  leaves a running save alone.
  """
  me = jax.process_index()
  return ocp.CheckpointManager(
      directory,
      options=ocp.CheckpointManagerOptions(
          create=False, enable_async_checkpointing=False,
          multiprocessing_options=ocp.options.MultiprocessingOptions(
              primary_host=me, active_processes={me},
              barrier_sync_key_prefix=f"t2t_jax_read_{me}")),
      handler_registry=handler_registry(tree_handler))


def _free_bytes(directory: pathlib.Path) -> int:
  """Bytes an unprivileged writer may still use on the file system of `directory` (or of
  its nearest existing parent)."""
  while not directory.exists() and directory != directory.parent:
    directory = directory.parent
  return shutil.disk_usage(directory).free


def _set_aside(path: pathlib.Path) -> pathlib.Path:
  """Renames a broken step directory so that orbax no longer sees it as a step."""
  target = path.with_name(path.name + CORRUPT_SUFFIX)
  n = 1
  while target.exists():
    target = path.with_name(f"{path.name}{CORRUPT_SUFFIX}{n}")
    n += 1
  os.replace(path, target)
  return target


@dataclasses.dataclass
class _Retention:
  """Orbax's preservation policy: the newest `keep` checkpoints, not counting interim ones.

  An interim checkpoint (saved off the schedule on a preemption, `interim`
  holds their steps) is kept only while it is the newest: once the resumed run
  saves again it goes, so the checkpoints left to average are the ones an
  uninterrupted run would have.
  """
  keep: int
  interim: set[int]

  def should_preserve(self, checkpoints: Sequence[Any], *, context: Any) -> list[bool]:
    del context
    newest = max((c.step for c in checkpoints), default=None)
    regular = sorted(c.step for c in checkpoints
                     if c.step == newest or c.step not in self.interim)
    kept = set(regular[-self.keep:])
    return [c.step in kept for c in checkpoints]


def _is_interim(reader: ocp.CheckpointManager, step: int) -> bool:
  try:
    meta = reader.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
    return bool(meta["meta"].get("interim"))
  except Exception:  # pylint: disable=broad-except
    return False  # a damaged or unreadable step: restore_latest deals with it


class Checkpointer:
  """Saves the training state every `checkpoint_every_steps` steps and/or minutes.

  Keeps the last max(average_last, 2) checkpoints, so there is always one to
  average over and one to fall back on (an interim save, `maybe_save(...,
  interim=True)`, does not count and goes at the next save). Saving is asynchronous: `maybe_save`
  returns once the state is copied to host memory; `wait()` blocks until the
  files are complete and `close()` (or leaving a `with` block) also finishes.
  `clock` returns seconds and `sleep` waits between attempts at a checkpoint that
  could not be read (`retry_delays_s`); both are injectable for tests.
  """

  def __init__(self, workdir: str | os.PathLike, cfg: configs.TransformerConfig, *,
               clock: Callable[[], float] = time.monotonic, async_save: bool = True,
               retry_delays_s: Sequence[float] = RETRY_DELAYS_S,
               sleep: Callable[[float], None] = time.sleep):
    minutes = cfg.checkpoint_every_minutes
    if minutes is not None and minutes <= 0:
      raise ValueError(f"checkpoint_every_minutes={minutes} must be positive (or None)")
    self.directory = pathlib.Path(workdir).absolute() / CHECKPOINT_DIR
    self.keep = max(cfg.average_last, 2)
    self._every_steps = cfg.checkpoint_every_steps
    self._every_seconds = None if minutes is None else 60.0 * minutes
    self._clock = clock
    self._retry_delays_s = tuple(retry_delays_s)
    self._sleep = sleep
    self._last_save_time = clock()
    self._retention = _Retention(self.keep, set())
    self._writing_step: Optional[int] = None
    self._write_error: Optional[OSError] = None
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            preservation_policy=self._retention,
            enable_async_checkpointing=async_save,
            cleanup_tmp_directories=True),
        handler_registry=handler_registry(ocp.StandardCheckpointHandler))
    with read_manager(self.directory) as reader:
      self._retention.interim.update(
          s for s in self._manager.all_steps() if _is_interim(reader, s))

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  @property
  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def _is_new(self, step: int) -> bool:
    latest = self.latest_step
    return latest is None or step > latest

  def should_save(self, step: int) -> bool:
    """Whether `step` is due by the step interval or by the wall-clock interval.

    Every process of a multi-process run must save the same steps, and their
    clocks differ: a save due by the clock is process 0's decision, shared.
    """
    if not self._is_new(step):
      return False
    if self._every_steps is not None and step % self._every_steps == 0:
      return True
    if self._every_seconds is None:
      return False
    due = lambda: "1" if self._clock() - self._last_save_time >= self._every_seconds else ""
    return bool(multihost.agree("checkpoint_due", due))

  def maybe_save(self, step: int, state: PyTree, extras: Optional[dict] = None,
                 force: bool = False, interim: bool = False) -> bool:
    """Saves `state` (unreplicated) and `extras` (JSON) if due.

    `force` saves regardless of the intervals (e.g. at the end of training), but
    never a step at or before the latest saved one. `interim` (implies force): a
    save off the schedule, on a preemption; it is deleted at the next save and
    never counts among the last `keep`. Returns whether it saved.
    """
    step = int(step)
    if not (self._is_new(step) and (force or interim or self.should_save(step))):
      return False
    extras = _json_clean({} if extras is None else extras, "extras")
    meta = {"extras": extras, "saved_at": time.time(), "interim": interim}
    if interim:
      self._retention.interim.add(step)
    host_state = _host_copy(state)
    with self._writing():  # a failure of the previous (asynchronous) save shows here
      self._manager.wait_until_finished()  # as orbax's save would, first
    self._writing_step = step
    with self._writing():
      self._check_space(host_state)
      self._manager.save(step, force=True, args=ocp.args.Composite(
          state=ocp.args.StandardSave(host_state), meta=ocp.args.JsonSave(meta)))
    self._last_save_time = self._clock()
    return True

  def _check_space(self, host_state: PyTree) -> None:
    """ENOSPC before anything is written when the disk has less room than the state's size.

    A save orbax starts and the disk cannot hold does not end cleanly: its array writes
    run together, the first to fail ends their event loop and the others finish on a
    closed one ("Event loop is closed" tracebacks, after the error has been reported).
    Process 0 measures (it writes the arrays), so every process raises alike.
    """
    needed = sum(leaf.nbytes for leaf in jax.tree.leaves(host_state))
    short = multihost.agree(
        "checkpoint_space", lambda: "1" if _free_bytes(self.directory) < needed else "")
    if short:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.directory))

  @contextlib.contextmanager
  def _writing(self) -> Iterator[None]:
    """Turns a failed write (disk full, read-only) into one OSError saying what to do."""
    if self._write_error is not None:
      raise self._write_error
    try:
      yield
    except OSError as e:
      complete = [int(p.name) for p in self.directory.glob("*") if p.name.isdigit()]
      kept = (f"the last complete checkpoint, step {max(complete)}, is intact"
              if complete else "no complete checkpoint exists yet")
      self._write_error = OSError(
          f"could not write checkpoint step {self._writing_step} to {self.directory} "
          f"({e.strerror or e}); {kept}. Free space or make the directory writable, then run "
          "the same command again to resume")
      raise self._write_error from None

  def _read(self, reader: ocp.CheckpointManager, step: int, target: PyTree
            ) -> tuple[Optional[tuple[PyTree, dict]], Optional[Failure]]:
    """(state, extras) of `step`, or why it failed; a failed read is tried again."""
    attempt = 0
    while True:
      attempt += 1
      try:
        restored = reader.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()))
        mismatch = _shape_mismatch(restored["state"], target)
        if mismatch:
          return None, Failure(INCOMPATIBLE, str(self.directory / str(step)),
                                             mismatch, attempt)
        return (restored["state"], dict(restored["meta"]["extras"])), None
      except Exception as e:  # pylint: disable=broad-except  (classify decides)
        kind = classify(e)
        step_dir = self.directory / str(step)
        if kind == DAMAGED and not step_dir.is_dir():
          kind = UNREADABLE  # listed a moment ago, gone now: the listing or the mount is off
        if kind == UNREADABLE and attempt <= len(self._retry_delays_s):
          delay = self._retry_delays_s[attempt - 1]
          log.warning("Could not read checkpoint step %d (%s); trying again in %.0f s",
                      step, describe(e), delay)
          self._sleep(delay)
          continue
        return None, Failure(kind, culprit(e, step_dir), describe(e), attempt)

  def restore_latest(self, target_state: PyTree) -> Optional[tuple[PyTree, dict]]:
    """The newest checkpoint that restores, as (state, extras); None when there is none.

    `target_state` gives the structure, shapes and dtypes (real arrays or
    `jax.eval_shape` output); the restored leaves are host NumPy arrays.
    docs/checkpoints.md has the rule: a newer checkpoint whose files are damaged
    (`classify`) while an older one restores is renamed to `<step>.corrupt`
    with a warning, and the older one is used. A checkpoint that cannot be read
    now (I/O error, permissions, memory) is tried again after each of
    `retry_delays_s`, then CheckpointUnreadableError names the step, the file and
    the cause; anything else (e.g. the config changed) raises ValueError. In
    both cases, and when every step is damaged, nothing moves. In a multi-process
    run every process reads each step, they pool their outcomes, and all of them
    act on the same, worst, one: the same step restored, or the same error.
    """
    self.wait()
    self._manager.reload()
    steps = sorted(self._manager.all_steps(), reverse=True)
    if not steps:
      return None
    target = _abstract(target_state)
    damaged: list[tuple[int, Failure]] = []
    with read_manager(self.directory, ocp.StandardCheckpointHandler) as reader:
      for step in steps:
        restored, failure = self._read(reader, step, target)
        failure = pooled(f"restore/{step}", failure)
        if failure is None:
          if damaged:
            self._set_aside(damaged, step)
          return restored
        if failure.kind == UNREADABLE:
          raise CheckpointUnreadableError(
              f"{failure.where()}could not read checkpoint step {step} ({failure.file}: "
              f"{failure.cause}; {failure.attempts} attempts); nothing was moved. Fix the "
              "file system or free memory, then run the same command again to resume from "
              f"step {step}")
        if failure.kind == INCOMPATIBLE:
          raise ValueError(
              f"{failure.where()}checkpoint step {step} in {self.directory} does not restore "
              f"into the given state ({failure.cause}); nothing was moved. If the config "
              "changed, use a new workdir; if the files are damaged, move the step away")
        damaged.append((step, failure))
    details = "; ".join(f"step {s}: {f.where()}{f.file}: {f.cause}" for s, f in damaged)
    raise ValueError(
        f"every checkpoint in {self.directory} is damaged ({details}); nothing was moved. "
        "Delete them to start again, or use a new workdir")

  def _set_aside(self, damaged: Sequence[tuple[int, Failure]], step: int) -> None:
    """Renames the newer, damaged checkpoints (process 0 does), then reloads."""
    if multihost.is_main():
      for bad_step, failure in damaged:
        path = self.directory / str(bad_step)
        moved = _set_aside(path)
        warnings.warn(
            f"checkpoint step {bad_step} at {path} is damaged ({failure.where()}"
            f"{failure.file}: {failure.cause}); moved it to {moved} and resumed from step "
            f"{step}", CheckpointWarning, stacklevel=3)
    multihost.barrier("checkpoint_set_aside")  # the others list the steps after the rename
    self._manager.reload()

  def wait(self) -> None:
    """Blocks until every save issued so far is complete on disk; OSError if one failed."""
    with self._writing():
      self._manager.wait_until_finished()

  def close(self) -> None:
    """Finishes the saves; a write failure already raised is not raised again."""
    try:
      if self._write_error is None:
        self.wait()
    finally:
      try:
        self._manager.close()
      except OSError:
        if self._write_error is None:
          raise

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()
