"""The house: no import cycle between tfdist's modules, and no private name used across them.

Read from the source with `ast`, so every import counts, deferred ones inside
functions too.
"""

import ast
import glob
import os
import re

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
  # A package's __init__ is the package: an import of tfdist.cluster._spec runs
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
        # A private module (tfdist/launch/_local.py) is tfdist's own to import;
        # a private name inside another module is not.
        offences += [f"{module}: from {node.module} import {a.name}" for a in node.names
                     if a.name.startswith("_") and not a.name.startswith("__")
                     and f"{node.module}.{a.name}" not in modules]
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in aliases and node.attr.startswith("_")
          and not node.attr.startswith("__")
          and f"{aliases[node.value.id]}.{node.attr}" not in modules):
        offences.append(f"{module}: {node.value.id}.{node.attr} ({aliases[node.value.id]})")
  assert not offences, offences


def test_the_checks_see_what_they_look_for():
  # The graph is not empty and knows the layering it checks.
  modules, graph = _graph()
  assert "tfdist.cluster._spec" in graph["tfdist.cluster._slurm"]
  assert "tfdist.cluster._slurm" not in graph["tfdist.cluster._spec"]
  assert "tfdist.cluster._spec" in graph["tfdist.cluster.preflight"]


# --- output policy and TensorFlow/Keras internals -----------------------------

INTERNALS = "tfdist.internals"
PRIVATE_MODULES = ("tensorflow.python", "keras.src", "tf_keras.src")
# Private names of Python's own that library code may use.
STDLIB_PRIVATE = {"os._exit", "sys._getframe"}
# Every private TensorFlow and Keras symbol tfdist uses, all in tfdist/internals.
# A new one is a decision: add it here, gated and documented (docs/architecture.md,
# "Private TensorFlow and Keras code", and docs/known_issues.md).
INVENTORY = {
    # tensorflow.py
    "tensorflow.python.distribute.collective_all_reduce_strategy",
    "CollectiveAllReduceExtended._initialize_local_devices",
    "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver",
    "tf.__internal__.distribute.ShardedVariable",
    "keras._tfll_initialized", "keras._tfll_keras_version",
    "Dataset._as_serialized_graph",
    # The coordination service's key-value store (set/get/delete_config_key_value), and
    # abort_collective_ops (a check that found workers differ fails a peer's collectives).
    "tensorflow.python.eager.context", "Context._initialized",
    # tf_keras.py
    "tf_keras.src.engine.base_layer",
    "BackupAndRestore._supported_strategies", "BackupAndRestore._training_state",
    "WorkerTrainingState._ckpt_saved_epoch", "WorkerTrainingState._ckpt_saved_batch",
    "BackupAndRestore._current_epoch", "BackupAndRestore._backup",
    "Callback._supports_tf_logs",
    "DataHandler._initial_epoch", "DataHandler._initial_step", "DataHandler._adapter",
    "DataHandler._dataset", "DataHandler._inferred_steps", "DatasetAdapter._dataset",
    # keras.py (Keras 3)
    "keras.src.version.__version__", "keras.src.backend.tensorflow.trainer", "keras.src.tree",
    "keras.src.backend.common", "keras.src.backend.tensorflow.core",
    "TensorFlowTrainer._maybe_symbolic_build", "Trainer._distribute_strategy",
    "Variable._value", "Variable._convert_to_tensor", "Variable._dtype",
    "Variable._serialize_to_tensors", "Variable._restore_from_tensors",
    "Layer._flatten_layers", "Model._initial_epoch", "BackupAndRestore._save_model",
    "BackupAndRestore._weights_path", "BackupAndRestore._training_metadata_path",
    "BackupAndRestore._prev_weights_path", "BackupAndRestore._prev_training_metadata_path",
    "BackupAndRestore._last_batch_seen", "EpochIterator._enumerate_iterator",
    "EpochIterator._num_batches", "TFDatasetAdapter._dataset",
    "TFOptimizer._all_reduce_sum_gradients",  # Local SGD: each replica's own gradients.
    # keras_callbacks.py (Keras 3's own callbacks, written once under multi-worker strategies)
    "keras.src.callbacks", "ModelCheckpoint._save_model", "ModelCheckpoint._get_file_path",
}


def _sources():
  """(dotted module, path, source) of every tfdist module."""
  for folder, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        dotted = os.path.relpath(path, helpers.REPO)[:-3].replace(os.sep, ".")
        with open(path) as f:
          yield dotted.removesuffix(".__init__"), path, f.read()


def test_no_print_outside_the_cli_mains():
  offences = [f"{path}:{node.lineno}" for module, path, source in _sources()
              if not module.startswith("tfdist.cli")
              for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "print"]
  assert not offences, f"library code logs (tfdist.output), mains print: {offences}"


# No module outside tfdist.strategies and the traits (tfdist._choices) spells a strategy's
# name: a list of strategies derives from the traits, and code that means one strategy
# says `Name.MIRRORED` (issue 52). The one string left is Kubernetes's namespace named
# "default", which is not the strategy of that name.
STRATEGY_LITERALS = {"tfdist.launch.kubernetes._manifests": 1}


def _strategy_literals(tree, names):
  """Lines of the string constants in `tree` that are one of `names` (docstrings aside)."""
  docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef))
                and node.body and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)}
  return [node.lineno for node in ast.walk(tree)
          if isinstance(node, ast.Constant) and isinstance(node.value, str)
          and node.value in names and id(node) not in docstrings]


def test_strategies_are_named_only_where_the_inventory_says():
  from tfdist import _choices as choices
  names = set(choices.strategy_names())
  found = {}
  for module, _, source in _sources():
    if module.startswith("tfdist.strategies") or module == "tfdist._choices":
      continue
    lines = _strategy_literals(ast.parse(source), names)
    if lines:
      found[module] = len(lines)
  assert found == STRATEGY_LITERALS, (
      "a list of strategies derives from tfdist._choices.STRATEGIES (kinds, traits), and "
      "one strategy is tfdist._choices.Name's. "
      f"Received: {dict(sorted(found.items()))}")
  # The check sees a literal, and not a docstring.
  sample = ast.parse('"""mirrored"""\nx = ["mirrored", "one_device"]\ny = "mirrored_x"\n')
  assert _strategy_literals(sample, names) == [2, 2]


def test_every_strategy_has_a_name_and_every_name_a_strategy():
  from tfdist import _choices as choices
  named = {value for key, value in vars(choices.Name).items() if key.isupper()}
  assert named == set(choices.strategy_names())


# What a main may set in its own environment: TensorFlow's switches, which TensorFlow reads
# only from there, as it loads. A library option travels as an argument, never this way.
TENSORFLOW_SWITCHES = {"'TF_CPP_MIN_LOG_LEVEL'"}


def _environment_writes(tree):
  """(line, key's source) for each write into os.environ: item, setdefault, update, pop."""
  for node in ast.walk(tree):
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
      for target in getattr(node, "targets", None) or [node.target]:
        if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "os.environ":
          yield node.lineno, ast.unparse(target.slice)
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and ast.unparse(node.func.value) == "os.environ"
          and node.func.attr in ("setdefault", "update", "pop", "clear", "__setitem__")):
      yield node.lineno, ast.unparse(node.args[0]) if node.args else "(everything)"


def test_no_main_passes_an_option_through_its_own_environment():
  offences = [f"{path}:{line} sets {key}" for module, path, source in _sources()
              if module.startswith("tfdist.cli")
              for line, key in _environment_writes(ast.parse(source))
              if key not in TENSORFLOW_SWITCHES]
  assert not offences, ("a main passes options to the library as arguments (a launcher's "
                        f"`env`), not by writing os.environ: {offences}")
  # The check sees each kind of write.
  sample = ast.parse("os.environ['A'] = '1'\nos.environ.setdefault('B', '2')\n"
                     "os.environ.update({'C': '3'})\ndel os.environ['D']\n")
  assert sorted(_environment_writes(sample)) == [
      (1, "'A'"), (2, "'B'"), (3, "{'C': '3'}"), (4, "'D'")]


def _is_foreign_private_attribute(node) -> bool:
  """`x._name` where `x` is not tfdist's own object (self, cls, super()) nor Python's."""
  if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
          and not node.attr.startswith(("__", "_tfdist"))):
    return False
  text = ast.unparse(node)
  own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
  return not own and text not in STDLIB_PRIVATE and not text.startswith("super().")


def test_private_tensorflow_and_keras_code_is_reached_only_from_internals():
  offences = []
  for module, path, source in _sources():
    if module.startswith(INTERNALS):
      continue
    for node in ast.walk(ast.parse(source)):
      if isinstance(node, ast.Import):
        bad = [a.name for a in node.names if a.name.startswith(PRIVATE_MODULES)]
      elif isinstance(node, ast.ImportFrom):
        bad = [node.module] if (node.module or "").startswith(PRIVATE_MODULES) else []
      elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        bad = [w for w in node.value.split() if w.strip("`'\"(),").startswith(PRIVATE_MODULES)]
      elif isinstance(node, ast.Attribute) and node.attr == "__internal__":
        bad = ["__internal__"]
      else:
        bad = [ast.unparse(node)] if _is_foreign_private_attribute(node) else []
      offences += [f"{path}:{node.lineno}: {name}" for name in bad]
  assert not offences, offences


def _private_uses(source: str) -> set:
  """Private TF/Keras modules imported and private attributes read or set in `source`."""
  found = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PRIVATE_MODULES):
      found.update(f"{node.module}.{alias.name}" for alias in node.names)
    elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
        not node.attr.startswith("__") and ast.unparse(node) not in STDLIB_PRIVATE:
      found.add(node.attr)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        node.value.startswith("_") and not node.value.startswith("__"):
      found.add(node.value)  # Attribute names held as strings (getattr, vars()).
  return found


def test_every_private_symbol_used_is_in_the_inventory():
  used = set()
  for module, _, source in _sources():
    if module.startswith(INTERNALS):
      used |= _private_uses(source)
  listed_attributes = {name.rpartition(".")[2] for name in INVENTORY}
  listed_modules = {name for name in INVENTORY if name.startswith(PRIVATE_MODULES)}
  ours = {"_originals", "_assign_originals", "_checkpoint_originals", "_restore_variable_methods",
          "_original", "_may_patch", "_reduce_per_replica", "_one_step_per_execution",
          "_BACKUP_PATHS", "_own_gradients",
          # tfdist's own state on Keras's callbacks (keras_callbacks.py).
          "_tfdist_log_dirs", "_tfdist_own", "_tfdist_position"}
  unlisted = {u for u in used if u not in listed_attributes | listed_modules | ours}
  assert not unlisted, f"private TF/Keras symbols not in the inventory: {sorted(unlisted)}"


def test_each_internals_patch_is_gated_undoable_and_points_to_its_issue():
  from tfdist.internals import keras as keras_internals
  from tfdist.internals import tensorflow as tf_internals
  from tfdist.internals import tf_keras as tf_keras_internals
  from tfdist.internals import keras_callbacks, strategy_watch
  for module in (keras_internals, tf_internals, tf_keras_internals, keras_callbacks,
                 strategy_watch):
    low, high = module.TESTED
    assert low <= high and len(low) == 2, module
  for module in (keras_internals, tf_keras_internals, keras_callbacks, strategy_watch):
    for name, issue in module.PATCHES.items():
      assert callable(getattr(module, f"enable_{name}")), name
      assert callable(getattr(module, f"disable_{name}")), name
      assert "/" in issue and "#" in issue, (name, issue)
  for name, issue in tf_internals.PATCHES.items():
    assert callable(getattr(tf_internals, name)), name  # A context manager: its exit undoes.
    assert "/" in issue and "#" in issue, (name, issue)


# --- layers -----------------------------------------------------------------------
# docs/architecture.md's layers, top to bottom: a module imports from its own
# layer or those below it, never from above. A new top-level module or package
# takes its place here.
LAYERS = (
    ("cli",),
    ("advice", "serving"),
    # The lab's instruments (harness, models, allreduce, collectives) time advice's
    # ways and workers; the lab never imports the product.
    ("_lab",),
    ("_doctor", "training"),
    ("launch",),
    # The task side (tfdist.task) runs inside the tasks the launchers start; its
    # progress rows are what strategies, data and training report to.
    ("strategies", "data", "task"),
    ("_keras_support", "devices", "placement", "cluster", "_folders"),
    ("internals", "output", "_registry", "_choices", "_stack", "_variables", "_barrier"),
)


def _layer(module):
  top = module.split(".")[1] if module.count(".") else None
  for depth, names in enumerate(LAYERS):
    if top in names:
      return depth
  return None


def test_imports_run_down_the_layers():
  modules, graph = _graph()
  unplaced = sorted({m.split(".")[1] for m in modules if m != "tfdist"
                     and m.split(".")[1] != "__main__" and _layer(m) is None})
  assert not unplaced, f"top-level modules with no layer in LAYERS: {unplaced}"
  upward = [f"{m} -> {t}" for m, targets in graph.items() if m != "tfdist" and _layer(m) is not None
            for t in targets if t != "tfdist" and _layer(t) is not None and _layer(t) < _layer(m)]
  assert not upward, f"imports up the layers (docs/architecture.md): {upward}"


# Methods of TF's and Keras's classes whose names are private, overridden by a
# tfdist class outside internals/. Each depends on the library's internals as an
# import would; a new one is a decision, listed here with why.
OVERRIDES = {
    # tf_keras asks it whether to call the batch hooks; the SIGTERM check needs them.
    "tfdist.training.checkpoints.BackupAndRestore._implements_train_batch_hooks",
    # Keras 3 writes its backup there and only there; the chief's folder wraps it.
    "tfdist.training.checkpoints.Keras3BackupAndRestore._save_model",
}


def _resolved_bases(class_node, namespace):
  """The classes a class statement names as its bases, evaluated in its module."""
  import importlib  # pylint: disable=import-outside-toplevel
  bases = []
  for base in class_node.bases:
    root = base
    while isinstance(root, ast.Attribute):
      root = root.value
    scope = dict(namespace)
    if isinstance(root, ast.Name) and root.id in ("keras", "tf_keras", "tensorflow", "tf"):
      # A class built inside a function imports its library there (Keras 3, lazily).
      scope.setdefault(root.id, importlib.import_module(
          "tensorflow" if root.id == "tf" else root.id))
    try:
      value = eval(ast.unparse(base), scope)  # pylint: disable=eval-used
    except Exception:  # pylint: disable=broad-except
      continue  # A base made at run time: its own module's classes are seen where defined.
    if isinstance(value, type):  # Not Generic[...] and the like.
      bases.append(value)
  return bases


def test_every_override_of_a_private_tf_or_keras_method_is_in_the_inventory():
  import importlib  # pylint: disable=import-outside-toplevel
  found = set()
  for module, _, source in _sources():
    if module.startswith(("tfdist.cli", "tfdist.task.site")) or module.endswith("__main__"):
      continue  # Mains define flags on import; the task site runs in tasks.
    namespace = vars(importlib.import_module(module))
    # Every class statement, module-level or built inside a function (a class made
    # on first use, as Keras 3's backup is), with the bases it names.
    for node in ast.walk(ast.parse(source)):
      if not isinstance(node, ast.ClassDef):
        continue
      mro = [cls for base in _resolved_bases(node, namespace) for cls in base.__mro__]
      for item in node.body:
        attr = getattr(item, "name", "")
        if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and attr.startswith("_")
            and not attr.startswith("__") and any(
                base.__module__.split(".")[0] in ("tensorflow", "keras", "tf_keras")
                and attr in vars(base) for base in mro)):
          found.add(f"{module}.{node.name}.{attr}")
  outside = {name for name in found if not name.startswith(INTERNALS)}
  assert outside == OVERRIDES, f"private TF/Keras methods overridden: {sorted(outside)}"


def test_no_library_code_starts_a_module_of_the_cli():
  # A process that a library package starts runs that package's own main
  # (`python -m tfdist.launch.ray._task`); cli/ holds the commands users type.
  offences = [f"{path}:{node.lineno}: {node.value}" for module, path, source in _sources()
              if not module.startswith("tfdist.cli")
              for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Constant) and isinstance(node.value, str)
              and node.value.startswith("tfdist.cli.")]
  assert not offences, offences


# Library code that writes `python -m tfdist <command>`: only the Kubernetes manifests,
# which the library prints for users to apply and keep, and which name the command users
# also type in their own images (`tfdist task`, `tfdist data_service`), not a private
# module that may move. What the library starts itself, here or through sbatch or Ray,
# runs a library module (`tfdist.launch._task`, `_serve_data_service`, `ray._task`).
RUNS_A_MAIN = {"tfdist.launch.kubernetes._manifests": 2}


def test_library_code_runs_no_tfdist_command_beyond_its_inventory():
  """`[..., "-m", "tfdist", ...]` or "-m tfdist CMD" in code outside cli/, per module."""
  found = {}
  for module, _, source in _sources():
    if module.startswith("tfdist.cli"):
      continue
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    count = 0
    for node in ast.walk(tree):
      if isinstance(node, ast.List):
        items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
        count += sum(1 for a, b in zip(items, items[1:]) if (a, b) == ("-m", "tfdist"))
      elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings):
        count += len(re.findall(r"-m tfdist [a-z]", node.value))
    if count:
      found[module] = count
  assert found == RUNS_A_MAIN, (
      "library code that starts a tfdist command (cli/ holds the mains; a library process "
      f"runs its own package's main): {found}")


def test_a_module_is_public_or_visibly_private():
  """Every module is on its package's public surface or starts with an underscore."""
  import importlib
  import pkgutil
  import tfdist
  # The command's mains, the lab and the private TF/Keras code are private by their package's name.
  private_packages = ("tfdist._lab", "tfdist.cli", "tfdist.internals", "tfdist.task.site")
  public_modules = {module for module, attribute in tfdist._EXPORTS.values() if attribute is None}
  unmarked = []
  for info in pkgutil.walk_packages(tfdist.__path__, "tfdist."):
    package, leaf = info.name.rsplit(".", 1)
    if (leaf.startswith("_") or info.name.startswith(private_packages)
        or info.name in private_packages or info.name in public_modules):
      continue
    if package != "tfdist" and leaf in getattr(importlib.import_module(package), "__all__", ()):
      continue
    unmarked.append(info.name)
  assert not unmarked, (f"modules neither in their package's __all__ nor named with a leading "
                        f"underscore (docs/architecture.md, Public and private): {unmarked}")


# --- environment variables -----------------------------------------------------------


def test_every_tfdist_variable_is_declared_once_and_listed_in_the_architecture_page():
  from tfdist import _variables  # pylint: disable=import-outside-toplevel
  names = [v.name for v in _variables.VARIABLES]
  assert len(names) == len(set(names)), names
  outside = []
  for path in glob.glob(os.path.join(helpers.REPO, "tfdist", "**", "*.py"), recursive=True):
    if path.endswith(os.path.join("tfdist", "_variables.py")):
      continue
    with open(path) as f:
      tree = ast.parse(f.read())
    outside += [f"{os.path.relpath(path, helpers.REPO)}:{node.lineno}: {node.value}"
                for node in ast.walk(tree) if isinstance(node, ast.Constant)
                and isinstance(node.value, str) and re.fullmatch(r"TFDIST_[A-Z_]+", node.value)]
  assert not outside, f"declare it in tfdist/_variables.py and use its constant: {outside}"
  with open(os.path.join(helpers.REPO, "docs", "reference", "environment.md")) as f:
    page = f.read()
  for v in _variables.VARIABLES:
    row = f"| `{v.name}` | {v.set_by} | `{v.read_by}` | {v.meaning} |"
    assert row in page, f"docs/reference/environment.md's row for {v.name} should read: {row}"
  listed = re.findall(r"^\| `(TFDIST_[A-Z_]+)` \|", page, re.M)
  assert sorted(listed) == sorted(names), set(listed) ^ set(names)


def test_every_tfdist_variable_a_template_or_manifest_names_is_declared():
  """What Python cannot import, the SLURM script and the manifests users keep, names declared
  variables only: each `TFDIST_` name in them is one of tfdist/_variables.py's."""
  from tfdist import _variables  # pylint: disable=import-outside-toplevel
  declared = {v.name for v in _variables.VARIABLES}
  files = [path for folder in ("tfdist", "launch")
           for path in glob.glob(os.path.join(helpers.REPO, folder, "**", "*"), recursive=True)
           if os.path.isfile(path) and not path.endswith((".py", ".pyc"))]
  named, undeclared = set(), []
  for path in files:
    with open(path, errors="replace") as f:
      for number, line in enumerate(f, 1):
        for name in re.findall(r"\bTFDIST_[A-Z_]+\b", line):
          named.add(name)
          if name not in declared:
            undeclared.append(f"{os.path.relpath(path, helpers.REPO)}:{number}: {name}")
  assert not undeclared, f"declare it in tfdist/_variables.py: {undeclared}"
  assert {"TFDIST_SLURM_NUM_PS", "TFDIST_PREFLIGHT_TIMEOUT"} <= named, sorted(named)
