"""The train step built from a config: the optimiser, the state at step 0, the mapped steps.

    built = builder.build(cfg)                    # cfg.parallelism over every device
    state = built.init_state(key)                 # steps.TrainState at step 0, one copy
    shapes = built.abstract_state()               # the same as jax.eval_shape gives it
    placed = built.mapped.put_state(state)        # parallel.DataParallel: place, run, read
    placed, metrics = built.mapped.train_step(placed, built.mapped.put_batch(batch), key)
    lowered = built.lower(rows, length, accum_steps=2, packed=True)   # shapes only

Everything that runs or compiles an update builds it here: the training loop,
the memory fitting (train/memory.py), the compiles for another accelerator and
the timing on this host (accelerators/), the benchmarks. So the program the
memory fitting measures, the one t2t-compile predicts and the one the loop
runs are one program, and a new knob of the step is added in one place.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

from t2t_jax.configs import TransformerConfig
from t2t_jax.data.packing import SEGMENT_KEYS  # batch fields of packed rows
from t2t_jax.train import optim
from t2t_jax.train import parallel
from t2t_jax.train import steps


@dataclasses.dataclass(frozen=True)
class TrainStep:
  """One config's update over some devices, and the state it takes."""
  cfg: TransformerConfig
  optimizer: optax.GradientTransformation
  parallelism: str                              # "pmap" or "shard_map"
  devices: Optional[tuple[jax.Device, ...]]     # None: parallel.py's default devices
  mapped: parallel.DataParallel                 # the train and eval steps, placement

  def init_state(self, key: jax.Array) -> steps.TrainState:
    """The state at step 0: parameters drawn with `key`, the optimiser's zero moments."""
    return steps.create_train_state(self.cfg, self.optimizer, key)

  def abstract_state(self) -> steps.TrainState:
    """`init_state`'s shapes and dtypes (`jax.eval_shape`): nothing is allocated."""
    return jax.eval_shape(self.init_state, jax.random.key(0))

  def lower(self, rows: int, length: int, accum_steps: int = 1,
            packed: bool = False) -> jax.stages.Lowered:
    """The mapped train step traced for micro-batches of [rows, length] on each device,
    `accum_steps` of them per update (`packed`: with segment ids), on shapes only."""
    return self.mapped.train_step.lower(*self._abstract_arguments(rows, length, accum_steps,
                                                                  packed))

  def _abstract_arguments(self, rows: int, length: int, accum_steps: int,
                          packed: bool) -> tuple[Any, dict[str, Any], Any]:
    """(state, batch, root key) as the mapped train step takes them, shapes only."""
    state = self.abstract_state()
    key = jax.eval_shape(lambda: jax.random.key(0))
    names = ("inputs", "targets") + (SEGMENT_KEYS if packed else ())
    if self.parallelism == "pmap":
      count = len(self.devices) if self.devices is not None else jax.local_device_count()
      stacked = jax.tree.map(lambda x: jax.ShapeDtypeStruct((count, *x.shape), x.dtype), state)
      # [devices, accum_steps, micro_batch, length]
      batch = {n: jax.ShapeDtypeStruct((count, accum_steps, rows, length), jnp.int32)
               for n in names}
      return stacked, batch, key
    mesh = parallel.data_mesh(self.devices)
    replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P(parallel.AXIS))
    placed = lambda tree: jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), tree)
    batch = {n: jax.ShapeDtypeStruct((mesh.size, accum_steps, rows, length), jnp.int32,
                                     sharding=split) for n in names}
    return placed(state), batch, placed(key)


def check_trainable(cfg: TransformerConfig) -> None:
  """Raises ValueError for a config only decoding takes (int8 quantization)."""
  if cfg.quantization is not None:
    raise ValueError(f"quantization={cfg.quantization!r} is for decoding only (t2t-translate "
                     "--int8): train in float32 and quantise when translating")


def build(cfg: TransformerConfig, devices: Optional[Sequence[jax.Device]] = None,
          parallelism: Optional[str] = None) -> TrainStep:
  """`cfg`'s optimiser (the paper's Adam and schedule) and its steps mapped over
  `devices` as `parallelism` says (default `cfg.parallelism`; pmap maps over this
  process's devices, shard_map over every process's unless `devices` are given),
  each donating the state it is given."""
  check_trainable(cfg)
  parallelism = parallelism or cfg.parallelism
  devices = tuple(devices) if devices is not None else None
  optimizer = optim.make_optimizer(cfg)
  return TrainStep(cfg, optimizer, parallelism, devices,
                   parallel.data_parallel(cfg, optimizer, devices, parallelism))
