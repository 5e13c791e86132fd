"""The dependencies are split: the package's own, then one file per extra; requirements.txt gathers the README's."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pins(name: str) -> dict[str, str]:
  """{package: version} pinned in one requirements file (its -r lines left out)."""
  pins = {}
  for line in (ROOT / name).read_text().splitlines():
    line = line.split("#")[0].strip()
    if line and not line.startswith("-r"):
      package, version = re.fullmatch(r"([\w.\-\[\]]+)==(\S+)", line).groups()
      pins[package.lower()] = version
  return pins


def test_requirements_txt_gathers_core_notebook_and_test():
  included = re.findall(r"^-r (\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
  assert included == ["requirements-core.txt", "requirements-notebook.txt", "requirements-test.txt"]
  assert not _pins("requirements.txt"), "requirements.txt pins nothing of its own"


def test_test_and_notebook_packages_are_not_the_packages_own():
  core = _pins("requirements-core.txt")
  assert {"jax", "flax", "optax", "orbax-checkpoint", "sentencepiece", "sacrebleu"} <= set(core)
  for extra in ("notebook", "test", "export", "accelerators"):
    pins = _pins(f"requirements-{extra}.txt")
    assert pins and not set(pins) & set(core), f"{extra} repeats core packages: {set(pins) & set(core)}"
  assert "pytest" not in core and "nbclient" not in core
  setup = (ROOT / "setup.py").read_text()
  assert 'install_requires=_requirements("requirements-core.txt")' in setup
