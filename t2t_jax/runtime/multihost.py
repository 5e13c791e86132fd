"""Several processes, one run: starting JAX's multi-process runtime, waiting, failing together.

Every process of a multi-host run executes the same program. `initialize`
connects them (JAX's coordination service on process 0); afterwards
`jax.process_index()` and `jax.process_count()` say who is who, `pmap`'s
collectives span every device of every process, and the helpers below cover
what the collectives do not:

- `main_first(fn)`: process 0 runs `fn` (e.g. builds the vocabulary and token
  caches on the shared work directory) while the others wait; then they run it
  (and find the caches built).
- `agree(name, fn)`: process 0's value of `fn()` on every process (a decision
  that reads the wall clock must be the same everywhere).
- `gather(name, value)`: every process's value, on every process (each
  process's outcome of a checkpoint read, pooled into one decision).
- `barrier(name)`: waits for every process.
- `first_flag(name, value)`: a flag any one process may raise (SIGTERM reached
  it), seen by all of them at the same call.
- `report_failure(message)`: tells every other process that this one failed;
  their watcher thread (started by `initialize`) hands the news to the caller's
  `on_peer_failure` within about a second. This module ends no process: the
  command decides (cli.py ends them all at once, since a plain exit would hang:
  JAX's exit handler waits for all processes at a shutdown barrier while the
  others wait for this one inside a collective).

A process killed outright (SIGKILL, a lost host) is noticed by the coordination
service after `heartbeat_timeout_s` without a heartbeat: every other process
then ends (SIGABRT) with "Terminating process because the JAX distributed
service detected fatal errors ... another task died", or sooner when a
collective in flight loses its connection to it (gloo: "Connection reset by
peer", an error the command handles as any other). If process 0 is the one
lost, the others end within seconds (their connection to the service breaks).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Any, Callable, Optional

import jax
from orbax.checkpoint import multihost as orbax_multihost

log = logging.getLogger(__name__)

# What the launcher may set instead of flags (JAX itself reads the first one).
ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"
# JAX's own default; a dead process is noticed after this long.
DEFAULT_HEARTBEAT_TIMEOUT_S = 100
# Waiting for process 0 (e.g. while it tokenises WMT14 En-Fr) may take hours.
_LONG_WAIT_MS = 24 * 3600 * 1000
_FAILED_KEY = "t2t_jax/failed"
_POLL_S = 1.0  # how often a process looks for another one's failure

_AGREE_KEEP = 16

_exiting = threading.Event()
_uses: dict[str, int] = {}
_raised: set[str] = set()  # first_flag names this process has raised


def _env_int(name: str) -> Optional[int]:
  text = os.environ.get(name)
  if text is None:
    return None
  try:
    return int(text)
  except ValueError:
    raise ValueError(f"{name}={text!r} must be an integer") from None


def initialize(coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
               process_id: Optional[int] = None, *,
               heartbeat_timeout_s: int = DEFAULT_HEARTBEAT_TIMEOUT_S,
               initialization_timeout_s: int = 300,
               on_peer_failure: Optional[Callable[[str], Any]] = None) -> None:
  """Joins this process to the run; must come before anything else touches JAX's devices.

  Unset arguments come from JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
  JAX_PROCESS_ID, and what is still unset from JAX's cluster auto-detection
  (SLURM, Open MPI, Cloud TPU, Kubernetes). On CPU the collectives go over gloo.
  `on_peer_failure(text)` runs in a watcher thread when another process
  reported a failure ("process 1 failed: ..."); without it the news is only
  logged, and this process carries on until a collective or the heartbeat fails.
  """
  coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR)
  if num_processes is None:
    num_processes = _env_int(ENV_NUM_PROCESSES)
  if process_id is None:
    process_id = _env_int(ENV_PROCESS_ID)
  if num_processes is not None and num_processes < 1:
    raise ValueError(f"num_processes={num_processes} must be at least 1")
  if (process_id is not None and num_processes is not None
      and not 0 <= process_id < num_processes):
    raise ValueError(f"process_id={process_id} must be in [0, {num_processes})")
  if jax.config.jax_cpu_collectives_implementation in (None, "none"):
    # Without it, CPU computations cannot span processes (only tests and laptops run
    # multi-process on CPU; GPUs and TPUs bring their own collectives).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address, num_processes, process_id,
                             heartbeat_timeout_seconds=heartbeat_timeout_s,
                             initialization_timeout=initialization_timeout_s)
  log.info("Process %d of %d; %d local devices of %d", jax.process_index(),
           jax.process_count(), jax.local_device_count(), jax.device_count())
  watcher = threading.Thread(target=_watch_for_failures, args=(on_peer_failure,),
                             name="t2t_jax-peer-failures", daemon=True)
  watcher.start()
  atexit.register(_stop_watching, watcher)  # runs before JAX's shutdown (registered earlier)


def _client() -> Any:
  """JAX's coordination-service client (its key-value store and barriers).

  JAX has no public accessor; orbax's public one keeps up with JAX's versions.
  """
  return orbax_multihost.get_jax_distributed_client()


def is_multiprocess() -> bool:
  return jax.distributed.is_initialized() and jax.process_count() > 1


def is_main() -> bool:
  """Whether this process writes the run's files (logs, metrics, results)."""
  return jax.process_index() == 0


def _unique(name: str) -> str:
  """`name` plus how often this process used it: every process counts the same way."""
  count = _uses.get(name, 0)
  _uses[name] = count + 1
  return f"t2t_jax/{name}/{count}"


def barrier(name: str, timeout_ms: int = _LONG_WAIT_MS) -> None:
  """Waits until every process reached its barrier `name`; no-op in one process."""
  if is_multiprocess():
    _client().wait_at_barrier(_unique(f"barrier/{name}"), timeout_ms)


def main_first(name: str, fn: Callable[[], Any]) -> Any:
  """`fn()` on process 0 first, then (after a barrier named `name`) on the others."""
  if not is_multiprocess():
    return fn()
  result = fn() if is_main() else None
  barrier(name)
  return result if is_main() else fn()


def agree(name: str, fn: Callable[[], str]) -> str:
  """Process 0's `fn()` (a string) on every process; `fn` runs on process 0 only.

  Every process must call it the same number of times for each `name`. Process 0
  keeps the last `_AGREE_KEEP` values of each name for the others to read, which
  holds wherever the processes also meet in collectives in between (a loop's
  steps keep them within a step or two of each other).
  """
  if not is_multiprocess():
    return fn()
  key = _unique(f"agree/{name}")
  if not is_main():
    return _client().blocking_key_value_get(key, _LONG_WAIT_MS)
  value = fn()
  _client().key_value_set(key, value)
  count = _uses[f"agree/{name}"] - 1
  if count >= _AGREE_KEEP:
    _client().key_value_delete(f"t2t_jax/agree/{name}/{count - _AGREE_KEEP}")
  return value


def gather(name: str, value: str) -> list[str]:
  """Every process's `value` (a string), in process order, on every process.

  Every process must call it the same number of times for each `name`.
  """
  if not is_multiprocess():
    return [value]
  key = _unique(f"gather/{name}")
  _client().key_value_set(f"{key}/{jax.process_index()}", value)
  return [_client().blocking_key_value_get(f"{key}/{i}", _LONG_WAIT_MS)
          for i in range(jax.process_count())]


def first_flag(name: str, value: Optional[int]) -> Optional[int]:
  """A flag any process may raise (a stop signal's number), seen by every process at once.

  `value`: this process's flag, None while it has none. Returns the flag raised
  first as process 0 saw it, or None; every process gets the same answer from
  the same call, so they act on it at the same point (e.g. after the same
  training step). Every process must call it equally often.
  """
  if not is_multiprocess():
    return value
  if value is not None and name not in _raised:
    _raised.add(name)
    _client().key_value_set(f"t2t_jax/flag/{name}/{jax.process_index()}", str(value))

  def decide() -> str:
    if value is not None:
      return str(value)
    raised = _client().key_value_dir_get(f"t2t_jax/flag/{name}/")
    return raised[0][1] if raised else ""

  text = agree(f"flag/{name}", decide)
  return int(text) if text else None


def report_failure(message: str) -> str:
  """Tells the other processes that this one failed; returns the text they are given.

  This process's watcher falls silent (its own failure is no news to it); ending
  the process is the caller's decision.
  """
  text = f"process {jax.process_index()} failed: {message}"
  _exiting.set()
  if is_multiprocess():
    try:
      _client().key_value_set(_FAILED_KEY, text)
    except Exception:  # pylint: disable=broad-except
      pass  # another process failed first and told everyone already
  return text


def _watch_for_failures(on_peer_failure: Optional[Callable[[str], Any]]) -> None:
  """Hands another process's failure report (`report_failure`) to `on_peer_failure`."""
  client = _client()
  while not _exiting.wait(_POLL_S):
    try:
      text = client.key_value_try_get(_FAILED_KEY)
    except Exception:  # pylint: disable=broad-except
      continue  # nobody failed (NOT_FOUND), or the service is going away
    if _exiting.is_set():
      return
    if on_peer_failure is None:
      log.error("Process %d: %s", jax.process_index(), text)
    else:
      on_peer_failure(text)
    return


def _stop_watching(watcher: threading.Thread) -> None:
  # A thread still inside a gRPC call when the interpreter finalises aborts the process.
  _exiting.set()
  watcher.join()
