"""`python -m t2t_jax.cli.bleu bleu`: the library's three scores as JSON, or a one-line error."""

import json
import os
import pathlib
import subprocess
import sys

from t2t_jax.evaluation import bleu

ROOT = pathlib.Path(__file__).resolve().parents[2]

REFS = ["Die Rich-Text-Datei kostet 3,50 Euro.", "Er sagte: „Das ist ein E-Mail-Programm.“",
        "Das Wetter ist heute schön.", "Wir haben’s geschafft."]
HYPS = ["Die Rich-Format-Datei kostet 3,50 Euro.", "Er sagte: \"Das ist ein E-Mail-Programm.\"",
        "Das Wetter ist schön heute.", "Wir haben's geschafft."]


def test_cli_prints_the_three_scores_as_json(tmp_path):
  hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
  hyp.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
  ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
  command = [sys.executable, "-m", "t2t_jax.cli.bleu", "bleu", "--hyp", str(hyp),
             "--ref", str(ref), "--lang", "de"]
  env = dict(os.environ, PYTHONPATH=str(ROOT))  # this checkout's package, not an installed one
  done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
  printed = json.loads(done.stdout)
  assert printed == json.loads(json.dumps(bleu.bleu_scores(HYPS, REFS, "de")))

  ref.write_text("\n".join(REFS[:2]) + "\n", encoding="utf-8")
  failed = subprocess.run(command, env=env, capture_output=True, text=True)
  assert failed.returncode != 0
  assert "4 hypothesis lines but 2 reference lines" in failed.stderr
