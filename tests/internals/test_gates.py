"""tfdist.internals.gates: every gated use of private code, listed once, reported on any version."""

import importlib
import pkgutil

import pytest

import tfdist.internals
from tfdist.internals import gates

# Version-sensitive: `make test-versions` runs it on the oldest and newest supported TensorFlow too.
pytestmark = pytest.mark.versions


def test_every_patch_of_every_internals_module_has_a_gate_and_the_list_has_them_all():
  modules = [importlib.import_module(f"tfdist.internals.{m.name}")
             for m in pkgutil.iter_modules(tfdist.internals.__path__)]
  with_gates = {m for m in modules if hasattr(m, "GATES")}
  assert with_gates == set(gates.MODULES), with_gates ^ set(gates.MODULES)
  for module in modules:
    assert set(getattr(module, "PATCHES", {})) <= set(getattr(module, "GATES", {})), module
  names = [name for name, _ in gates.gates()]
  assert len(names) == len(set(names)) == 14, names
  for _, gate in gates.gates():
    assert gate.library in ("TensorFlow", "tf_keras", "Keras") and gate.without, gate
    low, high = gate.tested
    assert low <= high and len(low) == 2, gate


def test_the_report_names_each_use_once_on_a_version_it_was_not_run_with():
  report = gates.report({"TensorFlow": (2, 16), "tf_keras": (2, 16), "Keras": (3, 17)})
  reasons = [reason for _, _, reason in report]
  assert all(r is not None and r.count("tfdist's") == 1 for r in reasons), reasons
  assert gates.report({"TensorFlow": None, "tf_keras": None, "Keras": None})[0][2] == \
      "TensorFlow is not installed"


def test_the_installed_versions_come_from_package_metadata_and_pass_every_gate():
  import tensorflow as tf
  installed = gates.installed()
  assert installed["TensorFlow"] == tuple(int(p) for p in tf.__version__.split(".")[:2])
  assert all(reason is None for _, _, reason in gates.report(installed))


def test_every_gate_is_the_supported_range_or_inside_it():
  # A gate wider than what is supported was never run there; a TensorFlow or tf_keras
  # gate narrower than it would leave a supported version without its patch.
  from tfdist import _stack
  library = {"TensorFlow": "tensorflow", "tf_keras": "tf_keras", "Keras": "keras"}
  for name, gate in gates.gates():
    low, high = _stack.SUPPORTED[library[gate.library]]
    assert low <= gate.tested[0] <= gate.tested[1] <= high, (name, gate.tested)
    if gate.library != "Keras":
      assert gate.tested == (low, high), (name, gate.tested)
