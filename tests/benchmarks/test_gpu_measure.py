"""benchmarks/gpu_measure.py's driver: a part that crashes, hangs or writes nothing leaves an
error record and the next part runs; one that no longer fits the budget is skipped. Its toy
run with every part is in test_smoke.py."""

import json
import os
import pathlib
import re
import runpy
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_measure.py"
gpu_measure = runpy.run_path(str(SCRIPT), run_name="gpu_measure")
Part = gpu_measure["Part"]


def _records(out: pathlib.Path) -> list[dict]:
  return [json.loads(line) for line in (out / "figures.jsonl").open()]


def _writes(name: str, extra: str = "") -> str:
  """Python code that appends a record of part `name` to the figures, then runs `extra`."""
  return (f"import json, sys; open(sys.argv[1], 'a').write(json.dumps("
          f"{{'part': {name!r}, 'x': 1}}) + '\\n'); {extra}")


def test_failures_are_recorded_and_the_next_part_still_runs(tmp_path):
  code = {
      "crash": "raise ValueError('no GPU here')",
      "hang": "import time; time.sleep(60)",
      "silent": "pass",
      "own_error": ("import json, sys; open(sys.argv[1], 'a').write(json.dumps("
                    "{'part': 'own_error', 'error': 'said by the part'}) + '\\n'); sys.exit(3)"),
      "fine": _writes("fine"),
      "late": _writes("late"),
  }
  parts = [Part("crash", 30, 0), Part("hang", 2, 0), Part("silent", 30, 0),
           Part("own_error", 30, 0), Part("fine", 30, 0), Part("late", 30, 1000)]
  figures = str(tmp_path / "figures.jsonl")
  outcomes = gpu_measure["run_parts"](
      parts, tmp_path, 500, lambda p: [sys.executable, "-c", code[p.name], figures],
      dict(os.environ))
  assert [o["status"] for o in outcomes] == ["error"] * 4 + ["ok", "skipped"]
  records = _records(tmp_path)
  assert [r["part"] for r in records] == [p.name for p in parts] + ["run"]
  crash, hang, silent, own, fine, late, run = records
  assert crash["error"].startswith("exited with status 1: ValueError: no GPU here")
  assert hang["error"].startswith("timed out after 2 s") and 2 <= hang["wall_s"] < 30
  assert silent["error"].startswith("exited without writing a record")
  assert own == {"part": "own_error", "error": "said by the part"}  # not written twice
  assert fine == {"part": "fine", "x": 1}
  assert re.fullmatch(r"needs 1000 s, 4\d\d s left of --budget_s=500", late["skipped"])
  assert run["outcomes"] == outcomes
  assert "ValueError: no GPU here" in (tmp_path / "logs" / "crash.log").read_text()


def test_the_budget_skips_what_no_longer_fits(tmp_path):
  code = {"slow": _writes("slow", "import time; time.sleep(2)"), "next": _writes("next")}
  parts = [Part("slow", 30, 0), Part("next", 30, 2)]
  figures = str(tmp_path / "figures.jsonl")
  outcomes = gpu_measure["run_parts"](
      parts, tmp_path, 3, lambda p: [sys.executable, "-c", code[p.name], figures],
      dict(os.environ))
  assert [o["status"] for o in outcomes] == ["ok", "skipped"]
  assert _records(tmp_path)[1]["skipped"].startswith("needs 2 s, ")


def test_a_part_that_raises_writes_its_error_and_the_command_fails(tmp_path):
  # No TPU here: every part that computes fails at once; the environment part does not.
  out = tmp_path / "out"
  result = subprocess.run(
      [sys.executable, str(SCRIPT), str(out), "--toy", "--device=tpu",
       "--parts=decode,environment,train"],
      capture_output=True, text=True, cwd=ROOT, timeout=300,
      env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert result.returncode == 1, result.stderr[-3000:]
  records = _records(out)
  assert [r["part"] for r in records] == ["environment", "train", "decode", "run"]
  assert "error" not in records[0] and records[0]["jax"]
  for record in records[1:3]:
    assert record["error"].startswith("ValueError: no TPU found"), record
  assert "1 of 3 parts measured, 2 failed, 0 skipped" in result.stdout
  assert "train: ERROR ValueError: no TPU found" in result.stdout


def test_a_missing_package_stops_the_run_at_once_in_one_line(tmp_path):
  assert gpu_measure["missing_modules"](("json", "t2t_jax_no_such_module", "no_such.pkg")) == [
      "t2t_jax_no_such_module", "no_such.pkg"]
  assert gpu_measure["missing_modules"]() == []          # this stack has them all
  # An image without flax: one line, no part run, nothing written.
  shadow = tmp_path / "shadow"
  shadow.mkdir()
  (shadow / "sitecustomize.py").write_text(
      "import importlib.util, sys\n"
      "find = importlib.util.find_spec\n"
      "importlib.util.find_spec = lambda name, *a: None if name == 'flax' else find(name, *a)\n")
  out = tmp_path / "out"
  result = subprocess.run([sys.executable, str(SCRIPT), str(out), "--toy", "--device=cpu"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": f"{shadow}{os.pathsep}{ROOT}"})
  assert result.returncode == 1
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("gpu_measure: flax cannot be imported here")
  assert not (out / "figures.jsonl").exists()
