"""The house: no import cycle between tfdist's modules, and no private name used across them.

Read from the source with `ast`, so every import counts, deferred ones inside
functions too.
"""

import ast
import os

import helpers

PACKAGE = os.path.join(helpers.REPO, "tfdist")


def _modules():
  """Module name -> parsed source, for every module of the tfdist package."""
  found = {}
  for folder, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        dotted = os.path.relpath(path, helpers.REPO)[:-3].replace(os.sep, ".")
        dotted = dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted
        with open(path) as f:
          found[dotted] = ast.parse(f.read(), path)
  return found


def _imports(module, tree, known):
  """(imported tfdist module, alias it is bound to or None) for every import in `tree`."""
  package = module if module in _PACKAGES else module.rpartition(".")[0]
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name in known:
          yield alias.name, alias.asname
    elif isinstance(node, ast.ImportFrom) and node.module:
      base = node.module if node.level == 0 else package
      for alias in node.names:
        full = f"{base}.{alias.name}"
        if full in known:
          yield full, alias.asname or alias.name
        elif base in known:
          yield base, None


_PACKAGES = set()


def _graph():
  modules = _modules()
  _PACKAGES.update(name for name in modules
                   if os.path.isdir(os.path.join(helpers.REPO, *name.split("."))))
  return modules, {m: {target for target, _ in _imports(m, tree, modules)} - {m}
                   for m, tree in modules.items()}


def _is_package_init(importer, imported):
  # A package's __init__ gathers its own modules; they import siblings, not it.
  return imported.startswith(importer + ".")


def test_no_import_cycle():
  modules, graph = _graph()
  edges = {m: {t for t in targets if not _is_package_init(m, t)
               and not _is_package_init(t, m)}
           for m, targets in graph.items()}
  # A package's __init__ is the package: an import of tfdist.cluster.spec runs
  # tfdist.cluster first, so edges into a package's own modules are not cycles.
  state, path, cycles = {}, [], []

  def visit(node):
    state[node] = "open"
    path.append(node)
    for target in sorted(edges.get(node, ())):
      if state.get(target) == "open":
        cycles.append(path[path.index(target):] + [target])
      elif target not in state:
        visit(target)
    path.pop()
    state[node] = "done"

  for node in sorted(edges):
    if node not in state:
      visit(node)
  # tfdist/__init__ maps public names onto modules lazily; it imports none of them.
  cycles = [c for c in cycles if "tfdist" not in c]
  assert not cycles, f"import cycles: {cycles}"


def test_no_module_uses_a_private_name_of_another():
  modules, _ = _graph()
  offences = []
  for module, tree in modules.items():
    aliases = {alias: target for target, alias in _imports(module, tree, modules)
               if alias and target != module}
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tfdist"):
        offences += [f"{module}: from {node.module} import {a.name}" for a in node.names
                     if a.name.startswith("_") and not a.name.startswith("__")]
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in aliases and node.attr.startswith("_")
          and not node.attr.startswith("__")):
        offences.append(f"{module}: {node.value.id}.{node.attr} ({aliases[node.value.id]})")
  assert not offences, offences


def test_the_checks_see_what_they_look_for():
  # The graph is not empty and knows the layering it checks.
  modules, graph = _graph()
  assert "tfdist.cluster.spec" in graph["tfdist.cluster.slurm"]
  assert "tfdist.cluster.slurm" not in graph["tfdist.cluster.spec"]
  assert "tfdist.cluster.spec" in graph["tfdist.cluster.preflight"]


def test_moved_modules_still_import_with_a_warning():
  import importlib
  import sys
  import warnings
  import tfdist
  for old, new in tfdist.MOVED_MODULES.items():
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      module = importlib.import_module(old)
    assert module is importlib.import_module(new), old
    assert any(f"{old} moved to {new}" in str(w.message) for w in caught), old
    sys.modules.pop(old, None)
