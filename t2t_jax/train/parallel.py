"""The only module that maps steps over devices: data parallelism on one mesh axis.

Two equivalent ways to run the same per-device `steps.train_step`, chosen by
`cfg.parallelism` (both tested to give the same training run):
- "pmap" (the default): `jax.pmap` over the local devices. The state is stored
  stacked, `[local_devices, ...]` per leaf (`replicate`/`unreplicate`), batches
  are `[local_devices, accum_steps, micro_batch, length]` (`shard_batch`).
  Multi-process runs pass host-local arrays; pmap joins them across processes.
- "shard_map": `jax.jit(jax.shard_map(...))` over a 1-D mesh of all devices with
  axis "batch". The state is an ordinary pytree replicated over the mesh; the
  batch is the same `[devices, ...]` array, split on its leading axis. This is
  what JAX now builds pmap on, and the form that extends to model sharding.

`data_parallel(cfg, optimizer)` gives either one behind one interface
(`DataParallel`): place the state and the batches, run the steps, read one copy
back. train/builder.py is its caller: it builds the optimiser and the state too.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from t2t_jax.configs import TransformerConfig
from t2t_jax.train import steps

AXIS = "batch"
PARALLELISMS = ("pmap", "shard_map")


def data_mesh(devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """The 1-D mesh of axis "batch" the shard_map steps run on: `devices`, else all of them."""
  return Mesh(np.array(list(devices) if devices is not None else jax.devices()), (AXIS,))


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


def fetch_first(tree: Any, stacked: bool = True) -> Any:
  """This process's first copy of a placed pytree as NumPy arrays, by a transfer alone.

  Indexing the stacked copy on the device (`unreplicate`) would be a computation
  queued behind the step dispatched after it: reading step t's metrics would wait
  for step t+1 and leave the device idle while the host prepares t+2. A transfer
  waits only for the buffer it reads; the [0] happens on the host.
  """
  first = jax.device_get(jax.tree.map(lambda x: x.addressable_data(0), tree))
  return jax.tree.map(lambda x: np.asarray(x)[0], first) if stacked else first


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


def jit_shard_map_eval_step(cfg: TransformerConfig, mesh: Mesh) -> Callable:
  """`(params, batch) -> metric sums` under `jax.jit(jax.shard_map(...))`; params unstacked."""
  def per_device(params, batch):
    batch = jax.tree.map(lambda x: x[0], batch)  # drop this device's size-1 slice axis
    return steps.eval_step(params, batch, cfg=cfg, axis_name=AXIS)

  return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P()))


@dataclasses.dataclass(frozen=True)
class DataParallel:
  """The steps of one `cfg.parallelism`, and how their inputs and outputs are placed."""
  train_step: Callable  # (placed state, placed batch, root key) -> (placed state, metrics)
  eval_step: Callable   # (placed params, placed batch) -> metric sums
  put_state: Callable   # host pytree -> placed on every device
  put_batch: Callable   # host batch [local_devices, ...] -> placed, one slice per device
  get: Callable         # placed pytree -> this process's first copy (device arrays)
  fetch: Callable       # placed metrics -> this process's first copy on the host, no device op


def data_parallel(cfg: TransformerConfig, optimizer: optax.GradientTransformation,
                  devices: Optional[Sequence[jax.Device]] = None,
                  parallelism: Optional[str] = None) -> DataParallel:
  """The steps over `devices` (pmap: this process's, shard_map: every process's, by
  default), mapped as `parallelism` (default `cfg.parallelism`) says."""
  parallelism = parallelism or cfg.parallelism
  if parallelism == "pmap":
    return DataParallel(train_step=pmap_train_step(cfg, optimizer, devices),
                        eval_step=pmap_eval_step(cfg, devices),
                        put_state=functools.partial(replicate, devices=devices),
                        put_batch=functools.partial(shard_batch, devices=devices),
                        get=unreplicate, fetch=fetch_first)
  if parallelism != "shard_map":
    raise ValueError(f"parallelism={parallelism!r}: use one of {PARALLELISMS}")
  m = data_mesh(devices)
  replicated, split = NamedSharding(m, P()), NamedSharding(m, P(AXIS))

  def put_state(tree):
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(replicated, np.asarray(x)), tree)

  def put_batch(batch):
    local = sum(d.process_index == jax.process_index() for d in m.devices.flat)
    for name, x in batch.items():
      if x.shape[0] != local:
        raise ValueError(f"batch[{name!r}] has leading dimension {x.shape[0]}, expected one "
                         f"slice per local device ({local}); build batches for {local} devices")
    return {name: jax.make_array_from_process_local_data(split, x) for name, x in batch.items()}

  return DataParallel(train_step=jit_shard_map_train_step(cfg, optimizer, m),
                      eval_step=jit_shard_map_eval_step(cfg, m), put_state=put_state,
                      put_batch=put_batch,
                      get=lambda tree: jax.tree.map(lambda x: x.addressable_data(0), tree),
                      fetch=lambda tree: fetch_first(tree, stacked=False))
