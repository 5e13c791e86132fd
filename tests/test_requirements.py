"""The dependencies: the package asks for ranges (it installs into an environment's own JAX),
requirements.txt pins the tested stack of each Python version, and each extra has its file."""

import pathlib
import re

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parents[1]
STACK = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")
PYTHONS = ("3.11", "3.12", "3.13")


def _requirements(name: str) -> list[Requirement]:
  """The requirements one file lists (its -r lines left out)."""
  lines = [line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines()]
  return [Requirement(line) for line in lines if line and not line.startswith("-r")]


def _by_name(requirements: list[Requirement]) -> dict[str, Requirement]:
  return {r.name.lower(): r for r in requirements}


def _pins(name: str, python: str) -> dict[str, Version]:
  """{package: version} that file pins for `python` (its environment markers evaluated)."""
  pins = {}
  for r in _requirements(name):
    if r.marker is None or r.marker.evaluate({"python_version": python}):
      (spec,) = r.specifier
      assert spec.operator == "==", f"{name} pins exact versions: {r}"
      assert r.name.lower() not in pins, f"{name} pins {r.name} twice for Python {python}"
      pins[r.name.lower()] = Version(spec.version)
  return pins


def test_the_package_asks_for_ranges_with_both_ends():
  core = _by_name(_requirements("requirements-core.txt"))
  assert set(STACK) | {"sentencepiece", "sacrebleu"} <= set(core)
  for r in core.values():
    operators = {spec.operator for spec in r.specifier}
    assert operators == {">=", "<"}, f"requirements-core.txt: {r} is not a range"
  # Nothing a user of the layers does not need: the WMT data path is the `wmt` extra.
  assert not {"tensorflow", "tensorflow-cpu", "tensorflow-datasets", "pytest"} & set(core)
  assert {"tensorflow-cpu", "tensorflow-datasets"} <= set(_by_name(_requirements("requirements-wmt.txt")))


@pytest.mark.parametrize("python", PYTHONS)
def test_requirements_txt_pins_a_stack_inside_the_ranges(python):
  pins = _pins("requirements.txt", python)
  for name in ("requirements-core.txt", "requirements-wmt.txt"):
    for r in _requirements(name):
      assert r.name.lower() in pins, f"requirements.txt pins no {r.name} for Python {python}"
      assert pins[r.name.lower()] in r.specifier, (
          f"Python {python}: requirements.txt's {r.name}=={pins[r.name.lower()]} is outside "
          f"{name}'s {r}")
  # Python 3.11 gets the newest JAX it can (0.10.2); 3.12 and newer, JAX 0.11 or newer.
  if python == "3.11":
    assert pins["jax"] == Version("0.10.2")
  else:
    assert pins["jax"] >= Version("0.11")
  assert pins["jax"] == pins["jaxlib"]


@pytest.mark.parametrize("python", PYTHONS)
def test_the_accelerators_extra_follows_each_pythons_jax(python):
  jax = _pins("requirements.txt", python)["jax"]
  compilers = [r for r in _requirements("requirements-accelerators.txt")
               if r.marker is None or r.marker.evaluate({"python_version": python})]
  assert {tuple(sorted(r.extras)) for r in compilers} == {("cuda12",), ("tpu",)}
  for r in compilers:
    assert r.name == "jax" and Version(next(iter(r.specifier)).version) == jax, r


def test_a_gpu_images_versions_are_inside_the_ranges():
  core = _by_name(_requirements("requirements-core.txt"))
  image = _pins(".ci/gpu-image.txt", "3.12")
  assert image["jax"] == Version("0.11.2")
  for name, version in image.items():
    assert version in core[name].specifier, f"{name}=={version} is outside {core[name]}"


def test_requirements_txt_gathers_the_readmes_extras():
  included = re.findall(r"^-r (\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
  assert included == ["requirements-notebook.txt", "requirements-test.txt"]


def test_extras_are_not_the_packages_own():
  core = set(_by_name(_requirements("requirements-core.txt")))
  for extra in ("wmt", "notebook", "test", "export", "serve"):
    names = set(_by_name(_requirements(f"requirements-{extra}.txt")))
    assert names and not names & core, f"{extra} repeats core packages: {names & core}"
  setup = (ROOT / "setup.py").read_text()
  assert 'install_requires=_requirements("requirements-core.txt")' in setup
  assert '"wmt", "notebook", "test", "export", "serve", "accelerators"' in setup
