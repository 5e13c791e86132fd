"""accelerators/plan.py: the rows compiled, the config's explicit micro-batch, and a plan's
figures for a target this host lacks (`t2t-compile`'s JSON: tests/cli/test_compile.py)."""

from compilers import NO_CUDA
from t2t_jax import configs
from t2t_jax.accelerators import plan, targets


def test_the_rows_compiled_are_the_longest_bucket_of_either_side():
  cfg = configs.get_config("base", max_source_length=40, max_target_length=100)
  assert plan.row_length(cfg) == 100
  assert plan.row_length(cfg.replace(max_source_length=100, max_target_length=40)) == 100


def test_an_explicit_micro_batch_is_split_into_micro_steps():
  cfg = configs.get_config("base", max_tokens_per_device=4096, tokens_per_batch=65536)
  assert plan.micro_batch(cfg, devices=8, length=256) == (16, 4096, 2)
  assert plan.micro_batch(cfg, devices=16, length=256) == (16, 4096, 1)
  # Rows longer than the budget still make one row, and an uneven split rounds up.
  assert plan.micro_batch(cfg.replace(tokens_per_batch=40000), devices=8, length=8192) == (
      1, 4096, 2)


@NO_CUDA
def test_plan_for_an_h100_uses_the_config_micro_batch_and_cudnn():
  cfg = configs.get_config("base", num_layers=1, d_model=64, d_ff=128, num_heads=4,
                           vocab_size=256, dtype="bfloat16", max_source_length=32,
                           max_target_length=32, max_tokens_per_device=128,
                           tokens_per_batch=512)
  figures = plan.plan(cfg, targets.get("h100"), decode=False)
  assert (figures["row_length"], figures["rows_per_micro_step"], figures["micro_steps"]) == (
      32, 4, 4)
  assert figures["attention_impl"] == "cudnn" and figures["fits"]
  assert figures["prediction_basis"] == "gpu_roofline" and figures["predicted_step_s"] > 0
  assert figures["eval_compiles"] and "decode_step_compiles" not in figures
