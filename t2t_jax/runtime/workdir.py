"""A work directory: the config it belongs to, JSON files that are never half written, and one
run at a time in it (its run lock), each shared first-run file built once.

A work directory holds one run: `config.json` (written when the run starts,
checked when it resumes), the vocabulary and token caches (data/dataset.py), the
checkpoints (runtime/checkpoint.py), metrics (train/metrics.py) and results.

Run lock: `WORKDIR/run.lock`, a small JSON file (host, pid, process start time,
boot id, when) created atomically: written under a temporary name and
hard-linked into place, so it never exists half-written and two processes
cannot both create it. A second run on the same work directory finds it and
refuses with `WorkdirBusyError`, naming the running one's host and pid.

A lock is stale, and is taken over with a warning, when
- it was made on this host (same hostname and boot id) by a process that no
  longer exists: the pid is gone, or now belongs to a process started at
  another time (pids are reused; in a container a restarted run often gets
  the same one);
- it was made on another host and its file has not been touched for
  `STALE_SECONDS` (10 minutes). The holder touches it every
  `HEARTBEAT_SECONDS` (1 minute) from a background thread, so a lock that old
  belongs to a run that died without removing it (a preempted machine). Times
  are compared with the file system's own clock, not this host's;
- it cannot be read (emptied or garbled).
Taking over happens under a file lock, so two processes that find the same
stale lock cannot both take it. Within one process the lock is re-entrant (the
experiment holds it around training, which takes it again). On several hosts,
only one process should take the run lock: `lock_workdir(workdir)` has process
0 take it and every process of the run agree on the outcome.

Build lock: `build_once(path, build, lock_dir)` makes `path` exactly once
among processes sharing a work directory (several runs, or the hosts of one
multi-host run on a shared file system): the first takes an exclusive
`fcntl.flock` on `lock_dir/<name>` and builds; the others block on it, then
find the file made. Linux's NFS client implements flock with NFS locks, so
this holds across hosts on NFS; on file systems without locks (e.g. FUSE
object-store mounts) the caller must serialise some other way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import json
import logging
import os
import pathlib
import socket
import tempfile
import threading
from typing import Any, Callable, Iterator, Optional, TypeVar

from t2t_jax import configs
from t2t_jax.runtime import multihost

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
TRAIN_FIRST = "train a model there first, or pass the right --workdir"

# Fields that may differ between a run and its resumption: they change how the
# run proceeds, not the shape or meaning of what the checkpoints hold.
RESUMABLE_FIELDS = frozenset({
    "num_train_steps", "log_every_steps", "eval_every_steps", "num_eval_batches",
    "peak_tflops", "checkpoint_every_steps", "checkpoint_every_minutes", "average_last",
    "beam_size", "alpha", "max_decode_extra", "decode_batch_size", "data_dir",
    "max_tokens_per_device", "memory_margin", "parallelism", "compilation_cache",
    "attention_impl",
})


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
  """Writes `data` so that a reader never sees half a file, even after a kill or beside
  another process writing the same path (each writes its own temporary file)."""
  path = pathlib.Path(path)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException:
    pathlib.Path(tmp).unlink(missing_ok=True)
    raise


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
  """Writes `obj` as JSON, atomically (`write_bytes_atomic`)."""
  write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def load_config(workdir: str | os.PathLike) -> configs.TransformerConfig:
  """The config a work directory was trained with (`workdir/config.json`).

  FileNotFoundError when there is none; ValueError when it does not match this
  version's `TransformerConfig` (an unknown field, a value out of range).
  """
  path = pathlib.Path(workdir) / CONFIG_FILE
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: {TRAIN_FIRST}")
  try:
    fields = json.loads(path.read_text())
  except (ValueError, UnicodeDecodeError) as e:
    raise ValueError(f"{path} is damaged ({e}); restore it from a copy, or write it again "
                     "by running the training command with the run's settings") from None
  return configs.from_dict(fields, str(path))


def check_or_write_config(cfg: configs.TransformerConfig, workdir: str | os.PathLike,
                          write: bool = True) -> None:
  """Writes `cfg` as the run's config (if `write`); ValueError if the run there has an
  incompatible one, or if its config.json is damaged."""
  path = pathlib.Path(workdir) / CONFIG_FILE
  if path.exists():
    try:
      old = json.loads(path.read_text())
      if not isinstance(old, dict):
        raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
      raise ValueError(
          f"{path} is damaged ({e}); restore it, or delete it to resume with the config "
          "given now (it must be the run's config: the checkpoints hold its shapes)") from None
    # Read as a config, so that a field an earlier version did not write compares as its
    # default (what that run computed) and a renamed one as its new name.
    old = dataclasses.asdict(configs.from_dict(old, str(path)))
    new = dataclasses.asdict(cfg)
    changed = sorted(k for k in new if k not in RESUMABLE_FIELDS and old.get(k) != new[k])
    if changed:
      diffs = ", ".join(f"{k}: {old.get(k)!r} -> {new[k]!r}" for k in changed)
      raise ValueError(
          f"{workdir} holds a run with a different config ({diffs}); "
          "use a new --workdir or the same settings")
  if write:
    write_json_atomic(path, dataclasses.asdict(cfg))


# ------------------------------------------------------------------ one run at a time

LOCK_FILE = "run.lock"
LOCKS_DIR = ".locks"        # flock files: empty, never deleted (deleting them is racy)
HEARTBEAT_SECONDS = 60.0
STALE_SECONDS = 600.0

T = TypeVar("T")

# Run locks this process holds: lock path -> how many RunLocks hold it (re-entrancy).
_HELD: dict[pathlib.Path, int] = {}
_HELD_GUARD = threading.Lock()


class WorkdirBusyError(RuntimeError):
  """Another live run holds the work directory's run lock; the message names it."""


# --- Who is this process ----------------------------------------------------------

def _boot_id() -> Optional[str]:
  try:
    return pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
  except OSError:
    return None


def _process_start(pid: int) -> Optional[int]:
  """The process's start time in clock ticks since boot (Linux), None if unknown or gone."""
  try:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
  except OSError:
    return None
  # The command name (field 2) may hold spaces and parentheses; fields after it don't.
  fields = stat[stat.rindex(")") + 2:].split()
  return int(fields[19])  # field 22 of stat(5), counted from field 3 here


def _pid_exists(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # exists, owned by someone else
  return True


def this_process() -> dict:
  pid = os.getpid()
  return {"host": socket.gethostname(), "pid": pid, "start": _process_start(pid),
          "boot_id": _boot_id(),
          "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}


# --- flock ------------------------------------------------------------------------

@contextlib.contextmanager
def file_lock(path: str | os.PathLike, what: str = "") -> Iterator[None]:
  """An exclusive `fcntl.flock` on `path` (created if missing), waiting as long as it takes.

  The holder writes its host and pid into the file, so a waiter can say whom it
  waits for. The kernel releases the lock when the holder dies. Not re-entrant:
  taking the same lock twice in one process blocks forever.
  """
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      if e.errno not in (errno.EAGAIN, errno.EACCES):
        raise
      holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
      log.info("Waiting for %s to finish %s (lock %s)", holder, what or "its work", path)
      fcntl.flock(fd, fcntl.LOCK_EX)
    me = this_process()
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {me['pid']} on host {me['host']}\n".encode(), 0)
    yield
  finally:
    os.close(fd)  # releases the flock


def build_once(path: str | os.PathLike, build: Callable[[], T],
               lock_dir: str | os.PathLike,
               ready: Optional[Callable[[pathlib.Path], bool]] = None) -> Optional[T]:
  """Calls `build()` (which must create `path` atomically) unless `path` is ready.

  Among processes sharing `lock_dir`, one builds and the others wait, then see
  `path` ready and return None. `ready` defaults to "exists"; a caller whose
  file may be corrupt passes a check (and deletes what fails it inside `build`).
  Returns `build()`'s result when this process built.
  """
  path = pathlib.Path(path)
  is_ready = ready or (lambda p: p.exists())
  if is_ready(path):
    return None
  with file_lock(pathlib.Path(lock_dir) / (path.name + ".lock"), f"building {path}"):
    if is_ready(path):
      return None
    return build()


# --- The run lock -----------------------------------------------------------------

def _fs_now(directory: pathlib.Path) -> float:
  """The file system's current time: the mtime of a file made just now."""
  with tempfile.NamedTemporaryFile(dir=directory, prefix=".clock") as f:
    return os.fstat(f.fileno()).st_mtime


def _read(path: pathlib.Path) -> tuple[Optional[dict], float]:
  """(holder, mtime); holder None when the file is unreadable. FileNotFoundError if gone."""
  mtime = path.stat().st_mtime
  try:
    holder = json.loads(path.read_text())
    if not (isinstance(holder, dict) and isinstance(holder.get("pid"), int)
            and isinstance(holder.get("host"), str)):
      holder = None
  except (ValueError, UnicodeDecodeError):
    holder = None
  return holder, mtime


def describe(holder: dict) -> str:
  return f"pid {holder['pid']} on host {holder['host']} (since {holder.get('since', '?')})"


def stale_reason(holder: Optional[dict], mtime: float, fs_now: float,
                 stale_seconds: float = STALE_SECONDS) -> Optional[str]:
  """Why the lock `holder` (its file touched at `mtime`) is abandoned; None if it is live."""
  if holder is None:
    return "the lock file is empty or garbled"
  me = this_process()
  same_host = holder["host"] == me["host"] and holder.get("boot_id") == me["boot_id"]
  if same_host:
    pid = holder["pid"]
    if pid == me["pid"] or not _pid_exists(pid):
      return f"{describe(holder)} no longer runs"
    start = _process_start(pid)
    if holder.get("start") is not None and start is not None and start != holder["start"]:
      return f"{describe(holder)} no longer runs (pid {pid} now belongs to another process)"
    return None
  age = fs_now - mtime
  if age > stale_seconds:
    return (f"{describe(holder)} has not refreshed the lock for {age / 60:.0f} minutes "
            f"(more than {stale_seconds / 60:.0f})")
  return None


class RunLock:
  """Holds `workdir/run.lock` while a run uses the work directory.

  `with RunLock(workdir):` or `acquire()`/`release()`. Raises WorkdirBusyError
  when a live run holds it; takes over a stale one (see the module docstring).
  """

  def __init__(self, workdir: str | os.PathLike, *,
               heartbeat_seconds: float = HEARTBEAT_SECONDS,
               stale_seconds: float = STALE_SECONDS):
    self.workdir = pathlib.Path(workdir).absolute()
    self.path = self.workdir / LOCK_FILE
    self._heartbeat_seconds = heartbeat_seconds
    self._stale_seconds = stale_seconds
    self._record: Optional[dict] = None
    self._nested = False
    self._stop = threading.Event()
    self._thread: Optional[threading.Thread] = None

  @property
  def held(self) -> bool:
    return self._record is not None or self._nested

  def acquire(self) -> "RunLock":
    if self.held:
      raise RuntimeError(f"{self.path} is already held by this RunLock")
    with _HELD_GUARD:
      if self.path in _HELD:  # an outer RunLock of this process has it
        _HELD[self.path] += 1
        self._nested = True
        return self
    self.workdir.mkdir(parents=True, exist_ok=True)
    record = this_process()
    text = json.dumps(record) + "\n"
    with file_lock(self.workdir / LOCKS_DIR / "run", "taking the run lock"):
      while True:
        if self._create(text):
          break
        try:
          holder, mtime = _read(self.path)
        except FileNotFoundError:
          continue
        reason = stale_reason(holder, mtime, _fs_now(self.workdir), self._stale_seconds)
        if reason is None:
          raise WorkdirBusyError(
              f"{self.workdir} is in use by another run: {describe(holder)}; wait for it "
              f"to finish or stop it, or use another --workdir (if that run is gone, "
              f"delete {self.path})")
        log.warning("Taking over %s: %s", self.path, reason)
        os.remove(self.path)
    self._record = record
    with _HELD_GUARD:
      _HELD[self.path] = 1
    self._stop.clear()
    self._thread = threading.Thread(target=self._heartbeat, name="run-lock-heartbeat",
                                    daemon=True)
    self._thread.start()
    return self

  def _create(self, text: str) -> bool:
    """Writes the lock under a temporary name and links it into place; False if it exists."""
    fd, tmp = tempfile.mkstemp(dir=self.workdir, prefix=".run.lock.")
    try:
      with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
      os.link(tmp, self.path)
      return True
    except FileExistsError:
      return False
    finally:
      os.remove(tmp)

  def _is_ours(self) -> bool:
    try:
      holder, _ = _read(self.path)
    except FileNotFoundError:
      return False
    return holder is not None and all(holder.get(k) == self._record[k]
                                      for k in ("host", "pid", "start", "since"))

  def _heartbeat(self) -> None:
    while not self._stop.wait(self._heartbeat_seconds):
      try:
        if not self._is_ours():
          log.error("%s was removed or taken by another process; this run no longer "
                    "holds the work directory", self.path)
          return
        os.utime(self.path)
      except OSError as e:
        log.warning("Could not refresh %s: %s", self.path, e)

  def release(self) -> None:
    """Stops the heartbeat and removes the lock file if it is still this run's."""
    if self._nested:
      with _HELD_GUARD:
        _HELD[self.path] -= 1
      self._nested = False
      return
    if not self.held:
      return
    with _HELD_GUARD:
      _HELD.pop(self.path, None)
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
    with contextlib.suppress(OSError):
      if self._is_ours():
        os.remove(self.path)
    self._record = None

  def __enter__(self) -> "RunLock":
    return self.acquire()

  def __exit__(self, *exc_info) -> None:
    self.release()


def lock_workdir(workdir: str | os.PathLike) -> RunLock:
  """The work directory's run lock, taken by process 0; the caller releases it.

  Raises WorkdirBusyError, naming the running process, on every process of this
  run when another run holds the lock. Re-entrant: the experiment holds it
  around training, and the Trainer takes it again.
  """
  lock = RunLock(workdir)

  def take() -> str:
    try:
      lock.acquire()
    except WorkdirBusyError as e:
      return str(e)
    return ""

  refusal = multihost.agree("run_lock", take)
  if refusal:
    raise WorkdirBusyError(refusal)
  return lock
