"""t2t-train: the README's "Train on your own data" commands, run as written on tiny files."""

import json
import pathlib
import re
import shlex

import jax
import numpy as np
import pytest

from t2t_jax.cli import average
from t2t_jax.cli import bleu
from t2t_jax.cli import train
from t2t_jax.cli import translate
from t2t_jax.corpora import demo
from t2t_jax.runtime import averaging
from t2t_jax.runtime import workdir as workdir_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MARKER = "<!-- commands run by tests/cli/test_train.py -->"
PROGRAMS = {"t2t-train": train.main, "t2t-average-checkpoints": average.main,
            "t2t-translate": translate.main, "python -m t2t_jax.cli.bleu": bleu.main}
# Appended to every t2t-train command (the last value of a flag wins): a model
# small enough to train a few steps in seconds, evaluated on one dev batch (one program
# traced, not one per length bucket; nothing here reads the dev figures).
TINY = ["--config.num_layers=1", "--config.d_model=32", "--config.d_ff=64",
        "--config.num_heads=2", "--config.vocab_size=200", "--config.tokens_per_batch=512",
        "--config.max_tokens_per_device=512", "--config.eval_every_steps=2",
        "--config.num_eval_batches=1", "--config.log_every_steps=2",
        "--config.checkpoint_every_steps=2", "--config.max_decode_extra=4"]
STEPS = {None: 4, "200000": 6, "2000": 2}   # the README's step counts -> a few steps


def readme_commands() -> list[tuple[str, list[str]]]:
  block = re.search(re.escape(MARKER) + r"\s*```bash\n(.*?)```", README, re.S)
  assert block, "README lost its 'Train on your own data' command block"
  commands = []
  for line in block.group(1).splitlines():
    program = next(p for p in PROGRAMS if line.startswith(p + " "))
    commands.append((program, shlex.split(line[len(program):])))
  return commands


def tiny(argv: list[str]) -> list[str]:
  steps = next((a.partition("=")[2] for a in argv if a.startswith("--config.num_train_steps=")),
               None)
  kept = [a for a in argv if not a.startswith("--config.num_train_steps=")]
  return kept + TINY + [f"--config.num_train_steps={STEPS[steps]}"]


def write_files(directory: pathlib.Path) -> None:
  pairs = demo.generate(760, seed=0, min_words=3, max_words=6)
  chunks = {"dev": pairs[:20], "test": pairs[20:40], "news": pairs[40:100], "train": pairs[100:]}
  for name, chunk in chunks.items():
    for side, lang in enumerate(("en", "de")):
      (directory / f"{name}.{lang}").write_text("".join(p[side] + "\n" for p in chunk))


def test_readme_walkthrough_own_files_train_average_translate_score_resume_finetune(
    tmp_path, monkeypatch, capfd):
  monkeypatch.chdir(tmp_path)
  write_files(tmp_path)
  commands = readme_commands()
  assert [p for p, _ in commands] == ["t2t-train", "t2t-average-checkpoints", "t2t-translate",
                                      "python -m t2t_jax.cli.bleu", "t2t-train",
                                      "t2t-train"]
  outputs = []
  for program, argv in commands:
    PROGRAMS[program](tiny(argv) if program == "t2t-train" else argv)
    outputs.append(capfd.readouterr())

  mine, news = tmp_path / "runs" / "mine", tmp_path / "runs" / "news"
  # 1. Vocabulary built from the files, trained, averaged, test set scored.
  assert (mine / "vocab" / "spm.model").exists()
  assert workdir_lib.load_config(mine).train_files == "train.en,train.de"
  assert len((mine / "test.hyp").read_text().split("\n")[:-1]) == 20
  # 2. Averaged by hand; 3. translated a file, one line per input line; 4. scored it.
  assert "Averaged steps [2, 4]" in outputs[1].out
  assert len((tmp_path / "test.hyp").read_text().split("\n")[:-1]) == 20
  assert set(json.loads(outputs[3].out)) >= {"sacrebleu", "paper"}
  # 5. The finished run trained longer: it resumed at step 4 and stopped at 6.
  results = json.loads((mine / "results.json").read_text())
  assert results["steps"] == 6 and results["averaged_steps"] == [2, 4, 6]
  assert all(0.0 <= v <= 100.0 for v in results["bleu"].values())
  steps = [json.loads(line)["step"] for line in (mine / "metrics.jsonl").read_text().splitlines()]
  assert steps == [2, 4, 6]
  # 6. Fine-tuned: the parent's vocabulary and params, a fresh schedule from step 0, no test set.
  assert (news / "vocab" / "spm.model").read_bytes() == (mine / "vocab" / "spm.model").read_bytes()
  tuned = json.loads((news / "results.json").read_text())
  assert tuned["steps"] == 2 and tuned["bleu"]["sacrebleu"] is None
  assert not (news / "test.hyp").exists()
  first = json.loads((news / "metrics.jsonl").read_text().splitlines()[0])
  assert first["step"] == 2 and first["learning_rate"] < 1e-5   # warmup starts again
  parent = averaging.load_params(mine)
  after_two_steps = averaging.load_params(news, averaged=False)
  # Two warmup steps move a weight by about 2 learning rates (~3e-6): the start was the parent's.
  for a, b in zip(jax.tree.leaves(parent), jax.tree.leaves(after_two_steps)):
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_finetune_refuses_another_model_and_bad_data_flags(tmp_path, trained_workdir):
  files = ["--train=a.en,a.de", "--dev=a.en,a.de"]
  with pytest.raises(SystemExit, match=r"^error: cannot fine-tune from .*: the model or "
                                       r"vocabulary differs \(d_model: 64 -> 32"):
    train.main([f"--finetune_from={trained_workdir}", *files, f"--workdir={tmp_path}/ft",
                "--config.d_model=32", "--config.num_heads=2"])
  with pytest.raises(SystemExit, match=r"vocab_size: 300 -> 400"):
    train.main([f"--finetune_from={trained_workdir}", *files, f"--workdir={tmp_path}/ft",
                "--config.vocab_size=400"])
  with pytest.raises(SystemExit, match="--train and --dev are both required"):
    train.main(["--train=a.en,a.de", f"--workdir={tmp_path}/x"])
  with pytest.raises(SystemExit) as e:
    train.main([f"--finetune_from={trained_workdir}", "--config=base", *files,
                f"--workdir={tmp_path}/ft"])
  assert e.value.code == 2
  assert not (tmp_path / "ft").exists()   # nothing was written for a refused run


def test_describe_names_the_paper_figures_of_each_language_pair(capsys):
  train.main(["--config=big_enfr", "--describe"])
  out = capsys.readouterr().out
  assert "newstest2014 BLEU 41.8" in out and "P_drop 0.1" in out and "1.0 s/step" in out
  train.main(["--config=big", "--describe"], pair="enfr")   # the En-Fr script's big
  assert capsys.readouterr().out == out


def test_help_lists_what_may_change_on_resume(capsys):
  with pytest.raises(SystemExit):
    train.main(["--help"])
  text = " ".join(capsys.readouterr().out.split())
  for field in workdir_lib.RESUMABLE_FIELDS:
    assert field in text.split("Resuming", 1)[1], field
  # The README sends readers to this list.
  section = README.split("## Train on your own data", 1)[1].split("Fine-tuning", 1)[0]
  assert "only the fields that `t2t-train --help` lists" in " ".join(section.split())


def test_help_shows_the_values_of_the_preset_the_script_runs(capsys):
  """The En-Fr script runs big_enfr for --config=big: its --help shows big_enfr's values."""
  for pair, shown in (("enfr", "[big_enfr: 0.1]"), ("ende", "[big: 0.3]")):
    with pytest.raises(SystemExit):
      train.main(["--config=big", "--help"], pair=pair)
    text = " ".join(capsys.readouterr().out.split())
    assert f"accepts a number in [0, 1) {shown}" in text, pair    # dropout_rate
