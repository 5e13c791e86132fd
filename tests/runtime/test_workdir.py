"""runtime/workdir.py: a work directory's config (written, checked, read back) and atomic JSON."""

import json

import pytest

from t2t_jax import configs
from t2t_jax.runtime import workdir


def test_config_round_trip_and_old_work_directories(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json not found: train a model there"):
    workdir.load_config(tmp_path)
  cfg = configs.get_config("demo", d_model=64)
  workdir.check_or_write_config(cfg, tmp_path)
  assert workdir.load_config(tmp_path) == cfg
  assert list(tmp_path.iterdir()) == [tmp_path / workdir.CONFIG_FILE]  # no temporary left

  # Written by an earlier version: a retired field is dropped, an unknown one is named.
  path = tmp_path / workdir.CONFIG_FILE
  path.write_text(json.dumps({**configs.to_dict(cfg), "shuffle_buffer_batches": 0}))
  assert workdir.load_config(tmp_path) == cfg
  path.write_text(json.dumps({**configs.to_dict(cfg), "d_modle": 3}))
  with pytest.raises(ValueError, match=r"config.json has unknown config field\(s\) \['d_modle'\]"):
    workdir.load_config(tmp_path)


def test_resuming_accepts_run_settings_and_refuses_a_different_model(tmp_path):
  cfg = configs.get_config("demo")
  workdir.check_or_write_config(cfg, tmp_path)
  longer = cfg.replace(num_train_steps=5000, parallelism="shard_map", beam_size=2)
  workdir.check_or_write_config(longer, tmp_path)
  assert workdir.load_config(tmp_path) == longer
  with pytest.raises(ValueError, match=r"different config \(d_model: 128 -> 64, "
                                       r"num_layers: 3 -> 2\); use a new --workdir"):
    workdir.check_or_write_config(longer.replace(d_model=64, num_layers=2), tmp_path)
  assert workdir.load_config(tmp_path) == longer  # the refused config is not written


@pytest.mark.parametrize("text", ["", '{"d_model": 6', "\x00\xff garbage", "[1, 2]"])
def test_a_damaged_config_stops_with_what_to_do(tmp_path, text):
  cfg = configs.get_config("demo")
  (tmp_path / workdir.CONFIG_FILE).write_text(text, errors="surrogateescape")
  with pytest.raises(ValueError, match="config.json is damaged .*; restore it"):
    workdir.check_or_write_config(cfg, tmp_path)
  if text != "[1, 2]":
    with pytest.raises(ValueError, match="config.json is damaged .*; restore it"):
      workdir.load_config(tmp_path)
  assert (tmp_path / workdir.CONFIG_FILE).read_text(errors="surrogateescape") == text
