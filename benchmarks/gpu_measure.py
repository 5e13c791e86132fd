"""Everything worth measuring on a lent GPU, in one command of at most 8 minutes.

    PYTHONPATH=$PWD python3 benchmarks/gpu_measure.py /tmp/gpu_figures
    python3 benchmarks/gpu_measure.py OUT --parts=train,decode --budget_s=200  # some parts again
    python3 benchmarks/gpu_measure.py OUT --toy --device=cpu    # tiny sizes: the CPU smoke run

Parts, the most valuable first, each in a subprocess of its own (this process
never starts JAX, so a part that hangs or crashes takes nothing down with it):

  environment   GPU name and memory, driver, JAX/jaxlib/CUDA plugin (and nvidia-*) versions,
                python, date, git commit, a digest of the traced sources
  measure_base  `t2t-compile --measure --config=base --config.dtype=bfloat16`
                (accelerators/measure.py): 25000 tokens per update, step time, tokens/s,
                MFU, peak memory beside the prediction and measured / predicted; beam-4
                decoding of `decode_batch_size` (64) sentences
  measure_big   the same for big
  train         a short real run on the demo corpus (train/trainer.py), first and last loss
  parallelism   base's update under jit(shard_map), beside measure_base's pmap
  decode        beam-4 decoding of base at more batch sizes (measure.decode_speed)

Each part runs under its own time limit (`Part.limit_s`) and all of them under
`--budget_s`; a part that needs more than is left (`Part.needs_s`) is skipped.
The limits are guesses until a first GPU run: its `run` record holds each
part's wall time. Every record is one JSON line, `{"part": name, ...}`,
appended to OUT/figures.jsonl as soon as it is known (a killed run keeps what
it measured); a part that fails writes `{"part": name, "error": one line}`, one
left out `{"part": name, "skipped": why}`, and the run ends with a `run`
record. OUT/logs/<part>.log holds each part's output. Scratch files go under
OUT/scratch and are deleted; the JAX compilation cache is off, so compile
times are cold. Nothing is installed and nothing but the training and
decoding path's packages is imported (no TensorFlow, tensorboardX,
sacremoses). Exit status 1 if a part failed. A summary is printed at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import logging
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time
from typing import Any, Callable, Optional

_ROOT = pathlib.Path(__file__).resolve().parents[1]
FIGURES = "figures.jsonl"
MEASURED_PRESETS = {"measure_base": "base", "measure_big": "big"}
# Distributions whose versions the environment record lists (the CUDA plugin is jax-cuda*).
PACKAGE_PREFIXES = ("jax", "flax", "optax", "orbax", "numpy", "nvidia-", "libtpu",
                    "sentencepiece", "tensorstore")


# What the parts import (a GPU image may lack some): checked once, first, by name.
NEEDED = ("jax", "jaxlib", "flax", "optax", "orbax.checkpoint", "numpy", "sentencepiece",
          "sacrebleu", "tqdm", "absl", "filelock", "matplotlib")


def missing_modules(names: tuple[str, ...] = NEEDED) -> list[str]:
  """The modules of `names` this Python cannot import (found by name: nothing is imported,
  so this process still never starts JAX)."""
  import importlib.util  # pylint: disable=import-outside-toplevel

  def found(name):
    try:
      return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:   # a dotted name whose package is absent
      return False
  return [name for name in names if not found(name)]


@dataclasses.dataclass(frozen=True)
class Part:
  name: str
  limit_s: float   # the longest it may run
  needs_s: float   # less time left than this: skipped


PARTS = (
    Part("environment", limit_s=60, needs_s=15),
    Part("measure_base", limit_s=180, needs_s=90),
    Part("measure_big", limit_s=180, needs_s=90),
    Part("train", limit_s=150, needs_s=60),
    Part("parallelism", limit_s=120, needs_s=50),
    Part("decode", limit_s=150, needs_s=40),
)


@dataclasses.dataclass(frozen=True)
class Sizes:
  """How much each part does."""
  model: dict[str, Any]        # config fields over base and big
  measure_steps: int           # updates timed
  warmup: int                  # updates run before
  train_model: dict[str, Any]  # config fields over demo
  train_steps: int
  train_pairs: int             # demo corpus pairs generated for training
  dev_pairs: int
  log_every: int               # steps between the loss curve's points
  decode_sentences: tuple[int, ...]  # beside measure_base's decode_batch_size
  decode_repeats: int


GPU = Sizes(model={}, measure_steps=20, warmup=2, train_model={}, train_steps=300,
            # 300 updates of 2048 tokens read about 40k pairs of ~15 pieces a side.
            train_pairs=50_000, dev_pairs=1000, log_every=25,
            decode_sentences=(1, 16, 256), decode_repeats=3)
_TINY = dict(num_layers=1, d_model=32, d_ff=64, num_heads=2)
TOY = Sizes(model=dict(_TINY, vocab_size=64, max_source_length=16, max_target_length=16,
                       max_len=32, tokens_per_batch=512, max_tokens_per_device=32,
                       decode_batch_size=2),
            measure_steps=1, warmup=1,
            # Rows of at most 32 tokens: one batch shape, one compilation.
            train_model=dict(_TINY, vocab_size=200, tokens_per_batch=512, warmup_steps=10,
                             max_len=32, max_source_length=32, max_target_length=32),
            train_steps=30, train_pairs=2000, dev_pairs=20, log_every=10,
            decode_sentences=(1,), decode_repeats=1)


# --- The parts (each runs in its own worker process) -------------------------------------

@dataclasses.dataclass(frozen=True)
class Context:
  sizes: Sizes
  dtype: str
  scratch: pathlib.Path
  figures: pathlib.Path

  def emit(self, record: dict[str, Any]) -> None:
    write_record(self.figures, record)


def environment(ctx: Context) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  import jaxlib  # pylint: disable=import-outside-toplevel
  from t2t_jax.inference import stored_programs  # pylint: disable=import-outside-toplevel
  record = {
      "part": "environment", "date": datetime.datetime.now(datetime.timezone.utc)
      .isoformat(timespec="seconds"), "python": sys.version.split()[0],
      "host": platform.platform(), "cpus": os.cpu_count(), "jax": jax.__version__,
      "jaxlib": jaxlib.__version__, "packages": _packages(), "git_commit": _git_commit(),
      "t2t_jax_sources": stored_programs.source_digest()[:16], "driver": _driver(),
      "xla_flags": os.environ.get("XLA_FLAGS"), "dtype": ctx.dtype,
      "toy": ctx.sizes is TOY}
  try:
    devices = jax.local_devices()
    stats = devices[0].memory_stats() or {}
    record.update(platform=devices[0].platform, device_kind=devices[0].device_kind,
                  devices=len(devices), memory_bytes=stats.get("bytes_limit"),
                  platform_version=devices[0].client.platform_version,
                  jax_environment=jax.print_environment_info(return_string=True))
  except Exception as e:  # the versions above are what explains a device JAX cannot start
    record.update(platform=None, device_error=f"{type(e).__name__}: {_one_line(e)}")
  ctx.emit(record)


def measure_preset(ctx: Context, part: str) -> None:
  from t2t_jax import configs  # pylint: disable=import-outside-toplevel
  from t2t_jax.accelerators import measure  # pylint: disable=import-outside-toplevel
  preset = MEASURED_PRESETS[part]
  cfg = configs.get_config(preset, dtype=ctx.dtype, **ctx.sizes.model)
  report = measure.measure(cfg, ctx.sizes.measure_steps, ctx.sizes.warmup)
  ctx.emit({"part": part, "preset": preset, **report})


def train(ctx: Context) -> None:
  from t2t_jax import configs  # pylint: disable=import-outside-toplevel
  from t2t_jax.data import dataset  # pylint: disable=import-outside-toplevel
  from t2t_jax.corpora import demo  # pylint: disable=import-outside-toplevel
  from t2t_jax.train import trainer  # pylint: disable=import-outside-toplevel
  s = ctx.sizes
  start = time.perf_counter()
  # The demo corpus, only as much as the run reads, as text files.
  paths = demo.write_corpus(str(ctx.scratch / "corpus"), num_train=s.train_pairs,
                            num_dev=s.dev_pairs, num_test=s.dev_pairs)
  files = {f"{split}_files": ",".join(pair) for split, pair in paths.items()}
  cfg = configs.get_config("demo", dtype=ctx.dtype, num_train_steps=s.train_steps,
                           log_every_steps=s.log_every, compilation_cache=False,
                           dataset="text", **files, **s.train_model)
  workdir = ctx.scratch / "workdir"
  ds = dataset.prepare(cfg, str(workdir))
  prepare_s = time.perf_counter() - start
  summary = trainer.train_and_evaluate(cfg, workdir, ds)
  with open(workdir / "metrics.jsonl", encoding="utf-8") as f:  # a run's documented output
    logged = [r for r in map(json.loads, f) if "train_loss" in r]
  times = sorted(r["step_time_s"] for r in logged if "step_time_s" in r)
  ctx.emit({
      "part": "train", "preset": "demo", "dtype": ctx.dtype, "steps": summary["final_step"],
      "train_pairs": s.train_pairs, "first_loss": logged[0]["train_loss"],
      "last_loss": logged[-1]["train_loss"],
      "loss_fell": logged[-1]["train_loss"] < logged[0]["train_loss"],
      # The median window: the first includes no compilation, but may include a slow start.
      "steps_per_s": 1 / times[len(times) // 2] if times else None,
      "tokens_per_s": summary["tokens_per_s"], "dev_loss": summary["dev_loss"],
      "dev_accuracy": summary["dev_accuracy"], "prepare_s": prepare_s,
      "train_s": time.perf_counter() - start - prepare_s,
      "device_kind": summary["device_kind"], "devices": summary["num_devices"],
      "accum_steps": summary["accum_steps"],
      "curve": [[r["step"], r["train_loss"], r.get("step_time_s")] for r in logged]})


def parallelism(ctx: Context) -> None:
  from t2t_jax import configs  # pylint: disable=import-outside-toplevel
  from t2t_jax.accelerators import measure  # pylint: disable=import-outside-toplevel
  cfg = configs.get_config("base", dtype=ctx.dtype, parallelism="shard_map", **ctx.sizes.model)
  figures, _, _ = measure.time_updates(cfg, ctx.sizes.measure_steps, ctx.sizes.warmup)
  # measure_base timed the same update under pmap (the config's default), in its own process.
  pmap = [r for r in read_records(ctx.figures)
          if r["part"] == "measure_base" and "step_s" in r and r["dtype"] == ctx.dtype]
  pmap_s = pmap[-1]["step_s"] if pmap else None
  ctx.emit({"part": "parallelism", "preset": "base", "dtype": ctx.dtype,
            "parallelism": "shard_map", **figures, "pmap_step_s": pmap_s,
            "shard_map_over_pmap": figures["step_s"] / pmap_s if pmap_s else None})


def decode(ctx: Context) -> None:
  from t2t_jax import configs  # pylint: disable=import-outside-toplevel
  from t2t_jax.accelerators import measure  # pylint: disable=import-outside-toplevel
  cfg = configs.get_config("base", dtype=ctx.dtype, **ctx.sizes.model)
  for sentences in ctx.sizes.decode_sentences:  # one record each: a timeout keeps the first
    ctx.emit({"part": "decode", "preset": "base", "dtype": ctx.dtype,
              **measure.decode_speed(cfg, sentences, ctx.sizes.decode_repeats)})


WORKERS: dict[str, Callable[[Context], None]] = {
    "environment": environment, "measure_base": lambda ctx: measure_preset(ctx, "measure_base"),
    "measure_big": lambda ctx: measure_preset(ctx, "measure_big"), "train": train,
    "parallelism": parallelism, "decode": decode}


def _packages() -> dict[str, str]:
  found = {}
  for dist in importlib.metadata.distributions():
    name = (dist.metadata["Name"] or "").lower()
    if name.startswith(PACKAGE_PREFIXES):
      found[name] = dist.version
  return dict(sorted(found.items()))


def _run_text(argv: list[str]) -> Optional[str]:
  """A command's stdout, stripped; None if it is missing or fails."""
  try:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=True)
  except (OSError, subprocess.SubprocessError):
    return None
  return done.stdout.strip()


def _git_commit() -> Optional[str]:
  commit = _run_text(["git", "-C", str(_ROOT), "rev-parse", "HEAD"])
  changed = _run_text(["git", "-C", str(_ROOT), "status", "--porcelain", "--untracked-files=no"])
  return commit and commit + ("-dirty" if changed else "")


def _driver() -> Optional[str]:
  """nvidia-smi's GPUs (name, driver, memory, compute capability), else the kernel
  module's version line; None without an NVIDIA driver."""
  smi = _run_text(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                   "--format=csv,noheader"])
  if smi:
    return smi
  try:
    with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
      return f.readline().strip()
  except OSError:
    return None


def _one_line(error: BaseException) -> str:
  from t2t_jax import errors  # pylint: disable=import-outside-toplevel
  return errors.one_line(error)


def worker(args: argparse.Namespace) -> None:
  """Runs one part in this process; its failure becomes that part's error record."""
  from t2t_jax.runtime import platform as platform_lib  # pylint: disable=import-outside-toplevel
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
  out = pathlib.Path(args.out)
  ctx = Context(TOY if args.toy else GPU, args.dtype, out / "scratch" / args.worker,
                out / FIGURES)
  platform_lib.cpu_without_accelerators()  # no plugin tracebacks on a host without any
  try:
    if args.worker != "environment":  # which records what JAX finds, whatever it is
      platform_lib.select(args.device)
    WORKERS[args.worker](ctx)
  except Exception as e:
    ctx.emit({"part": args.worker, "error": f"{type(e).__name__}: {_one_line(e)}"})
    raise


# --- The driver: one subprocess a part, under the budget ---------------------------------

def write_record(path: pathlib.Path, record: dict[str, Any]) -> None:
  """Appends one JSON line and closes the file, so that a killed run keeps it."""
  line = json.dumps(record, default=lambda v: v.item() if hasattr(v, "item") else str(v))
  with open(path, "a", encoding="utf-8") as f:
    f.write(line + "\n")


def read_records(path: pathlib.Path, offset: int = 0) -> list[dict[str, Any]]:
  """The records from byte `offset` on ([] without the file)."""
  try:
    with open(path, "rb") as f:
      f.seek(offset)
      return [json.loads(line) for line in f.read().decode("utf-8").splitlines() if line]
  except FileNotFoundError:
    return []


def _size(path: pathlib.Path) -> int:
  return path.stat().st_size if path.exists() else 0


def _last_line(log: pathlib.Path) -> str:
  lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
  return lines[-1] if lines else "no output"


def run_part(part: Part, argv: list[str], out: pathlib.Path, timeout_s: float,
             env: dict[str, str]) -> dict[str, Any]:
  """Runs one part's command; returns its outcome, having written its error record if it
  failed without writing one itself."""
  figures, log = out / FIGURES, out / "logs" / f"{part.name}.log"
  offset, start = _size(figures), time.perf_counter()
  error = None
  with open(log, "w", encoding="utf-8") as output:
    try:
      code = subprocess.run(argv, stdout=output, stderr=subprocess.STDOUT, env=env,
                            timeout=timeout_s, check=False).returncode
    except subprocess.TimeoutExpired:
      code, error = None, f"timed out after {timeout_s:.0f} s"
  wall_s = time.perf_counter() - start
  written = [r for r in read_records(figures, offset) if r.get("part") == part.name]
  if code not in (0, None):
    error = f"exited with status {code}: {_last_line(log)}"
  elif code == 0 and not written:
    error = "exited without writing a record"
  if error is not None and not any("error" in r for r in written):
    write_record(figures, {"part": part.name, "error": error + f" (logs/{part.name}.log)",
                           "wall_s": wall_s})
  shutil.rmtree(out / "scratch" / part.name, ignore_errors=True)
  return {"part": part.name, "status": "ok" if error is None else "error", "wall_s": wall_s}


def run_parts(parts: list[Part], out: pathlib.Path, budget_s: float,
              command: Callable[[Part], list[str]], env: dict[str, str]) -> list[dict[str, Any]]:
  """Each part in turn, the time left permitting; the outcomes, also as the `run` record."""
  (out / "logs").mkdir(parents=True, exist_ok=True)
  deadline = time.perf_counter() + budget_s
  outcomes = []
  for part in parts:
    left = deadline - time.perf_counter()
    if left < part.needs_s:
      write_record(out / FIGURES, {"part": part.name, "skipped": (
          f"needs {part.needs_s:.0f} s, {max(left, 0):.0f} s left of --budget_s={budget_s:g}")})
      outcomes.append({"part": part.name, "status": "skipped", "wall_s": 0.0})
      continue
    outcomes.append(run_part(part, command(part), out, min(part.limit_s, left), env))
  write_record(out / FIGURES, {"part": "run", "budget_s": budget_s, "outcomes": outcomes})
  shutil.rmtree(out / "scratch", ignore_errors=True)
  return outcomes


def child_environment() -> dict[str, str]:
  """This checkout first on the path, no compilation cache, unbuffered logs."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
  env["T2T_JAX_COMPILATION_CACHE"] = "off"
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  env["PYTHONUNBUFFERED"] = "1"
  return env


# --- The summary -----------------------------------------------------------------------------

def _gib(n: Optional[float]) -> str:
  return "?" if n is None else f"{n / 2**30:.1f} GiB"


def _pct(x: Optional[float]) -> str:
  return "n/a" if x is None else f"{100 * x:.1f}%"


def _measured(r: dict[str, Any]) -> str:
  d, ratio = r["decode"], (r["measured_over_predicted"] or {}).get("step_s")
  text = (f"{r['preset']} {r['dtype']} x{r['devices']}: {r['step_s']:.4f} s/update "
          f"({r['micro_steps']} micro-step(s)), {r['tokens_per_s']:,.0f} tokens/s, "
          f"MFU {_pct(r['mfu'])}, peak {_gib(r['peak_bytes'])}; ")
  text += ("no prediction" if ratio is None else
           f"predicted {r['predicted']['step_s']:.4f} s (measured/predicted {ratio:.2f})")
  return text + (f"; beam {d['beam_size']} x {d['sentences']} sentences: "
                 f"{d['sentences_per_s']:.1f} sentences/s")


def summary_line(r: dict[str, Any]) -> str:
  name = r["part"]
  if "error" in r:
    return f"{name}: ERROR {r['error']}"
  if "skipped" in r:
    return f"{name}: skipped ({r['skipped']})"
  if name == "environment":
    where = (f"{r['devices']} x {r['device_kind']} ({r['platform']}, {_gib(r['memory_bytes'])})"
             if r["platform"] else f"no device: {r['device_error']}")
    plugins = ", ".join(f"{k} {v}" for k, v in r["packages"].items() if k.startswith("jax-"))
    return (f"environment: {where}; driver {r['driver']}; jax {r['jax']} (jaxlib "
            f"{r['jaxlib']}{', ' + plugins if plugins else ''}); python {r['python']}; "
            f"commit {r['git_commit']}; {r['date']}")
  if name in MEASURED_PRESETS:
    return f"{name}: {_measured(r)}"
  if name == "train":
    rate = "?" if r["steps_per_s"] is None else f"{r['steps_per_s']:.1f}"
    return (f"train: {r['preset']} {r['dtype']}, {r['steps']} steps: loss {r['first_loss']:.3f} "
            f"-> {r['last_loss']:.3f} ({'fell' if r['loss_fell'] else 'DID NOT FALL'}), "
            f"{rate} steps/s")
  if name == "parallelism":
    ratio = r["shard_map_over_pmap"]
    return (f"parallelism: shard_map {r['step_s']:.4f} s/update"
            + ("" if ratio is None else f", pmap {r['pmap_step_s']:.4f} s: shard_map/pmap "
                                        f"{ratio:.2f}"))
  if name == "decode":
    return (f"decode: beam {r['beam_size']} x {r['sentences']} sentences: "
            f"{r['sentences_per_s']:.1f} sentences/s, {r['target_tokens_per_s']:,.0f} "
            "target tokens/s")
  return f"{name}: {json.dumps(r)[:200]}"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("out", help="folder for figures.jsonl and logs/ (appended to)")
  parser.add_argument("--budget_s", type=float, default=450,
                      help="the whole run's deadline; parts that no longer fit are skipped")
  parser.add_argument("--parts", default=",".join(p.name for p in PARTS),
                      help="which parts (run in the order above)")
  parser.add_argument("--device", default="gpu", choices=("cpu", "gpu", "tpu"),
                      help="the kind of device every part must run on")
  parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
  parser.add_argument("--toy", action="store_true",
                      help="tiny models, 1 timed update, 30 training steps: the CPU smoke run")
  parser.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.worker:
    sys.path.insert(0, str(_ROOT))
    worker(args)
    return
  missing = missing_modules()
  if missing:
    sys.exit(f"gpu_measure: {', '.join(missing)} cannot be imported here; install "
             f"{'it' if len(missing) == 1 else 'them'} (pip install -r requirements-core.txt "
             "takes the tested ranges) and run again: no part was run")
  wanted = set(args.parts.split(","))
  unknown = wanted - {p.name for p in PARTS}
  if unknown:
    parser.error(f"unknown --parts {sorted(unknown)}; choose from {[p.name for p in PARTS]}")
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  offset = _size(out / FIGURES)
  shared = [str(out), f"--device={args.device}", f"--dtype={args.dtype}"] + (
      ["--toy"] if args.toy else [])
  outcomes = run_parts([p for p in PARTS if p.name in wanted], out, args.budget_s,
                       lambda p: [sys.executable, __file__, *shared, f"--worker={p.name}"],
                       child_environment())
  for record in read_records(out / FIGURES, offset):
    if record["part"] != "run":
      print(summary_line(record))
  counts = {s: sum(o["status"] == s for o in outcomes) for s in ("ok", "error", "skipped")}
  print(f"{counts['ok']} of {len(outcomes)} parts measured, {counts['error']} failed, "
        f"{counts['skipped']} skipped in {sum(o['wall_s'] for o in outcomes):.0f} s; "
        f"figures in {out / FIGURES}")
  if counts["error"]:
    sys.exit(1)


if __name__ == "__main__":
  main()
