"""cli/serve.py: `t2t-serve`'s flags reach the server's options and engine, and a wrong
combination is one line (the server at work, over HTTP: tests/serve/)."""

import shutil

import pytest

import extras as extras_lib

extras_lib.skip_module_if_missing("serve", "fastapi")

from t2t_jax.cli import serve  # noqa: E402  (after the skip)
from t2t_jax.inference import shortlist  # noqa: E402
from t2t_jax.data import vocab  # noqa: E402
from t2t_jax.serve import app as app_lib  # noqa: E402
from t2t_jax.serve import engines  # noqa: E402


@pytest.fixture
def started(monkeypatch):
  """What main hands to create_app and serve, instead of listening."""
  calls = {}

  def create_app(engine, options, **kwargs):
    calls.update(engine=engine, options=options, **kwargs)
    return "app"

  monkeypatch.setattr(app_lib, "create_app", create_app)
  monkeypatch.setattr(app_lib, "serve", lambda app, host, port, banner: calls.update(
      app=app, host=host, port=port, banner=banner))
  return calls


def test_flags_reach_the_options_the_engine_and_the_listener(trained_workdir, started):
  serve.main(["--workdir", str(trained_workdir), "--port", "0", "--max_batch", "3",
                  "--max_wait_ms", "20", "--max_lines", "5", "--max_chars", "40",
                  "--max_beam", "6", "--max_len_a", "1.5", "--workers", "1"])
  options = started["options"]
  assert (options.max_batch, options.max_wait, options.workers) == (3, 0.02, 1)
  assert (options.limits.max_lines, options.limits.max_chars, options.limits.max_beam) == (
      5, 40, 6)
  engine = started["engine"]
  assert (engine.name, engine.batch_size, engine.max_len_a) == ("jax", 3, 1.5)
  assert (started["app"], started["host"], started["port"]) == ("app", "127.0.0.1", 0)
  assert started["banner"].startswith(f"serving {trained_workdir} (jax engine)")


def test_the_default_batch_is_small_on_a_cpu_and_the_configs_elsewhere(trained_workdir, started,
                                                                      monkeypatch):
  serve.main(["--workdir", str(trained_workdir)])
  assert started["options"].max_batch == started["engine"].batch_size == 8
  assert started["engine"].cfg.decode_batch_size != 8
  monkeypatch.setattr(engines.jax, "default_backend", lambda: "gpu")
  serve.main(["--workdir", str(trained_workdir)])
  assert started["options"].max_batch == started["engine"].cfg.decode_batch_size


def test_a_checkpoint_with_the_ctranslate2_engine_is_one_line(trained_workdir, started):
  checkpoint = next((trained_workdir / "checkpoints").iterdir())
  with pytest.raises(SystemExit, match="--checkpoint is for --engine jax"):
    serve.main(["--workdir", str(trained_workdir), "--engine", "ctranslate2",
                    "--checkpoint", str(checkpoint)])
  assert not started


def test_the_shortlist_reaches_the_jax_engine_and_is_one_line_elsewhere(trained_workdir, started,
                                                                       tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(trained_workdir, workdir)
  with pytest.raises(SystemExit, match="no shortlist at .* build one with t2t-shortlist"):
    serve.main(["--workdir", str(workdir), "--shortlist"])
  with pytest.raises(SystemExit, match="--shortlist is for --engine jax"):
    serve.main(["--workdir", str(workdir), "--shortlist", "--engine", "ctranslate2"])
  tokenizer = vocab.Tokenizer(str(workdir / "vocab" / "spm.model"))
  shortlist.save(shortlist.build(tokenizer, [("the dog", "der Hund")], per_source=2, frequent=2),
                 workdir / shortlist.FILE)
  serve.main(["--workdir", str(workdir), "--shortlist"])
  assert started["engine"].translator.shortlist is not None


def test_int8_reaches_the_jax_engines_model_and_is_refused_for_ctranslate2(trained_workdir,
                                                                           started):
  serve.main(["--workdir", str(trained_workdir), "--int8"])
  translator = started["engine"].translator
  assert translator.cfg.quantization == "int8"
  assert translator.params["output_projection"].values.dtype == "int8"
  started.clear()
  with pytest.raises(SystemExit, match="--int8 is for --engine jax"):
    serve.main(["--workdir", str(trained_workdir), "--engine", "ctranslate2", "--int8"])
  assert not started


def test_bfloat16_reaches_the_jax_engines_model_and_is_refused_for_ctranslate2(trained_workdir,
                                                                               started):
  serve.main(["--workdir", str(trained_workdir), "--dtype", "bfloat16"])
  translator = started["engine"].translator
  assert (translator.cfg.quantization, translator.cfg.dtype) == ("bfloat16", "float32")
  assert translator.params["embedding"]["embedding"].dtype == "bfloat16"
  started.clear()
  with pytest.raises(SystemExit, match="--dtype is for --engine jax"):
    serve.main(["--workdir", str(trained_workdir), "--engine", "ctranslate2", "--dtype",
                "bfloat16"])
  assert not started
