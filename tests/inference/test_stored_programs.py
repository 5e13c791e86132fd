"""stored_programs.Store: a stored program is loaded, not traced or compiled; one made for another
machine or JAX, or a damaged file, is compiled again with one log line; a read-only store writes
nothing."""

import functools
import hashlib
import json
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import monitoring

from t2t_jax import configs
from t2t_jax.inference import stored_programs

MODEL = configs.get_config("demo", num_layers=1).model


@functools.partial(jax.jit, static_argnames=("model", "scale"))
def _program(x, pair, *, model, scale):
  # Enough operations for XLA:CPU to emit several fused kernels (the ones a
  # program re-serialized from JAX's compilation cache would lose).
  y = jnp.tanh(x @ pair["w"]) * scale + jnp.exp(-x) * model.num_layers
  return {"y": y, "sum": (y + pair["b"]).sum(0)}


def _args(rows=4):
  # NumPy: making them compiles nothing, so the counts see the program alone.
  x = np.linspace(-1.0, 1.0, rows * 8, dtype=np.float32).reshape(rows, 8)
  return x, {"w": np.eye(8, dtype=np.float32) * 0.5, "b": np.ones(8, np.float32)}


@pytest.fixture
def events():
  """Counts of JAX's tracing and compilation events (any thread) during a test."""
  counts = {"trace": 0, "compile": 0, "cache_hit": 0}
  names = {"/jax/core/compile/jaxpr_trace_duration": "trace",
           "/jax/core/compile/backend_compile_duration": "compile",
           "/jax/compilation_cache/cache_retrieval_time_sec": "cache_hit"}
  active = [True]

  def listener(event, duration, **kwargs):
    del duration, kwargs
    if active[0] and event in names:
      counts[names[event]] += 1
  monitoring.register_event_duration_secs_listener(listener)
  yield counts
  active[0] = False   # JAX keeps its listeners; this one stops counting


def _call(store, rows=4, scale=2.0):
  return store.call(_program, *_args(rows), model=MODEL, scale=scale)


def test_a_stored_program_is_loaded_without_tracing_or_compiling(tmp_path, events):
  expected = _program(*_args(), model=MODEL, scale=2.0)
  first = stored_programs.Store(tmp_path)
  out = _call(first)
  assert (first.compiled, first.loaded) == (1, 0)
  _call(first)                                    # the same program: from memory
  assert (first.compiled, first.loaded) == (1, 0)
  assert len(list((tmp_path / jax.devices()[0].platform).glob("*.bin"))) == 1

  jax.clear_caches()
  before = dict(events)
  second = stored_programs.Store(tmp_path)         # as a new process would
  again = _call(second)
  assert (second.compiled, second.loaded) == (0, 1)
  assert events == before, "a stored program was traced or compiled"
  for got in (out, again):
    np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-6)
    np.testing.assert_allclose(got["sum"], expected["sum"], rtol=1e-6)


def test_static_arguments_and_shapes_name_different_programs(tmp_path):
  store = stored_programs.Store(tmp_path)
  _call(store)
  _call(store, rows=8)
  _call(store, scale=3.0)
  store.call(_program, *_args(), model=configs.get_config("demo", num_layers=2).model, scale=2.0)
  assert store.compiled == 4
  reloaded = stored_programs.Store(tmp_path)
  np.testing.assert_allclose(_call(reloaded, scale=3.0)["y"],
                             _program(*_args(), model=MODEL, scale=3.0)["y"], rtol=1e-6)
  assert (reloaded.compiled, reloaded.loaded) == (0, 1)


def _manifests(directory):
  return sorted((directory / jax.devices()[0].platform).glob("*.json"))


@pytest.mark.parametrize("field,value", [("jax", "0.4.1"), ("platform", "tpu"),
                                         ("cpu", "another"), ("t2t_jax_sources", "0" * 16)])
def test_a_program_made_for_another_machine_or_jax_is_compiled_with_one_log_line(
    tmp_path, caplog, field, value):
  store = stored_programs.Store(tmp_path)
  _call(store)
  _call(store, rows=8)
  for path in _manifests(tmp_path):
    manifest = json.loads(path.read_text())
    manifest["fingerprint"][field] = value
    path.write_text(json.dumps(manifest))
  caplog.set_level(logging.INFO, logger=stored_programs.__name__)
  again = stored_programs.Store(tmp_path)
  np.testing.assert_allclose(_call(again)["y"], _program(*_args(), model=MODEL, scale=2.0)["y"],
                             rtol=1e-6)
  _call(again, rows=8)
  assert (again.compiled, again.loaded) == (2, 0)
  lines = [r.getMessage() for r in caplog.records]
  assert len(lines) == 1 and field in lines[0] and value in lines[0], lines
  # Compiled again, they were stored for this machine: a third store loads them.
  third = stored_programs.Store(tmp_path)
  _call(third)
  assert (third.compiled, third.loaded) == (0, 1)


@pytest.mark.parametrize("damage", ["garble", "truncate", "manifest"])
def test_a_damaged_program_is_compiled_not_a_crash(tmp_path, caplog, damage):
  _call(stored_programs.Store(tmp_path))
  manifest = _manifests(tmp_path)[0]
  payload = manifest.with_suffix(".bin")
  data = payload.read_bytes()
  if damage == "garble":
    payload.write_bytes(data[:100] + bytes(b ^ 0x5A for b in data[100:200]) + data[200:])
  elif damage == "truncate":
    payload.write_bytes(data[:len(data) // 2])
  else:
    manifest.write_text("{not json")
  caplog.set_level(logging.INFO, logger=stored_programs.__name__)
  store = stored_programs.Store(tmp_path)
  np.testing.assert_allclose(_call(store)["y"], _program(*_args(), model=MODEL, scale=2.0)["y"],
                             rtol=1e-6)
  assert (store.compiled, store.loaded) == (1, 0)
  assert len(caplog.records) == 1 and "unreadable" in caplog.records[0].getMessage()


def test_a_garbled_payload_with_a_matching_checksum_is_compiled_not_a_crash(tmp_path, caplog):
  """Damage the checksum cannot see (a payload written by a broken writer)."""
  _call(stored_programs.Store(tmp_path))
  manifest_path = _manifests(tmp_path)[0]
  bad = b"\x80\x04not a pickle"
  manifest_path.with_suffix(".bin").write_bytes(bad)
  manifest = json.loads(manifest_path.read_text())
  manifest["sha256"] = hashlib.sha256(bad).hexdigest()
  manifest_path.write_text(json.dumps(manifest))
  caplog.set_level(logging.INFO, logger=stored_programs.__name__)
  store = stored_programs.Store(tmp_path)
  _call(store)
  assert (store.compiled, store.loaded) == (1, 0) and len(caplog.records) == 1


def test_a_read_only_store_writes_nothing(tmp_path):
  store = stored_programs.Store(tmp_path, writable=False)
  _call(store)
  assert store.compiled == 1 and not list(tmp_path.iterdir())


def test_an_unwritable_directory_costs_only_compilations(tmp_path, caplog):
  blocker = tmp_path / "file"
  blocker.write_text("")
  caplog.set_level(logging.INFO, logger=stored_programs.__name__)
  store = stored_programs.Store(blocker / "programs")   # below a file: cannot be created
  _call(store)
  _call(store, rows=8)
  assert store.compiled == 2
  assert len(caplog.records) == 1 and "not stored" in caplog.records[0].getMessage()


def test_a_static_argument_without_a_stable_name_is_refused(tmp_path):
  with pytest.raises(TypeError, match="stable name"):
    stored_programs.program_key(_program, _args(), {"model": object(), "scale": 1.0})


def _stored_from_jaxs_cache(directory, scale, compile_fn=None):
  """Stores `_program` while JAX's persistent cache holds it; returns its args and results."""
  if not jax.config.jax_compilation_cache_dir:
    pytest.skip("runs with JAX's persistent compilation cache (tests/conftest.py enables it)")
  saved = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  try:
    args = _args(rows=16)
    expected = _program(*args, model=MODEL, scale=scale)        # now in JAX's cache
    jax.clear_caches()
    store = stored_programs.Store(directory)
    if compile_fn is not None:
      store._compile = compile_fn  # pylint: disable=protected-access
    store.call(_program, *args, model=MODEL, scale=scale)
  finally:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", saved)
  return args, expected


def test_a_program_in_jaxs_compilation_cache_is_stored_in_a_form_that_runs(tmp_path):
  """XLA:CPU executables read from JAX's cache lose kernels when serialized again."""
  args, expected = _stored_from_jaxs_cache(tmp_path, scale=5.0)
  loaded = stored_programs.Store(tmp_path)
  np.testing.assert_allclose(loaded.call(_program, *args, model=MODEL, scale=5.0)["y"],
                             expected["y"], rtol=1e-6)
  assert loaded.loaded == 1


def test_a_stored_program_that_fails_on_its_first_call_is_compiled(tmp_path, caplog):
  """Written without the fresh compilation (as before it existed): it loads, then fails."""
  args, expected = _stored_from_jaxs_cache(tmp_path, scale=6.0,
                                           compile_fn=lambda lower: lower().compile())
  caplog.set_level(logging.INFO, logger=stored_programs.__name__)
  store = stored_programs.Store(tmp_path)
  np.testing.assert_allclose(store.call(_program, *args, model=MODEL, scale=6.0)["y"],
                             expected["y"], rtol=1e-6)
  assert (store.compiled, store.loaded) == (1, 0)
  assert len(caplog.records) == 1 and "first call" in caplog.records[0].getMessage()
  third = stored_programs.Store(tmp_path)           # the program compiled then was stored
  third.call(_program, *args, model=MODEL, scale=6.0)
  assert (third.compiled, third.loaded) == (0, 1)
