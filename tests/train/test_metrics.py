"""train/metrics.py: FLOP counts against the matmuls JAX actually traces, the peak table, MFU;
records in metrics.jsonl and TensorBoard, and a resumed run drops later lines."""

import json
import logging
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import extras as extras_lib
from t2t_jax import configs
from t2t_jax.model import transformer
from t2t_jax.train import metrics as metrics_lib
from t2t_jax.train import step as step_lib


def _dot_flops(jaxpr) -> int:
  """2 x multiply-adds of every dot_general in a jaxpr, nested jaxprs included."""
  total = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      (lhs_contract, _), _ = eqn.params["dimension_numbers"]
      lhs = eqn.invars[0].aval.shape
      total += 2 * int(np.prod(eqn.outvars[0].aval.shape)) * int(
          np.prod([lhs[i] for i in lhs_contract]))
    for value in eqn.params.values():
      for sub in value if isinstance(value, (list, tuple)) else [value]:
        if hasattr(sub, "eqns"):
          total += _dot_flops(sub)
        elif hasattr(getattr(sub, "jaxpr", None), "eqns"):
          total += _dot_flops(sub.jaxpr)
  return total


@pytest.mark.parametrize("options", [{}, dict(decoder_layers=1, embeddings="tied_output",
                                                 target_vocab_size=70)], ids=["paper", "own"])
def test_forward_and_training_flops_count_every_traced_matmul(options):
  # d_k != d_v and S != T so that no term can stand in for another; a decoder of its own
  # depth and a target vocabulary of its own size.
  cfg = configs.get_config("demo", vocab_size=50, num_layers=2, d_model=16, d_ff=24,
                           num_heads=2, d_k=4, d_v=6, max_len=32, **options)
  params = jax.eval_shape(lambda k: transformer.init_params(cfg.model, k), jax.random.key(0))
  source, target = jnp.ones((1, 7), jnp.int32), jnp.ones((1, 5), jnp.int32)

  def forward(p):
    return transformer.Transformer(cfg.model).apply({"params": p}, source, target)

  def train_loss(p):
    return step_lib.compute_metrics(forward(p), target, cfg.label_smoothing)["loss"]

  assert _dot_flops(jax.make_jaxpr(forward)(params).jaxpr) == metrics_lib.forward_flops(cfg, 7, 5)
  assert _dot_flops(jax.make_jaxpr(jax.grad(train_loss))(params).jaxpr) == \
      metrics_lib.train_flops(cfg, 7, 5)
  assert metrics_lib.train_flops_per_token(cfg, 7, 5) == pytest.approx(metrics_lib.train_flops(cfg, 7, 5) / 5)


def test_batch_flops_use_real_lengths_only():
  cfg = configs.get_config("demo")
  inputs = np.zeros((2, 3, 10), np.int32)
  targets = np.zeros((2, 3, 10), np.int32)
  inputs[0, 0, :4], targets[0, 0, :6] = 5, 5
  inputs[1, 2, :9], targets[1, 2, :2] = 5, 5     # the other rows are fillers
  expected = metrics_lib.train_flops(cfg, 4, 6) + metrics_lib.train_flops(cfg, 9, 2)
  assert metrics_lib.batch_train_flops(cfg, inputs, targets) == pytest.approx(expected)


def test_packed_batch_flops_count_each_sentence_pair():
  cfg = configs.get_config("demo")
  # Row 0 packs pairs (3, 2) and (4, 5); row 1 holds pair (6, 1); row 2 is a filler.
  inputs_segments = np.array([[1, 1, 1, 2, 2, 2, 2, 0], [1] * 6 + [0, 0], [0] * 8])
  targets_segments = np.array([[1, 1, 2, 2, 2, 2, 2, 0], [1] + [0] * 7, [0] * 8])
  inputs, targets = (np.where(seg > 0, 7, 0) for seg in (inputs_segments, targets_segments))
  expected = sum(metrics_lib.train_flops(cfg, s, t) for s, t in ((3, 2), (4, 5), (6, 1)))
  got = metrics_lib.batch_train_flops(cfg, inputs, targets, inputs_segments, targets_segments)
  assert got == pytest.approx(expected)
  assert metrics_lib.batch_train_flops(cfg, inputs, targets) > got   # rows as one pair: more


def test_peak_flops_table_and_override():
  assert metrics_lib.peak_flops("Tesla P100-SXM2-16GB", "float32") == 9.5e12  # the paper's figure
  assert metrics_lib.peak_flops("NVIDIA H100 80GB HBM3", "bfloat16") == 989e12
  assert metrics_lib.peak_flops("NVIDIA H100 PCIe", "bfloat16") == 756e12
  assert metrics_lib.peak_flops("TPU v5 lite", "bfloat16") == 197e12
  assert metrics_lib.peak_flops("TPU v5", "bfloat16") == 459e12
  assert metrics_lib.peak_flops("cpu", "float32") is None
  assert metrics_lib.peak_flops("cpu", "float32", override=2.0) == 2e12
  with pytest.raises(ValueError, match="float16"):
    metrics_lib.peak_flops("TPU v4", "float16")
  with pytest.raises(ValueError, match="peak_tflops"):
    metrics_lib.peak_flops("TPU v4", "float32", override=0.0)


def test_mfu_and_the_papers_training_cost():
  assert metrics_lib.mfu(4e12, 2.0, 4, 1e12) == pytest.approx(0.5)
  assert metrics_lib.mfu(4e12, 2.0, 4, None) is None
  # Table 2's base cost is 12 h x 8 GPUs x 9.5 TFLOPS; our model FLOPs for 100k
  # updates of 25000 target tokens must be below it (MFU < 1) and of its order.
  cfg = configs.get_config("base")
  model_flops = metrics_lib.train_flops_per_token(cfg, 25, 25) * 25000 * cfg.num_train_steps
  paper_cost = 12 * 3600 * 8 * metrics_lib.peak_flops("Tesla P100-PCIE-16GB", "float32")
  assert 0.1 < model_flops / paper_cost < 1.0


# --- the writer


def _steps(path):
  return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_resume_truncates_metrics_after_the_checkpoint(tmp_path):
  path = tmp_path / metrics_lib.METRICS_FILE
  lines = [json.dumps({"step": s, "train_loss": 1.0 / s}) for s in (1, 2, 3, 4)]
  path.write_text("\n".join(lines) + '\n{"step": 5, "train_lo')  # killed mid-write
  metrics_lib.truncate(path, 2)
  assert _steps(path) == [1, 2]
  metrics_lib.truncate(path, 0)  # a fresh start keeps nothing
  assert path.read_text() == ""


def test_writer_appends_after_the_resumed_step_and_logs_each_record(tmp_path, caplog):
  path = tmp_path / metrics_lib.METRICS_FILE
  path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
  writer = metrics_lib.MetricsWriter(tmp_path, start_step=2)
  with caplog.at_level(logging.INFO):
    writer.write({"step": 3, "train_loss": 0.5, "tokens_per_s": 1234.5})
  writer.close()
  assert _steps(path) == [1, 2, 3]
  assert json.loads(path.read_text().splitlines()[-1])["train_loss"] == 0.5
  assert "step 3: train_loss 0.5, tokens_per_s 1234" in caplog.text

  # Not the main process: nothing is written, nothing is truncated.
  quiet = metrics_lib.MetricsWriter(tmp_path / "other", start_step=0, enabled=False)
  quiet.write({"step": 1, "train_loss": 1.0})
  quiet.close()
  assert not (tmp_path / "other").exists()


def test_tensorboard_events_are_written_where_tensorboardx_is_installed(tmp_path):
  # tensorboardX comes with the wmt extra (requirements-wmt.txt), not with core: a GPU
  # image has none (.ci/gpu-image.txt), and its run writes metrics.jsonl alone (below).
  extras_lib.skip_if_missing("wmt", "tensorboardX")
  writer = metrics_lib.MetricsWriter(tmp_path, start_step=2)        # resumed: purge_step 3
  writer.write({"step": 3, "train_loss": 0.5})
  writer.close()
  assert any((tmp_path / metrics_lib.TENSORBOARD_DIR).iterdir())


def test_without_tensorboardx_metrics_go_to_the_jsonl_alone_with_a_warning(tmp_path, caplog,
                                                                         monkeypatch):
  monkeypatch.setitem(sys.modules, "tensorboardX", None)            # import raises ImportError
  with caplog.at_level(logging.WARNING):
    writer = metrics_lib.MetricsWriter(tmp_path, start_step=0)
    writer.write({"step": 1, "train_loss": 0.5})
    writer.close()
  assert _steps(tmp_path / metrics_lib.METRICS_FILE) == [1]
  assert "tensorboardX is not installed" in caplog.text
  assert not (tmp_path / metrics_lib.TENSORBOARD_DIR).exists()


def test_damaged_lines_are_dropped_with_a_warning_and_the_rest_kept(tmp_path, caplog):
  path = tmp_path / metrics_lib.METRICS_FILE
  good = [json.dumps({"step": s, "train_loss": 1.0 / s}) for s in (1, 2, 3)]
  path.write_bytes(("\n".join([good[0], "{garbled", good[1], '"just a string"']) + "\n").encode()
                   + b"\xff\xfe\x00binary\n" + (good[2] + "\n").encode())
  with caplog.at_level(logging.WARNING):
    metrics_lib.truncate(path, 3)
  assert _steps(path) == [1, 2, 3]
  assert "Dropped 3 damaged line(s)" in caplog.text
  path.write_text("")  # emptied: nothing to keep, nothing to say
  caplog.clear()
  metrics_lib.truncate(path, 3)
  assert path.read_text() == "" and "Dropped" not in caplog.text
