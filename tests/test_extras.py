"""tests/extras.py: a test of an absent extra skips naming its install command; under
T2T_JAX_REQUIRE_EXTRAS (CI) that skip fails. Run on a small suite in a process of its own."""

import pathlib
import subprocess
import sys

TESTS = pathlib.Path(__file__).resolve().parent
ABSENT = "t2t_jax_no_such_module"   # stands for an extra's library that is not installed

FILES = {
    "conftest.py": f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
                   "from extras import pytest_make_collect_report, pytest_runtest_makereport\n",
    "test_core.py": "def test_core():\n  pass\n",
    # A folder whose test files import the extra at their top, as tests/serve's do.
    "served/conftest.py": "import extras\n"
                          f"pytest_pycollect_makemodule = extras.skip_modules_without('serve', {ABSENT!r})\n",
    "served/test_served.py": f"import {ABSENT}\n\ndef test_served():\n  pass\n",
    # A test that asks for the extra itself, as tests/export's (through the `extras` fixture).
    "test_exported.py": "import extras\n\ndef test_exported():\n"
                        f"  extras.skip_if_missing('export', {ABSENT!r})\n",
}


def _run(tmp_path, *args, require):
  for name, text in FILES.items():
    (tmp_path / name).parent.mkdir(exist_ok=True)
    (tmp_path / name).write_text(text)
  env = {"PATH": "/usr/bin:/bin", "T2T_JAX_REQUIRE_EXTRAS": require}
  return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsfE", "-p", "no:cacheprovider",
                         *args], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)


def test_a_missing_extra_skips_naming_its_install_command(tmp_path):
  run = _run(tmp_path, require="")
  assert run.returncode == 0, run.stdout + run.stderr
  assert "1 passed, 2 skipped" in run.stdout, run.stdout
  assert "pip install -e '.[serve]'" in run.stdout and "pip install -e '.[export]'" in run.stdout
  assert "Traceback" not in run.stdout + run.stderr
  # Naming the folder on the command line reads its conftest.py first: still a skip.
  run = _run(tmp_path, "served", "test_core.py", require="")
  assert run.returncode == 0 and "1 passed, 1 skipped" in run.stdout, run.stdout
  assert "SKIPPED [1] served/test_served.py:1: the serve extra" in run.stdout, run.stdout


def test_ci_fails_a_test_that_skips_for_a_missing_extra(tmp_path):
  run = _run(tmp_path, "test_core.py", "test_exported.py", require="1")
  assert run.returncode == 1 and "1 failed, 1 passed" in run.stdout, run.stdout
  assert ("T2T_JAX_REQUIRE_EXTRAS is set (CI installs every extra), yet: the export extra "
          f"({ABSENT}) is not installed; to run these tests: pip install -e '.[export]'"
          in run.stdout), run.stdout


def test_ci_stops_at_a_test_file_that_skips_for_a_missing_extra(tmp_path):
  run = _run(tmp_path, require="1")
  assert run.returncode == 2 and "Interrupted: 1 error during collection" in run.stdout, run.stdout
  assert "ERROR served/test_served.py - T2T_JAX_REQUIRE_EXTRAS is set" in run.stdout
  # Naming the folder on the command line reads its conftest.py first: the same outcome.
  run = _run(tmp_path, "served", require="1")
  assert run.returncode == 2 and "T2T_JAX_REQUIRE_EXTRAS is set" in run.stdout, run.stdout


def test_ci_can_require_some_extras_by_name(tmp_path):
  # On Python 3.12 CI installs serve and accelerators but not export (.ci/run).
  run = _run(tmp_path, "test_core.py", "test_exported.py", require="serve,accelerators")
  assert run.returncode == 0 and "1 passed, 1 skipped" in run.stdout, run.stdout
  run = _run(tmp_path, "test_core.py", "test_exported.py", require="serve,export")
  assert run.returncode == 1 and "1 failed, 1 passed" in run.stdout, run.stdout
  run = _run(tmp_path, "served", require="serve")
  assert run.returncode == 2 and "T2T_JAX_REQUIRE_EXTRAS is set" in run.stdout, run.stdout


def test_every_skip_for_something_not_installed_goes_through_the_one_guard():
  """A skip of its own (pytest's importorskip) would pass CI's T2T_JAX_REQUIRE_EXTRAS unseen."""
  own_skip = "pytest." + "importorskip("
  own = [f"{path.relative_to(TESTS)}:{number}" for path in sorted(TESTS.rglob("*.py"))
         for number, line in enumerate(path.read_text().splitlines(), 1) if own_skip in line]
  assert not own, ("skip through tests/extras.py (skip_if_missing, skip_module_if_missing): "
                   + ", ".join(own))
