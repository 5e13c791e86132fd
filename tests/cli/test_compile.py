"""cli/compile.py: `t2t-compile` for a target this host lacks (its figures, its last line one
JSON object), and what to install when the compilers are absent. `--measure`:
tests/accelerators/test_measure.py."""

import json

import pytest

from compilers import NO_CUDA
from t2t_jax.accelerators import targets
from t2t_jax.cli import compile as compile_lib


def test_compile_command_without_the_compilers_says_what_to_install(monkeypatch, capsys):
  monkeypatch.setattr(targets, "available", lambda platform: False)
  with pytest.raises(SystemExit, match=r"needs .* pip install -e '\.\[accelerators\]'"):
    compile_lib.main(["--target=h100", "--config=base"])


@NO_CUDA
def test_compile_command_prints_the_figures_last(capsys):
  compile_lib.main(["--target=h100", "--config=base", "--config.num_layers=1",
                    "--config.d_model=128", "--config.d_ff=256", "--config.num_heads=4",
                    "--config.vocab_size=512", "--config.dtype=bfloat16",
                    "--config.max_source_length=32", "--config.max_target_length=32",
                    "--config.tokens_per_batch=256"])
  out = capsys.readouterr().out.strip().splitlines()
  report = json.loads(out[-1])
  assert report["fits"] and report["cudnn_attention_calls"] == 6
  assert report["peak_bytes"] < report["device_memory_bytes"]
  assert report["predicted_step_s"] > 0 and report["decode_step_compiles"]
  assert report["tpu_cost_model_optimal_seconds"] is None  # not a GPU figure
  assert any(line.startswith("PREDICTED") for line in out)
  assert any("roofline" in line for line in out[:-1])


@NO_CUDA
def test_compile_command_prices_the_all_reduce_of_eight_gpus(capsys):
  compile_lib.main(["--target=8xh100", "--config=base", "--config.num_layers=1",
                    "--config.d_model=64", "--config.d_ff=128", "--config.num_heads=4",
                    "--config.vocab_size=256", "--config.dtype=bfloat16", "--no-decode",
                    "--config.max_source_length=32", "--config.max_target_length=32",
                    "--config.tokens_per_batch=2048"])
  report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert report["devices"] == 8 and report["rows_per_micro_step"] == 8  # 2048 / 8 / 32
  assert report["prediction_basis"] == "gpu_roofline+all_reduce"
  assert report["interconnect_bytes_per_s"] == 450e9
  assert report["predicted_all_reduce_s"] == pytest.approx(
      2 * 7 / 8 * report["all_reduce_bytes"] / 450e9)
  assert any("NVLink" in a for a in report["prediction_assumptions"])

