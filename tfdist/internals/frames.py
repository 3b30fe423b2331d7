"""Reading a local variable of a call running on this thread, e.g. Keras's `fit`.

Neither Keras hands a callback the objects its `fit` reads the data through;
`tf_keras` and `keras` here find them in `fit`'s frame, by the local names
of the Keras versions they were tested with.
"""

import inspect
import sys


def running_local(function, name: str):
  """The local `name` of the innermost call of `function` on this thread's stack, or None.

  Before Python 3.13 (PEP 667), reading `frame.f_locals` leaves a copy of every local on
  the frame, which `frame.clear()` does not free where python/cpython#113939 is not fixed
  (3.11.7 among them). A `fit` stopped by an exception keeps its frame in the traceback;
  that copy kept its tf.data iterators alive after `traceback.clear_frames`, and freeing
  them later waited for their autotune threads (docs/suite-time-cpu.md, "A fit stopped by
  an exception"). So the copy is emptied once the local is read, unless a debugger or
  tracer runs: Python writes that copy back into the frame after each trace event, so an
  emptied one would unbind `fit`'s locals.
  """
  code = inspect.unwrap(function).__code__
  frame = sys._getframe(1)
  while frame is not None and frame.f_code is not code:
    frame = frame.f_back
  if frame is None:
    return None
  local_variables = frame.f_locals
  value = local_variables.get(name)
  # A dict is a copy; from 3.13 on, f_locals is a view of the frame itself.
  if isinstance(local_variables, dict) and sys.gettrace() is None:
    local_variables.clear()
  return value
