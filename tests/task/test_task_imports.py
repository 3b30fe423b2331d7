"""tfdist.task._imports: a function runs right after a module first executes, once."""

import importlib
import importlib.util
import sys

from tfdist.task import _imports as task_imports


def test_a_bare_find_spec_leaves_the_hook_waiting_for_the_import(tmp_path, monkeypatch):
  (tmp_path / "tfdist_probe_one.py").write_text("VALUE = 1\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.delitem(sys.modules, "tfdist_probe_one", raising=False)
  ran = []
  task_imports.after_import("tfdist_probe_one", lambda module: ran.append(module.VALUE))
  task_imports.after_import("tfdist_probe_one", lambda module: ran.append(2))  # Two wait.
  try:
    # TensorFlow asks whether keras is there without importing it.
    assert importlib.util.find_spec("tfdist_probe_one") is not None
    assert ran == []
    importlib.import_module("tfdist_probe_one")
    assert sorted(ran) == [1, 2]
    # Done once executed: the hooks are gone, and a second import runs nothing.
    assert not any(getattr(f, "name", None) == "tfdist_probe_one" for f in sys.meta_path)
    del sys.modules["tfdist_probe_one"]
    importlib.import_module("tfdist_probe_one")
    assert sorted(ran) == [1, 2]
  finally:
    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "name", None) != "tfdist_probe_one"]
    sys.modules.pop("tfdist_probe_one", None)


def test_a_module_already_imported_runs_the_function_at_once_and_errors_are_warnings(caplog):
  ran = []
  task_imports.after_import("json", lambda module: ran.append(module.__name__))
  assert ran == ["json"]
  task_imports.after_import("json", lambda module: 1 / 0)
  assert "what it enables after importing json was not enabled: ZeroDivisionError" in caplog.text


def test_the_same_function_asked_again_waits_once(tmp_path, monkeypatch):
  # As when a process makes several multi-worker strategies before importing Keras 3.
  (tmp_path / "tfdist_probe_two.py").write_text("VALUE = 2\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.delitem(sys.modules, "tfdist_probe_two", raising=False)
  ran = []

  def record(module):
    ran.append(module.VALUE)

  try:
    for _ in range(3):
      task_imports.after_import("tfdist_probe_two", record)
    assert sum(getattr(f, "name", None) == "tfdist_probe_two" for f in sys.meta_path) == 1
    importlib.import_module("tfdist_probe_two")
    assert ran == [2]
  finally:
    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "name", None) != "tfdist_probe_two"]
    sys.modules.pop("tfdist_probe_two", None)
