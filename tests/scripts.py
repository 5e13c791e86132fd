"""An experiment script of experiments/ loaded as a module, for its tests (the scripts are not
a package: each is the one entry of its experiment)."""

import pathlib
import runpy
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load(name: str) -> types.SimpleNamespace:
  """experiments/<name>.py's names (its `main`, ...), the script not run."""
  return types.SimpleNamespace(**runpy.run_path(str(ROOT / "experiments" / f"{name}.py"),
                                                run_name=f"experiments.{name}"))
