"""What a step moves between devices: every tensor one of its ops reads from another device.

Counted in the graph a `tf.function` traces, not timed: the answer to "what
does this placement cost in copies?" before the step ever runs, for placements
of a model over devices (notebooks 14 and 16 compare them with it).

Example:

    >>> with tf.device("/cpu:0"):
    ...   x = tf.random.normal((512, 512))
    >>> @tf.function
    ... def step():
    ...   with tf.device("/cpu:1"):
    ...     return tf.nn.relu(tf.matmul(x, x))
    >>> sorted(placement.bytes_crossing(step).values())   # x there, the result back
    [1048576, 1048576]
"""

import logging
from typing import Dict, Optional, Tuple

import tensorflow as tf

logger = logging.getLogger(__name__)

# Ops that read only a tensor's shape: asked for no device, TensorFlow's placer runs
# them beside their input.
_METADATA_OPS = ("Shape", "ShapeN", "Size", "Rank")


def bytes_crossing(step, *args,
                   default_device: Optional[str] = None) -> Dict[Tuple[str, str], int]:
  """{(tensor, receiving device): bytes} for each tensor that `step` reads across devices.

  Where each op runs, as TensorFlow's placer decides it: an op that reads a
  variable runs where the variable lives, whatever device it asks for; else
  an op colocated with another runs with it; else on the device it asks for;
  else on `default_device`. So a gradient tape's backward ops run where
  `tape.gradient` was called, not with their forward ops
  (tensorflow/tensorflow#33688): a model placed with `tf.device` alone sends
  its weights to that device and their gradients back, and the count shows
  it. What the step returns goes to `default_device` (a function's results
  come back there). A captured tensor comes from the device it lives on; the
  step's arguments from `default_device`. A variable's handle is not counted,
  the values read through it are; a tensor read by several ops on the other
  device counts once; an op that reads only a shape (`Shape`, `Size`...) and
  asks for no device runs beside its input.

  Not counted: ops inside the bodies of a `tf.cond`, a loop or a nested
  `tf.function` (the call counts as one op, its inputs where it runs); a
  warning names them. Strings count 8 bytes an element (their lengths are not
  in the graph). Devices of other tasks count as other devices.

  Example:

      >>> crossing = placement.bytes_crossing(train_step, batch)
      >>> sum(crossing.values()) / 2**20   # MiB a step

  Args:
    step: a `tf.function`; traced (not run) for `args`.
    *args: its arguments, as for `step.get_concrete_function`.
    default_device: where TensorFlow runs an op that asks for no device;
      None: the first GPU if there is one, else the first CPU.

  Returns:
    {(tensor name, device): bytes}, the device as "CPU:1", or
    "/job:worker/task:1/CPU:0" for another task's; empty when nothing crosses.

  Raises:
    TypeError: `step` is not a `tf.function`.
    ValueError: a tensor that crosses has an unknown shape.
  """
  if not hasattr(step, "get_concrete_function"):
    raise TypeError("bytes_crossing counts in a traced graph: pass a tf.function (decorate "
                    f"the step with @tf.function). Received: {step!r}")
  if default_device is None:
    default_device = "/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0"
  graph = step.get_concrete_function(*args).graph
  # A captured tensor or variable comes from where it lives, whatever device scope
  # its placeholder was made in (captures are made at their first use).
  captured = {inside.op.name: outside.device for outside, inside in graph.captures
              if getattr(outside, "device", "")}
  variable_device = {inside.name: captured[inside.op.name] for outside, inside in graph.captures
                     if outside.dtype == tf.resource and inside.op.name in captured}
  default = _short(default_device)
  placed = {}  # op name -> device: each op is placed once, however many ops read it

  def where(op) -> str:
    if op.name not in placed:
      placed[op.name] = place(op)
    return placed[op.name]

  def place(op) -> str:
    if op.name in captured:
      return _short(captured[op.name])
    # An op that reads a variable is colocated with it (a request is overridden).
    variable = next((variable_device[t.name] for t in op.inputs if t.name in variable_device),
                    None)
    if variable:
      return _short(variable)
    for group in op.colocation_groups():
      name = group.decode().partition("loc:@")[2]
      if name != op.name:
        return where(graph.get_operation_by_name(name))
    if op.device:
      return _short(op.device)
    if op.type in _METADATA_OPS and op.inputs:
      return where(op.inputs[0].op)
    return default

  crossing, calls = {}, set()
  for op in graph.get_operations():
    if any(value.HasField("func") for value in op.node_def.attr.values()):
      calls.add(op.type)  # If, While, PartitionedCall...: a body of its own.
    for tensor in op.inputs:
      if tensor.dtype != tf.resource and where(tensor.op) != where(op):
        if tensor.shape.num_elements() is None:
          raise ValueError(f"bytes_crossing: {tensor.name} crosses to {where(op)} with an "
                           "unknown shape; trace the step with fixed shapes (example arguments, "
                           "an input_signature, or a dataset batched with drop_remainder=True). "
                           f"Received: shape {tensor.shape}")
        crossing[(tensor.name, where(op))] = tensor.shape.num_elements() * tensor.dtype.size
  if calls:
    logger.warning("bytes_crossing: the step calls functions (%s); what their bodies move "
                   "between devices is not counted", ", ".join(sorted(calls)))
  return crossing


def _short(device: str) -> str:
  """'/job:localhost/replica:0/task:0/device:CPU:1' or '/cpu:1' -> 'CPU:1'; other jobs kept."""
  spec = tf.DeviceSpec.from_string(device)
  name = f"{spec.device_type}:{spec.device_index or 0}"
  if spec.job in (None, "localhost"):
    return name
  return f"/job:{spec.job}/task:{spec.task or 0}/{name}"
