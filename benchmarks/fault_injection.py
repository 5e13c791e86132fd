"""Fault injection: kill a demo-sized run at random moments, restart it, compare with an unkilled one.

    python benchmarks/fault_injection.py [--kills=20] [--signals=KILL,TERM] [--seed=0]
        [--faults=unreadable] [--steps=200] [--workdir=DIR] [--keep]

Runs the real experiment script (`experiments/wmt14_ende.py --config=demo`, with a
1-layer model on a small generated corpus, a checkpoint every 5 steps and a
metrics line every step) once without interruption, then, for each signal, again
in a fresh work directory, sending the signal at `--kills` random moments and
restarting the same command after each, until it finishes. The moments are of
three kinds, in a seeded random order: during start-up (a random delay up to
the reference run's start-up time), during training (once the log shows a
randomly drawn step, plus up to 0.5 s), and during a checkpoint write (as soon as
a temporary orbax directory appears).

A kill counts as survived when the run restarted after it ended normally
(killed by the next signal, or finished) and every metrics line written so far
equals the unkilled run's, bit for bit (loss, accuracy, learning rate, gradient
norm of every step: the whole trajectory); the last one also needs the final
state (params, Adam moments, step), the data position, the averaged params and
the BLEU scores to be identical to the unkilled run's. Prints, per signal,
"survived N/M kills".

`--faults=unreadable` (the default; `--faults=` for none): an unreadable newest
checkpoint. The run is killed (SIGKILL) once its second checkpoint is on disk,
the array files of that newest checkpoint lose their read permission (mode
000), and the run is restarted: a real EACCES (as root, the restart runs under
`setpriv` without the capabilities that let root read anything). It must stop
with exit status 1 and one line naming the step, the file and the cause, set
nothing aside and move nothing. With the permissions given back and restarted
once more, it must resume from that newest step and finish identical to the
unkilled run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Logged values that depend on the computation only (not on the wall clock).
DETERMINISTIC = ("train_loss", "train_nll", "train_accuracy", "train_perplexity",
                 "learning_rate", "grad_norm", "eval_loss", "eval_nll", "eval_accuracy",
                 "eval_perplexity")
EVERY = 5
STEP_LINE = re.compile(r"\bstep (\d+):")


def write_corpus(directory: pathlib.Path) -> dict:
  """A small generated corpus as text files; returns the config fields naming them."""
  from t2t_jax.corpora import demo  # pylint: disable=g-import-not-at-top
  pairs = demo.generate(2040, seed=0, min_words=3, max_words=8)
  directory.mkdir(parents=True, exist_ok=True)
  files = {}
  for split, chunk in {"dev": pairs[:20], "test": pairs[20:40], "train": pairs[40:]}.items():
    for side, lang in enumerate(("en", "de")):
      (directory / f"{split}.{lang}").write_text("".join(p[side] + "\n" for p in chunk))
    files[f"{split}_files"] = f"{directory}/{split}.en,{directory}/{split}.de"
  return files


def command(workdir: pathlib.Path, files: dict, steps: int) -> list[str]:
  overrides = dict(dataset="text", **files, vocab_size=300, num_layers=1, d_model=32,
                   d_ff=64, num_heads=2, max_len=32, max_source_length=16,
                   max_target_length=16, tokens_per_batch=256, max_tokens_per_device=256,
                   num_train_steps=steps, warmup_steps=20, log_every_steps=1,
                   eval_every_steps=100, num_eval_batches=1, checkpoint_every_steps=EVERY,
                   average_last=2, beam_size=2, decode_batch_size=32)
  return [sys.executable, str(ROOT / "experiments" / "wmt14_ende.py"), "--config=demo",
          f"--workdir={workdir}", *(f"--config.{k}={v}" for k, v in overrides.items())]


def environment(cache: pathlib.Path) -> dict:
  return {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
          "TF_CPP_MIN_LOG_LEVEL": "2", "JAX_COMPILATION_CACHE_DIR": str(cache),
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
          "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def metrics(workdir: pathlib.Path) -> dict[int, dict]:
  """Deterministic fields per step; a line cut short by a kill is left out."""
  path = workdir / "metrics.jsonl"
  records = {}
  if path.exists():
    for line in path.read_text().splitlines():
      try:
        record = json.loads(line)
      except ValueError:
        continue
      records[record["step"]] = {k: record[k] for k in DETERMINISTIC if k in record}
  return records


def partial_checkpoints(workdir: pathlib.Path) -> list[pathlib.Path]:
  found = []
  for name in ("checkpoints", "averaged"):
    directory = workdir / name
    if directory.is_dir():
      found += [p for p in directory.iterdir() if "tmp" in p.name]
  return found


def logged_step(log: pathlib.Path) -> int:
  steps = STEP_LINE.findall(log.read_text(errors="replace")) if log.exists() else []
  return int(steps[-1]) if steps else 0


class Incarnation:
  """One process of the run, its stderr in a file (a pipe could fill up and stall it)."""

  def __init__(self, cmd: list[str], env: dict, log: pathlib.Path):
    self.log = log
    self.started = time.monotonic()
    with open(log, "w") as stderr:
      self.process = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                      stderr=stderr)

  def running(self) -> bool:
    return self.process.poll() is None

  def wait_until(self, condition, poll: float = 0.01, timeout: float = 900.0) -> bool:
    """Polls `condition` every `poll` seconds; False if the process ended first."""
    deadline = time.monotonic() + timeout
    while self.running():
      if condition():
        return True
      if time.monotonic() > deadline:
        raise TimeoutError(f"condition not met in {timeout} s; see {self.log}")
      time.sleep(poll)
    return False


def run_reference(cmd, env, log) -> tuple[float, float]:
  """Runs uninterrupted; returns (seconds to the first logged step, total seconds)."""
  inc = Incarnation(cmd, env, log)
  inc.wait_until(lambda: logged_step(log) > 0)
  first = time.monotonic() - inc.started
  if inc.process.wait() != 0:
    raise SystemExit(f"the reference run failed; see {log}")
  return first, time.monotonic() - inc.started


def final_state(workdir: pathlib.Path):
  from t2t_jax.runtime import averaging  # pylint: disable=g-import-not-at-top
  from t2t_jax.runtime import checkpoint  # pylint: disable=g-import-not-at-top
  from t2t_jax.runtime import workdir as workdir_lib
  from t2t_jax.train import step as step_lib
  cfg = workdir_lib.load_config(workdir)
  with checkpoint.Checkpointer(workdir, cfg) as ckpt:
    state, extras = ckpt.restore_latest(step_lib.build(cfg).abstract_state())
  averaged = averaging.load_params(workdir, averaged=True)
  bleu = json.loads((workdir / "results.json").read_text())["bleu"]
  return state, extras["data"], averaged, bleu


def same_final(reference: pathlib.Path, faulted: pathlib.Path) -> list[str]:
  """What differs between the two finished runs ([] when nothing does)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  ref, new = final_state(reference), final_state(faulted)
  problems = []
  for what, a, b in (("state", ref[0], new[0]), ("averaged params", ref[2], new[2])):
    leaves_a = jax.tree_util.tree_leaves_with_path(a)
    leaves_b = jax.tree_util.tree_leaves_with_path(b)
    if [p for p, _ in leaves_a] != [p for p, _ in leaves_b]:
      problems.append(f"{what}: different structure")
      continue
    for (path, x), (_, y) in zip(leaves_a, leaves_b):
      if not np.array_equal(np.asarray(x), np.asarray(y)):
        problems.append(f"{what} {jax.tree_util.keystr(path)} differs")
  if ref[1] != new[1]:
    problems.append(f"data position {new[1]} != {ref[1]}")
  if ref[3] != new[3]:
    problems.append(f"BLEU {new[3]} != {ref[3]}")
  return problems


def checkpoint_names(workdir: pathlib.Path) -> list[str]:
  """The entries of WORKDIR/checkpoints that are finished or set-aside steps."""
  directory = workdir / "checkpoints"
  names = [p.name for p in directory.iterdir()] if directory.is_dir() else []
  step = lambda n: int(n.partition(".")[0]) if n.partition(".")[0].isdigit() else -1
  return sorted((n for n in names if "tmp" not in n), key=lambda n: (step(n), n))


def unreadable_newest(cmd, env, workdir: pathlib.Path, reference: dict) -> dict:
  """Kill after the second checkpoint; restart unable to read it; restart with the fault gone."""
  logs = [workdir.parent / f"{workdir.name}.{n}.log" for n in range(3)]
  first = Incarnation(cmd, env, logs[0])
  first.wait_until(lambda: str(2 * EVERY) in checkpoint_names(workdir))
  first.process.send_signal(signal.SIGKILL)
  first.process.wait()
  before = checkpoint_names(workdir)
  newest = max(int(n) for n in before if n.isdigit())
  arrays = [p for p in (workdir / "checkpoints" / str(newest)).rglob("*")
            if p.is_file() and p.parent.name == "d"]
  modes = {p: p.stat().st_mode for p in arrays}
  for path in arrays:
    path.chmod(0)
  # Root reads any file: the restart runs without the capabilities that allow it.
  no_override = (["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
                 if os.geteuid() == 0 else [])
  faulted = Incarnation(no_override + cmd, env, logs[1])
  faulted_rc = faulted.process.wait(timeout=900)
  faulted_s = time.monotonic() - faulted.started
  after_fault = checkpoint_names(workdir)
  for path, mode in modes.items():
    if path.exists():
      path.chmod(mode)
  text = logs[1].read_text(errors="replace")
  errors = [line for line in text.splitlines() if line.startswith("error:")]
  healed = Incarnation(cmd, env, logs[2])
  healed_rc = healed.process.wait(timeout=900)
  resumed = re.findall(r"Resumed from step (\d+)", logs[2].read_text(errors="replace"))
  problems = []
  if faulted_rc != 1 or len(errors) != 1 or f"checkpoint step {newest} (" not in errors[0]:
    problems.append(f"the faulted run ended with status {faulted_rc} and {errors}; see {logs[1]}")
  if after_fault != before:
    problems.append(f"the faulted run changed the checkpoints: {before} -> {after_fault}")
  if resumed != [str(newest)]:
    problems.append(f"the run resumed from {resumed}, not step {newest}; see {logs[2]}")
  if healed_rc != 0:
    problems.append(f"the run after the fault failed with status {healed_rc}; see {logs[2]}")
  else:
    logged = metrics(workdir)
    if logged != {s: reference.get(s) for s in logged}:
      problems.append("metrics differ from the reference")
    problems += same_final(workdir.parent / "reference", workdir)
  return {"newest": newest, "files": len(arrays),
          "attempts": text.count("Could not read checkpoint step") + 1,
          "faulted_s": faulted_s, "faulted_rc": faulted_rc, "message": errors[:1],
          "set_aside": [n for n in checkpoint_names(workdir) if "corrupt" in n],
          "before": before, "after_fault": after_fault, "resumed": resumed,
          "problems": problems}


def kill_plan(kills: int, steps: int, rng: random.Random) -> list[tuple[str, float]]:
  """(kind, parameter) per kill: start-up (fraction of start-up time), training (step), checkpoint."""
  kinds = (["checkpoint"] * (kills // 4) + ["startup"] * (kills // 5))
  kinds += ["training"] * (kills - len(kinds))
  rng.shuffle(kinds)
  targets = iter(sorted(rng.sample(range(1, steps - EVERY), kinds.count("training"))))
  return [(kind, next(targets) if kind == "training" else rng.random()) for kind in kinds]


def inject(signum: int, kills: int, cmd, env, workdir: pathlib.Path, reference: dict,
           startup_s: float, steps: int, rng: random.Random) -> dict:
  plan = kill_plan(kills, steps, rng)
  counts = {"startup": 0, "training": 0, "checkpoint": 0, "partial": 0}
  survived, delivered, problems = 0, 0, []
  for n in range(kills + 10):
    log = workdir.parent / f"{workdir.name}.{n}.log"
    inc = Incarnation(cmd, env, log)
    kind, param = plan[delivered] if delivered < len(plan) else (None, None)
    if kind == "startup":
      inc.wait_until(lambda: time.monotonic() - inc.started > param * startup_s)
    elif kind == "training":
      inc.wait_until(lambda: logged_step(log) >= param)
      # The start-up of a restart (compilation cache warm) is what a start-up kill
      # must fall into, not the reference run's cold one.
      startup_s = min(startup_s, time.monotonic() - inc.started)
      time.sleep(rng.uniform(0.0, 0.5))
    elif kind == "checkpoint":
      inc.wait_until(lambda: bool(partial_checkpoints(workdir)), poll=0.001)
    if kind is not None and inc.running():
      inc.process.send_signal(signum)
      delivered += 1
      counts[kind] += 1
    rc = inc.process.wait(timeout=600)
    killed = rc in (-signum, 128 + signum)
    if kind == "checkpoint" and killed and partial_checkpoints(workdir):
      counts["partial"] += 1
    logged = metrics(workdir)
    ok = killed or rc == 0
    if not ok:
      problems.append(f"run {n} failed with exit status {rc}; see {log}")
    if logged != {s: reference.get(s) for s in logged}:
      ok = False
      problems.append(f"run {n} logged metrics that differ from the reference")
    if rc == 0:
      final_problems = same_final(workdir.parent / "reference", workdir)
      problems += final_problems
      ok = ok and not final_problems
    if n > 0:  # this run judges the kill before it
      survived += ok
    if not killed:
      break
  return {"signal": signal.Signals(signum).name, "delivered": delivered, "planned": kills,
          "survived": survived, "restarts": n, "counts": counts, "problems": problems}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--kills", type=int, default=20)
  parser.add_argument("--signals", default="KILL,TERM", help="comma-separated: KILL, TERM, INT")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--faults", default="unreadable",
                      help="comma-separated: unreadable (the newest checkpoint); empty: none")
  parser.add_argument("--steps", type=int, default=200, help="training steps of the run")
  parser.add_argument("--workdir", default=None, help="default: a temporary directory")
  parser.add_argument("--keep", action="store_true", help="keep the work directories")
  args = parser.parse_args()
  signums = [getattr(signal, "SIG" + name.strip().upper())
             for name in args.signals.split(",") if name.strip()]
  faults = [name.strip() for name in args.faults.split(",") if name.strip()]
  if set(faults) - {"unreadable"}:
    parser.error(f"unknown --faults={args.faults}; the faults are: unreadable")
  base = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="fault_injection_"))
  base.mkdir(parents=True, exist_ok=True)
  files = write_corpus(base / "corpus")
  env = environment(base / "jax_cache")
  rng = random.Random(args.seed)

  start = time.monotonic()
  ref_dir = base / "reference"
  startup_s, total_s = run_reference(command(ref_dir, files, args.steps), env,
                                     base / "reference.log")
  reference = metrics(ref_dir)
  print(f"uninterrupted run: {total_s:.0f} s, first step logged after {startup_s:.0f} s",
        flush=True)
  results = []
  for signum in signums:
    workdir = base / f"killed_{signal.Signals(signum).name}"
    result = inject(signum, args.kills, command(workdir, files, args.steps), env, workdir,
                    reference, startup_s, args.steps, rng)
    results.append(result)
    c = result["counts"]
    print(f"{result['signal']}: survived {result['survived']}/{result['delivered']} kills "
          f"({c['startup']} in start-up, {c['training']} in training, {c['checkpoint']} "
          f"during a checkpoint write, {c['partial']} of which left a partial checkpoint); "
          f"{result['restarts']} restarts; final state, data position, averaged params and "
          f"BLEU {'identical' if not result['problems'] else 'NOT identical'} to the "
          f"uninterrupted run", flush=True)
    for problem in result["problems"]:
      print("  problem:", problem)
  if "unreadable" in faults:
    workdir = base / "unreadable"
    result = unreadable_newest(command(workdir, files, args.steps), env, workdir, reference)
    results.append(result)
    print(f"unreadable newest checkpoint (step {result['newest']}, its {result['files']} "
          "array files without read permission): the "
          f"restart stopped after {result['attempts']} attempts in {result['faulted_s']:.0f} s "
          f"with exit status {result['faulted_rc']}: {result['message']}; checkpoints "
          f"{result['before']} before, {result['after_fault']} after, set aside: "
          f"{result['set_aside'] or 'none'}; with the fault gone it resumed from step "
          f"{', '.join(result['resumed']) or 'none'} and finished "
          f"{'identical' if not result['problems'] else 'NOT identical'} to the uninterrupted "
          "run", flush=True)
    for problem in result["problems"]:
      print("  problem:", problem)
  print(f"total {time.monotonic() - start:.0f} s; work directories in {base}")
  if not args.keep and not args.workdir:
    shutil.rmtree(base, ignore_errors=True)
  failed = any(r["problems"] or r.get("survived", args.kills) < args.kills
               or r.get("delivered", args.kills) < args.kills for r in results)
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  main()
