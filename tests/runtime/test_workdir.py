"""runtime/workdir.py: a work directory's config (written, checked, read back) and atomic JSON;
one run per work directory, stale locks taken over, first-run builds once."""

import json
import logging
import os
import pathlib
import subprocess
import sys
import time

import pytest

from t2t_jax import configs
from t2t_jax.runtime import workdir as workdir_lib
from t2t_jax.runtime.workdir import RunLock, WorkdirBusyError


def test_config_round_trip_and_old_work_directories(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json not found: train a model there"):
    workdir_lib.load_config(tmp_path)
  cfg = configs.get_config("demo", d_model=64)
  workdir_lib.check_or_write_config(cfg, tmp_path)
  assert workdir_lib.load_config(tmp_path) == cfg
  assert list(tmp_path.iterdir()) == [tmp_path / workdir_lib.CONFIG_FILE]  # no temporary left

  # Written by an earlier version: a retired field is dropped, an unknown one is named.
  path = tmp_path / workdir_lib.CONFIG_FILE
  path.write_text(json.dumps({**configs.to_dict(cfg), "shuffle_buffer_batches": 0}))
  assert workdir_lib.load_config(tmp_path) == cfg
  path.write_text(json.dumps({**configs.to_dict(cfg), "d_modle": 3}))
  with pytest.raises(ValueError, match=r"config.json has unknown config field\(s\) \['d_modle'\]"):
    workdir_lib.load_config(tmp_path)


def test_resuming_accepts_run_settings_and_refuses_a_different_model(tmp_path):
  cfg = configs.get_config("demo")
  workdir_lib.check_or_write_config(cfg, tmp_path)
  longer = cfg.replace(num_train_steps=5000, parallelism="shard_map", beam_size=2)
  workdir_lib.check_or_write_config(longer, tmp_path)
  assert workdir_lib.load_config(tmp_path) == longer
  with pytest.raises(ValueError, match=r"different config \(d_model: 128 -> 64, "
                                       r"num_layers: 3 -> 2\); use a new --workdir"):
    workdir_lib.check_or_write_config(longer.replace(d_model=64, num_layers=2), tmp_path)
  assert workdir_lib.load_config(tmp_path) == longer  # the refused config is not written


def test_an_earlier_versions_config_resumes(tmp_path):
  """A config.json without the fields added since (their defaults are what it computed) and
  with share_embeddings, which `embeddings` replaced: the same run, which resumes."""
  cfg = configs.get_config("demo")
  old = configs.to_dict(cfg)
  for name in ("activation", "attention_bias", "output_bias", "position_layout",
               "layer_norm_epsilon", "embeddings", "target_vocab_size", "decoder_layers"):
    del old[name]
  (tmp_path / workdir_lib.CONFIG_FILE).write_text(json.dumps({**old, "share_embeddings": True}))
  assert workdir_lib.load_config(tmp_path) == cfg
  workdir_lib.check_or_write_config(cfg.replace(num_train_steps=2000), tmp_path)
  (tmp_path / workdir_lib.CONFIG_FILE).write_text(json.dumps({**old, "share_embeddings": False}))
  with pytest.raises(ValueError, match=r"different config \(embeddings: 'separate' -> 'shared'\)"):
    workdir_lib.check_or_write_config(cfg, tmp_path)


@pytest.mark.parametrize("text", ["", '{"d_model": 6', "\x00\xff garbage", "[1, 2]"])
def test_a_damaged_config_stops_with_what_to_do(tmp_path, text):
  cfg = configs.get_config("demo")
  (tmp_path / workdir_lib.CONFIG_FILE).write_text(text, errors="surrogateescape")
  with pytest.raises(ValueError, match="config.json is damaged .*; restore it"):
    workdir_lib.check_or_write_config(cfg, tmp_path)
  if text != "[1, 2]":
    with pytest.raises(ValueError, match="config.json is damaged .*; restore it"):
      workdir_lib.load_config(tmp_path)
  assert (tmp_path / workdir_lib.CONFIG_FILE).read_text(errors="surrogateescape") == text


# --- one run at a time

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Holds the run lock of argv[1] until its stdin closes; says HELD once it has it.
_HOLDER = """
import sys
from t2t_jax.runtime import workdir
with workdir.RunLock(sys.argv[1]):
  print("HELD", flush=True)
  sys.stdin.read()
"""


def _python(code, *args, **kwargs):
  return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, **kwargs)


def _write_lock(workdir, **fields):
  record = {**workdir_lib.this_process(), **fields}
  (workdir / workdir_lib.LOCK_FILE).write_text(json.dumps(record))
  return record


def _dead_pid():
  process = subprocess.Popen([sys.executable, "-c", "pass"])
  process.wait()
  return process.pid


def test_lock_file_names_this_process_and_is_removed_on_release(tmp_path):
  with RunLock(tmp_path) as lock:
    holder = json.loads(lock.path.read_text())
    assert holder["pid"] == os.getpid()
    assert holder["host"] == workdir_lib.this_process()["host"]
  assert not (tmp_path / workdir_lib.LOCK_FILE).exists()
  with RunLock(tmp_path):  # free again
    pass


def test_second_process_refuses_naming_the_running_one(tmp_path):
  holder = _python(_HOLDER, tmp_path)
  try:
    assert holder.stdout.readline().strip() == "HELD", holder.stderr.read()
    with pytest.raises(WorkdirBusyError) as error:
      RunLock(tmp_path).acquire()
    message = str(error.value)
    assert f"pid {holder.pid} on host {workdir_lib.this_process()['host']}" in message
    assert "\n" not in message and "--workdir" in message
  finally:
    holder.stdin.close()
    holder.wait(timeout=30)
  assert holder.returncode == 0, holder.stderr.read()
  with RunLock(tmp_path):
    pass


def test_lock_of_a_killed_process_is_taken_over(tmp_path, caplog):
  holder = _python(_HOLDER, tmp_path)
  assert holder.stdout.readline().strip() == "HELD", holder.stderr.read()
  holder.kill()
  holder.wait()
  assert (tmp_path / workdir_lib.LOCK_FILE).exists()  # a SIGKILL leaves it behind
  with caplog.at_level(logging.WARNING, "t2t_jax.runtime.workdir"):
    with RunLock(tmp_path) as lock:
      assert json.loads(lock.path.read_text())["pid"] == os.getpid()
  assert f"pid {holder.pid}" in caplog.text and "no longer runs" in caplog.text


def test_reused_pid_and_garbled_files_are_stale(tmp_path, caplog):
  # Our parent is alive, but did not start when the lock says: the pid was reused.
  _write_lock(tmp_path, pid=os.getppid(), start=1)
  with caplog.at_level(logging.WARNING, "t2t_jax.runtime.workdir"):
    with RunLock(tmp_path):
      pass
  assert "now belongs to another process" in caplog.text
  for garbage in ("", "{\"pid\": ", "\x00\x01", "[1, 2]"):
    (tmp_path / workdir_lib.LOCK_FILE).write_text(garbage)
    with RunLock(tmp_path):
      pass
  # A live process whose start time matches is not stale.
  _write_lock(tmp_path, pid=os.getppid(), start=workdir_lib._process_start(os.getppid()))
  with pytest.raises(WorkdirBusyError, match=f"pid {os.getppid()}"):
    RunLock(tmp_path).acquire()


def test_another_hosts_lock_is_respected_until_its_heartbeat_stops(tmp_path):
  record = _write_lock(tmp_path, host="other-host", pid=_dead_pid(), boot_id="x")
  path = tmp_path / workdir_lib.LOCK_FILE
  with pytest.raises(WorkdirBusyError, match="on host other-host"):
    RunLock(tmp_path).acquire()  # its pid means nothing here
  old = time.time() - workdir_lib.STALE_SECONDS - 60
  os.utime(path, (old, old))
  with RunLock(tmp_path) as lock:
    assert json.loads(path.read_text())["pid"] == os.getpid()
    assert lock.held
  assert record["pid"] != os.getpid()


def test_heartbeat_keeps_the_lock_fresh_and_release_spares_a_foreign_lock(tmp_path):
  lock = RunLock(tmp_path, heartbeat_seconds=0.05).acquire()
  path = lock.path
  old = time.time() - 3600
  os.utime(path, (old, old))
  deadline = time.monotonic() + 10
  while path.stat().st_mtime < old + 60 and time.monotonic() < deadline:
    time.sleep(0.02)
  assert path.stat().st_mtime > old + 60, "the heartbeat did not touch the lock"
  _write_lock(tmp_path, host="other-host", boot_id="x")  # someone took it over meanwhile
  lock.release()
  assert json.loads(path.read_text())["host"] == "other-host"


# Builds argv[1] with build_once after a pause; records each build in argv[2].
_BUILDER = """
import os, pathlib, sys, time
from t2t_jax.runtime import workdir
target, log = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
def build():
  with open(log, "a") as f:
    f.write(f"{os.getpid()}\\n")
  time.sleep(1.0)
  tmp = target.with_suffix(".tmp")
  tmp.write_text("built")
  os.replace(tmp, target)
  return "built"
print(workdir.build_once(target, build, target.parent / ".locks"), flush=True)
"""


def test_concurrent_first_runs_build_once_and_the_others_wait(tmp_path):
  target, builds = tmp_path / "cache.bin", tmp_path / "builds.txt"
  processes = [_python(_BUILDER, target, builds) for _ in range(3)]
  outputs = []
  for process in processes:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    outputs.append(out.strip())
  assert len(builds.read_text().split()) == 1, "built more than once"
  assert sorted(outputs) == ["None", "None", "built"]
  assert target.read_text() == "built"


def test_build_once_rebuilds_what_fails_the_ready_check(tmp_path):
  target = tmp_path / "vocab.model"
  target.write_text("")  # emptied
  def build():
    target.write_text("model")
    return 1
  ready = lambda p: p.exists() and p.stat().st_size > 0
  assert workdir_lib.build_once(target, build, tmp_path / ".locks", ready) == 1
  assert workdir_lib.build_once(target, build, tmp_path / ".locks", ready) is None
  assert target.read_text() == "model"


def test_the_lock_is_reentrant_within_a_process(tmp_path):
  with RunLock(tmp_path) as outer:
    with RunLock(tmp_path) as inner:
      assert inner.held
    assert (tmp_path / workdir_lib.LOCK_FILE).exists(), "the inner release removed it"
    assert json.loads(outer.path.read_text())["pid"] == os.getpid()
  assert not (tmp_path / workdir_lib.LOCK_FILE).exists()
