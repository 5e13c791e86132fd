"""docs/design.md's layers are true: every module is placed, and imports go down only."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "t2t_jax"


def _layers():
  """{module: layer index, 0 = the top} from the design doc's layers block."""
  text = (ROOT / "docs" / "design.md").read_text()
  block = re.search(r"## Layers: imports go down only\n.*?```\n(.*?)```", text, re.S).group(1)
  return {module: rank for rank, line in enumerate(block.strip().splitlines())
          for module in line.split()[1:]}


def _module_imports():
  """{module: names of the package's modules it imports, anywhere in the file}."""
  graph = {}
  for path in sorted(PACKAGE.rglob("*.py")):
    name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    if name.endswith("__init__"):
      continue
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.ImportFrom) and node.module == "t2t_jax":
        imported |= {alias.name for alias in node.names}
      elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("t2t_jax."):
        imported.add(node.module[len("t2t_jax."):])
      elif isinstance(node, ast.Import):
        imported |= {a.name[len("t2t_jax."):] for a in node.names
                     if a.name.startswith("t2t_jax.")}
    graph[name] = imported
  return graph


def test_every_module_is_in_a_layer_and_imports_only_downwards():
  layers, graph = _layers(), _module_imports()
  assert set(graph) == set(layers), ("modules missing from / unknown to docs/design.md's "
                                     f"layers: {sorted(set(graph) ^ set(layers))}")
  upward = [(module, dep) for module, deps in graph.items() for dep in deps
            if dep in layers and layers[dep] < layers[module]]
  assert not upward, f"imports of a higher layer (module, imported): {upward}"


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
