"""tfdist.launch.task_keras: scripts that never import tfdist train under `tfdist launch`."""

import os
import re

import pytest

import helpers
from tfdist.launch import kubernetes
from tfdist.launch import task_keras

TUTORIAL = f"{helpers.SCRIPTS}/user/tutorial_mwms.py"


def test_the_choice_is_explicit_then_the_environment_then_tf_keras():
  assert task_keras.resolve(None, {}) == "tf_keras"
  assert task_keras.resolve(None, {"TF_USE_LEGACY_KERAS": "0"}) == "keras3"
  assert task_keras.resolve(None, {"TF_USE_LEGACY_KERAS": "1"}) == "tf_keras"
  assert task_keras.resolve("keras3", {"TF_USE_LEGACY_KERAS": "1"}) == "keras3"


def test_bad_choices_name_the_field_and_the_value():
  with pytest.raises(ValueError, match=r"`keras` must be one of \['tf_keras', 'keras3'\].*"
                                       r"Received: 'keras2'"):
    task_keras.resolve("keras2", {})
  with pytest.raises(ValueError, match=r"`TF_USE_LEGACY_KERAS` must be 1 .* "
                                       r"Received: TF_USE_LEGACY_KERAS='yes'"):
    task_keras.resolve(None, {"TF_USE_LEGACY_KERAS": "yes"})


def test_the_shim_goes_first_on_the_python_path_once():
  variables = task_keras.variables("keras3", {"PYTHONPATH": f"/a{os.pathsep}{task_keras.SITE_DIR}"})
  assert variables == {"TF_USE_LEGACY_KERAS": "0",
                       "PYTHONPATH": os.pathsep.join([task_keras.SITE_DIR, "/a"])}
  assert os.path.isfile(os.path.join(task_keras.SITE_DIR, "sitecustomize.py"))


def test_a_task_that_never_imports_keras_loads_no_keras():
  code = "import sys; print('keras' in sys.modules, 'tensorflow' in sys.modules)"
  env = {**os.environ, **task_keras.variables(None, os.environ)}
  result = helpers.run(helpers.python("-c", code), timeout=60, env=env)
  assert result.stdout.strip().splitlines()[-1] == "False False", result.stdout


@pytest.mark.parametrize("kind", sorted(kubernetes.MANIFESTS))
def test_manifests_choose_the_keras_of_the_flag_not_of_this_machine(kind, monkeypatch):
  monkeypatch.setenv("TF_USE_LEGACY_KERAS", "0")
  for keras, value in ((None, "1"), ("keras3", "0")):
    docs = kubernetes.MANIFESTS[kind]("job", image="img", command=["python", "t.py"],
                                      workers=2, keras=keras)
    text = kubernetes.to_yaml(docs)
    assert re.search(rf"name: TF_USE_LEGACY_KERAS\s+value: '{value}'", text), text


def _launch_tutorial(flavour, *flags):
  return helpers.run(helpers.tfdist_cli("launch", "--workers=2", "--timeout=240", *flags, "--",
                                        *helpers.python(TUTORIAL, flavour)), timeout=300)


def _trained(stdout):
  found = dict(re.findall(r"^\[(worker:\d)\] (KERAS: .*)$", stdout, re.MULTILINE))
  assert set(found) == {"worker:0", "worker:1"}, stdout[-3000:]
  assert found["worker:0"] == found["worker:1"]  # Same losses on both workers.
  return found["worker:0"]


@pytest.mark.slow
def test_tutorial_tf_keras_code_trains_with_tf_keras_by_default():
  result = _launch_tutorial("tf.keras")
  assert result.returncode == 0, result.stdout[-3000:]
  assert _trained(result.stdout).startswith("KERAS: tf_keras TRAINED")


@pytest.mark.slow
def test_tutorial_import_keras_code_trains_with_keras3():
  result = _launch_tutorial("keras")
  assert result.returncode == 0, result.stdout[-3000:]
  assert _trained(result.stdout).startswith("KERAS: keras TRAINED")


@pytest.mark.slow
def test_tutorial_tf_keras_code_trains_with_keras3_when_chosen():
  result = _launch_tutorial("tf.keras", "--keras=keras3")
  assert result.returncode == 0, result.stdout[-3000:]
  assert _trained(result.stdout).startswith("KERAS: keras TRAINED")
