"""runtime/checkpoint.py: round trips, intervals, corrupt checkpoints (averaging: test_averaging.py)."""

import errno
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xla_flags  # tests/xla_flags.py

from saved_states import CFG, Unreadable, assert_trees_equal, eio, make_state, save_steps, truncate
from t2t_jax.runtime import checkpoint
from t2t_jax.train.step import TrainState


def test_round_trip_of_state_and_extras(tmp_path):
  state = make_state(7)
  extras = {"data": {"epoch": 1, "index": np.int64(42), "order": np.arange(3)}, "note": "x"}
  with checkpoint.Checkpointer(tmp_path, CFG) as ckpt:
    assert ckpt.restore_latest(state) is None
    assert ckpt.maybe_save(7, state, extras, force=True)
    assert not ckpt.maybe_save(7, state, extras, force=True), "a step is written once"

  ckpt = checkpoint.Checkpointer(tmp_path, CFG)
  abstract = jax.eval_shape(lambda: make_state(0))
  for target in (abstract, make_state(0)):
    restored, restored_extras = ckpt.restore_latest(target)
    assert isinstance(restored, TrainState)
    assert type(restored.opt_state) is type(state.opt_state)  # optax NamedTuples come back
    assert_trees_equal(restored, jax.device_get(state))
    assert all(isinstance(x, np.ndarray) for x in jax.tree.leaves(restored))
    assert restored_extras == {"data": {"epoch": 1, "index": 42, "order": [0, 1, 2]},
                               "note": "x"}
  ckpt.close()


def test_bad_extras_and_typed_keys_fail_early(tmp_path):
  with checkpoint.Checkpointer(tmp_path, CFG) as ckpt:
    with pytest.raises(ValueError, match="JSON"):
      ckpt.maybe_save(1, make_state(1), {"bad": object()}, force=True)
    with pytest.raises(ValueError, match="typed PRNG keys"):
      ckpt.maybe_save(1, {"key": jax.random.key(0)}, force=True)
    assert ckpt.all_steps() == []


def test_saved_values_are_copies_not_views_of_donated_buffers(tmp_path):
  state = jax.device_put(make_state(3))
  expected = jax.device_get(state)
  overwrite = jax.jit(lambda s: jax.tree.map(lambda x: x * 0 + 99, s), donate_argnums=0)
  with checkpoint.Checkpointer(tmp_path, CFG) as ckpt:
    ckpt.maybe_save(3, state, force=True)
    state = overwrite(state)  # reuses the buffers while the save may still be writing
    jax.block_until_ready(state)
    ckpt.wait()
    restored, _ = ckpt.restore_latest(expected)
  assert_trees_equal(restored, expected)


def test_step_interval(tmp_path):
  cfg = CFG.replace(checkpoint_every_steps=3)
  with checkpoint.Checkpointer(tmp_path, cfg, async_save=False) as ckpt:
    saved = [step for step in range(1, 11) if ckpt.maybe_save(step, make_state(step))]
    assert saved == [3, 6, 9]
    assert ckpt.maybe_save(10, make_state(10), force=True)
    assert not ckpt.maybe_save(8, make_state(8), force=True), "older than the latest"
    assert ckpt.all_steps() == [6, 9, 10]  # average_last=3 kept


def test_minute_interval_with_injected_clock(tmp_path):
  now = [1000.0]
  cfg = CFG.replace(checkpoint_every_minutes=10.0)
  with checkpoint.Checkpointer(tmp_path, cfg, clock=lambda: now[0], async_save=False) as ckpt:
    saved = []
    for step in range(1, 13):
      now[0] += 130.0  # 2m10s per step: due after 5 steps (650 s) since the last save
      if ckpt.maybe_save(step, make_state(step)):
        saved.append(step)
    assert saved == [5, 10]
    # Both intervals: by time at 5 (650 s), by steps at 7, by time again at 12.
    both = checkpoint.Checkpointer(tmp_path / "both", cfg.replace(checkpoint_every_steps=7),
                                   clock=lambda: now[0], async_save=False)
    saved = []
    for step in range(1, 13):
      now[0] += 130.0
      if both.maybe_save(step, make_state(step)):
        saved.append(step)
    both.close()
    assert saved == [5, 7, 12]
  with pytest.raises(ValueError, match="checkpoint_every_minutes=0"):
    checkpoint.Checkpointer(tmp_path, CFG.replace(checkpoint_every_minutes=0.0))


def test_minutes_count_from_the_last_save_not_the_last_check(tmp_path):
  now = [0.0]
  cfg = CFG.replace(checkpoint_every_minutes=1.0, checkpoint_every_steps=2)
  with checkpoint.Checkpointer(tmp_path, cfg, clock=lambda: now[0], async_save=False) as ckpt:
    assert not ckpt.maybe_save(1, make_state(1))
    now[0] = 50.0
    assert ckpt.maybe_save(2, make_state(2))      # by steps; restarts the clock
    now[0] = 100.0
    assert not ckpt.maybe_save(3, make_state(3))  # 50 s since the last save
    now[0] = 111.0
    assert ckpt.maybe_save(5, make_state(5))      # 61 s


def test_keeps_at_least_two(tmp_path):
  save_steps(tmp_path, [1, 2, 3, 4], cfg=CFG.replace(average_last=1))
  assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [3, 4]


def test_an_interim_save_goes_at_the_next_save_and_does_not_count(tmp_path):
  # The steps an uninterrupted run would keep (average_last=3): 30, 40, 50.
  cfg = CFG.replace(checkpoint_every_steps=10)
  save_steps(tmp_path, [10, 20, 30, 40])
  with checkpoint.Checkpointer(tmp_path, cfg) as ckpt:
    assert ckpt.maybe_save(43, make_state(43), interim=True)  # preempted after step 43
    ckpt.wait()
    assert ckpt.all_steps() == [30, 40, 43]  # kept while it is the newest
  with checkpoint.Checkpointer(tmp_path, cfg) as ckpt:  # the resumed run knows it is interim
    assert ckpt.maybe_save(46, make_state(46), interim=True)
    ckpt.wait()
    assert ckpt.all_steps() == [30, 40, 46]
    assert ckpt.maybe_save(50, make_state(50))
  assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [30, 40, 50]


def _drop_meta(step_dir):
  shutil.rmtree(step_dir / "meta")


def _garble_metadata(step_dir):
  (step_dir / "state" / "_METADATA").write_text('{"tree_metadata": {')


def _garble_every_file(step_dir):
  """Random bytes in place of every file (a disk or a copy gone wrong), as long as it was."""
  rng = np.random.default_rng(0)
  files = [p for p in step_dir.rglob("*") if p.is_file()]
  assert len(files) > 5, files
  for path in files:
    path.write_bytes(rng.bytes(max(path.stat().st_size, 16)))


@pytest.mark.parametrize("damage", [truncate, _drop_meta, _garble_metadata, _garble_every_file])
def test_corrupt_latest_is_set_aside_and_previous_restored(tmp_path, damage):
  save_steps(tmp_path, [2, 4, 6])
  directory = tmp_path / "checkpoints"
  damage(directory / "6")
  ckpt = checkpoint.Checkpointer(tmp_path, CFG)
  with pytest.warns(checkpoint.CheckpointWarning, match=r"step 6 at .*checkpoints/6.*moved"):
    state, extras = ckpt.restore_latest(jax.eval_shape(lambda: make_state(0)))
  assert_trees_equal(state, jax.device_get(make_state(4)))
  assert extras == {"data": {"position": 4}}
  assert (directory / "6.corrupt").is_dir() and not (directory / "6").exists()
  # The broken step no longer blocks: training redoes step 6 and saves it again.
  assert ckpt.latest_step == 4
  assert ckpt.maybe_save(6, make_state(60), force=True)
  ckpt.wait()
  state, _ = ckpt.restore_latest(make_state(0))
  assert_trees_equal(state, jax.device_get(make_state(60)))
  ckpt.close()


def test_incompatible_target_raises_and_moves_nothing(tmp_path):
  save_steps(tmp_path, [1, 2])
  wrong = make_state(0).replace(params={"embed": jnp.zeros((41, 16))})
  with checkpoint.Checkpointer(tmp_path, CFG) as ckpt:
    with pytest.raises(ValueError, match="new workdir"):
      ckpt.restore_latest(wrong)
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["1", "2"]


def test_target_of_other_shapes_raises_and_moves_nothing(tmp_path):
  # Same structure, one array wider: what a run resumed with another d_model asks for.
  save_steps(tmp_path, [1, 2])
  state = make_state(0)
  wider = state.replace(params={**state.params, "embed": jnp.zeros((40, 24))})
  with checkpoint.Checkpointer(tmp_path, CFG) as ckpt:
    with pytest.raises(ValueError, match=r"step 2 .*\['embed'\] is \(40, 16\) there, "
                                         r"\(40, 24\) in the given state.*new workdir"):
      ckpt.restore_latest(jax.eval_shape(lambda: wider))
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["1", "2"]


def test_unfinished_save_of_a_killed_run_is_ignored_and_removed(tmp_path):
  save_steps(tmp_path, [1, 2])
  directory = tmp_path / "checkpoints"
  # What a kill in the middle of saving step 3 leaves: orbax's temporary directory.
  partial = directory / "3.orbax-checkpoint-tmp"
  shutil.copytree(directory / "2", partial)
  (partial / "commit_success.txt").unlink(missing_ok=True)
  truncate(partial)
  with checkpoint.Checkpointer(tmp_path, CFG) as ckpt:
    assert ckpt.all_steps() == [1, 2]
    state, _ = ckpt.restore_latest(make_state(0))
    assert_trees_equal(state, jax.device_get(make_state(2)))
    assert ckpt.maybe_save(3, make_state(3), force=True)
  assert sorted(p.name for p in directory.iterdir()) == ["1", "2", "3"]


def test_restores_on_a_different_device_count(tmp_path):
  """Saved from state replicated over 8 devices; restored in a process with 1 device."""
  assert jax.device_count() == 8
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("batch",))
  replicated = jax.device_put(make_state(5), jax.sharding.NamedSharding(
      mesh, jax.sharding.PartitionSpec()))
  save_steps(tmp_path, [])
  with checkpoint.Checkpointer(tmp_path, CFG) as ckpt:
    ckpt.maybe_save(5, replicated, force=True)
  expected = tmp_path / "expected.npz"
  np.savez(expected, *[np.asarray(x) for x in jax.tree.leaves(jax.device_get(make_state(5)))])
  script = textwrap.dedent(f"""
      import jax, numpy as np
      assert jax.device_count() == 1, jax.device_count()
      sys_path = {str(pathlib.Path(__file__).parents[1])!r}
      import sys; sys.path.insert(0, sys_path)
      from saved_states import make_state, CFG
      from t2t_jax.runtime import checkpoint
      with checkpoint.Checkpointer({str(tmp_path)!r}, CFG) as ckpt:
        state, _ = ckpt.restore_latest(jax.eval_shape(lambda: make_state(0)))
      expected = np.load({str(expected)!r})
      leaves = jax.tree.leaves(state)
      assert len(leaves) == len(expected.files)
      for i, leaf in enumerate(leaves):
        np.testing.assert_array_equal(leaf, expected[f"arr_{{i}}"])
      print("restored", len(leaves), "leaves on", jax.device_count(), "device")
  """)
  env = {**os.environ, "XLA_FLAGS": xla_flags.with_devices(1),
         "JAX_PLATFORMS": "cpu"}
  result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, cwd=pathlib.Path(__file__).parents[2])
  assert result.returncode == 0, result.stderr[-3000:]
  assert "on 1 device" in result.stdout


@pytest.fixture
def small_disk(tmp_path):
  """A 2 MiB tmpfs (needs mount privileges, e.g. root in a container; skipped without)."""
  mount = tmp_path / "disk"
  mount.mkdir()
  result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
  if result.returncode != 0:
    pytest.skip(f"cannot mount a small file system here: {result.stderr.strip()}")
  yield mount
  subprocess.run(["umount", "-l", str(mount)], check=False)


# Saves step 3 into the work directory argv[1], whose disk is full; prints the one line.
_SAVE_ON_A_FULL_DISK = """
import sys
from saved_states import CFG, make_state
from t2t_jax.runtime import checkpoint
ckpt = checkpoint.Checkpointer(sys.argv[1], CFG)
try:
  ckpt.maybe_save(3, make_state(3), force=True)
  ckpt.wait()  # the save is asynchronous: the failure shows here at the latest
except OSError as e:
  print("error:", e)
ckpt.close()  # does not raise the reported failure again
"""


def test_a_full_disk_gives_one_line_keeps_the_checkpoints_and_resumes_after(small_disk):
  save_steps(small_disk, [1, 2])
  filler = small_disk / "filler"
  with pytest.raises(OSError):
    filler.write_bytes(b"0" * (4 << 20))  # the disk is full now
  # In a process of its own: what a save left running prints by the time the process ends
  # (orbax's writes on a closed event loop) is part of what a user sees.
  env = {**os.environ, "XLA_FLAGS": xla_flags.with_devices(1), "JAX_PLATFORMS": "cpu"}
  result = subprocess.run([sys.executable, "-c", _SAVE_ON_A_FULL_DISK, str(small_disk)],
                          env=env, capture_output=True, text=True, timeout=120,
                          cwd=pathlib.Path(__file__).parents[1])
  output = result.stdout + result.stderr
  assert result.returncode == 0, output[-3000:]
  (message,) = [l[len("error: "):] for l in result.stdout.splitlines() if l.startswith("error: ")]
  assert message.startswith(
      f"could not write checkpoint step 3 to {small_disk / 'checkpoints'} (No space left on "
      "device); the last complete checkpoint, step 2, is intact. Free space"), message
  assert "Event loop is closed" not in output and "Traceback" not in output, output[-3000:]

  filler.unlink()  # space freed: a new run resumes from step 2 and saves again
  with checkpoint.Checkpointer(small_disk, CFG) as ckpt:
    state, _ = ckpt.restore_latest(make_state(0))
    assert_trees_equal(state, jax.device_get(make_state(2)))
    assert ckpt.maybe_save(3, make_state(3), force=True)
  assert sorted(p.name for p in (small_disk / "checkpoints").iterdir()) == ["1", "2", "3"]


@pytest.mark.parametrize("make_error", [eio, lambda _: MemoryError(), lambda _: TimeoutError(
    "read timed out"), lambda d: ValueError(
        'UNAVAILABLE: Error reading local file "/nfs/x": [os_error_code=\'5\']')])
def test_a_failed_read_is_retried_then_stops_and_moves_nothing(tmp_path, monkeypatch,
                                                               make_error):
  save_steps(tmp_path, [2, 4, 6])
  directory = tmp_path / "checkpoints"
  fault = Unreadable(monkeypatch, 6, make_error(directory / "6"))
  waits = []
  ckpt = checkpoint.Checkpointer(tmp_path, CFG, retry_delays_s=(1, 5), sleep=waits.append)
  with pytest.raises(checkpoint.CheckpointUnreadableError) as e:
    ckpt.restore_latest(jax.eval_shape(lambda: make_state(0)))
  assert fault.reads == 3 and waits == [1, 5]  # the first read and two more
  message = str(e.value)
  assert "\n" not in message and message.startswith("could not read checkpoint step 6 (")
  assert type(fault.error).__name__ in message and "3 attempts); nothing was moved" in message
  if getattr(fault.error, "filename", None):  # else the step directory stands for it
    assert f"{directory / '6' / 'state' / 'd' / 'abc'}: OSError: [Errno 5] Input/output" \
        in message
  assert sorted(p.name for p in directory.iterdir()) == ["2", "4", "6"]
  ckpt.close()
  monkeypatch.undo()  # the fault is gone: the newest step restores
  with checkpoint.Checkpointer(tmp_path, CFG) as ckpt:
    state, extras = ckpt.restore_latest(make_state(0))
  assert_trees_equal(state, jax.device_get(make_state(6)))
  assert extras == {"data": {"position": 6}}


# Restores argv[1] (a state {"w": float32[3]}) with one attempt; prints the outcome.
_RESTORE = """
import sys, jax
from t2t_jax import configs
from t2t_jax.runtime import checkpoint
cfg = configs.get_config("demo", checkpoint_every_steps=None, checkpoint_every_minutes=None)
with checkpoint.Checkpointer(sys.argv[1], cfg, retry_delays_s=(0,)) as ckpt:
  try:
    print("restored step", ckpt.restore_latest({"w": jax.ShapeDtypeStruct((3,), "float32")}
                                               )[1]["step"])
  except checkpoint.CheckpointUnreadableError as e:
    print("stopped:", e)
"""


def test_a_file_without_read_permission_stops_the_restore_and_moves_nothing(tmp_path):
  """A real EACCES from tensorstore (root reads anything: it runs without that capability)."""
  no_override = []
  if os.geteuid() == 0:
    if shutil.which("setpriv") is None:
      pytest.skip("running as root without setpriv: file permissions cannot stop a read")
    no_override = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
  with checkpoint.Checkpointer(tmp_path, CFG) as ckpt:
    for step in (2, 4):
      ckpt.maybe_save(step, {"w": np.full(3, step, np.float32)}, {"step": step}, force=True)
  files = [p for p in (tmp_path / "checkpoints" / "4").rglob("*") if p.is_file()
           and p.parent.name == "d"]
  for path in files:
    path.chmod(0)
  result = subprocess.run([*no_override, sys.executable, "-c", _RESTORE, str(tmp_path)],
                          cwd=pathlib.Path(__file__).parents[2], capture_output=True,
                          text=True, check=False)
  for path in files:
    if path.exists():  # not if the step was (wrongly) set aside
      path.chmod(0o644)
  lines = [l for l in result.stdout.splitlines() if l.startswith(("stopped", "restored"))]
  assert len(lines) == 1 and lines[0].startswith(
      "stopped: could not read checkpoint step 4 ("), result.stdout + result.stderr[-2000:]
  assert "Permission denied" in lines[0] and "nothing was moved" in lines[0]
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["2", "4"]
  with checkpoint.Checkpointer(tmp_path, CFG) as ckpt:  # readable again: step 4 restores
    assert ckpt.restore_latest({"w": np.zeros(3, np.float32)})[1] == {"step": 4}


def test_a_read_that_fails_once_is_retried_and_restores_the_newest(tmp_path, monkeypatch):
  save_steps(tmp_path, [2, 4])
  fault = Unreadable(monkeypatch, 4, eio(tmp_path), times=1)
  with checkpoint.Checkpointer(tmp_path, CFG, retry_delays_s=(1,), sleep=lambda _: None
                               ) as ckpt:
    state, _ = ckpt.restore_latest(make_state(0))
  assert_trees_equal(state, jax.device_get(make_state(4)))
  assert fault.reads == 1
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["2", "4"]


# --- what a failed read means: only evidence about the files counts as damage


@pytest.mark.parametrize("error, kind", [
    (FileNotFoundError(errno.ENOENT, "No such file"), checkpoint.DAMAGED),
    (json.JSONDecodeError("Expecting value", "{", 1), checkpoint.DAMAGED),
    (UnicodeDecodeError("utf-8", b"\xae", 0, 1, "invalid start byte"), checkpoint.DAMAGED),
    (KeyError('Item "meta" was not found in the checkpoint. Available items: [\'state\']'),
     checkpoint.DAMAGED),
    (ValueError('DATA_LOSS: Error reading local file "/c/6/state/d/1": Error decoding b-tree'),
     checkpoint.DAMAGED),
    (ValueError('OUT_OF_RANGE: Error reading local file "/c/6/state/d/1": Requested byte'),
     checkpoint.DAMAGED),
    (ValueError("NOT_FOUND: Error reading local file \"/c/d/1\" [os_error_code='2']"),
     checkpoint.DAMAGED),
    (PermissionError(errno.EACCES, "Permission denied"), checkpoint.UNREADABLE),
    (OSError(errno.ENOSPC, "No space left on device"), checkpoint.UNREADABLE),
    (ValueError('PERMISSION_DENIED: Error opening local file "/c/6/state/d/1"'),
     checkpoint.UNREADABLE),
    (ValueError("RESOURCE_EXHAUSTED: Failed writing [os_error_code='28']"),
     checkpoint.UNREADABLE),
    (MemoryError(), checkpoint.UNREADABLE),
    (ValueError("User-provided restore item and on-disk value metadata tree structures do "
                "not match"), checkpoint.INCOMPATIBLE),
    (KeyError("params"), checkpoint.INCOMPATIBLE),
])
def test_only_evidence_about_the_files_counts_as_damage(error, kind):
  assert checkpoint.classify(error) == kind
  wrapped = RuntimeError("orbax wrapped it")
  wrapped.__cause__ = error
  assert checkpoint.classify(wrapped) == kind


def test_the_cause_is_one_line_with_the_file_and_without_tensorstore_s_spec():
  error = ValueError(
      'PERMISSION_DENIED: Error opening "zarr" driver: Error reading local file "/c/6/state/": '
      + "x" * 300 + ' of local file "/c/6/state/d/ab": Failed to open: "/c/6/state/d/ab": '
      "Permission denied [tensorstore_spec='{\"driver\":\"zarr\"}'] [os_error_code='13']\n"
      "second line")
  assert checkpoint.culprit(error, "/c/6") == "/c/6/state/d/ab"
  cause = checkpoint.describe(error)
  assert cause.startswith("ValueError: PERMISSION_DENIED: Error opening") and "\n" not in cause
  assert cause.endswith("Permission denied [os_error_code='13']") and "spec" not in cause
  assert checkpoint.culprit(OSError(errno.EIO, "Input/output error", "/c/6/x"), "/c/6") == \
      "/c/6/x"
  assert checkpoint.culprit(MemoryError(), "/c/6") == "/c/6"
