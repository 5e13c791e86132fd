"""runtime/platform.py: the CPU chosen before JAX starts on a host without accelerators; the
compilation cache's switches and where it goes."""

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


# --- the compilation cache


@pytest.fixture
def restore_config(monkeypatch):
  saved = {name: getattr(jax.config, name) for name in (
      "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
      "jax_compilation_cache_max_size")}
  yield monkeypatch
  for name, value in saved.items():
    jax.config.update(name, value)


def test_directory_from_the_environment_and_off_switches(tmp_path, restore_config):
  target = tmp_path / "cache"
  restore_config.setenv(platform.CACHE_ENV, str(target))
  assert platform.enable_compilation_cache() == str(target)
  assert target.is_dir() and jax.config.jax_compilation_cache_dir == str(target)
  assert jax.config.jax_compilation_cache_max_size == platform.MAX_BYTES
  restore_config.setenv(platform.CACHE_ENV, "off")
  assert platform.enable_compilation_cache() is None
  restore_config.delenv(platform.CACHE_ENV)
  assert platform.enable_compilation_cache(False) is None


def test_default_is_per_user_and_an_existing_setting_is_kept(tmp_path, restore_config):
  restore_config.delenv(platform.CACHE_ENV, raising=False)
  restore_config.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert platform.default_directory() == str(tmp_path / "t2t_jax" / "jax")
  jax.config.update("jax_compilation_cache_dir", None)
  assert platform.enable_compilation_cache() == str(tmp_path / "t2t_jax" / "jax")
  jax.config.update("jax_compilation_cache_dir", str(tmp_path / "mine"))
  assert platform.enable_compilation_cache() == str(tmp_path / "mine")   # JAX_COMPILATION_CACHE_DIR wins


def test_an_unusable_directory_disables_the_cache_with_a_warning(tmp_path, restore_config,
                                                                 caplog):
  blocker = tmp_path / "file"
  blocker.write_text("")
  restore_config.setenv(platform.CACHE_ENV, str(blocker / "cache"))
  assert platform.enable_compilation_cache() is None
  assert "cannot create" in caplog.text
