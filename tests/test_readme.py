"""The README's promises: its reuse examples run (plain JAX, and Flax NNX on a trained work
directory), CI runs its test command (and says truly why a step stopped)."""

import os
import pathlib
import re
import subprocess

import flax
from flax import nnx
import numpy as np

import xla_flags  # tests/xla_flags.py

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _run_block(marker: str) -> dict:
  """Runs the README's python block after `marker` as written; returns its names. A failure's
  traceback shows README.md's own line."""
  block = re.search(re.escape(marker) + r"\s*```python\n(.*?)```", README, re.S)
  assert block, f"README lost its tested example block after {marker}"
  code = "\n" * README.count("\n", 0, block.start(1)) + block.group(1)
  names = {}
  exec(compile(code, str(ROOT / "README.md"), "exec"), names)  # pylint: disable=exec-used
  return names


def test_reuse_example_runs():
  _run_block("<!-- this block is executed by tests/test_readme.py -->")


def test_nnx_example_runs_on_a_trained_work_directory(trained_workdir, tmp_path, monkeypatch):
  # The block as written, its runs/demo the suite's trained work directory (tests/trained.py).
  (tmp_path / "runs").mkdir()
  (tmp_path / "runs" / "demo").symlink_to(trained_workdir)
  monkeypatch.chdir(tmp_path)
  names = _run_block(
      "<!-- this block is executed on a trained work directory by tests/test_readme.py -->")
  # The block asserts that the NNX module's logits are the Linen model's within 1e-6 and that
  # one step lowers the loss. Here: those logits are a trained model's (most next tokens right),
  # the NNX state held every weight of the work directory and no other, and the step moved each.
  logits, targets = np.asarray(names["logits"]), np.asarray(names["targets"])
  assert np.mean(logits.argmax(-1) == targets) > 0.5
  loaded = flax.traverse_util.flatten_dict(names["params"])
  stepped = nnx.to_pure_dict(nnx.state(names["model"], nnx.Param))
  stepped = flax.traverse_util.flatten_dict(stepped)
  assert stepped.keys() == loaded.keys()
  for path, weight in loaded.items():
    after = np.asarray(stepped[path])
    assert after.shape == weight.shape and np.all(np.isfinite(after)), path
    moved = float(np.abs(after - weight).max())
    assert moved > 0, f"the step left {path} unchanged"


def test_ci_runs_the_readme_test_command():
  commands = re.findall(r"^(XLA_FLAGS=\S+ python3? -m pytest.*)$", README, re.M)
  assert len(commands) == 1, commands
  ci = (ROOT / ".ci" / "run").read_text()
  assert commands[0] in ci
  # CI installs every extra: there a test that skips for one fails (tests/extras.py).
  assert re.search(r"^\s*export T2T_JAX_REQUIRE_EXTRAS=1$", ci, re.M)


def test_every_ci_step_runs_under_a_time_limit_of_its_own():
  ci = (ROOT / ".ci" / "run").read_text()
  limits = dict(re.findall(r"\[(\w+)\]=(\d+)", re.search(r"declare -A LIMITS=\((.*?)\)", ci).group(1)))
  steps = re.findall(r"^run_step (\w+) ", ci, re.M)
  assert len(steps) >= 4 and all(step in limits for step in steps), (steps, limits)
  assert sum(int(limits[step]) for step in steps) <= 85, limits   # CI's limit is 90 minutes
  # Outside run_step nothing runs a test.
  outside = [line for line in ci.splitlines() if "pytest" in line and line.startswith(("python", "XLA"))]
  assert not outside, outside


def _run_step(body: str) -> subprocess.CompletedProcess:
  """.ci/run's own run_step running a step whose body is `body`, with a 1-minute limit."""
  ci = (ROOT / ".ci" / "run").read_text()
  run_step = re.search(r"^run_step\(\) \{\n.*?^\}\n", ci, re.M | re.S).group(0)
  script = (f"set -euo pipefail\ndeclare -A LIMITS=([fake]=1)\n{run_step}"
            f"fake() {{ {body}; }}\nexport -f fake\nrun_step fake 'a fake step'\n")
  return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


def test_a_ci_step_killed_inside_its_limit_is_not_said_to_have_run_over():
  # SIGKILL (137) is also the OOM killer's; only a kill once the limit is past is the limit's.
  killed = _run_step("kill -KILL $BASHPID")
  assert killed.returncode == 1, killed
  last = killed.stdout.splitlines()[-1]
  assert last.startswith("CI step 'a fake step' was killed (exit status 137) after 0 min "), last
  assert "inside its 1-minute limit: out of memory" in last and "ran over" not in last, last
  # 124 is timeout's own: the step ran over its limit.
  stopped = _run_step("exit 124")
  assert stopped.returncode == 1, stopped
  assert stopped.stdout.splitlines()[-1] == (
      "CI step 'a fake step' ran over its 1-minute limit and was stopped")


def test_first_command_runs_the_demo_script():
  first = re.search(r"```bash\n(.*?)\n", README).group(1)
  assert "pip install -r requirements.txt" in first
  script = re.search(r"python3 (experiments/\S+\.py) --config=demo", first).group(1)
  assert (ROOT / script).exists()


def test_the_tests_compile_without_llvm_optimisation_and_ci_once_with_it(pytestconfig):
  # tests/conftest.py: the suite's budget rests on it (docs/benchmarks.md, "The test suite"),
  # and CI covers the machine code the commands run: the core's tests in its third step, the
  # exactness tests (marked `exact`, registered in tests/conftest.py) after README's command
  # in its first, where every extra is installed.
  optimised = os.environ.get("T2T_JAX_TEST_OPTIMIZE") == "1"
  flags = os.environ["XLA_FLAGS"].split()
  assert "--xla_backend_optimization_level=0" in xla_flags.FAST_COMPILE
  assert [f in flags for f in xla_flags.FAST_COMPILE] == [not optimised] * len(xla_flags.FAST_COMPILE)
  ci = (ROOT / ".ci" / "run").read_text()
  step3 = re.search(r"^step3\(\) \{\n(.*?)^\}", ci, re.M | re.S).group(1)
  assert re.search(r"T2T_JAX_TEST_OPTIMIZE=1 XLA_FLAGS=\S+ \\\n\s+python3 -m pytest", step3)
  step1 = re.search(r"^step1\(\) \{\n(.*?)^\}", ci, re.M | re.S).group(1)
  assert re.search(r"^\s+readme_tests\n(\s*#.*\n)*\s+T2T_JAX_TEST_OPTIMIZE=1 XLA_FLAGS=\S+ \\\n"
                   r"\s+python3 -m pytest -q -n 2 -m exact tests$", step1, re.M), step1
  assert any(line.startswith("exact:") for line in pytestconfig.getini("markers"))
