"""The only module that maps steps over devices: data parallelism on one mesh axis.

Two equivalent ways to run the same per-device `steps.train_step`:
- `pmap_train_step`: `jax.pmap` over the local devices. The state is stored
  stacked, `[local_devices, ...]` per leaf (`replicate`/`unreplicate`), batches
  are `[local_devices, accum_steps, micro_batch, length]` (`shard_batch`).
  Multi-process runs pass host-local arrays; pmap joins them across processes.
- `jit_shard_map_train_step`: `jax.jit(jax.shard_map(...))` over a 1-D mesh with
  axis "batch". The state is an ordinary (replicated) pytree; the batch is the
  same `[devices, ...]` array, split on its leading axis.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from t2t_jax import steps
from t2t_jax.configs import TransformerConfig

AXIS = "batch"


def _stacked_sharding(devices: Optional[Sequence[jax.Device]]) -> NamedSharding:
  devices = list(devices) if devices is not None else jax.local_devices()
  return NamedSharding(Mesh(np.array(devices), (AXIS,)), P(AXIS))


def replicate(tree: Any, devices: Optional[Sequence[jax.Device]] = None) -> Any:
  """One copy of every leaf per device, stacked on a new leading axis (for pmap)."""
  sharding = _stacked_sharding(devices)
  mesh_devices = list(sharding.mesh.devices.flat)

  def put(x):
    # Copy to each device separately so that no device ever holds all copies.
    shards = [jax.device_put(x[None], d) for d in mesh_devices]
    return jax.make_array_from_single_device_arrays((len(mesh_devices),) + x.shape,
                                                    sharding, shards)

  return jax.tree.map(put, tree)


def unreplicate(tree: Any) -> Any:
  """The first local device's copy of a replicated (pmapped) pytree."""
  return jax.tree.map(lambda x: x.addressable_data(0)[0], tree)


def shard_batch(batch: dict[str, np.ndarray],
                devices: Optional[Sequence[jax.Device]] = None) -> dict[str, jax.Array]:
  """Puts a host batch `[local_devices, ...]` on the devices, one slice each (async)."""
  sharding = _stacked_sharding(devices)
  size = sharding.mesh.size
  for name, x in batch.items():
    if x.shape[0] != size:
      raise ValueError(f"batch[{name!r}] has leading dimension {x.shape[0]}, expected one "
                       f"slice per device ({size}); build batches for {size} devices")
  return jax.device_put(batch, sharding)


def pmap_train_step(cfg: TransformerConfig, optimizer: optax.GradientTransformation,
                    devices: Optional[Sequence[jax.Device]] = None) -> Callable:
  """`(replicated_state, sharded_batch, root_key) -> (state, metrics)`; donates the state.

  Metrics come back stacked per device (all equal: they are psum'd).
  """
  step = functools.partial(steps.train_step, cfg=cfg, optimizer=optimizer, axis_name=AXIS)
  return jax.pmap(step, axis_name=AXIS, in_axes=(0, 0, None), donate_argnums=(0,),
                  devices=devices)


def pmap_eval_step(cfg: TransformerConfig,
                   devices: Optional[Sequence[jax.Device]] = None) -> Callable:
  """`(replicated_params, sharded_batch) -> metric sums` stacked per device."""
  step = functools.partial(steps.eval_step, cfg=cfg, axis_name=AXIS)
  return jax.pmap(step, axis_name=AXIS, devices=devices)


def jit_shard_map_train_step(cfg: TransformerConfig, optimizer: optax.GradientTransformation,
                             mesh: Mesh) -> Callable:
  """The pmap step's twin under `jax.jit(jax.shard_map(...))`; donates the state.

  `(state, batch, root_key) -> (state, metrics)` with an unstacked state and the
  batch `[devices, accum_steps, micro_batch, length]` split over mesh axis "batch".
  """
  if mesh.axis_names != (AXIS,):
    raise ValueError(f"mesh axes {mesh.axis_names}: use a 1-D mesh with the single axis "
                     f"{AXIS!r}, e.g. Mesh(np.array(jax.devices()), ({AXIS!r},))")

  def per_device(state, batch, root_key):
    batch = jax.tree.map(lambda x: x[0], batch)  # drop this device's size-1 slice axis
    return steps.train_step(state, batch, root_key, cfg=cfg, optimizer=optimizer,
                            axis_name=AXIS)

  sharded = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(AXIS), P()),
                          out_specs=(P(), P()))
  return jax.jit(sharded, donate_argnums=(0,))
