"""A run's saved parameters: the last N checkpoints averaged (section 6.1), loaded for inference.

  averaged/<step>/params      mean of the last N checkpoints' params (float32)
  averaged/<step>/info        JSON: which steps were averaged

A damaged checkpoint is skipped with a warning (the next older one takes its
place); one that cannot be read now stops with CheckpointUnreadableError, as
when a run resumes (runtime/checkpoint.py's `classify` decides which is which).
"""

from __future__ import annotations

import logging
import os
import pathlib
import warnings
from typing import Any, Optional, Sequence

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers

from t2t_jax.runtime import checkpoint
from t2t_jax.runtime.checkpoint import (AVERAGED_DIR, CHECKPOINT_DIR, CheckpointUnreadableError,
                                        CheckpointWarning)
from t2t_jax.runtime.checkpoint import DAMAGED, UNREADABLE, classify, describe

log = logging.getLogger(__name__)

PyTree = Any


def _restore_params(manager: ocp.CheckpointManager, step: int, item: str = "state") -> PyTree:
  """The `params` subtree of one saved state (or of an averaged checkpoint), on the host."""
  tree = manager.item_metadata(step)[item].tree
  params = tree["params"] if item == "state" else tree
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), params)
  if item == "state":
    target = {"params": target}
  restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target)
  restored = manager.restore(step, args=ocp.args.Composite(**{
      item: ocp.args.PyTreeRestore(item=target, restore_args=restore_args,
                                   partial_restore=item == "state")}))[item]
  return restored["params"] if item == "state" else restored


def _steps(directory: pathlib.Path) -> list[int]:
  if not directory.is_dir():
    return []
  with checkpoint.read_manager(directory) as manager:
    return sorted(manager.all_steps())


def _unless_damaged(error: Exception, what: str) -> None:
  """Raises for a failure that is not damage (`classify`): only damage may be passed over."""
  kind = classify(error)
  if kind == UNREADABLE:
    raise CheckpointUnreadableError(
        f"could not read {what} ({describe(error)}); nothing was skipped. Fix the file "
        "system or free memory, then run the same command again") from error
  if kind != DAMAGED:
    raise error


def _newest_loadable(manager, directory: pathlib.Path, steps: Sequence[int]):
  """Yields (step, params) newest first, warning about and skipping damaged ones."""
  for step in reversed(steps):
    try:
      params = _restore_params(manager, step)
    except Exception as e:  # pylint: disable=broad-except  (_unless_damaged decides)
      _unless_damaged(e, f"checkpoint step {step} at {directory / str(step)}")
      warnings.warn(f"skipping checkpoint step {step} at {directory / str(step)} "
                    f"({describe(e)})", CheckpointWarning, stacklevel=3)
      continue
    yield step, params


def average_checkpoints(workdir: str | os.PathLike, last: int = 5) -> PyTree:
  """The float32 mean of the params of the last `last` checkpoints; also written to `averaged/`.

  Fewer checkpoints than `last`: averages those there are, with a warning. A
  damaged checkpoint is skipped with a warning (the next older one takes its
  place); one that cannot be read now raises CheckpointUnreadableError. Raises
  FileNotFoundError when there is no checkpoint at all.
  """
  if last < 1:
    raise ValueError(f"last={last} must be at least 1")
  workdir = pathlib.Path(workdir).absolute()
  directory = workdir / CHECKPOINT_DIR
  steps = _steps(directory)
  if not steps:
    raise FileNotFoundError(_no_checkpoints(
        workdir, "to average: they need none; fine-tune them with t2t-train --finetune_from"))
  total, used = None, []
  with checkpoint.read_manager(directory) as manager:
    for step, params in _newest_loadable(manager, directory, steps):
      # Sums in float64 so that the mean of N float32 values is rounded once.
      params = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
      total = params if total is None else jax.tree.map(np.add, total, params)
      used.append(step)
      if len(used) == last:
        break
  if not used:
    raise FileNotFoundError(f"none of the checkpoints {steps} in {directory} could be loaded")
  if len(used) < last:
    warnings.warn(f"averaging {len(used)} checkpoint(s) (steps {sorted(used)}), fewer than "
                  f"last={last}", CheckpointWarning, stacklevel=2)
  used.sort()
  averaged = jax.tree.map(lambda x: (x / len(used)).astype(np.float32), total)
  _write_averaged(workdir / AVERAGED_DIR, averaged, used)
  return averaged


def _no_checkpoints(workdir: pathlib.Path, instead: str) -> str:
  """The message for a work directory without checkpoints: train first, or, where its params
  were written whole (an imported model: `written_source`), what to do `instead`."""
  source = written_source(workdir)
  if source is not None:
    return f"{workdir} holds params written whole ({source}), no checkpoints {instead}"
  return f"no checkpoints in {workdir / CHECKPOINT_DIR}: train into {workdir} first"


def written_source(workdir: str | os.PathLike) -> Optional[str]:
  """Where the params of a work directory without checkpoints of its own came from, when
  they were written whole (`write_params`: "imported from ..."); None for a training run."""
  workdir = pathlib.Path(workdir).absolute()
  if _steps(workdir / CHECKPOINT_DIR) or not _steps(workdir / AVERAGED_DIR):
    return None
  source = _load_averaged(workdir / AVERAGED_DIR, with_params=False)[2].get("source")
  return source if source != str(workdir / CHECKPOINT_DIR) else None


def write_params(workdir: str | os.PathLike, params: PyTree, source: str) -> None:
  """Parameters made elsewhere (an imported model's) as `workdir`'s averaged params of step 0,
  which every command loads (`load_params`); `source` says where they came from."""
  _write_averaged(pathlib.Path(workdir).absolute() / AVERAGED_DIR, params, [0], source)


def _write_averaged(directory: pathlib.Path, params: PyTree, steps: Sequence[int],
                    source: Optional[str] = None) -> None:
  """Writes a params-only checkpoint named after the newest averaged step."""
  options = ocp.CheckpointManagerOptions(
      preservation_policy=checkpoint_managers.LatestN(1), enable_async_checkpointing=False,
      cleanup_tmp_directories=True)
  registry = checkpoint.handler_registry(ocp.StandardCheckpointHandler)
  with ocp.CheckpointManager(directory, options=options, handler_registry=registry) as manager:
    if steps[-1] in manager.all_steps():
      manager.delete(steps[-1])
    manager.save(steps[-1], force=True, args=ocp.args.Composite(
        params=ocp.args.StandardSave(params),
        info=ocp.args.JsonSave({"averaged_steps": list(steps),
                                "source": source or str(directory.parent / CHECKPOINT_DIR)})))


def _load_averaged(directory: pathlib.Path, with_params: bool = True
                   ) -> tuple[Optional[PyTree], int, dict]:
  """The params (if asked), step and info of the averaged checkpoint in `directory`."""
  with checkpoint.read_manager(directory) as manager:
    step = manager.latest_step()
    params = _restore_params(manager, step, item="params") if with_params else None
    info = manager.restore(step, args=ocp.args.Composite(info=ocp.args.JsonRestore()))["info"]
  return params, step, info


def averaged_steps(workdir: str | os.PathLike) -> list[int]:
  """The checkpoint steps behind `workdir/averaged` ([] when nothing was averaged)."""
  directory = pathlib.Path(workdir).absolute() / AVERAGED_DIR
  if not _steps(directory):
    return []
  return list(_load_averaged(directory, with_params=False)[2]["averaged_steps"])


def load_params(workdir: str | os.PathLike, averaged: bool = True) -> PyTree:
  """Host params: the averaged ones if `averaged` and present, else the latest checkpoint's.

  Logs which ones it loaded.
  """
  workdir = pathlib.Path(workdir).absolute()
  directory = workdir / CHECKPOINT_DIR
  checkpoint_steps = _steps(directory)
  if averaged and _steps(workdir / AVERAGED_DIR):
    try:
      params, step, info = _load_averaged(workdir / AVERAGED_DIR)
    except Exception as e:  # pylint: disable=broad-except  (_unless_damaged decides)
      _unless_damaged(e, f"the averaged params in {workdir / AVERAGED_DIR}")
      warnings.warn(f"cannot load the averaged params in {workdir / AVERAGED_DIR} "
                    f"({describe(e)}); using the latest checkpoint", CheckpointWarning,
                    stacklevel=2)
    else:
      log.info("Loaded the average of steps %s from %s", info["averaged_steps"],
               workdir / AVERAGED_DIR / str(step))
      if checkpoint_steps and checkpoint_steps[-1] > step:
        warnings.warn(f"{workdir / AVERAGED_DIR} averages up to step {step} but {directory} "
                      f"has step {checkpoint_steps[-1]}; run t2t-average-checkpoints "
                      f"--workdir {workdir} to refresh it", CheckpointWarning, stacklevel=2)
      return params
  if not checkpoint_steps:
    raise FileNotFoundError(_no_checkpoints(
        workdir, "(--no-average: the latest checkpoint's params): read its averaged params"))
  with checkpoint.read_manager(directory) as manager:
    for step, params in _newest_loadable(manager, directory, checkpoint_steps):
      log.info("Loaded the params of step %d from %s%s", step, directory / str(step),
               " (no averaged checkpoint)" if averaged else "")
      return params
  raise FileNotFoundError(f"none of the checkpoints {checkpoint_steps} in {directory} loads")



def checkpoint_workdir(path: str | os.PathLike) -> Optional[pathlib.Path]:
  """The work directory of a checkpoint path `W/checkpoints/<step>` or `W/averaged/<step>`
  (None for any other path)."""
  path = pathlib.Path(path).absolute()
  if path.parent.name in (CHECKPOINT_DIR, AVERAGED_DIR) and path.name.isdigit():
    return path.parent.parent
  return None


def load_checkpoint_params(path: str | os.PathLike) -> PyTree:
  """Host params of one checkpoint: `W/checkpoints/<step>` or `W/averaged/<step>`."""
  path = pathlib.Path(path).absolute()
  if checkpoint_workdir(path) is None:
    raise ValueError(f"{path} is not a checkpoint: pass WORKDIR/{CHECKPOINT_DIR}/<step> or "
                     f"WORKDIR/{AVERAGED_DIR}/<step>")
  steps = _steps(path.parent)
  if int(path.name) not in steps:
    raise FileNotFoundError(f"{path} is not a finished checkpoint; {path.parent} has steps "
                            f"{steps or 'none'}")
  item = "state" if path.parent.name == CHECKPOINT_DIR else "params"
  with checkpoint.read_manager(path.parent) as manager:
    params = _restore_params(manager, int(path.name), item=item)
  log.info("Loaded the params of %s", path)
  return params
