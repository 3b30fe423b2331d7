"""The training wing: a job that trains, saves, resumes and exports, under any strategy.

- `job`: the default training job (`tfdist train`): `TrainConfig` -> `TrainResult`.
- `config`: `TrainConfig`, the job's rules checked once, when it is made.
- `loop`: a custom training loop, one runner per kind of strategy (`Loop`).
- `fit_step`: Keras `fit`'s step with one all-reduce of the gradients.
- `accumulation`: exact gradient accumulation (`accumulate`, `accumulated_gradients`).
- `local_sgd`, `LocalSGD`, `LocalSGDOptions`: local SGD and DiLoCo, the replicas averaged
  every H steps.
- `verification`: does a model train the same under a strategy as on one device (`verify`).
- `checkpoints`: saving once (the chief), backup and resume, SIGTERM backups.
- `preemption`: when a running job checks for SIGTERM, and what the workers agree.
- `sidecar`: an evaluator task that evaluates each new checkpoint.
- `saved_model`: a SavedModel for serving (`tfdist.export`), from any strategy.
- `compression`, `precision`: float16 all-reduce; mixed precision.
- `sparsification`: gradients exchanged below 16 bits, top-k or int8, with error feedback.
- `scaling`: global batch and learning-rate rules, warm-up.
- `timing`: step and epoch times.

`__all__` is the public surface. Modules whose names start with an underscore
(`_user_code`) serve tfdist's own mains and may change in any
release. Submodules load on first use
(`tfdist.training.loop`), so importing the package loads no TensorFlow.
"""

import importlib

_SUBMODULES = ("accumulation", "checkpoints", "compression", "config", "fit_step", "job", "loop",
               "precision", "preemption", "saved_model", "scaling", "sidecar",
               "sparsification", "timing", "verification")
# Public functions -> their module, loaded on first use as the submodules are.
_FUNCTIONS = {"accumulate": "accumulation", "accumulated_gradients": "accumulation",
              "verify": "verification", "local_sgd": "_local_sgd", "LocalSGD": "_local_sgd",
              "LocalSGDOptions": "_local_sgd"}
__all__ = list(_SUBMODULES) + list(_FUNCTIONS) + ["step_done"]


def __getattr__(name):
  if name == "step_done":  # A custom loop's one call for the launcher's stall watchdog.
    return importlib.import_module("tfdist.task.progress").step_done
  if name in _FUNCTIONS:
    return getattr(importlib.import_module(f"{__name__}.{_FUNCTIONS[name]}"), name)
  if name not in _SUBMODULES:
    raise AttributeError(f"module 'tfdist.training' has no attribute {name!r}")
  try:
    return importlib.import_module(f"{__name__}.{name}")
  except ModuleNotFoundError as e:
    from tfdist import _keras_support  # pylint: disable=import-outside-toplevel
    if e.name != "tf_keras" or isinstance(e, _keras_support.TfKerasNotInstalled):
      raise
    # Keras 3 alone: a module that only tf_keras can run names what to install.
    raise _keras_support.tf_keras_missing(f"{__name__}.{name}") from e


def __dir__():
  return __all__
