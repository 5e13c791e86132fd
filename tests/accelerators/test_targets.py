"""accelerators/targets.py: the targets as data, the compiler each needs, compile-only devices."""

import dataclasses
import re

import pytest

from compilers import NO_CUDA
from t2t_jax import errors
from t2t_jax.accelerators import targets


def test_an_unknown_target_names_the_known_ones():
  with pytest.raises(ValueError, match=r"unknown target 'h200'; choose one of h100, 8xh100"):
    targets.get("h200")
  assert targets.get("v5p-8").platform == "tpu" and targets.get("8xh100").devices == 8


def test_gpu_compiler_spec_agrees_with_the_target_figures():
  for target in targets.TARGETS.values():
    if not target.is_gpu:
      continue
    spec = targets.gpu_target_config(target)
    figure = lambda name: float(re.search(rf"\b{name}: ([\d.]+)", spec).group(1))  # noqa: E731
    assert figure("device_memory_size") == target.memory_bytes, target.name
    assert figure("memory_bandwidth") == target.memory_bandwidth, target.name
    assert f'device_description_str: "{target.device_kind}"' in spec


def test_a_missing_compiler_says_what_to_install(monkeypatch):
  h100, v5e = targets.get("h100"), targets.get("v5e-8")
  monkeypatch.setattr(targets, "available", lambda platform: platform == "cuda")
  assert targets.missing_compiler(h100) is None
  assert targets.missing_compiler(v5e) == (
      "compiling for v5e-8 needs libtpu, which is not installed: "
      "pip install -e '.[accelerators]' (see README)")
  # A target no earlier call cached: topology() refuses before building anything.
  absent = dataclasses.replace(v5e, name="v5e-8-absent")
  with pytest.raises(errors.MissingExtraError, match=r"needs libtpu.*pip install"):
    targets.topology(absent)


@NO_CUDA
def test_gpu_topology_has_one_compile_only_device_per_gpu():
  devices = targets.topology(targets.get("8xh100")).devices
  assert len(devices) == 8
  assert {d.device_kind for d in devices} == {"NVIDIA H100 80GB HBM3"}
