"""Mixed precision under any strategy, for both Kerases: one policy name, set once.

A Keras dtype policy decides, for every layer built after it is set, the
dtype of its computations and of its variables. The mixed policies compute in
16 bits and keep the variables (and so the optimizer's updates) in float32:

- "mixed_bfloat16": bfloat16 has float32's exponent range, so nothing overflows
  or flushes to zero and no loss scaling is needed. What CPUs with AVX-512
  BF16 / AMX and TPUs compute fast; the one measured here.
- "mixed_float16": float16's narrow range needs loss scaling, which both
  Kerases' `compile` add themselves under this policy (a `LossScaleOptimizer`;
  `tfdist.training.loop` applies it too). What NVIDIA GPUs from Volta on compute fast
  (tensor cores); on a CPU it is emulated and slower than float32. tf_keras
  refuses it under ParameterServerStrategy and CentralStorageStrategy (its
  loss scaling does not support them).

TF's guide (https://www.tensorflow.org/guide/mixed_precision) keeps the model's
output in float32: a softmax or loss in 16 bits loses what the float32
variables keep. tfdist's default model does; give your own last layer
`dtype="float32"`.

Example:

    >>> with tfdist.training.precision.policy("mixed_bfloat16"):
    ...   with strategy.scope():
    ...     model = make_model()          # layers compute in bfloat16
"""

import contextlib
import importlib
import sys
from typing import Iterator, List

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def _kerases(imported_only: bool = False) -> List:
  """Both Keras packages, where installed: a policy must reach whichever builds the model.

  With `imported_only`, only those this process has imported already.
  """
  found = []
  for name in ("tf_keras", "keras"):
    if imported_only and name not in sys.modules:
      continue
    try:
      found.append(importlib.import_module(name))
    except ImportError:
      pass
  return found


def _check(name: str) -> None:
  if name not in POLICIES:
    raise ValueError(f"The precision must be one of {list(POLICIES)}. Received: {name!r}")


def global_policy() -> str:
  """tf_keras's global policy name (Keras 3's is set alike by `set_policy`)."""
  return _kerases()[0].mixed_precision.global_policy().name


def set_policy(name: str) -> None:
  """Sets `name` as the global dtype policy of tf_keras and of Keras 3.

  Raises:
    ValueError: `name` is not one of `POLICIES`.
  """
  _check(name)
  for keras in _kerases():
    keras.mixed_precision.set_global_policy(name)


@contextlib.contextmanager
def policy(name: str) -> Iterator[str]:
  """Sets the policy for the block (layers built in it keep it), then restores the old one."""
  _check(name)
  # float32 is where a Keras starts, so one not imported yet needs nothing set; importing it
  # here cost every float32 process the Keras it does not use (Keras 3 alone, with the
  # matplotlib and IPython it imports where installed, is about 0.8 s of CPU).
  kerases = _kerases(imported_only=name == "float32")
  previous = [keras.mixed_precision.global_policy().name for keras in kerases]
  for keras in kerases:
    keras.mixed_precision.set_global_policy(name)
  try:
    yield name
  finally:
    for keras, old in zip(kerases, previous):
      keras.mixed_precision.set_global_policy(old)
