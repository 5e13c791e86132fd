"""docs/design.md's layers are true: every module is placed, and imports go down only.

The layers block names subpackages (`model`: every module in t2t_jax/model/ and
its __init__) or single modules (`train.trainer`); a module named on its own is
placed there rather than with its package. Only the commands (t2t_jax/cli/) import
`cli`, its parser included.
"""

import ast
import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "t2t_jax"


def _module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(PACKAGE).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> list[str]:
  return sorted(_module_name(p) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or
                p.parent != PACKAGE)


def _layer_entries() -> dict[str, int]:
  """{subpackage or module: layer index, 0 = the top} from the design doc's layers block."""
  text = (ROOT / "docs" / "design.md").read_text()
  block = re.search(r"## Layers: imports go down only\n.*?```\n(.*?)```", text, re.S).group(1)
  return {entry: rank for rank, line in enumerate(block.strip().splitlines())
          for entry in line.split()[1:]}


def _layer_of(module: str, entries: dict[str, int]) -> int | None:
  """The layer of a module: its own entry, else the nearest enclosing package's."""
  while module not in entries and "." in module:
    module = module.rsplit(".", 1)[0]
  return entries.get(module)


def _resolve(module: str, name: str | None) -> str:
  """The package module that `from t2t_jax.<module> import <name>` reads."""
  if name is not None and (PACKAGE / module.replace(".", "/") / f"{name}.py").exists():
    return f"{module}.{name}" if module else name
  if name is not None and (PACKAGE / module.replace(".", "/") / name).is_dir():
    return f"{module}.{name}" if module else name
  return module


def _module_imports() -> dict[str, set[str]]:
  """{module: the package's modules it imports, anywhere in the file}."""
  graph = {}
  for path in sorted(PACKAGE.rglob("*.py")):
    if path == PACKAGE / "__init__.py":
      continue
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "t2t_jax":
        module = node.module[len("t2t_jax."):]
        imported |= {_resolve(module, alias.name) for alias in node.names}
      elif isinstance(node, ast.Import):
        imported |= {a.name[len("t2t_jax."):] for a in node.names if a.name.startswith("t2t_jax.")}
    graph[_module_name(path)] = imported - {""}
  return graph


def test_every_module_is_in_a_layer_and_imports_only_downwards():
  entries, graph = _layer_entries(), _module_imports()
  unplaced = sorted(m for m in graph if _layer_of(m, entries) is None)
  assert not unplaced, f"modules missing from docs/design.md's layers: {unplaced}"
  unknown = sorted(e for e in entries if e not in graph and not (PACKAGE / e.replace(".", "/")).is_dir())
  assert not unknown, f"docs/design.md's layers name what the package lacks: {unknown}"
  upward = [(module, dep) for module, deps in graph.items() for dep in deps
            if _layer_of(dep, entries) < _layer_of(module, entries)]
  assert not upward, f"imports of a higher layer (module, imported): {upward}"


def test_only_commands_import_cli():
  entries, graph = _layer_entries(), _module_imports()
  assert _layer_of("cli.flags", entries) == entries["cli"], \
      "docs/design.md's layers place cli.flags below the commands: only they import it"
  outside = [(module, dep) for module, deps in graph.items() for dep in deps
             if (dep == "cli" or dep.startswith("cli.")) and module.split(".")[0] != "cli"]
  assert not outside, f"modules outside t2t_jax/cli that import it (module, imported): {outside}"


def test_no_import_cycles():
  graph = _module_imports()
  done, active = set(), []

  def visit(module):
    assert module not in active, f"import cycle: {' -> '.join(active + [module])}"
    if module in done:
      return
    active.append(module)
    for dep in graph.get(module, ()):
      visit(dep)
    active.pop()
    done.add(module)

  for module in graph:
    visit(module)


def _package_names(init: pathlib.Path) -> tuple[list[str] | None, set[str]]:
  """A package's `__all__` (None: not declared) and the names its __init__ binds (those it
  loads on first use, `_LAZY`'s keys, included)."""
  declared, bound = None, set()
  for node in ast.parse(init.read_text()).body:
    if isinstance(node, ast.ImportFrom):
      bound |= {alias.asname or alias.name for alias in node.names}
    elif isinstance(node, ast.Assign):
      names = {target.id for target in node.targets if isinstance(target, ast.Name)}
      bound |= names - {"_LAZY"}
      if "__all__" in names:
        declared = ast.literal_eval(node.value)
      if "_LAZY" in names:
        bound |= set(ast.literal_eval(node.value))
  return declared, bound


def test_every_package_says_what_is_public_and_each_name_exists():
  """`help(t2t_jax.x)` shows what `__all__` lists: names the __init__ binds, or modules."""
  for init in sorted(PACKAGE.rglob("__init__.py")):
    declared, bound = _package_names(init)
    package = init.parent
    assert declared is not None, f"{init.relative_to(ROOT)} declares no __all__"
    missing = [name for name in declared if name not in bound
               and not (package / f"{name}.py").exists()
               and not (package / name / "__init__.py").exists()]
    assert not missing, f"{init.relative_to(ROOT)}'s __all__ names what it lacks: {missing}"
    unlisted = sorted(bound - set(declared) - {"__all__", "__version__"})
    assert not unlisted, \
        f"{init.relative_to(ROOT)} re-exports names its __all__ leaves out: {unlisted}"


# Third-party modules by their community's short names; anything else is imported by its name.
THIRD_PARTY_ALIASES = {("numpy", "np"), ("jax.numpy", "jnp"), ("flax.linen", "nn"),
                       ("orbax.checkpoint", "ocp"), ("sentencepiece", "spm"),
                       ("tensorflow", "tf"), ("tensorflow_datasets", "tfds"),
                       ("prometheus_client", "prom"), ("jax.sharding.PartitionSpec", "P"),
                       # Beside our own multihost and exceptions, the library's say whose they are.
                       ("orbax.checkpoint.multihost", "orbax_multihost"),
                       ("starlette.exceptions", "starlette_exceptions")}


def _renamed_modules(path: pathlib.Path) -> list[str]:
  """`import X as Y` and `from P import X as Y` (X a module of ours) where Y is not X or X_lib."""
  found = []
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      pairs = [(a.name, a.asname) for a in node.names if a.asname]
    elif isinstance(node, ast.ImportFrom) and node.module:
      ours = node.module.split(".")[0] == "t2t_jax"
      folder = ROOT / node.module.replace(".", "/")
      pairs = [(f"{node.module}.{a.name}", a.asname) for a in node.names if a.asname
               and (not ours or (folder / f"{a.name}.py").exists() or (folder / a.name).is_dir())]
    else:
      continue
    found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name} as {alias}" for name, alias in pairs
              if alias not in (name.rsplit(".", 1)[-1], name.rsplit(".", 1)[-1] + "_lib")
              and (name, alias) not in THIRD_PARTY_ALIASES]
  return found


def test_modules_are_imported_by_their_own_name_or_name_lib():
  """`from t2t_jax.data import dataset as data` hides which module `data.` reads; refuse it.

  In the package and in the code that reads it: tests, benchmarks and experiments.
  """
  paths = [path for folder in (PACKAGE, ROOT / "tests", ROOT / "benchmarks", ROOT / "experiments")
           for path in sorted(folder.rglob("*.py"))]
  renamed = [line for path in paths for line in _renamed_modules(path)]
  assert not renamed, "import these modules as themselves or <name>_lib:\n" + "\n".join(renamed)


# Code outside the package that imports from it as a user would: the scripts beside it.
SCRIPTS = ("benchmarks", "experiments", "notebooks")


def _sources() -> list[tuple[str, str]]:
  """(where, Python text) of every module of the package and every script and notebook beside it."""
  paths = sorted(PACKAGE.rglob("*.py")) + [p for folder in SCRIPTS
                                           for p in sorted((ROOT / folder).rglob("*.py"))]
  sources = [(str(p.relative_to(ROOT)), p.read_text()) for p in paths]
  for notebook in sorted((ROOT / "notebooks").rglob("*.ipynb")):
    cells = json.loads(notebook.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    lines = [line for line in "\n".join(code).splitlines() if not line.lstrip().startswith(("%", "!"))]
    sources.append((str(notebook.relative_to(ROOT)), "\n".join(lines)))
  return sources


def _is_package(dotted: str) -> bool:
  return (PACKAGE / dotted.replace(".", "/") / "__init__.py").exists()


def _imported_from_packages(where: str, tree: ast.AST) -> set[tuple[str, str]]:
  """(package, name) for each name one of the package's subpackages gives `where` from outside,
  and (module, name) for each private name taken from a module of another package.

  `from t2t_jax.corpora.demo import corpus` in serve/ takes `demo` from `data` and `corpus` from
  `corpora.demo`; `from t2t_jax import inference` then `inference.Translator` takes `Translator`.
  """
  inside = _module_name(ROOT / where) if where.startswith("t2t_jax/") else ""
  paths, bound = [], {}
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "t2t_jax":
      module = node.module[len("t2t_jax"):].lstrip(".")
      for alias in node.names:
        paths.append(f"{module}.{alias.name}".lstrip("."))
        if _is_package(paths[-1]):
          bound[alias.asname or alias.name] = paths[-1]
    elif isinstance(node, ast.Import):
      paths += [a.name[len("t2t_jax."):] for a in node.names if a.name.startswith("t2t_jax.")]
  paths += [f"{bound[n.value.id]}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id in bound]
  def outside(package):
    return inside != package and not inside.startswith(package + ".")

  found = set()
  for path in paths:
    parts = path.split(".")
    for i in range(1, len(parts)):
      package = ".".join(parts[:i])
      if not _is_package(package):   # a module: the private names taken from another package's
        if outside(".".join(parts[:i - 1])):
          found |= {(package, name) for name in parts[i:] if name.startswith("_")}
        break
      if outside(package):
        found.add((package, parts[i]))
  return found


def _cross_package_imports() -> dict[tuple[str, str], list[str]]:
  """{(package, name): where it is imported from outside that package}."""
  found = {}
  for where, text in _sources():
    for key in _imported_from_packages(where, ast.parse(text)):
      found.setdefault(key, []).append(where)
  return found


def _commands() -> set[str]:
  """The cli modules that users run: the console scripts and `python -m t2t_jax.cli.<name>`."""
  texts = [(ROOT / "setup.py").read_text(), (ROOT / "README.md").read_text(),
           *(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))]
  return {name for text in texts for name in re.findall(r"\bt2t_jax\.cli\.(\w+)", text)
          if (PACKAGE / "cli" / f"{name}.py").exists()}


# The model's functional entry points users call (README, docs/design.md), public whether or
# not other code of the package calls them.
ENTRY_POINTS = {("model", "init_params"), ("model", "init_cache"), ("model", "decode_step")}


def test_every_package_s_all_is_what_other_code_imports_from_it():
  """Public is what is in use: a name imported across packages (or by benchmarks/,
  experiments/, notebooks/) is in that package's `__all__`, and `__all__` names nothing else
  (cli's also names the commands users run)."""
  imported = _cross_package_imports()
  private = sorted(f"{module}.{name} ({', '.join(sorted(where))})"
                   for (module, name), where in imported.items() if name.startswith("_"))
  assert not private, "private names imported from another package:\n" + "\n".join(private)
  declared = {_module_name(init): _package_names(init)[0] or []
              for init in sorted(PACKAGE.rglob("__init__.py")) if init.parent != PACKAGE}
  private = sorted(f"{package}.{name} ({', '.join(sorted(where))})"
                   for (package, name), where in imported.items()
                   if name not in declared[package])
  assert not private, ("imported from outside their package but missing from its __all__:\n"
                       + "\n".join(private))
  commands = {("cli", name) for name in _commands()}
  unused = sorted(f"{package}.{name}" for package, names in declared.items() for name in names
                  if (package, name) not in imported and (package, name) not in commands
                  and (package, name) not in ENTRY_POINTS)
  assert not unused, f"in an __all__ but imported by no other package or script: {unused}"


# ------------------------------------------------------------------ the core and the product
# The paper's core: the config, the model, its kernels, the train step and loop, beam search,
# BLEU, the WMT/text data path, one experiment end to end. The product plugs in around it,
# each feature in a package of its own, and the core imports none of it: a rule about folders.
PRODUCT = ("serve", "export", "accelerators", "inference", "quantization", "corpora")
CORE = ("configs", "ids", "errors", "decode_cache", "model", "kernels", "train", "decoding",
        "evaluation", "data", "runtime", "recipes.experiment", "recipes.paper", "cli.train")
# The few places a core module loads a product module, and only when a config asks for it.
ON_REQUEST = {("kernels.choice", "quantization.int8"): "an int8 model (decoding only)",
              ("kernels.choice", "quantization.bfloat16"): "a bfloat16 model (decoding only)",
              ("data.sources", "corpora.demo"): "dataset=demo"}
# `python -c "import t2t_jax.cli.train"` loads at most this many of the package's modules.
TRAIN_MODULES = 50


def _in(module: str, names) -> bool:
  return any(module == n or module.startswith(n + ".") for n in names)


def _top_level_imports() -> dict[str, set[str]]:
  """{module: the package's modules its top-level statements import} (not inside functions)."""
  graph = {}
  for path in sorted(PACKAGE.rglob("*.py")):
    if path == PACKAGE / "__init__.py":
      continue
    imported = set()
    for node in ast.parse(path.read_text()).body:
      if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "t2t_jax":
        imported |= {_resolve(node.module[len("t2t_jax."):], a.name) for a in node.names}
      elif isinstance(node, ast.Import):
        imported |= {a.name[len("t2t_jax."):] for a in node.names
                     if a.name.startswith("t2t_jax.")}
    graph[_module_name(path)] = imported - {""}
  return graph


def test_the_core_imports_no_product_module():
  """Nothing the core loads, all the way down, at import is a product module; inside a
  function only where `ON_REQUEST` says, when a config asks for it."""
  top, anywhere = _top_level_imports(), _module_imports()
  core = sorted(m for m in top if _in(m, CORE) and not _in(m, PRODUCT))
  assert core, "CORE names no module of the package"
  seen, todo = set(), list(core)
  while todo:
    module = todo.pop()
    if module not in seen:
      seen.add(module)
      todo.extend(top.get(module, ()))
  loaded = sorted(m for m in seen if _in(m, PRODUCT))
  assert not loaded, f"the core loads product modules at import: {loaded}"
  lazy = sorted((m, dep) for m in seen for dep in anywhere.get(m, ())
                if _in(dep, PRODUCT) and (m, dep) not in ON_REQUEST
                and not any(_in(dep, [d]) for (mm, d) in ON_REQUEST if mm == m))
  assert not lazy, f"core modules that load product modules (module, product): {lazy}"


def test_training_loads_few_modules_and_no_product():
  """What `t2t-train` loads: counted in a fresh interpreter."""
  code = ("import sys, t2t_jax.cli.train; "
          "print(' '.join(m for m in sys.modules if m.startswith('t2t_jax')))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split()
  product = sorted(m for m in out if _in(m[len("t2t_jax."):], PRODUCT))
  assert not product, f"importing t2t_jax.cli.train loads product modules: {product}"
  assert len(out) <= TRAIN_MODULES, (
      f"importing t2t_jax.cli.train loads {len(out)} of the package's modules (at most "
      f"{TRAIN_MODULES}): {sorted(out)}")
