"""compile_cache.enable: the switches and where the cache goes."""

import jax
import pytest

from t2t_jax.runtime import compile_cache


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
  restore_config.setenv(compile_cache.ENV, str(target))
  assert compile_cache.enable() == str(target)
  assert target.is_dir() and jax.config.jax_compilation_cache_dir == str(target)
  assert jax.config.jax_compilation_cache_max_size == compile_cache.MAX_BYTES
  restore_config.setenv(compile_cache.ENV, "off")
  assert compile_cache.enable() is None
  restore_config.delenv(compile_cache.ENV)
  assert compile_cache.enable(False) is None


def test_default_is_per_user_and_an_existing_setting_is_kept(tmp_path, restore_config):
  restore_config.delenv(compile_cache.ENV, raising=False)
  restore_config.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert compile_cache.default_directory() == str(tmp_path / "t2t_jax" / "jax")
  jax.config.update("jax_compilation_cache_dir", None)
  assert compile_cache.enable() == str(tmp_path / "t2t_jax" / "jax")
  jax.config.update("jax_compilation_cache_dir", str(tmp_path / "mine"))
  assert compile_cache.enable() == str(tmp_path / "mine")   # JAX_COMPILATION_CACHE_DIR wins


def test_an_unusable_directory_disables_the_cache_with_a_warning(tmp_path, restore_config,
                                                                 caplog):
  blocker = tmp_path / "file"
  blocker.write_text("")
  restore_config.setenv(compile_cache.ENV, str(blocker / "cache"))
  assert compile_cache.enable() is None
  assert "cannot create" in caplog.text
