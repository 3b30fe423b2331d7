"""The documentation cannot drift: the site builds strictly, its examples run, every public name has a docstring."""

import importlib
import inspect
import os
import re
import subprocess
import sys

import pytest

import helpers

DOCS = os.path.join(helpers.REPO, "docs")
# The Python blocks that run in one process, in order, as a reader runs them.
RUNNABLE = ["README.md", "docs/get-started/quickstart-fit.md",
            "docs/get-started/quickstart-keras3.md"]


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
  # --strict: a broken link, a reference mkdocstrings cannot resolve, or a
  # docstring griffe cannot parse fails the build.
  done = helpers.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                      str(tmp_path / "site")], timeout=300)
  assert done.returncode == 0, done.stdout[-3000:]
  reference = (tmp_path / "site" / "reference" / "strategies" / "index.html").read_text()
  assert "make_strategy" in reference and "ClusterSpec" in (
      tmp_path / "site" / "reference" / "cluster" / "index.html").read_text()
  assert "LocalLauncher" in (tmp_path / "site" / "reference" / "launch" / "index.html").read_text()


@pytest.mark.slow
def test_the_readme_and_quickstart_examples_run_as_written():
  done = helpers.run([sys.executable, "-m", "pytest", "--markdown-docs", "-p", "no:cacheprovider",
                      "-o", "addopts=", "-q", *RUNNABLE], timeout=600)
  assert done.returncode == 0, done.stdout[-4000:]
  ran = re.search(r"(\d+) passed", done.stdout)
  assert ran and int(ran.group(1)) >= 4, done.stdout[-2000:]


@pytest.mark.slow
def test_the_multi_worker_quickstart_trains_two_workers_in_sync(tmp_path):
  page = open(os.path.join(DOCS, "get-started", "quickstart-multi-worker.md")).read()
  script = re.search(r'```\{\.python \.notest title="train.py"\}\n(.*?)```', page, re.S).group(1)
  (tmp_path / "train.py").write_text(script)
  done = helpers.run(helpers.tfdist_cli("launch", "--workers=2", "--timeout=240", "--",
                                        sys.executable, str(tmp_path / "train.py")),
                     timeout=300)
  assert done.returncode == 0, done.stdout[-3000:]
  losses = re.findall(r"\[worker:(\d)\] replicas: 2 loss: ([\d.]+)", done.stdout)
  assert sorted(w for w, _ in losses) == ["0", "1"], done.stdout[-2000:]
  assert losses[0][1] == losses[1][1]  # One model, trained in sync.


def _documented_modules():
  """Every module a reference page renders (`::: module` lines)."""
  names = []
  for page in sorted(os.listdir(os.path.join(DOCS, "reference"))):
    with open(os.path.join(DOCS, "reference", page)) as f:
      names += re.findall(r"^::: (tfdist[\w.]*)$", f.read(), re.M)
  return names


def _public(module):
  """(name, object) of the public names `module` defines (its __all__, else its own defs)."""
  if hasattr(module, "__all__"):
    return [(name, getattr(module, name)) for name in module.__all__]
  return [(name, value) for name, value in vars(module).items() if not name.startswith("_")
          and (inspect.isfunction(value) or inspect.isclass(value))
          and getattr(value, "__module__", None) == module.__name__]


def test_every_public_name_in_the_reference_has_a_docstring():
  missing = []
  modules = _documented_modules()
  assert "tfdist.strategies.registry" in modules and "tfdist.training.loop" in modules
  for dotted in modules:
    try:
      module = importlib.import_module(dotted)
    except ImportError:  # A function documented by its path (tfdist.keras_support.use_...).
      module_name, _, attribute = dotted.rpartition(".")
      value = getattr(importlib.import_module(module_name), attribute)
      missing += [] if inspect.getdoc(value) else [dotted]
      continue
    if not inspect.getdoc(module):
      missing.append(dotted)
    for name, value in _public(module):
      if not (inspect.isfunction(value) or inspect.isclass(value)):
        continue  # Constants are documented where they are defined.
      if not inspect.getdoc(value):
        missing.append(f"{dotted}.{name}")
      if inspect.isclass(value):
        missing += [f"{dotted}.{name}.{attr}" for attr, member in vars(value).items()
                    if not attr.startswith("_") and inspect.isfunction(member)
                    and not inspect.getdoc(member)]
  assert not missing, f"public names without a docstring: {sorted(set(missing))}"
