"""The notebooks run top to bottom on a tiny model and are committed without outputs."""

import os
import pathlib

import nbformat
from nbclient import NotebookClient

from t2t_jax.corpora import demo

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "attention_maps.ipynb"

# A model small enough to train in seconds on 2 CPU cores; the notebook trains it
# because the work directory holds no checkpoint.
TINY = ("--config.num_layers=2 --config.d_model=32 --config.d_ff=64 --config.num_heads=4 "
        "--config.vocab_size=300 --config.vocab_sample_sentences=2000 "
        "--config.tokens_per_batch=512 --config.max_tokens_per_device=512 "
        "--config.log_every_steps=4 --config.eval_every_steps=4 --config.num_eval_batches=1 "
        "--config.checkpoint_every_steps=4 --config.beam_size=2 --config.max_decode_extra=10")


def _run_notebook(**settings: str) -> tuple[str, int]:
  """The notebook run top to bottom with `settings` (T2T_NOTEBOOK_*) in its environment: its
  printed text and how many of its cells drew a picture."""
  env = {k: v for k, v in os.environ.items()
         # Without pytest's marker the kernel handles file descriptors as under Jupyter.
         if k != "PYTEST_CURRENT_TEST"}
  env.update(settings,
             PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
  nb = nbformat.read(NOTEBOOK, as_version=4)
  NotebookClient(nb, timeout=240, kernel_name="python3",
                 resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute(env=env)
  code = [cell for cell in nb.cells if cell.cell_type == "code"]
  text = "".join(out.get("text", "") for cell in code for out in cell.outputs)
  images = sum(any("image/png" in out.get("data", {}) for out in cell.outputs) for cell in code)
  return text, images


def test_notebook_is_committed_without_outputs():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  code = [c for c in nb.cells if c.cell_type == "code"]
  assert code and all(not c.outputs and c.execution_count is None for c in code)
  assert any("parameters" in c.metadata.get("tags", []) for c in code)


def test_attention_notebook_trains_translates_and_plots(tmp_path):
  # A small demo corpus in place, so that the run does not generate the full one.
  demo.write_corpus(str(tmp_path / "data" / "demo"), num_train=800, num_dev=16,
                           num_test=16)
  text, images = _run_notebook(
      T2T_NOTEBOOK_WORKDIR=str(tmp_path), T2T_NOTEBOOK_STEPS="1",
      T2T_NOTEBOOK_CONFIG_ARGS=TINY, T2T_NOTEBOOK_LAYER="1")
  assert "training 1 steps" in text
  assert "translation:" in text
  assert "encoder_self     (2, 4," in text
  # Heads, one token across heads, alignment (mean and one head), decoder self-attention.
  assert images == 5
  assert (tmp_path / "config.json").exists()
  assert any((tmp_path / "checkpoints").iterdir())


def test_attention_notebook_takes_an_imported_model(imported_workdir):
  """A published model imported with t2t-import (tests/marian.py's Marian model): loaded,
  not trained; its target pieces cut by its own target model."""
  text, images = _run_notebook(
      T2T_NOTEBOOK_WORKDIR=str(imported_workdir), T2T_NOTEBOOK_SENTENCE="My dog can sing.",
      T2T_NOTEBOOK_QUERY="dog")
  assert "No trained model" not in text and "translation: " in text
  assert "encoder_self     (2, 4," in text
  assert images == 5
