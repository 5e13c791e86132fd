"""cli/average.py: `t2t-average-checkpoints` averages the last N (the flag, else the work
directory's config), and says so; nothing to average is one line."""

import pytest

from saved_states import assert_trees_equal, np_mean, save_steps
from t2t_jax.cli import average
from t2t_jax.runtime import averaging


def test_console_script(tmp_path, capsys):
  with pytest.raises(SystemExit, match="no checkpoints"):
    average.main(["--workdir", str(tmp_path)])
  save_steps(tmp_path, [1, 2, 3])
  average.main(["--workdir", str(tmp_path), "--last", "2"])
  assert "Averaged steps [2, 3]" in capsys.readouterr().out
  assert_trees_equal(averaging.load_params(tmp_path), np_mean([2, 3]))
  (tmp_path / "config.json").write_text('{"average_last": 3}')
  average.main(["--workdir", str(tmp_path)])
  assert "Averaged steps [1, 2, 3]" in capsys.readouterr().out
  with pytest.raises(SystemExit):
    average.main(["--workdir", str(tmp_path), "--last", "0"])

