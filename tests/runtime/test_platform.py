"""runtime/platform.py: the CPU chosen before JAX starts on a host without accelerators."""

import jax
import pytest

from t2t_jax.runtime import platform


def test_a_host_without_accelerator_device_files_computes_on_the_cpu():
  assert platform.platforms_without_accelerators({}, []) == "cpu"
  assert platform.platforms_without_accelerators({"JAX_PLATFORMS": ""}, []) == "cpu"


@pytest.mark.parametrize("found", [["/dev/nvidia0", "/dev/nvidiactl"], ["/dev/accel0"],
                                   ["/dev/vfio"]])
def test_an_accelerator_device_file_leaves_the_choice_to_jax(found):
  assert platform.platforms_without_accelerators({}, found) is None


def test_jax_platforms_given_is_kept():
  assert platform.platforms_without_accelerators({"JAX_PLATFORMS": "cuda"}, []) is None


def test_select_names_what_jax_found_for_a_missing_kind():
  assert platform.select("cpu") == jax.devices("cpu")[0]
  with pytest.raises(ValueError, match=r"no TPU found \(JAX sees: cpu\).*--device cpu"):
    platform.select("tpu")
  with pytest.raises(ValueError, match="choose one of cpu, gpu, tpu"):
    platform.select("npu")
