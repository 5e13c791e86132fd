"""runtime/averaging.py: the last checkpoints averaged against a NumPy mean, loaded for
inference, a damaged or unreadable one among them, a stale average."""

import logging
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from saved_states import CFG, Unreadable, assert_trees_equal, eio, make_state, np_mean, save_steps, truncate
from t2t_jax.runtime import averaging
from t2t_jax.runtime import checkpoint


def test_average_equals_numpy_mean_and_load_params(tmp_path, caplog):
  save_steps(tmp_path, [10, 20, 30, 40, 50], cfg=CFG.replace(average_last=5))
  averaged = averaging.average_checkpoints(tmp_path, last=3)
  assert_trees_equal(averaged, np_mean([30, 40, 50]))
  # A separate mean differs from any single checkpoint (the test can fail).
  assert not np.array_equal(averaged["embed"], np.asarray(make_state(50).params["embed"]))

  caplog.set_level(logging.INFO, logger="t2t_jax.runtime.averaging")
  loaded = averaging.load_params(tmp_path)
  assert_trees_equal(loaded, averaged)
  assert "[30, 40, 50]" in caplog.text
  caplog.clear()
  latest = averaging.load_params(tmp_path, averaged=False)
  assert_trees_equal(latest, jax.device_get(make_state(50).params))
  assert "step 50" in caplog.text

  with pytest.warns(checkpoint.CheckpointWarning, match="fewer than last=9"):
    all_five = averaging.average_checkpoints(tmp_path, last=9)
  assert_trees_equal(all_five, np_mean([10, 20, 30, 40, 50]))
  assert_trees_equal(averaging.load_params(tmp_path), all_five)


def test_params_made_elsewhere_load_as_the_averaged_params_of_step_0(tmp_path, caplog):
  params = jax.device_get(make_state(7).params)
  averaging.write_params(tmp_path, params, source="an imported model")
  caplog.set_level(logging.INFO, logger="t2t_jax.runtime.averaging")
  assert_trees_equal(averaging.load_params(tmp_path), params)
  assert averaging.averaged_steps(tmp_path) == [0] and "[0]" in caplog.text
  # What a command that wants checkpoints says of such a directory: where its params came from.
  assert averaging.written_source(tmp_path) == "an imported model"
  with pytest.raises(FileNotFoundError, match=r"holds params written whole \(an imported model\), "
                                              r"no checkpoints \(--no-average"):
    averaging.load_params(tmp_path, averaged=False)
  with pytest.raises(FileNotFoundError, match=r"no checkpoints to average: they need none"):
    averaging.average_checkpoints(tmp_path)


def test_average_skips_a_corrupt_checkpoint(tmp_path):
  save_steps(tmp_path, [1, 2, 3, 4], cfg=CFG.replace(average_last=4))
  truncate(tmp_path / "checkpoints" / "3")
  with pytest.warns(checkpoint.CheckpointWarning, match=r"step 3 at .*checkpoints/3"):
    averaged = averaging.average_checkpoints(tmp_path, last=2)
  assert_trees_equal(averaged, np_mean([2, 4]))


def test_average_stops_at_a_checkpoint_it_cannot_read(tmp_path, monkeypatch):
  save_steps(tmp_path, [1, 2, 3, 4], cfg=CFG.replace(average_last=4))
  Unreadable(monkeypatch, 3, eio(tmp_path), handler=ocp.PyTreeCheckpointHandler)
  with pytest.raises(checkpoint.CheckpointUnreadableError,
                     match=r"could not read checkpoint step 3 at .*Input/output error"):
    averaging.average_checkpoints(tmp_path, last=2)  # not the average of 2 and 4
  assert not (tmp_path / "averaged").exists()


def test_load_params_falls_back_to_latest_and_warns_when_stale(tmp_path, caplog):
  save_steps(tmp_path, [1, 2])
  averaging.average_checkpoints(tmp_path, last=2)
  save_steps(tmp_path, [3])
  with pytest.warns(checkpoint.CheckpointWarning, match="averages up to step 2"):
    averaging.load_params(tmp_path)
  shutil.rmtree(tmp_path / "averaged")
  with caplog.at_level(logging.INFO, logger="t2t_jax.runtime.averaging"):
    assert_trees_equal(averaging.load_params(tmp_path), jax.device_get(make_state(3).params))
  assert "no averaged checkpoint" in caplog.text

