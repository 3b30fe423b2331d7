"""What a step moves between devices: every tensor one of its ops reads from another device.

Counted in the graph a `tf.function` traces, not timed: the answer to "what
does this placement cost in copies?" before the step ever runs, for placements
of a model over devices (notebooks 14 and 16 compare them with it).

Example:

    >>> @tf.function
    ... def step():
    ...   with tf.device("/cpu:1"):
    ...     return tf.nn.relu(tf.matmul(x, x))   # x was made on /cpu:0
    >>> placement.bytes_crossing(step)    # x there, the result back
    {('x:0', 'CPU:1'): 1048576, ('Relu:0', 'CPU:0'): 1048576}
"""

from typing import Dict, Tuple

import tensorflow as tf


def bytes_crossing(step, *args, default_device: str = "/cpu:0") -> Dict[Tuple[str, str], int]:
  """{(tensor, receiving device): bytes} for each tensor that `step` reads across devices.

  Each op runs on the device it asks for; an op colocated with another runs
  with it; an op that asks for none runs where the variable it reads lives,
  else on `default_device`, as TensorFlow's placer puts it. So a gradient
  tape's backward ops run where `tape.gradient` was called, not with their
  forward ops (tensorflow/tensorflow#33688): a model placed with `tf.device`
  alone sends its weights to that device and their gradients back, and the
  count shows it. What the step returns goes to `default_device` (a
  function's results come back there). A variable's handle is not counted; the values read through
  it are, where they cross. A captured tensor comes from the device it lives
  on; the step's arguments from `default_device`. A tensor read by several ops
  on the other device counts once.

  Args:
    step: a `tf.function`; traced (not run) for `args`.
    *args: its arguments, as for `step.get_concrete_function`.
    default_device: where TensorFlow runs an op that asks for no device.

  Returns:
    {(tensor name, "CPU:1" style device): bytes}; empty when nothing crosses.

  Raises:
    TypeError: `step` is not a `tf.function`.
  """
  if not hasattr(step, "get_concrete_function"):
    raise TypeError("bytes_crossing counts in a traced graph: pass a tf.function (decorate "
                    f"the step with @tf.function). Received: {step!r}")
  graph = step.get_concrete_function(*args).graph
  # A captured tensor or variable comes from where it lives, whatever device scope
  # its placeholder was made in (captures are made at their first use).
  captured = {inside.op.name: outside.device for outside, inside in graph.captures
              if getattr(outside, "device", "")}
  variable_device = {inside.name: captured[inside.op.name] for outside, inside in graph.captures
                     if outside.dtype == tf.resource and inside.op.name in captured}
  default = _short(default_device)

  def where(op) -> str:
    if op.name in captured:
      return _short(captured[op.name])
    for group in op.colocation_groups():
      name = group.decode().partition("loc:@")[2]
      if name != op.name:
        return where(graph.get_operation_by_name(name))
    if op.device:
      return _short(op.device)
    return next((_short(variable_device[t.name]) for t in op.inputs
                 if t.name in variable_device), default)

  crossing = {}
  for op in graph.get_operations():
    for tensor in op.inputs:
      if tensor.dtype != tf.resource and where(tensor.op) != where(op):
        if tensor.shape.num_elements() is None:
          raise ValueError(f"bytes_crossing: {tensor.name} crosses to {where(op)} with an "
                           "unknown shape; trace the step with fixed shapes (example arguments, an "
                           "input_signature, or a dataset batched with drop_remainder=True). "
                           f"Received: shape {tensor.shape}")
        crossing[(tensor.name, where(op))] = tensor.shape.num_elements() * tensor.dtype.size
  return crossing


def _short(device: str) -> str:
  """'/job:localhost/replica:0/task:0/device:CPU:1' or '/cpu:1' -> 'CPU:1'."""
  spec = tf.DeviceSpec.from_string(device)
  return f"{spec.device_type}:{spec.device_index}"
