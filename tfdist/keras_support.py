"""Which Keras trains under which strategy, and the choice tfdist makes for you.

On TF 2.21, Keras 3 cannot `fit` under multi-worker MultiWorkerMirroredStrategy
(keras-team/keras#20585) nor under ParameterServerStrategy (keras-team/keras#18624:
Keras 3 has no DatasetCreator). tf_keras trains under all of them. So `tfdist.keras`
is tf_keras, and importing tfdist sets `TF_USE_LEGACY_KERAS=1` so that `tf.keras`
is the same module, unless the user already chose.

A Keras 3 model is still fine under one_device, mirrored and central_storage; under
a strategy where it would fail, tfdist raises before the first step (see
`refuse_keras3`), instead of TensorFlow's error from deep inside the first step.
"""

import os
import sys
import warnings
from typing import Callable, Optional

from tfdist import cluster as cluster_lib

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
KERAS3 = "keras3"
TF_KERAS = "tf_keras"

# Measured on TF 2.21 / Keras 3.15 / tf_keras 2.21 (docs/known_issues.md) and asserted
# by tests/test_keras_support.py. (keras flavour, strategy) -> reason it fails, or None.
_MWMS_ISSUE = ("Keras 3 cannot fit under multi-worker MultiWorkerMirroredStrategy: "
               "it fails converting PerReplica values (keras-team/keras#20585)")
_PSS_ISSUE = ("Keras 3 cannot fit under ParameterServerStrategy: it has no "
              "DatasetCreator and never uses the ClusterCoordinator (keras-team/keras#18624)")
SUPPORT = {
    (KERAS3, "one_device"): None,
    (KERAS3, "mirrored"): None,
    (KERAS3, "central_storage"): None,
    (KERAS3, "multi_worker_mirrored (1 worker)"): None,
    (KERAS3, "multi_worker_mirrored (2+ workers)"): _MWMS_ISSUE,
    (KERAS3, "parameter_server"): _PSS_ISSUE,
    (TF_KERAS, "one_device"): None,
    (TF_KERAS, "mirrored"): None,
    (TF_KERAS, "central_storage"): None,
    (TF_KERAS, "multi_worker_mirrored (1 worker)"): None,
    (TF_KERAS, "multi_worker_mirrored (2+ workers)"): None,
    (TF_KERAS, "parameter_server"): None,
}


def use_legacy_keras() -> None:
  """Makes `tf.keras` resolve to tf_keras, or warns when it is too late.

  TensorFlow resolves `tf.keras` lazily, on first attribute access, from
  `TF_USE_LEGACY_KERAS`. So setting it works even after `import tensorflow`, as
  long as nothing touched `tf.keras` yet. An explicit user setting wins.
  """
  os.environ.setdefault(LEGACY_KERAS_ENV, "1")
  flavour = tf_keras_flavour()
  if flavour == KERAS3:
    warnings.warn(
        "tf.keras in this process is already Keras 3, because it was used before "
        "tfdist was imported. Keras 3 cannot fit under multi-worker or "
        "parameter-server strategies. Build models with `from tfdist import keras` "
        "(tf_keras), or import tfdist before TensorFlow, or set "
        f"{LEGACY_KERAS_ENV}=1 in the environment. Received: tf.keras is Keras 3",
        UserWarning, stacklevel=3)


def tf_keras_flavour() -> Optional[str]:
  """What `tf.keras` resolved to in this process: KERAS3, TF_KERAS, or None if unresolved."""
  tf = sys.modules.get("tensorflow")
  if tf is None:
    return None
  keras = tf.__dict__.get("keras")
  if keras is None:
    return None
  # Read the lazy loader's own state through vars(): its __getattr__ would load Keras.
  state = vars(keras)
  if "_tfll_initialized" in state:
    if not state["_tfll_initialized"]:
      return None
    name = {"keras_3": "keras.", "tf_keras": "tf_keras."}.get(state.get("_tfll_keras_version"), "")
  else:  # The loader already replaced itself with the module it loaded.
    name = getattr(keras, "__name__", "")
  if name.startswith("keras."):
    return KERAS3
  if name.startswith("tf_keras"):
    return TF_KERAS
  return None


def is_keras3_function(fn: Callable) -> bool:
  """Whether `fn` (a step function, possibly a tf.function) belongs to Keras 3."""
  fn = getattr(fn, "python_function", fn)
  return getattr(fn, "__module__", "").startswith("keras.")


def refuse_keras3(strategy_name: str, reason: str) -> None:
  """Raises the error a Keras 3 `fit` under an unsupported strategy gets, up front."""
  import keras  # Only reached from inside Keras 3's own trainer.
  raise TypeError(
      f"{reason}. Build the model with tf_keras, which trains under "
      f"{strategy_name}: `from tfdist import keras` (or import tfdist before "
      "TensorFlow and use tf.keras). "
      f"Received: a Keras {keras.__version__} model under {strategy_name}")


def is_multi_worker_mirrored(strategy) -> bool:
  """Whether `strategy` is MultiWorkerMirroredStrategy over 2 or more workers."""
  import tensorflow as tf  # Not at the top: importing tfdist must not load TF.
  return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and \
      cluster_lib.count_workers(strategy.cluster_resolver.cluster_spec().as_dict()) > 1


def set_distribute_reduction_method(model, strategy) -> str:
  """Reports a multi-worker step's metrics without one more all-reduce per step.

  tf_keras computes the compiled metrics inside each step with their
  sync-on-read variables all-reduced across workers, so every worker already
  holds the global values. It then reduces the step's outputs with "sum",
  another collective per step: on 2 localhost workers here the default job's
  CNN (batch 1024) stepped in 17.9 ms with it and 16.7 ms without. "first"
  takes the local copy of the same global values. Applied only under multi-worker
  MultiWorkerMirroredStrategy, to a model that uses Keras's own `train_step`
  and whose method is still "auto": a custom step may return unreduced values.

  Returns:
    The model's `distribute_reduction_method` afterwards.
  """
  import tf_keras  # Not at the top: importing tfdist must not load TF or Keras.
  own_step = type(model).train_step is tf_keras.Model.train_step
  if is_multi_worker_mirrored(strategy) and own_step \
      and model.distribute_reduction_method == "auto":
    model.distribute_reduction_method = "first"
  return model.distribute_reduction_method
