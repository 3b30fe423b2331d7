"""tfdist._keras_support: the Keras x strategy matrix, asserted both ways."""

import json
import os
import sys

import numpy as np
import pytest

import helpers
import tfdist
from tfdist import _keras_support as keras_support

# Version-sensitive: `make test-versions` runs it on the oldest and newest supported TensorFlow too.
pytestmark = pytest.mark.versions

KERAS_FIT = f"{helpers.SCRIPTS}/keras_fit.py"


def test_tfdist_keras_is_tf_keras():
  import tf_keras
  assert tfdist.keras is tf_keras


@pytest.mark.parametrize("flavour, value", [("keras3", "0"), ("tf_keras", "1")])
def test_select_sets_the_keras_of_this_process_over_an_earlier_choice(flavour, value,
                                                                      monkeypatch):
  monkeypatch.setenv(keras_support.LEGACY_KERAS_ENV, "0" if value == "1" else "1")
  monkeypatch.setattr(keras_support, "tf_keras_flavour", lambda: None)  # Not used yet.
  keras_support.select(flavour)
  assert os.environ[keras_support.LEGACY_KERAS_ENV] == value


def test_select_after_tf_keras_was_used_says_it_stays_for_this_process(monkeypatch):
  monkeypatch.setenv(keras_support.LEGACY_KERAS_ENV, "1")  # Restored after the test.
  monkeypatch.setattr(keras_support, "tf_keras_flavour", lambda: keras_support.TF_KERAS)
  with pytest.warns(UserWarning, match=r"already tf_keras.*child processes get keras3.*"
                                       r"Received: keras3"):
    keras_support.select("keras3")
  assert os.environ[keras_support.LEGACY_KERAS_ENV] == "0"


def test_select_refuses_another_keras_naming_the_choices(monkeypatch):
  monkeypatch.delenv(keras_support.LEGACY_KERAS_ENV, raising=False)
  with pytest.raises(ValueError, match=r"'tf_keras' or 'keras3'. Received: 'keras2'"):
    keras_support.select("keras2")
  assert keras_support.LEGACY_KERAS_ENV not in os.environ


@pytest.mark.slow
def test_importing_tfdist_changes_no_environment_variable():
  code = ("import os, json; before = dict(os.environ); import tfdist; "
          "tfdist.make_strategy; tfdist.keras; "
          "print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))")
  result = helpers.run(helpers.python("-c", code), timeout=120)
  assert result.returncode == 0, result.stdout[-2000:]
  assert result.stdout.strip().splitlines()[-1] == "{}"


@pytest.mark.slow
def test_use_legacy_keras_is_the_explicit_switch():
  code = ("import os; os.environ.pop('TF_USE_LEGACY_KERAS', None); import tensorflow as tf; "
          "import tfdist; tfdist.use_legacy_keras(); import tf_keras; "
          "assert tf.keras.Sequential is tf_keras.Sequential; print('OK')")
  result = helpers.run(helpers.python("-c", code), timeout=120)
  assert result.stdout.strip().endswith("OK"), result.stdout[-2000:]


@pytest.mark.slow
def test_tf_keras_used_before_the_switch_gets_a_clear_message():
  code = ("import os; os.environ.pop('TF_USE_LEGACY_KERAS', None); import tensorflow as tf; "
          "tf.keras.Sequential; import tfdist; tfdist.use_legacy_keras()")
  result = helpers.run(helpers.python("-W", "always", "-c", code), timeout=120)
  assert result.returncode == 0, result.stdout[-2000:]
  assert "tf.keras in this process is already Keras 3" in result.stdout
  assert "`from tfdist import keras`" in result.stdout
  assert "Received: tf.keras is Keras 3" in result.stdout


@pytest.mark.parametrize("name", ["one_device", "mirrored", "central_storage"])
def test_keras3_trains_where_it_works(name):
  import keras as keras3
  assert keras3.__version__.startswith("3.")
  strategy = tfdist.make_strategy(name)
  rng = np.random.default_rng(0)
  x = rng.random((128, 4)).astype("float32")
  y = x.sum(axis=1, keepdims=True)
  keras3.utils.set_random_seed(0)  # A ratio after 20 steps: not at the mercy of the start.
  with strategy.scope():
    model = keras3.Sequential([keras3.Input((4,)), keras3.layers.Dense(1)])
    model.compile(optimizer=keras3.optimizers.SGD(0.1), loss="mse")
  history = model.fit(x, y, batch_size=32, epochs=5, verbose=0, shuffle=False)
  assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
  assert model.predict(x, verbose=0).shape == (128, 1)


def _launch(*script_args, workers=2):
  return helpers.run(helpers.tfdist_cli("launch", f"--workers={workers}", "--timeout=240", "--",
                                        *helpers.python(KERAS_FIT, *script_args)), timeout=300)


@pytest.mark.slow
def test_tf_keras_trains_under_two_workers_with_identical_losses():
  result = _launch("tf_keras", "multi_worker_mirrored")
  assert result.returncode == 0, result.stdout[-3000:]
  losses = {line.split("]")[0]: line.split("TRAINED: ")[1]
            for line in result.stdout.splitlines() if "TRAINED: " in line}
  assert set(losses) == {"[worker:0", "[worker:1"}
  assert losses["[worker:0"] == losses["[worker:1"]
  evaluated = {line.split("]")[0]: line.split("EVALUATED: ")[1]
               for line in result.stdout.splitlines() if "EVALUATED: " in line}
  assert evaluated["[worker:0"] == evaluated["[worker:1"]
  assert "predictions=(64, 1)" in evaluated["[worker:0"]
  final_loss = float(losses["[worker:0"].strip("]").split(", ")[-1])
  assert float(evaluated["[worker:0"].split()[0].split("=")[1]) < 1.5 * final_loss
  assert "[worker:0] REDUCTION: first" in result.stdout
  default = {line.split("]")[0]: line.split("DEFAULT_REDUCTION_TRAINED: ")[1]
             for line in result.stdout.splitlines() if "DEFAULT_REDUCTION_TRAINED: " in line}
  assert default["[worker:0"] == default["[worker:1"] == losses["[worker:0"]
  # A tf_keras job does not import Keras 3 (before: every MWMS worker did, to patch it).
  assert result.stdout.count("KERAS3_IMPORTED: False") == 2, result.stdout[-3000:]


@pytest.mark.slow
class TestParameterServer:

  def test_keras3_fails_inside_tensorflow_without_tfdist(self):
    result = helpers.run(helpers.python(KERAS_FIT, "keras3", "parameter_server", "raw"),
                         timeout=240)
    assert result.returncode == 4, result.stdout[-3000:]
    assert "ClusterCoordinator.create_per_worker_dataset" in result.stdout

  def test_keras3_is_refused_up_front_with_the_fix(self):
    result = helpers.run(helpers.python(KERAS_FIT, "keras3", "parameter_server"), timeout=240)
    assert result.returncode == 3, result.stdout[-3000:]
    assert "REFUSED: Keras 3 cannot fit under ParameterServerStrategy" in result.stdout
    assert "keras-team/keras#18624" in result.stdout
    assert "Train this Keras 3 model with `tfdist.training.loop.Loop(strategy, model" in result.stdout

  def test_tf_keras_trains(self):
    result = helpers.run(helpers.python(KERAS_FIT, "tf_keras", "parameter_server"), timeout=240)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "TRAINED" in result.stdout


def test_support_matrix_names_the_failures():
  failing = {key for key, (raw, _) in keras_support.SUPPORT.items() if raw != "works"}
  assert failing == {(keras_support.KERAS3, "multi_worker_mirrored (2+ workers)"),
                     (keras_support.KERAS3, "parameter_server")}


class _CustomStep(tfdist.keras.Model):
  def train_step(self, data):
    return super().train_step(data)


@pytest.mark.parametrize("name", ["one_device", "mirrored", "multi_worker_mirrored"])
def test_reduction_method_stays_auto_without_a_second_worker(name):
  strategy = tfdist.make_strategy(name)
  with strategy.scope():
    model = tfdist.keras.Sequential([tfdist.keras.Input((4,)), tfdist.keras.layers.Dense(1)])
  assert keras_support.set_distribute_reduction_method(model, strategy) == "auto"


def test_reduction_method_leaves_a_custom_train_step_alone():
  inputs = tfdist.keras.Input((4,))
  model = _CustomStep(inputs, tfdist.keras.layers.Dense(1)(inputs))
  assert type(model).train_step is not tfdist.keras.Model.train_step
  assert keras_support.set_distribute_reduction_method(
      model, tfdist.make_strategy("one_device")) == "auto"


def test_keras_module_and_model_flavour():
  import keras as keras3
  import tf_keras
  assert keras_support.keras_module("keras3") is keras3
  assert keras_support.keras_module("tf_keras") is tf_keras
  model = keras3.Sequential([keras3.Input((2,)), keras3.layers.Dense(1)])
  assert keras_support.model_flavour(model) == "keras3"
  legacy = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
  assert keras_support.model_flavour(legacy) == "tf_keras"
  with pytest.raises(ValueError, match=r"must be 'keras3' or 'tf_keras'. Received: 'keras2'"):
    keras_support.keras_module("keras2")


def test_each_cell_that_rests_on_a_patch_is_in_the_matrix_and_names_a_gated_patch():
  from tfdist import _keras_support as support
  from tfdist.internals import keras as keras_internals
  assert set(support.RESTS_ON_PATCH) <= set(support.SUPPORT), support.RESTS_ON_PATCH
  assert set(support.RESTS_ON_PATCH.values()) <= set(keras_internals.GATES)


# Keras 3 alone: TensorFlow 2.16 and later install Keras 3 and no tf_keras, so an image's
# TensorFlow often comes without it (docs/get-started/install.md).

def test_without_tf_keras_the_default_is_keras3_and_what_needs_it_says_what_to_install(
    monkeypatch):
  import keras
  from tfdist.task import _keras as task_keras
  monkeypatch.delenv(keras_support.LEGACY_KERAS_ENV, raising=False)
  # Installed: tf_keras is the default, and tfdist's callbacks derive from its Callback.
  import tf_keras
  assert keras_support.tf_keras_installed() and keras_support.default_keras() == "tf_keras"
  assert keras_support.callback_base() is tf_keras.callbacks.Callback
  assert keras_support.tf_keras_base("callbacks.BackupAndRestore", "X") is \
      tf_keras.callbacks.BackupAndRestore
  monkeypatch.setitem(sys.modules, "tf_keras", None)  # Python's own block of an import.
  assert not keras_support.tf_keras_installed() and keras_support.optional_tf_keras() is None
  assert keras_support.default_keras() == "keras3"
  # A launch's tasks: `tf.keras` stays Keras 3, as TensorFlow makes it; a choice still wins.
  assert task_keras.variables()[keras_support.LEGACY_KERAS_ENV] == "0"
  monkeypatch.setenv(keras_support.LEGACY_KERAS_ENV, "1")
  assert task_keras.resolve() == "tf_keras"
  assert keras_support.callback_base() is keras.callbacks.Callback
  # A manifest's pods run an image, not this machine: tf_keras there, as before.
  monkeypatch.delenv(keras_support.LEGACY_KERAS_ENV)
  assert task_keras.resolve(None, {}, here=False) == "tf_keras"
  install = (r", which is not installed\. Install the one of your TensorFlow's minor version: "
             r"pip install 'tf-keras==2\.\d+\.\*' \(.*\)")
  received = r"\. Received: no module named 'tf_keras'$"
  for use, start, keras3_instead in [
      (lambda: keras_support.require_tf_keras("compress_gradients"),
       "compress_gradients needs tf_keras", False),
      (keras_support.tf_keras_base("callbacks.BackupAndRestore", "Its backup"),
       "Its backup needs tf_keras", False),
      (lambda: keras_support.keras_module("tf_keras"), "tfdist.keras is tf_keras", True)]:
    other = r", or use Keras 3 \(`import keras`; `--keras=keras3`\)" if keras3_instead else ""
    with pytest.raises(keras_support.TfKerasNotInstalled,
                       match=f"^{start}{install}{other}{received}") as raised:
      use()
    assert isinstance(raised.value, ModuleNotFoundError) and raised.value.name == "tf_keras"


@pytest.mark.slow
def test_a_keras3_job_runs_without_tf_keras_and_only_tf_keras_parts_name_the_fix():
  # Before: tfdist.training.checkpoints (and so tfdist.export and `tfdist train`) imported
  # tf_keras at the top, and a Keras 3 user's job failed with "No module named 'tf_keras'".
  result = helpers.run(helpers.python(f"{helpers.SCRIPTS}/keras3_alone.py"), timeout=240,
                       env=helpers.without_tf_keras())
  assert result.returncode == 0, result.stdout[-3000:]
  (line,) = [l for l in result.stdout.splitlines() if l.startswith("RESULT ")]
  out = json.loads(line[len("RESULT "):])
  assert not out["tf_keras_loaded"]
  assert out["losses"][1] < out["losses"][0] and out["loop_losses"][-1] < out["losses"][0]
  assert out["saved"].endswith("model.keras") and out["exported"].endswith(f"export{os.sep}1")
  assert out["backup_class"] == "Keras3BackupAndRestore"
  assert out["fit_step"].startswith("Keras's own step kept: not a tf_keras model")
  assert out["doctor_xla"] == {"every strategy": "not measured: this check needs tf_keras, "
                               + out["doctor_xla"]["every strategy"].split(", ", 1)[1]}
  errors = out["errors"]
  assert set(errors) == {"tfdist.keras", "SplitDense", "SplitDense.from_dense", "place_layers",
                         "PlacedSequential.from_config", "sparsification",
                         "import sparsification", "compress_gradients", "BackupAndRestore",
                         "WarmUp"}, errors
  # Before: importing tfdist.placement failed, Keras 3's layer in it too; and importing
  # sparsification directly ended in Python's "No module named 'tf_keras'".
  assert out["keras3_split_dense"] == [2, 3]
  for name, what in [("tfdist.keras", "tfdist.keras is tf_keras"),
                     ("SplitDense", "tfdist.placement.SplitDense needs tf_keras"),
                     ("SplitDense.from_dense", "tfdist.placement.SplitDense needs tf_keras"),
                     ("place_layers", "tfdist.placement.place_layers needs tf_keras"),
                     ("PlacedSequential.from_config",
                      "tfdist.placement.PlacedSequential needs tf_keras"),
                     ("sparsification", "tfdist.training.sparsification needs tf_keras"),
                     ("import sparsification", "tfdist.training.sparsification needs tf_keras"),
                     ("compress_gradients", "compress_gradients needs tf_keras"),
                     ("BackupAndRestore",
                      "tfdist.training.checkpoints.BackupAndRestore needs tf_keras"),
                     ("WarmUp", "tfdist.training.scaling.WarmUp needs tf_keras")]:
    kind, module, message = errors[name]
    assert (kind, module) == ("TfKerasNotInstalled", "tf_keras"), errors[name]
    assert message.startswith(f"{what}, which is not installed. Install the one of your "
                              "TensorFlow's minor version: pip install 'tf-keras=="), message
    # Keras 3 is named as the other way only for tfdist.keras, which is a choice of Keras.
    assert ("or use Keras 3" in message) == (name == "tfdist.keras"), message
