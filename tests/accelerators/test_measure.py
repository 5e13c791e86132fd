"""accelerators/measure.py and `t2t-compile --measure` on this CPU: measured figures beside
the prediction for the program that ran, and the training and decoding path without
TensorFlow, tensorflow-datasets, tensorboardX or sacremoses (a plain JAX GPU host).

Tests check what is reported, never how fast: the figures are timings of this machine.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import xla_flags  # tests/xla_flags.py

from t2t_jax import configs
from t2t_jax.accelerators import measure
from t2t_jax.cli import compile as compile_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = ["--config=base", "--config.num_layers=1", "--config.d_model=32", "--config.d_ff=64",
        "--config.num_heads=2", "--config.vocab_size=64", "--config.max_source_length=16",
        "--config.max_target_length=16", "--config.max_len=32",
        "--config.tokens_per_batch=512", "--config.max_tokens_per_device=32",
        "--config.decode_batch_size=2", "--measure_steps=2", "--measure_warmup=1"]
KEYS = {"step_s", "tokens_per_s", "mfu", "peak_bytes"}


def test_measured_figures_sit_beside_the_prediction_for_the_same_program(capsys):
  compile_lib.main(["--measure", *TINY, "--config.peak_tflops=0.05",
                    "--memory_bandwidth_gbs=5"])
  out = capsys.readouterr().out.strip().splitlines()
  report = json.loads(out[-1])
  assert report["measured"] is True and KEYS <= set(report) and KEYS <= set(report["predicted"])
  devices = jax.local_device_count()
  # 512 tokens per update: 16-token rows, 2 a micro-step (32 tokens) on each device.
  assert (report["devices"], report["row_length"], report["rows_per_micro_step"]) == (
      devices, 16, 2)
  assert report["micro_steps"] == -(-512 // (devices * 32))
  assert report["tokens_per_update"] == devices * report["micro_steps"] * 2 * 16
  assert report["tokens_per_s"] == pytest.approx(report["tokens_per_update"] / report["step_s"])
  ratio = report["measured_over_predicted"]
  assert ratio["step_s"] == pytest.approx(report["step_s"] / report["predicted"]["step_s"])
  assert ratio["tokens_per_s"] == pytest.approx(1 / ratio["step_s"])
  assert report["mfu"] == pytest.approx(report["predicted"]["mfu"] / ratio["step_s"])
  assert report["predicted"]["basis"].startswith("roofline")  # a CPU: no cost model, no GPU
  assert report["peak_bytes_source"] == "compiler_memory_analysis" and ratio["peak_bytes"] == 1
  assert np.isfinite(report["final_loss"])
  decode = report["decode"]
  # Every sentence decoded to its limit: its source's length, EOS included.
  assert decode["target_tokens"] == decode["sentences"] * decode["source_tokens"] == 2 * 28
  assert decode["beam_size"] == 4 and decode["sentences_per_s"] > 0
  assert decode["target_tokens_per_s"] == pytest.approx(
      decode["target_tokens"] / decode["run_s"])
  assert any(line.startswith("MEASURED") for line in out)
  assert any(line.startswith("PREDICTED") for line in out)


def test_a_device_without_datasheet_figures_is_measured_without_a_prediction():
  cfg = configs.get_config("base", num_layers=1, d_model=32, d_ff=64, num_heads=2,
                           vocab_size=64, max_source_length=16, max_target_length=16,
                           max_len=32, tokens_per_batch=256, max_tokens_per_device=32,
                           decode_batch_size=1)
  report = measure.measure(cfg, steps_timed=1, warmup=0)
  assert report["measured"] is True and report["step_s"] > 0 and report["mfu"] is None
  assert report["predicted"] is None and report["measured_over_predicted"] is None
  assert "--memory_bandwidth_gbs" in report["prediction_unavailable"]
  assert "--config.peak_tflops" in report["prediction_unavailable"]


def test_local_target_is_the_datasheet_entry_of_the_device_kind(monkeypatch):
  class H100:
    device_kind, platform = "NVIDIA H100 80GB HBM3", "gpu"

  monkeypatch.setattr(jax, "local_devices", lambda: [H100()])
  monkeypatch.setattr(jax, "local_device_count", lambda: 8)
  target = measure.local_target(configs.get_config("base"))
  assert target.name == "8xh100" and target.devices == 8 and target.interconnect_bandwidth
  monkeypatch.setattr(jax, "local_device_count", lambda: 2)
  two = measure.local_target(configs.get_config("base"))
  assert two.devices == 2 and two.peak_bf16_flops == 989e12 and two.interconnect_bandwidth


def test_measure_or_target_one_of_them(capsys):
  for argv in (["--config=demo"], ["--measure", "--target=h100", "--config=demo"]):
    with pytest.raises(SystemExit) as e:
      compile_lib.main(argv)
    assert e.value.code == 2
  assert "--measure" in capsys.readouterr().err


# Makes `import X` fail for the packages a plain JAX GPU host lacks, as if uninstalled.
_WITHOUT = textwrap.dedent("""
    import sys
    ABSENT = ("tensorflow", "tensorflow_datasets", "tensorboardX", "sacremoses")
    class Absent:
      def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
          raise ImportError(f"No module named {name!r} (absent in this test)")
    sys.meta_path.insert(0, Absent())
    for name in list(sys.modules):
      if name.split(".")[0] in ABSENT:
        del sys.modules[name]
""")


def test_training_and_decoding_run_without_tensorflow_or_optional_packages():
  script = _WITHOUT + textwrap.dedent(f"""
      import importlib, json, pkgutil
      import t2t_jax
      modules = ["t2t_jax.cli.compile", "t2t_jax.cli.train", "t2t_jax.cli.translate"]
      for package in ("train", "decoding", "inference", "model", "accelerators", "runtime"):
        path = t2t_jax.__path__[0] + "/" + package
        modules += [f"t2t_jax.{{package}}.{{m.name}}" for m in pkgutil.iter_modules([path])]
      for name in modules:
        importlib.import_module(name)
      from t2t_jax.train import metrics as metrics_lib
      from t2t_jax.evaluation import bleu
      import tempfile
      workdir = tempfile.mkdtemp()
      writer = metrics_lib.MetricsWriter(workdir)
      writer.write({{"step": 1, "loss": 2.0}})
      with open(workdir + "/metrics.jsonl") as f:
        assert json.loads(f.read()) == {{"step": 1, "loss": 2.0}}
      scores = bleu.bleu_scores(["a b c d"], ["a b c d"], "de")
      assert scores["paper"]["score"] is None and round(scores["sacrebleu"]["score"]) == 100
      from t2t_jax.cli import compile
      report = compile.main(["--measure", *{TINY!r}])
      loaded = [m for m in sys.modules if m.split(".")[0] in ABSENT]
      print(json.dumps({{"measured": report["measured"], "loaded": loaded,
                         "modules": len(modules)}}))
  """)
  env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": xla_flags.with_devices(1)}
  result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  last = json.loads(result.stdout.strip().splitlines()[-1])
  assert last["measured"] is True and last["loaded"] == [] and last["modules"] > 30
  assert "tensorboardX is not installed" in result.stderr
