"""Shared test setup: 8 virtual CPU devices, as in the paper's 8-GPU machine."""

import importlib
import os
import pathlib

import pytest

# Must happen before JAX initialises its backend; the README's test command sets
# it too, this only covers running a single test file by hand.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# The tests compile fast (LLVM's optimisations off: tests/xla_flags.py), unless
# T2T_JAX_TEST_OPTIMIZE=1; subprocesses inherit it, or ask `xla_flags.with_devices`.
import xla_flags  # noqa: E402  (tests/ is on sys.path)

if os.environ.get("T2T_JAX_TEST_OPTIMIZE", "") != "1":
  os.environ["XLA_FLAGS"] = xla_flags.with_fast_compile(os.environ["XLA_FLAGS"])
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# The persistent compilation cache (~/.cache/t2t_jax/jax), as the commands use it:
# a second run of the suite reads most executables from disk.
# T2T_JAX_COMPILATION_CACHE=off runs it without.
from t2t_jax.runtime import platform  # noqa: E402  (after the environment above)

platform.enable_compilation_cache()

import extras as extras_lib  # noqa: E402  (tests/extras.py; the fixture below is `extras`)
# Under T2T_JAX_REQUIRE_EXTRAS (CI) a skip for something not installed fails.
from extras import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402,F401


def pytest_configure(config):
  # CI's first step runs these once more compiled as the commands compile (.ci/run: step1).
  config.addinivalue_line(
      "markers", "exact: agrees with a reference or another engine to a tight bound, which "
      "the machine code can move; run again with T2T_JAX_TEST_OPTIMIZE=1")
  # A deprecated JAX, Flax or NumPy API called from t2t_jax's own modules fails the test that
  # reaches it, on every stack CI tests (.ci/run): the newest JAX warns first of what the next
  # release removes. Warnings raised in other libraries' own code are theirs.
  for category in ("DeprecationWarning", "PendingDeprecationWarning", "FutureWarning"):
    config.addinivalue_line("filterwarnings", f"error::{category}:t2t_jax")


def _made_once(request, tmp_path_factory, name: str, make) -> pathlib.Path:
  """`make(directory)` once per test run: under pytest-xdist its workers share what the first
  one made (under a file lock, in the run's own temporary directory)."""
  import filelock  # pylint: disable=import-outside-toplevel
  if not hasattr(request.config, "workerinput"):
    directory = tmp_path_factory.mktemp(name)
    make(directory)
    return directory
  shared = tmp_path_factory.getbasetemp().parent       # this run's, above each worker's
  with filelock.FileLock(str(shared / f"{name}.lock")):
    if not (shared / name).is_dir():
      (shared / f"{name}.partial").mkdir()
      make(shared / f"{name}.partial")
      (shared / f"{name}.partial").rename(shared / name)
  return shared / name


@pytest.fixture(scope="session")
def trained_workdir(tmp_path_factory, request):
  """A work directory with a small model trained for a few hundred steps (tests/trained.py),
  made once for the run's workers (about 20 s)."""
  import trained  # pylint: disable=import-outside-toplevel  (tests/ is on sys.path)
  return _made_once(request, tmp_path_factory, "trained", trained.make)


@pytest.fixture(scope="session")
def extras():
  """The export extra's libraries by name; tests that take it skip without them."""
  extras_lib.skip_if_missing("export")
  return {name: importlib.import_module(name) for name in extras_lib.MODULES["export"]}


@pytest.fixture(scope="session")
def random_workdir(tmp_path_factory):
  """(work directory, first params, second params): a tiny random model's run, its two
  checkpoints and their average (tests/random_run.py), for the translation tests."""
  import random_run  # pylint: disable=import-outside-toplevel  (tests/ is on sys.path)
  return random_run.make(tmp_path_factory.mktemp("random_run"))


@pytest.fixture(scope="session")
def marian_dir(extras, tmp_path_factory, request):  # pylint: disable=unused-argument
  """A small MarianMTModel and its MarianTokenizer as save_pretrained writes them, built and
  trained briefly here (tests/marian.py); the export extra is needed to make it.

  The workers of one run share it (`_made_once`): it takes about 20 s to make.
  """
  import marian  # pylint: disable=import-outside-toplevel  (tests/ is on sys.path)
  return _made_once(request, tmp_path_factory, "marian", marian.make)


@pytest.fixture(scope="session")
def imported_workdir(marian_dir, tmp_path_factory):
  """`marian_dir` imported (export/import_marian.py): a work directory the tests read only."""
  from t2t_jax.export import import_marian  # pylint: disable=import-outside-toplevel
  return import_marian.import_marian(marian_dir, tmp_path_factory.mktemp("imported") / "run")


@pytest.fixture(scope="session")
def marian_variant(extras, tmp_path_factory, request):  # pylint: disable=unused-argument
  """`marian_variant(name)`: the directory of one of tests/marian.py's `VARIANTS` (separate
  vocabularies, an untied output layer, a deep encoder, a multilingual target), made on
  first use, once for the run's workers (a few seconds each)."""
  import marian  # pylint: disable=import-outside-toplevel  (tests/ is on sys.path)
  made = {}

  def get(name: str) -> pathlib.Path:
    if name not in made:
      made[name] = _made_once(request, tmp_path_factory, f"marian_{name}",
                              lambda out: marian.make_variant(out, name))
    return made[name]
  return get


@pytest.fixture(scope="session")
def imported_variant(marian_variant, tmp_path_factory):
  """`imported_variant(name)`: `marian_variant(name)` imported, a work directory the tests read
  only (one per worker)."""
  from t2t_jax.export import import_marian  # pylint: disable=import-outside-toplevel
  made = {}

  def get(name: str) -> pathlib.Path:
    if name not in made:
      made[name] = import_marian.import_marian(
          marian_variant(name), tmp_path_factory.mktemp(f"imported_{name}") / "run")
    return made[name]
  return get
