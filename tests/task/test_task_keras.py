"""tfdist.task._keras: scripts that never import tfdist train under `tfdist launch`."""

import os
import re
import shutil
import sys

import pytest

import helpers
from tfdist.launch import Job
from tfdist.launch.kubernetes import _manifests as kubernetes
from tfdist.task import _keras as task_keras

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


def test_tf_keras_chosen_for_tasks_here_without_it_is_refused_naming_the_choice(monkeypatch):
  # Keras 3 alone here (import tf_keras fails): the default is Keras 3, and each way of
  # choosing tf_keras is named with both fixes. With tf_keras installed, nothing is refused.
  assert task_keras.resolve_here("tf_keras", {}) == "tf_keras"
  monkeypatch.setitem(sys.modules, "tf_keras", None)
  assert task_keras.resolve_here(None, {}) == "keras3"
  assert task_keras.resolve_here(None, {"TF_USE_LEGACY_KERAS": "0"}) == "keras3"
  for keras, environ, what in [("tf_keras", {}, "--keras=tf_keras"),
                               (None, {"TF_USE_LEGACY_KERAS": "True"}, "TF_USE_LEGACY_KERAS=True")]:
    with pytest.raises(ValueError, match=rf"^{re.escape(what)} needs tf_keras, which is not "
                                         r"installed\. Install .*, or use Keras 3 .*"
                                         r"Received: no module named 'tf_keras'$"):
      task_keras.resolve_here(keras, environ)
  # A manifest's image is not this machine: resolve alone refuses nothing.
  assert task_keras.resolve("tf_keras", {}) == "tf_keras"


def test_the_shim_goes_first_on_the_python_path_once():
  variables = task_keras.variables("keras3", {"PYTHONPATH": f"/a{os.pathsep}{task_keras.SITE_DIR}"})
  assert variables == {"TF_USE_LEGACY_KERAS": "0",
                       "PYTHONPATH": os.pathsep.join([task_keras.SITE_DIR, "/a"])}
  assert os.path.isfile(os.path.join(task_keras.SITE_DIR, "sitecustomize.py"))


def test_a_second_task_site_down_the_path_hands_over_and_the_next_site_runs_once(tmp_path):
  # Another tfdist's task site behind this one (a task that launches with another install):
  # each hands over only to the path after its own folder, never back up it.
  other, last = tmp_path / "other", tmp_path / "last"
  other.mkdir()
  last.mkdir()
  shutil.copy(os.path.join(task_keras.SITE_DIR, "sitecustomize.py"), other)
  (last / "sitecustomize.py").write_text("print('next site', flush=True)\n")
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([task_keras.SITE_DIR, str(other), str(last)])}
  result = helpers.run(helpers.python("-c", "print('ran', flush=True)"), timeout=60, env=env)
  assert result.returncode == 0, result.stdout[-3000:]
  assert [line for line in result.stdout.splitlines() if line in ("next site", "ran")] == [
      "next site", "ran"], result.stdout[-3000:]


def test_a_task_that_never_imports_keras_loads_no_keras():
  code = "import sys; print('keras' in sys.modules, 'tensorflow' in sys.modules)"
  env = {**os.environ, **task_keras.variables(None, os.environ)}
  result = helpers.run(helpers.python("-c", code), timeout=60, env=env)
  assert result.stdout.strip().splitlines()[-1] == "False False", result.stdout


@pytest.mark.parametrize("kind", sorted(kubernetes.MANIFESTS))
def test_manifests_choose_the_keras_of_the_flag_not_of_this_machine(kind, monkeypatch):
  monkeypatch.setenv("TF_USE_LEGACY_KERAS", "0")
  for keras, value in ((None, "1"), ("keras3", "0")):
    docs = kubernetes.MANIFESTS[kind](Job(workers=2), ["python", "t.py"],
                                      kubernetes.ManifestOptions(name="job", image="img",
                                                                 keras=keras))
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


# --- Keras 3's own callbacks under `tfdist launch` (enable_keras3_callbacks_on_import) ---

CALLBACKS = f"{helpers.SCRIPTS}/user/keras3_callbacks.py"


def _launch_callbacks(directory, *args, flags=()):
  return helpers.run(helpers.tfdist_cli("launch", "--workers=2", "--keras=keras3", "--timeout=240",
                                        *flags, "--",
                                        *helpers.python(CALLBACKS, str(directory), "--save_freq=2",
                                                        *args)), timeout=300)


def _final_weights(stdout):
  found = dict(re.findall(r"^\[(worker:\d)\] WEIGHTS: (.*)$", stdout, re.MULTILINE))
  assert set(found) == {"worker:0", "worker:1"}, stdout[-3000:]
  assert found["worker:0"] == found["worker:1"], found  # Trained in sync: one model.
  return found["worker:0"]


def _assert_written_once(directory, weights, epochs):
  import keras
  import numpy as np
  import tensorflow as tf
  names = [os.path.relpath(os.path.join(d, n), directory)
           for d, folders, files in os.walk(directory) for n in folders + files]
  assert not [n for n in names if "workertemp" in n], names  # Other workers' copies removed.
  assert not os.path.exists(os.path.join(directory, "backup")), names  # Deleted at the end.
  # The chief's checkpoint is whole, and holds the final model.
  model = keras.saving.load_model(os.path.join(directory, "model.keras"))
  total = sum(float(np.sum(w)) for w in model.get_weights())
  assert abs(total - float(weights.split()[0])) < 1e-4, (total, weights)
  # One writer per run, the chief's: the last run's event file is whole and logs its epochs.
  events = sorted(n for n in names if "tfevents" in n)
  assert events and all(n.startswith(os.path.join("logs", "train")) for n in events), names
  logged = set()
  for record in tf.data.TFRecordDataset(os.path.join(directory, events[-1])):
    event = tf.compat.v1.Event.FromString(record.numpy())
    logged.update(event.step for v in event.summary.value if v.tag == "epoch_loss")
  assert logged == epochs, (logged, events)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  directory = tmp_path_factory.mktemp("keras3_callbacks")
  result = _launch_callbacks(directory)
  assert result.returncode == 0, result.stdout[-3000:]
  return directory, result.stdout


@pytest.mark.slow
def test_keras3_own_callbacks_write_once_from_the_chief(uninterrupted):
  directory, stdout = uninterrupted
  assert len(re.findall(r"^\[worker:\d\] EPOCHS: 2$", stdout, re.MULTILINE)) == 2, stdout[-3000:]
  _assert_written_once(directory, _final_weights(stdout), epochs={0, 1})
  # Both joined one collective: neither a task nor the launcher says one trained alone.
  assert "trains alone" not in stdout and "No two tasks" not in stdout, stdout[-3000:]
  # The backup's barrier at the end of the fit is traced: TensorFlow's warning about eager
  # steps ("Using CollectiveAllReduceStrategy eagerly has significant overhead") is not printed.
  assert "eagerly has significant overhead" not in stdout, stdout[-3000:]


@pytest.mark.slow
def test_a_killed_worker_resumes_from_keras3_own_backup_exactly(uninterrupted, tmp_path):
  result = _launch_callbacks(tmp_path, "--kill-at=1:2", flags=("--max_restarts=1",))
  assert result.returncode == 0, result.stdout[-3000:]
  assert "KILLING worker 1 at epoch 1, batch 2" in result.stdout, result.stdout[-3000:]
  assert "restarting every task" in result.stdout, result.stdout[-3000:]
  # The backup after batch 1 of epoch 1 (save_freq=2), read by both workers.
  resumed = re.findall(r"^\[(worker:\d)\] BackupAndRestore: resuming at epoch 2, batch 3 ",
                       result.stdout, re.MULTILINE)
  assert sorted(resumed) == ["worker:0", "worker:1"], result.stdout[-3000:]
  # The same weights as the run that was never interrupted: the input was replayed.
  weights = _final_weights(result.stdout)
  assert weights == _final_weights(uninterrupted[1])
  _assert_written_once(tmp_path, weights, epochs={1})  # The resumed run logs epoch 2.
