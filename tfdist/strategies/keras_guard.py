"""Refusing Keras 3 up front under the strategies where its `fit` fails.

Keras 3 otherwise fails inside its first step with an error that names
neither the cause nor the fix (keras-team/keras#20585, #18624; see
docs/known_issues.md).
"""

import sys
from typing import Optional

from tfdist import keras_support


class RefusesKeras3:
  """Mixin: a Keras 3 `fit`/`evaluate`/`predict` fails at once with the fix.

  Keras 3 otherwise fails inside its first step with an error that names
  neither the cause nor the fix (keras-team/keras#20585, #18624).
  """

  _tfdist_name = ""

  def _keras3_failure(self) -> Optional[str]:
    raise NotImplementedError

  def experimental_distribute_dataset(self, dataset, options=None):
    # Keras 3's TFEpochIterator distributes the dataset before its first step.
    caller = sys._getframe(1).f_globals.get("__name__", "")
    if caller.startswith("keras."):
      self._maybe_refuse()
    return super().experimental_distribute_dataset(dataset, options)

  def run(self, fn, args=(), kwargs=None, options=None):
    if keras_support.is_keras3_function(fn):
      self._maybe_refuse()
    return super().run(fn, args=args, kwargs=kwargs, options=options)

  def _maybe_refuse(self):
    reason = self._keras3_failure()
    if reason:
      keras_support.refuse_keras3(self._tfdist_name, reason)
