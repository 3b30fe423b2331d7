"""Loading a user's `model_fn` and `dataset_fn` for `tfdist train --model --data`.

`--model` and `--data` name a Python file (`my_model.py`) or an importable
module (`mypackage.model`). The model module defines `model_fn()`, returning a
tf_keras model (compiled, or left to tfdist to compile for classification).
The data module defines `dataset_fn(input_context)`, or
`dataset_fn(input_context, global_batch_size)` to receive `--batch_size`, and
may set `STEPS_PER_EPOCH` (needed when the dataset repeats forever).
"""

import importlib
import importlib.util
import inspect
import os
import sys
from types import ModuleType
from typing import Any, Callable, Dict, Optional


def load_module(name_or_path: str, flag: str) -> ModuleType:
  """Imports a file path or a dotted module name.

  Raises:
    ValueError: the file or module does not exist, or fails to import.
  """
  if name_or_path.endswith(".py") or os.sep in name_or_path:
    if not os.path.isfile(name_or_path):
      raise ValueError(f"`--{flag}` names no file; give a .py file or an importable module. "
                       f"Received: {name_or_path!r}")
    module_name = f"tfdist_user_{flag}"
    spec = importlib.util.spec_from_file_location(module_name, name_or_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # Picklable and visible to tracebacks.
    spec.loader.exec_module(module)
    return module
  try:
    return importlib.import_module(name_or_path)
  except ModuleNotFoundError as e:
    raise ValueError(f"`--{flag}` names no importable module ({e}); give a .py file or a "
                     f"module on PYTHONPATH. Received: {name_or_path!r}") from e


def function(module: ModuleType, name: str, flag: str) -> Callable:
  """`module.name`, which must be callable.

  Raises:
    ValueError: it is missing or not callable.
  """
  fn = getattr(module, name, None)
  if not callable(fn):
    raise ValueError(f"`--{flag}` module {module.__name__} must define a function "
                     f"`{name}`. Received: {name}={fn!r}")
  return fn


def dataset_fn_with_batch(fn: Callable, global_batch_size: int) -> Callable:
  """`fn(input_context)`, passing the global batch size when `fn` takes a second argument."""
  if len(inspect.signature(fn).parameters) >= 2:
    return lambda input_context: fn(input_context, global_batch_size)
  return fn


def config_fields(model: Optional[str], data: Optional[str],
                  global_batch_size: int) -> Dict[str, Any]:
  """The `TrainConfig` fields that `--model` and `--data` give (none for the default job).

  `model_fn` from the model module; `dataset_fn`, passed the global batch size
  where it takes one, and `steps_per_epoch` (its `STEPS_PER_EPOCH`, else None)
  from the data module.

  Raises:
    ValueError: a module that does not exist or fails to import, or a function
      it does not define.
  """
  fields = {}
  if model:
    fields["model_fn"] = function(load_module(model, "model"), "model_fn", "model")
  if data:
    module = load_module(data, "data")
    fields["dataset_fn"] = dataset_fn_with_batch(function(module, "dataset_fn", "data"),
                                                 global_batch_size)
    fields["steps_per_epoch"] = getattr(module, "STEPS_PER_EPOCH", None)
  return fields
