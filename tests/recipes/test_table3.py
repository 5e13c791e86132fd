"""recipes/table3.py: rows, their configs and descriptions, parameter counts beside the paper's.

The rows trained end to end through the command: tests/cli/test_table3.py.
"""

import pytest

from t2t_jax import configs
from t2t_jax.configs import count_params, get_config
from t2t_jax.recipes import table3


def test_row_selection_and_overrides():
  assert table3.parse_rows("all") == ["base", *configs.TABLE3_ROWS, "big"]
  assert table3.parse_rows("A1, C4") == ["A1", "C4"]
  with pytest.raises(ValueError, match="unknown --rows"):
    table3.parse_rows("A9")
  cfg = table3.row_config("C4", {"dropout_rate": 0.2}, "demo", 50)
  assert (cfg.d_model, cfg.d_k, cfg.d_v, cfg.dropout_rate) == (256, 32, 32, 0.2)
  assert (cfg.dataset, cfg.vocab_size, cfg.num_train_steps) == ("demo", 1000, 50)
  assert table3.row_config("big", {}, None, None).num_train_steps == 300_000
  assert table3.describe_row("A1") == "h=1 d_k=512 d_v=512"


def test_param_counts_at_another_vocabulary():
  small = table3.param_counts(vocab_size=1000).splitlines()
  assert float(small[1].split()[1]) == pytest.approx(
      count_params(get_config("base", vocab_size=1000)) / 1e6, abs=0.05)
