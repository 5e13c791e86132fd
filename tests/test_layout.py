"""docs/design.md's promise that tests mirror the package: every module t2t_jax/<sub>/<m>.py
has tests/<sub>/test_<m>.py (t2t_jax/<m>.py: tests/test_<m>.py), bar the exceptions below."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "t2t_jax"

# Modules without a test file of their name, each with the reason. Keep it short: a module
# that is tested gets its file.
EXCEPTIONS = {
    "corpora/demo/lexicon.py": "data only (the demo's words); tests/corpora/demo/test_corpus.py reads "
                            "them through the corpus",
}


def _test_file(module: pathlib.Path) -> pathlib.Path:
  relative = module.relative_to(PACKAGE)
  return ROOT / "tests" / relative.parent / f"test_{relative.name}"


def test_every_module_has_a_test_file_of_its_name():
  modules = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
  missing = [str(p.relative_to(PACKAGE)) for p in modules
             if not _test_file(p).exists() and str(p.relative_to(PACKAGE)) not in EXCEPTIONS]
  assert not missing, (f"modules without tests/<subpackage>/test_<module>.py: {missing}; "
                       "write one, or name the module in tests/test_layout.py's EXCEPTIONS "
                       "with the reason")


def test_every_exception_is_a_module_still_without_its_test_file():
  stale = [m for m in EXCEPTIONS if not (PACKAGE / m).exists() or _test_file(PACKAGE / m).exists()]
  assert not stale, f"tests/test_layout.py's EXCEPTIONS name what is gone or tested: {stale}"
