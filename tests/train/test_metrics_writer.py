"""train/metrics_writer.py: records in metrics.jsonl and TensorBoard; a resumed run drops later lines."""

import json
import logging
import sys

import extras as extras_lib
from t2t_jax.train import metrics_writer


def _steps(path):
  return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_resume_truncates_metrics_after_the_checkpoint(tmp_path):
  path = tmp_path / metrics_writer.METRICS_FILE
  lines = [json.dumps({"step": s, "train_loss": 1.0 / s}) for s in (1, 2, 3, 4)]
  path.write_text("\n".join(lines) + '\n{"step": 5, "train_lo')  # killed mid-write
  metrics_writer.truncate(path, 2)
  assert _steps(path) == [1, 2]
  metrics_writer.truncate(path, 0)  # a fresh start keeps nothing
  assert path.read_text() == ""


def test_writer_appends_after_the_resumed_step_and_logs_each_record(tmp_path, caplog):
  path = tmp_path / metrics_writer.METRICS_FILE
  path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
  writer = metrics_writer.MetricsWriter(tmp_path, start_step=2)
  with caplog.at_level(logging.INFO):
    writer.write({"step": 3, "train_loss": 0.5, "tokens_per_s": 1234.5})
  writer.close()
  assert _steps(path) == [1, 2, 3]
  assert json.loads(path.read_text().splitlines()[-1])["train_loss"] == 0.5
  assert "step 3: train_loss 0.5, tokens_per_s 1234" in caplog.text

  # Not the main process: nothing is written, nothing is truncated.
  quiet = metrics_writer.MetricsWriter(tmp_path / "other", start_step=0, enabled=False)
  quiet.write({"step": 1, "train_loss": 1.0})
  quiet.close()
  assert not (tmp_path / "other").exists()


def test_tensorboard_events_are_written_where_tensorboardx_is_installed(tmp_path):
  # tensorboardX comes with the wmt extra (requirements-wmt.txt), not with core: a GPU
  # image has none (.ci/gpu-image.txt), and its run writes metrics.jsonl alone (below).
  extras_lib.skip_if_missing("wmt", "tensorboardX")
  writer = metrics_writer.MetricsWriter(tmp_path, start_step=2)        # resumed: purge_step 3
  writer.write({"step": 3, "train_loss": 0.5})
  writer.close()
  assert any((tmp_path / metrics_writer.TENSORBOARD_DIR).iterdir())


def test_without_tensorboardx_metrics_go_to_the_jsonl_alone_with_a_warning(tmp_path, caplog,
                                                                         monkeypatch):
  monkeypatch.setitem(sys.modules, "tensorboardX", None)            # import raises ImportError
  with caplog.at_level(logging.WARNING):
    writer = metrics_writer.MetricsWriter(tmp_path, start_step=0)
    writer.write({"step": 1, "train_loss": 0.5})
    writer.close()
  assert _steps(tmp_path / metrics_writer.METRICS_FILE) == [1]
  assert "tensorboardX is not installed" in caplog.text
  assert not (tmp_path / metrics_writer.TENSORBOARD_DIR).exists()


def test_damaged_lines_are_dropped_with_a_warning_and_the_rest_kept(tmp_path, caplog):
  path = tmp_path / metrics_writer.METRICS_FILE
  good = [json.dumps({"step": s, "train_loss": 1.0 / s}) for s in (1, 2, 3)]
  path.write_bytes(("\n".join([good[0], "{garbled", good[1], '"just a string"']) + "\n").encode()
                   + b"\xff\xfe\x00binary\n" + (good[2] + "\n").encode())
  with caplog.at_level(logging.WARNING):
    metrics_writer.truncate(path, 3)
  assert _steps(path) == [1, 2, 3]
  assert "Dropped 3 damaged line(s)" in caplog.text
  path.write_text("")  # emptied: nothing to keep, nothing to say
  caplog.clear()
  metrics_writer.truncate(path, 3)
  assert path.read_text() == "" and "Dropped" not in caplog.text
