"""Refusing up front what would fail inside a Keras step, with the cause and the fix.

Keras 3 under the strategies where its `fit` fails (keras-team/keras#20585,
#18624), and steps compiled with XLA (`jit_compile=True`) where XLA cannot
run them: otherwise both fail inside the first step with an error that names
neither the cause nor the fix (docs/known_issues.md).
"""

import sys
from typing import Optional

import tensorflow as tf

from tfdist import _keras_support as keras_support


class RefusesKeras3:
  """Mixin: a Keras 3 `fit`/`evaluate`/`predict` fails at once with the fix.

  Keras 3 otherwise fails inside its first step with an error that names
  neither the cause nor the fix (keras-team/keras#20585, #18624).
  """

  _tfdist_name = ""

  def _keras3_failure(self) -> Optional[str]:
    raise NotImplementedError

  def experimental_distribute_dataset(self, dataset, options=None):
    """TF's, after refusing a Keras 3 `fit` that would fail (see the class)."""
    # Keras 3's TFEpochIterator distributes the dataset before its first step.
    caller = sys._getframe(1).f_globals.get("__name__", "")
    if caller.startswith("keras."):
      self._maybe_refuse()
    return super().experimental_distribute_dataset(dataset, options)

  def run(self, fn, args=(), kwargs=None, options=None):
    """TF's `run`, after the refusal this class exists for (see the class)."""
    if keras_support.is_keras3_function(fn):
      self._maybe_refuse()
    return super().run(fn, args=args, kwargs=kwargs, options=options)

  def _maybe_refuse(self):
    reason = self._keras3_failure()
    if reason:
      keras_support.refuse_keras3(self._tfdist_name, reason)


# Why XLA cannot run a step, per strategy (measured on CPUs; docs/known_issues.md).
XLA_OTHER_DEVICES = ("XLA compiles each replica's step for one device, and the replicas' "
                     "variables live on the other CPU devices (tensorflow.org/xla/known_issues: "
                     "tf.Variable on a different device)")
XLA_CPU_COLLECTIVES = ("XLA has no collectives for CPU devices (\"Collectives are not yet "
                       "implemented for CPU devices when compiling with XLA\", TF's b/194942685)")
XLA_PS_VARIABLES = ("a worker's XLA-compiled step cannot read variables that live on the ps "
                    "tasks (tensorflow.org/xla/known_issues: tf.Variable on a different device)")


def on_cpus(strategy) -> bool:
  """Whether every device `strategy` computes on is a CPU (logical ones included)."""
  return all(tf.DeviceSpec.from_string(d).device_type == "CPU"
             for d in strategy.extended.worker_devices)


class RefusesJitCompile:
  """Mixin: a Keras step compiled with XLA fails at once, before it runs, with the fix.

  A model compiled with `jit_compile=True` hands `strategy.run` either its step
  as a `tf.function(jit_compile=True)` (tf_keras) or its own `train_step`
  from inside one (Keras 3). The subclass's `_jit_failure` says why XLA
  cannot run it here, or None. A ValueError, so that it leaves TensorFlow's
  tracing as itself.
  """

  _tfdist_name = ""

  def _jit_failure(self) -> Optional[str]:
    raise NotImplementedError

  def run(self, fn, args=(), kwargs=None, options=None):
    """TF's `run`, after the refusal this class exists for (see the class)."""
    if _compiled_with_xla(fn):
      reason = self._jit_failure()
      if reason:
        raise ValueError(
            f"jit_compile=True cannot run under {self._tfdist_name}: {reason}. Compile with "
            "jit_compile=False (Keras's default on CPUs), or use one_device or "
            f"central_storage, where XLA trains. Received: a step compiled with XLA")
    return super().run(fn, args=args, kwargs=kwargs, options=options)


def _compiled_with_xla(fn) -> bool:
  if getattr(fn, "_jit_compile", False):  # tf_keras: the step is the XLA function.
    return True
  model = getattr(fn, "__self__", None)  # Keras 3: the model's own bound step.
  return keras_support.is_keras3_model(model) and getattr(model, "jit_compile", False) is True
