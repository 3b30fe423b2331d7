"""How much memory one replica of a model needs: weights, gradients, optimizer slots, activations.

Data parallelism puts a whole copy on every device, so a model fits a device
only if all four fit: the weights, a gradient for each trainable weight, the
optimizer's slots (Adam keeps two per weight) and the activations that the
backward pass reads, which grow with the batch. Counted from the model, not
measured: TensorFlow's peak (`peak_bytes`) is the whole process's, every model
and batch it has held so far, and its allocator adds workspace on top of this count.

Example:

    >>> footprint(model, batch_size=64).total / 2**20   # MB per replica
"""

import dataclasses
import math
from typing import Optional

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Footprint:
  """Bytes one replica holds during a training step."""

  weights: int
  gradients: int
  slots: int
  activations: Optional[int]  # None: the model's layers have no symbolic outputs.

  @property
  def total(self) -> int:
    return self.weights + self.gradients + self.slots + (self.activations or 0)

  def at_batch(self, batch_size: int, counted_at: int) -> "Footprint":
    """The same model at another batch: activations grow with it, the rest does not."""
    if self.activations is None:
      return self
    return dataclasses.replace(self, activations=self.activations * batch_size // counted_at)

  def devices_needed(self, memory_per_device: float) -> int:
    """Devices the model needs when its layers are split evenly over them (model parallelism)."""
    if memory_per_device <= 0:
      raise ValueError(f"`memory_per_device` must be > 0 bytes. Received: {memory_per_device}")
    return max(1, math.ceil(self.total / memory_per_device))

  def as_dict(self) -> dict:
    """The bytes by kind, as JSON-ready data."""
    return dataclasses.asdict(self)


def _bytes(variables) -> int:
  return sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in variables)


def _layers(model):
  for layer in model.layers:
    if hasattr(layer, "layers"):  # A nested model: its own layers hold the outputs.
      yield from _layers(layer)
    else:
      yield layer


def _activation_bytes(model, batch_size: int) -> Optional[int]:
  """The layers' outputs for one batch: what the backward pass keeps."""
  total = 0
  for layer in _layers(model):
    try:
      outputs = tf.nest.flatten(layer.output)
    except (AttributeError, ValueError):  # A subclassed model's layers have none.
      return None
    for output in outputs:
      elements = int(np.prod([d for d in output.shape[1:] if d is not None]))
      total += batch_size * elements * tf.as_dtype(output.dtype).size
  return total


def footprint(model, batch_size: int) -> Footprint:
  """Counts a built, compiled model's bytes per replica at `batch_size` examples per replica.

  Builds the optimizer's slots if it has none yet (no step is run).
  """
  if model.optimizer is None:
    raise ValueError("Counting optimizer slots needs a compiled model; call model.compile() "
                     "first. Received: a model with optimizer=None")
  optimizer = model.optimizer
  if hasattr(optimizer, "build"):
    optimizer.build(model.trainable_variables)
  variables = optimizer.variables
  variables = variables() if callable(variables) else variables
  # Scalars (iterations, learning rate) are not slots; counting them is harmless.
  return Footprint(weights=_bytes(model.weights), gradients=_bytes(model.trainable_variables),
                   slots=_bytes(variables), activations=_activation_bytes(model, batch_size))


def peak_bytes(device: str = "GPU:0") -> Optional[int]:
  """The peak memory TensorFlow measured on `device` so far, or None where it reports none.

  None for a device this process does not have, and for a CPU before anything
  large was allocated there (TensorFlow reports 0 until then), or where
  TensorFlow keeps no CPU allocator stats: with oneDNN off, its default on x86
  CPUs without AVX-512 (`TF_ENABLE_ONEDNN_OPTS=1` turns it on).
  """
  try:
    peak = int(tf.config.experimental.get_memory_info(device)["peak"])
  except (ValueError, tf.errors.InvalidArgumentError):
    return None
  return peak or None
