"""The training loop the experiment scripts call: `train_and_evaluate(cfg, workdir, dataset)`.

`Trainer` sets everything up in its constructor, in labelled sections (input,
model and state, update step, metrics); `run()` is the loop, with the
checkpoint and eval sections it calls. Running it again on the same work
directory resumes from the latest checkpoint: the state, the step and the data
iterator's position come back together.

Stopping: the first SIGTERM or Ctrl-C (runtime/preemption.py) lets the step in flight
finish; then every process saves a checkpoint at that same step and `run()`
raises `preemption.Preempted`. Process 0 holds the work directory's run lock
(runtime/workdir.py) from set-up to `close()`.

Outputs (process 0 only): `workdir/metrics.jsonl` and TensorBoard events under
`workdir/tb` (train/metrics.py; a resumed run drops the lines after its
checkpoint and appends), log lines, and a tqdm bar on a terminal.
"""

from __future__ import annotations

import logging
import math
import os
import pathlib
import sys
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from t2t_jax.configs import TransformerConfig
from t2t_jax.data import dataset as dataset_lib
from t2t_jax.runtime import checkpoint
from t2t_jax.runtime import multihost
from t2t_jax.runtime import preemption
from t2t_jax.runtime import workdir as workdir_lib
from t2t_jax.train import memory
from t2t_jax.train import metrics as metrics_lib
from t2t_jax.train import step as step_lib

log = logging.getLogger(__name__)


@jax.jit
def _all_finite(tree) -> jax.Array:
  return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


class _Window:
  """Train metrics and throughput since the last log line."""

  def __init__(self):
    self.sums = {**dict.fromkeys(step_lib.METRIC_SUMS, 0.0), "grad_norm": 0.0}
    self.steps = 0
    self.learning_rate = float("nan")
    # Throughput counts only steps dispatched after `start` (see `start_timer`).
    self.start: Optional[float] = None
    self.timed_steps = 0
    self.timed: dict[str, float] = {}

  def start_timer(self) -> None:
    """(Re)starts the throughput count; the loss sums are kept."""
    self.start = time.perf_counter()
    self.timed_steps = 0
    self.timed = {"target_tokens": 0.0, "source_tokens": 0.0, "padded_tokens": 0.0,
                  "flops": 0.0}

  def add_host(self, counts: dict[str, float]) -> None:
    if self.start is not None:
      self.timed_steps += 1
      for name, value in counts.items():
        self.timed[name] += value

  def add_device(self, metrics: dict[str, float]) -> None:
    tokens = metrics["tokens"]
    self.sums["loss"] += metrics["loss"] * tokens
    self.sums["nll"] += metrics["nll"] * tokens
    self.sums["correct"] += metrics["accuracy"] * tokens
    self.sums["tokens"] += tokens
    self.sums["grad_norm"] += metrics["grad_norm"]
    self.steps += 1
    self.learning_rate = metrics["learning_rate"]


class Trainer:
  """One training run in a work directory, ready to `run()` once constructed.

      with Trainer(cfg, workdir, dataset) as trainer:
        summary = trainer.run()

  The constructor prepares the dataset if none is given, restores the latest
  checkpoint (with the data position) and places the state on the devices;
  `close()` (or leaving the `with` block) waits for pending checkpoint saves and
  stops the input thread.
  """

  def __init__(self, cfg: TransformerConfig, workdir: str | os.PathLike,
               dataset: Optional[dataset_lib.Dataset] = None, init_params: Any = None):
    step_lib.check_trainable(cfg)  # before the work directory is made or locked
    self.created = time.time()
    self.cfg = cfg
    self.workdir = pathlib.Path(workdir)
    self.workdir.mkdir(parents=True, exist_ok=True)
    self.is_main = jax.process_index() == 0
    self.num_devices = jax.device_count()
    self.device_kind = jax.devices()[0].device_kind
    self.peak = metrics_lib.peak_flops(self.device_kind, cfg.dtype, cfg.peak_tflops)
    self.train_iter = self.ckpt = self.writer = self.lock = None
    try:
      self.lock = workdir_lib.lock_workdir(self.workdir)
      self._setup(dataset, init_params)
    except BaseException:
      self.close()
      raise

  def _setup(self, dataset: Optional[dataset_lib.Dataset], init_params: Any) -> None:
    cfg = self.cfg
    # --- Input ---
    self.ds = dataset if dataset is not None else dataset_lib.prepare(cfg, str(self.workdir))
    # The micro-batch that fits the device (unless set), and so the accumulation.
    cfg = self.cfg = memory.resolve_max_tokens_per_device(
        cfg, self.num_devices, self.ds.buckets[-1], packed=self.ds.pack_lengths is not None)
    self.accum = dataset_lib.accum_steps(cfg, self.num_devices)
    self.train_iter = self.ds.train_iterator(jax.local_device_count(), self.accum,
                                             jax.process_index(), jax.process_count())

    # --- Model and state ---
    built = step_lib.build(cfg)
    # The dropout key is derived again from the seed on resume; it is never saved.
    init_key, self.dropout_key = jax.random.split(jax.random.key(cfg.seed))
    abstract_state = built.abstract_state()
    num_params = sum(x.size for x in jax.tree.leaves(abstract_state.params))
    log.info("Model: %s parameters; %d devices (%s, %s), %d micro-step(s) per update, dtype %s",
             f"{num_params:,}", self.num_devices, self.device_kind, cfg.parallelism,
             self.accum, cfg.dtype)
    self.ckpt = checkpoint.Checkpointer(self.workdir, cfg)
    restored = self.ckpt.restore_latest(abstract_state)
    if restored is None:
      state = built.init_state(init_key)
      if init_params is not None:  # fine-tuning: another run's params, a fresh optimiser
        state = state.replace(params=matching_params(init_params, abstract_state.params))
        log.info("Starting from the given params (fine-tuning), optimiser and schedule at step 0")
    else:
      state, extras = restored
      self.train_iter.set_state(extras["data"])
      log.info("Resumed from step %d (data position %s)", int(state.step), extras["data"])
    self.start_step = int(state.step)

    # --- Update step ---
    self.devices = built.mapped
    self.state = self.devices.put_state(state)

    # --- Metrics ---
    self.writer = metrics_lib.MetricsWriter(self.workdir, self.start_step, enabled=self.is_main)

  def close(self) -> None:
    """Waits for the asynchronous saves, stops the input thread, closes the metrics."""
    if self.writer is not None:
      self.writer.close()
    if self.ckpt is not None:
      self.ckpt.close()
    if self.train_iter is not None:
      self.train_iter.close()
    if self.lock is not None:
      self.lock.release()

  def __enter__(self) -> "Trainer":
    return self

  def __exit__(self, exc_type, *exc_info) -> None:
    if exc_type is not None and issubclass(exc_type, preemption.SignalledAgain):
      return  # stopping at once: no waiting for a save being written (the next run ignores it)
    self.close()

  # --- Checkpoint --------------------------------------------------------------------

  def save(self, step: int, data_state: dict, interim: bool = False) -> None:
    """Saves the state after `step` (`interim`: off the schedule, on a preemption)."""
    state = self.devices.get(self.state)
    if not bool(_all_finite(state)):
      raise FloatingPointError(
          f"the state after step {step} holds NaN/inf although its loss was finite; "
          f"not saving it (the last good checkpoint is step {self.ckpt.latest_step}). "
          "Lower --config.learning_rate_scale or use float32")
    self.ckpt.maybe_save(step, state, {"data": data_state}, force=True, interim=interim)

  def stop_requested(self, stop: preemption.StopSignals) -> Optional[int]:
    """The signal that asks this run to stop after this step, or None; the same on every
    process (a signal may reach one host before, or without, the others)."""
    return multihost.first_flag("stop", stop.signum)

  def preempted(self, step: int, signum: int) -> preemption.Preempted:
    """Waits for the checkpoint of `step` and returns the exception that ends the run."""
    self.ckpt.wait()
    name = preemption.signal_name(signum)
    return preemption.Preempted(
        f"stopped on {name} after step {step}; saved a checkpoint of step {step} in "
        f"{self.ckpt.directory}: run the same command again to resume", signum)

  # --- Evals -------------------------------------------------------------------------

  def evaluate(self) -> dict[str, float]:
    """Loss, NLL, accuracy and perplexity on the dev set (or its first batches)."""
    outputs = []
    batches = self.ds.dev_batches(jax.local_device_count(), jax.process_index(),
                                  jax.process_count())
    for i, batch in enumerate(batches):
      if self.cfg.num_eval_batches is not None and i >= self.cfg.num_eval_batches:
        break
      outputs.append(self.devices.eval_step(self.state.params, self.devices.put_batch(batch)))
    sums = dict.fromkeys(step_lib.METRIC_SUMS, 0.0)
    for out in jax.device_get([self.devices.get(o) for o in outputs]):
      for name in sums:
        sums[name] += float(out[name])
    return {f"eval_{k}": v for k, v in step_lib.summarize(sums).items()}

  # --- Loop --------------------------------------------------------------------------

  def read_metrics(self, step: int, metrics: Any, window: _Window) -> None:
    """Blocks on one step's metrics; stops the run on a NaN/inf loss or gradient."""
    # A transfer, not a device op: it waits for this step only, never for the next one.
    host = {k: float(v) for k, v in self.devices.fetch(metrics).items()}
    if not (math.isfinite(host["loss"]) and math.isfinite(host["grad_norm"])):
      raise FloatingPointError(
          f"training diverged at step {step}: loss {host['loss']}, gradient norm "
          f"{host['grad_norm']}; stopping without saving this state (the last good "
          f"checkpoint is step {self.ckpt.latest_step}). Lower "
          "--config.learning_rate_scale, raise --config.warmup_steps or check the data")
    window.add_device(host)

  def log_record(self, step: int, window: _Window) -> dict[str, Any]:
    sums = step_lib.summarize({k: window.sums[k] for k in step_lib.METRIC_SUMS})
    record = {"step": step, "train_loss": sums["loss"], "train_nll": sums["nll"],
              "train_accuracy": sums["accuracy"], "train_perplexity": sums["perplexity"],
              "learning_rate": window.learning_rate,
              "grad_norm": window.sums["grad_norm"] / max(window.steps, 1)}
    if window.timed_steps and window.start is not None:
      seconds = time.perf_counter() - window.start
      scale = jax.process_count()  # host counts are this process's share
      record.update({
          "step_time_s": seconds / window.timed_steps,
          "tokens_per_s": window.timed["target_tokens"] * scale / seconds,
          "source_tokens_per_s": window.timed["source_tokens"] * scale / seconds,
          "padded_tokens_per_s": window.timed["padded_tokens"] * scale / seconds,
      })
      utilisation = metrics_lib.mfu(window.timed["flops"] * scale / window.timed_steps,
                                  record["step_time_s"], self.num_devices, self.peak)
      if utilisation is not None:
        record["mfu"] = utilisation
    return record

  def run(self) -> dict[str, Any]:
    """Trains to cfg.num_train_steps; returns the summary `train_and_evaluate` describes.

    Raises preemption.Preempted after saving when SIGTERM or SIGINT arrives.
    """
    bar = tqdm.tqdm(total=self.cfg.num_train_steps, initial=self.start_step, unit="step",
                    dynamic_ncols=True,
                    disable=not (self.is_main and sys.stderr.isatty()))
    try:
      with preemption.StopSignals() as stop:
        summary = self._loop(bar, stop)
        # A signal after the last step's check: training is complete and saved, but the
        # caller (averaging, decoding) must still stop.
        signum = self.stop_requested(stop)
        if signum:
          raise self.preempted(summary["final_step"], signum)
        return summary
    except jax.errors.JaxRuntimeError as e:
      if "RESOURCE_EXHAUSTED" not in str(e):
        raise
      raise memory.DeviceMemoryError(memory.out_of_memory_message(self.cfg, e)) from None
    finally:
      bar.close()

  def _loop(self, bar: tqdm.tqdm, stop: preemption.StopSignals) -> dict[str, Any]:
    cfg = self.cfg
    window, last_record, evals = _Window(), None, None
    total_tokens, total_seconds = 0.0, 0.0
    pending: Optional[tuple[int, Any]] = None  # dispatched, metrics not read yet
    for step in range(self.start_step + 1, cfg.num_train_steps + 1):
      host_batch = next(self.train_iter)
      data_state = self.train_iter.get_state()
      window.add_host({
          "target_tokens": float(np.count_nonzero(host_batch["targets"])),
          "source_tokens": float(np.count_nonzero(host_batch["inputs"])),
          "padded_tokens": float(host_batch["targets"].size),
          "flops": metrics_lib.batch_train_flops(
              cfg, host_batch["inputs"], host_batch["targets"],
              host_batch.get("inputs_segments"), host_batch.get("targets_segments"))})
      self.state, metrics = self.devices.train_step(
          self.state, self.devices.put_batch(host_batch), self.dropout_key)
      # Read the previous step only now, so the device always has work queued.
      if pending is not None:
        self.read_metrics(*pending, window)
      pending = (step, metrics)
      bar.update(1)

      last = step == cfg.num_train_steps
      eval_due = step % cfg.eval_every_steps == 0 or last
      log_due = step % cfg.log_every_steps == 0 or eval_due
      save_due = last or self.ckpt.should_save(step)
      stop_signum = self.stop_requested(stop)
      if step == self.start_step + 1:
        # The first step includes compilation: keep it out of the throughput.
        self.read_metrics(*pending, window)
        pending = None
        window.start_timer()
      if not (log_due or save_due or stop_signum):
        continue
      if pending is not None:
        self.read_metrics(*pending, window)
        pending = None
      if window.start is not None and window.timed_steps:
        total_tokens += window.timed["target_tokens"] * jax.process_count()
        total_seconds += time.perf_counter() - window.start
      if log_due:
        last_record = self.log_record(step, window)  # timed before the eval runs
        evals = self.evaluate() if eval_due else {}
        last_record.update(evals)
        self.writer.write(last_record)
        bar.set_postfix(loss=f"{last_record['train_loss']:.3f}",
                        tok_s=f"{last_record.get('tokens_per_s', 0):.0f}")
      if save_due or stop_signum:
        self.save(step, data_state, interim=not save_due)
      if stop_signum:
        raise self.preempted(step, stop_signum)
      if log_due:
        window = _Window()
      window.start_timer()  # evals and saves stay out of the throughput

    if last_record is None:  # the run had already finished: evaluate for the summary
      evals = self.evaluate()
    return {
        "final_step": self.start_step if last_record is None else last_record["step"],
        "trained_steps": 0 if last_record is None else last_record["step"] - self.start_step,
        "train_loss": None if last_record is None else last_record["train_loss"],
        "dev_loss": evals["eval_loss"],
        "dev_perplexity": evals["eval_perplexity"],
        "dev_accuracy": evals["eval_accuracy"],
        "wall_time_s": time.time() - self.created,
        "tokens_per_s": total_tokens / total_seconds if total_seconds else None,
        "device_kind": self.device_kind,
        "num_devices": self.num_devices,
        "accum_steps": self.accum,
    }


def matching_params(params: Any, expected: Any) -> Any:
  """`params` as float32 arrays, if they have `expected`'s tree and shapes; else ValueError."""
  got = jax.tree_util.tree_flatten_with_path(params)[0]
  want = jax.tree_util.tree_flatten_with_path(expected)[0]
  got_shapes = {jax.tree_util.keystr(k): np.shape(v) for k, v in got}
  for key, leaf in want:
    name = jax.tree_util.keystr(key)
    if got_shapes.get(name) != leaf.shape:
      raise ValueError(f"the given params do not fit this model: {name} is "
                       f"{got_shapes.get(name, 'missing')}, the model needs {leaf.shape}")
  if len(got) != len(want):
    raise ValueError(f"the given params have {len(got)} arrays, the model {len(want)}")
  return jax.tree.map(lambda x, e: np.asarray(x, e.dtype), params, expected)


def train_and_evaluate(cfg: TransformerConfig, workdir: str | os.PathLike,
                       dataset: Optional[dataset_lib.Dataset] = None,
                       init_params: Any = None) -> dict[str, Any]:
  """Trains `cfg.num_train_steps` updates into `workdir` (resuming if it holds a run).

  `dataset`: `dataset_lib.prepare(cfg, workdir)`'s result, prepared here if not given.
  Returns a summary: final_step, trained_steps (by this call: 0 for a run that had
  finished), train_loss (last logged), dev_loss,
  dev_perplexity and dev_accuracy (last evaluation), wall_time_s (set-up and
  training), tokens_per_s (real target tokens per second of training),
  device_kind, num_devices and accum_steps. Raises FloatingPointError, naming
  the step, if the loss diverges. `init_params` (e.g. another run's averaged
  params, for fine-tuning) replace the random initialisation of a new run; a
  run that resumes from its own checkpoint ignores them.
  """
  with Trainer(cfg, workdir, dataset, init_params) as trainer:
    return trainer.run()
