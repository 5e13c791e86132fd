"""Tests of an extra skip where it is not installed, saying how to install it; CI fails instead.

README's first command installs core, wmt, notebook and test only, so a user's run of
the suite skips the tests of `export`, `serve` and `accelerators`, each skip
naming the `pip install` that brings it. CI installs every extra and sets
T2T_JAX_REQUIRE_EXTRAS=1 (.ci/run): tests/conftest.py then fails such a skip, so
CI cannot pass while running none of them. On Python 3.12 CI installs some of them
and names those: T2T_JAX_REQUIRE_EXTRAS=serve,accelerators fails only their skips.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Optional

import pytest

REQUIRE = "T2T_JAX_REQUIRE_EXTRAS"
# Every reason below contains it; tests/conftest.py fails the skips that do under REQUIRE.
NOT_INSTALLED = " is not installed; to run these tests: "

# The modules each extra's tests import (setup.py's extras; requirements-<extra>.txt).
MODULES = {
    "wmt": ("tensorflow", "tensorflow_datasets", "sacremoses", "tensorboardX"),
    "export": ("torch", "transformers", "safetensors", "ctranslate2"),
    "serve": ("fastapi", "starlette", "pydantic", "uvicorn", "httptools", "uvloop",
              "prometheus_client", "selenium"),
    "accelerators": ("jax_cuda12_plugin", "libtpu"),
}


def install_reason(what: str, command: str) -> str:
  """The one reason every such skip gives: what is missing and the command that brings it."""
  return f"{what}{NOT_INSTALLED}{command}"


def missing(extra: str, modules: Optional[tuple[str, ...]] = None) -> Optional[str]:
  """None when `modules` (default: all of `extra`'s) import, else the skip's reason."""
  for name in MODULES[extra] if modules is None else modules:
    if importlib.util.find_spec(name) is None:
      return install_reason(f"the {extra} extra ({name})", f"pip install -e '.[{extra}]'")
  return None


def skip_if_missing(extra: str, *modules: str) -> None:
  """Skips the calling test (or fixture) unless `modules` (default: all of `extra`'s) import."""
  reason = missing(extra, modules or None)
  if reason is not None:
    pytest.skip(reason)


def skip_module_if_missing(extra: str, *modules: str) -> None:
  """`skip_if_missing` for a whole test file, called at its top before it imports them."""
  reason = missing(extra, modules or None)
  if reason is not None:
    pytest.skip(reason, allow_module_level=True)


def required(extra: Optional[str] = None) -> bool:
  """Whether a skip for something not installed fails: T2T_JAX_REQUIRE_EXTRAS is 1 (CI, which
  installs every extra), or a comma-separated list that names `extra` (None: not an extra,
  e.g. Debian's chromium, which CI installs wherever it sets the variable)."""
  value = os.environ.get(REQUIRE, "")
  return value == "1" or (value not in ("", "0") and (extra is None or extra in value.split(",")))


def _fail_if_required(report) -> None:
  if not (report.skipped and isinstance(report.longrepr, tuple)):
    return
  reason = report.longrepr[2].removeprefix("Skipped: ")
  named = re.match(r"the (\w+) extra ", reason)   # missing()'s reason names its extra
  if NOT_INSTALLED in reason and required(named and named.group(1)):
    report.outcome = "failed"
    report.longrepr = f"{REQUIRE} is set (CI installs every extra), yet: {reason}"


# The hooks that fail those skips (tests/conftest.py imports them): a test's, a test file's.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):  # pylint: disable=unused-argument
  report = yield
  _fail_if_required(report)
  return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
  report = yield
  if isinstance(collector, SkippedModule) and report.skipped:   # named by the file, not here
    report.longrepr = (str(collector.path), 1, collector.reason)
  _fail_if_required(report)
  return report


class SkippedModule(pytest.Module):
  """A test file whose extra is absent: reported as skipped, never imported."""

  reason: str = ""

  def collect(self):
    pytest.skip(self.reason)


def skip_modules_without(extra: str, *modules: str):
  """A `pytest_pycollect_makemodule` hook for a folder's conftest.py: its test files skip
  unimported when `modules` (default: all of `extra`'s) are absent (their top-level imports
  need them)."""

  def pytest_pycollect_makemodule(module_path, parent):
    reason = missing(extra, modules or None)
    if reason is None:
      return None
    module = SkippedModule.from_parent(parent, path=module_path)
    module.reason = reason
    return module

  return pytest_pycollect_makemodule
