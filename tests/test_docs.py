"""The docs quote the demo preset as it is and name no path of the machine they were written
on; the code's pointers into docs/benchmarks.md name sections it has, and it keeps to 350 lines;
every file the docs, the requirements files and setup.py name exists."""

import pathlib
import re

import pytest

from t2t_jax import configs

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = sorted(p for folder in ("t2t_jax", "benchmarks", "experiments")
              for p in (ROOT / folder).rglob("*.py"))
DEMO = configs.get_config("demo")
# What names the package's files: the docs, the requirements files' comments, setup.py.
POINTING = [*DOCS, *sorted(ROOT.glob("requirements*.txt")), ROOT / "setup.py"]


def _demo_quotes():
  """(file, text around the quote, field, quoted value) for each figure of the demo preset a doc quotes."""
  patterns = [
      # "1100 steps of 2048 tokens"
      (r"(\d[\d,]*)\s+steps\s+of\s+(\d+)\s+tokens", ("num_train_steps", "tokens_per_batch")),
      # "3 layers, d_model 128"
      (r"(\d+)\s+layers,\s+d_model\s+(\d+)", ("num_layers", "d_model")),
      # "last 3 checkpoints averaged"
      (r"last\s+(\d+)\s+checkpoints\s+averaged", ("average_last",)),
      # checkpoints: "demo: 100 steps"
      (r"demo: (\d+)\s+steps", ("checkpoint_every_steps",)),
      # "splits its 2048-token update into two unrolled micro-steps of 1024"
      (r"its\s+(\d+)-token\s+update\s+into\s+(\w+)\s+unrolled\s+micro-steps\s+of\s+(\d+)",
       ("tokens_per_batch", "unroll_micro_steps", "max_tokens_per_device")),
  ]
  words = {"two": 2, "three": 3, "four": 4}
  for path in DOCS:
    text = path.read_text()
    for pattern, fields in patterns:
      for match in re.finditer(pattern, text):
        context = text[max(0, match.start() - 300):match.end()]
        if "demo" not in context:
          continue
        for field, value in zip(fields, match.groups()):
          number = words[value] if value in words else int(value.replace(",", ""))
          yield path.name, match.group(0), field, number


def test_the_docs_quote_the_demo_preset_as_it_is():
  quotes = list(_demo_quotes())
  # The README's results table and docs/data.md quote the preset: if these go, so does the test.
  assert {name for name, *_ in quotes} >= {"README.md", "data.md", "checkpoints.md", "training.md"}
  wrong = [(name, quote, f"{field} is {getattr(DEMO, field)}")
           for name, quote, field, number in quotes if getattr(DEMO, field) != number]
  assert not wrong, f"docs quote the demo preset wrongly: {wrong}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_no_doc_names_a_path_of_the_machine_it_was_written_on(path):
  found = re.findall(r"(?<![\w.~$])/(?:work|root|home|Users)/[\w./-]+", path.read_text())
  assert not found, f"{path.name} names paths of a particular machine: {found}"


def test_the_code_points_at_benchmark_sections_that_exist():
  # Measurements live in docs/benchmarks.md; a comment or message names the section
  # ('docs/benchmarks.md, "Serving"'), which must be (part of) one of its headings.
  headings = [line.lstrip("#").strip().lower()
              for line in (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
              if line.startswith("#")]
  pointers = []
  for path in CODE:
    text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text())  # a pointer may wrap
    pointers += [(path.relative_to(ROOT).as_posix(), name)
                 for name in re.findall(r'docs/benchmarks\.md,?\s*\(?"([^"]+)"', text)]
  assert len(pointers) >= 10, pointers  # the pattern still finds them
  missing = [(path, name) for path, name in pointers
             if not any(name.lower() in heading for heading in headings)]
  assert not missing, f"no such section in docs/benchmarks.md: {missing}"


def test_the_benchmarks_page_keeps_to_its_length():
  # docs/benchmarks.md holds each job's current figure; earlier ones are in git, not here.
  lines = (ROOT / "docs" / "benchmarks.md").read_text().count("\n")
  assert lines <= 350, (f"docs/benchmarks.md has {lines} lines, at most 350: trim superseded "
                        "or repeated rows and prose (their history is in git)")


@pytest.mark.parametrize("path", POINTING, ids=lambda p: p.name)
def test_the_python_files_a_doc_names_exist(path):
  # "runtime/platform.py" is the package's (t2t_jax/...), "tests/train/test_resume.py" the
  # repository's; a bare "predict.py" is one somewhere in the tree. A module merged or moved
  # leaves its old name behind in prose no import checks.
  names = re.findall(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.py)\b", path.read_text())
  files = {p.name for p in ROOT.rglob("*.py")}
  missing = sorted({name for name in names
                    if not ((ROOT / name).is_file() or (ROOT / "t2t_jax" / name).is_file()
                            or ("/" not in name and name in files))})
  assert not missing, f"{path.name} names files that do not exist: {missing}"
