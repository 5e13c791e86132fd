"""accelerators/predict.py: step time from XLA's cost model (TPU) or a roofline (GPU), the
gradient all-reduce on several GPUs, and the figures derived from the step time."""

import pytest

from compilers import SMALL
from t2t_jax.accelerators import predict, targets


def test_roofline_adds_compute_and_memory_time():
  h100 = targets.get("h100")
  cost = {"flops": h100.peak_bf16_flops, "bytes accessed": 2 * h100.memory_bandwidth}
  seconds, lower, basis = predict.micro_step_seconds(cost, h100)
  assert (seconds, lower, basis) == (pytest.approx(3.0), pytest.approx(2.0), "gpu_roofline")
  v5p = targets.get("v5p-8")
  assert predict.micro_step_seconds({"optimal_seconds": 0.5}, v5p)[0] == 0.5
  with pytest.raises(ValueError, match="no valid time"):
    predict.micro_step_seconds({"flops": 1.0}, v5p)
  with pytest.raises(ValueError, match="no valid time"):  # what libtpu's v5e model gave
    predict.micro_step_seconds({"optimal_seconds": -672.0}, v5p)


def test_sliced_prefetches_are_priced_at_zero_not_minus_one_second():
  v5e = targets.get("v5e-8")
  # libtpu's v5e answer for a program with one sliced prefetch (the FFN gradient below).
  seconds, lower, basis = predict.micro_step_seconds({"optimal_seconds": -0.99995}, v5e,
                                                     sliced_prefetches=1)
  assert seconds == lower == pytest.approx(5e-5) and basis.endswith("sliced_prefetch_correction")
  assert predict.micro_step_seconds({"optimal_seconds": 0.5}, v5e)[2] == "xla_tpu_cost_model"
  with pytest.raises(ValueError, match="672 sliced prefetches priced at -1 s"):
    predict.micro_step_seconds({"optimal_seconds": -673.5}, v5e, sliced_prefetches=672)


def test_prediction_scales_with_the_micro_steps():
  v5p = targets.get("v5p-8")
  one = predict.predict(SMALL, v5p, {"optimal_seconds": 0.1}, rows=4, length=32, accum_steps=1)
  three = predict.predict(SMALL, v5p, {"optimal_seconds": 0.1}, rows=4, length=32,
                          accum_steps=3)
  assert three.step_s == pytest.approx(3 * one.step_s)
  assert three.mfu == pytest.approx(one.mfu) and 0 < one.mfu
  assert one.hours_to_steps == pytest.approx(0.1 * SMALL.num_train_steps / 3600)


def test_all_reduce_is_priced_as_a_ring_on_several_gpus_only():
  eight = targets.get("8xh100")
  assert predict.all_reduce_seconds(eight, 450_000_000) == pytest.approx(2 * 7 / 8 * 1e-3)
  assert predict.all_reduce_seconds(targets.get("h100"), 450_000_000) == 0.0
  cost = {"flops": 1e12, "bytes accessed": 1e9}
  one = predict.predict(SMALL, eight, cost, rows=4, length=32, accum_steps=2)
  reduced = predict.predict(SMALL, eight, cost, rows=4, length=32, accum_steps=2,
                            all_reduce_bytes=450_000_000)
  # Once per update, not per micro-step.
  assert reduced.step_s == pytest.approx(one.step_s + 2 * 7 / 8 * 1e-3)
  assert reduced.basis == "gpu_roofline+all_reduce" and one.basis == "gpu_roofline"
  assert any("NVLink" in a for a in predict.assumptions(reduced))
  assert not any("NVLink" in a for a in predict.assumptions(one))

