"""Reading a local variable of a call running on this thread, e.g. Keras's `fit`.

Neither Keras hands a callback the objects its `fit` reads the data through;
`tf_keras` and `keras` here find them in `fit`'s frame, by the local names
of the Keras versions they were tested with.
"""

import inspect
import sys


def running_local(function, name: str):
  """The local `name` of the innermost call of `function` on this thread's stack, or None."""
  code = inspect.unwrap(function).__code__
  frame = sys._getframe(1)
  while frame is not None and frame.f_code is not code:
    frame = frame.f_back
  return None if frame is None else frame.f_locals.get(name)
