"""One fully connected layer over several devices: its kernel in slices, one per device.

A `Dense` layer computes `activation(x @ kernel + bias)`. It can be split two ways:

- by output columns: device i holds `kernel[:, cols_i]` and `bias[cols_i]` and
  computes its slice of the outputs; the slices are concatenated. Every device
  reads the whole input.
- by input rows: device i holds `kernel[rows_i, :]` and computes
  `x[:, rows_i] @ kernel[rows_i, :]`; the partial products are summed, then the
  bias and activation are applied. Each device reads only its slice of the input.

Either way each device holds 1/n of the weights and does 1/n of the multiply,
and what crosses between devices is activations (batch x width), not weights:
for a wide layer and a small batch, far fewer bytes than data parallelism's
all-reduce of every gradient. Notebook 16 counts both. `SplitDense` is the
tf_keras layer, `Keras3SplitDense` the same for Keras 3; both share the
functions below.

Example:

    >>> from tfdist import keras, placement
    >>> model = keras.Sequential([
    ...     keras.Input((64,)),
    ...     placement.SplitDense(256, ["/cpu:0", "/cpu:1"], split="columns", activation="relu"),
    ...     placement.SplitDense(10, ["/cpu:0", "/cpu:1"], split="rows")])
    >>> model.compile(optimizer="sgd", loss="mse")
"""

from typing import List, Sequence

import numpy as np
import tensorflow as tf

from tfdist import _keras_support as keras_support

SPLITS = ("columns", "rows")


def _slices(size: int, parts: int) -> List[slice]:
  """Consecutive, near-equal slices of range(size), one per part (larger ones first)."""
  base, extra = divmod(size, parts)
  slices, start = [], 0
  for i in range(parts):
    stop = start + base + (1 if i < extra else 0)
    slices.append(slice(start, stop))
    start = stop
  return slices


class SplitDenseMethods:
  """What `SplitDense` and `Keras3SplitDense` share: each Keras's class sets `_keras`.

  A mixin before the Keras layer class: `_keras` is the Keras package the layer
  belongs to (its activations, initializers and Dense), `_dense_name` how its
  errors name that Dense.
  """

  _keras = None
  _dense_name = ""

  def __init__(self, units: int, devices: Sequence[str], *, split: str = "columns",
               activation=None, use_bias: bool = True,
               kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
    super().__init__(**kwargs)
    _configure(self, self._keras, units, devices, split, activation, use_bias,
               kernel_initializer, bias_initializer)
    self._slices = []

  def build(self, input_shape):
    """Makes each slice of the kernel (and of the bias) on its device."""
    self._slices = _build(self, input_shape)
    super().build(input_shape)

  def call(self, inputs):
    """Each slice's multiply on its device; the concatenation or sum on the first."""
    return _call(self, self._slices, inputs)

  def dense_weights(self) -> List[np.ndarray]:
    """[kernel, bias] (or [kernel]) as the unsplit Dense's `get_weights()` would give them."""
    return _dense_weights(self)

  def set_dense_weights(self, weights: Sequence[np.ndarray]) -> None:
    """Takes an unsplit Dense's [kernel, bias] (or [kernel]) and gives each device its slice."""
    _set_dense_weights(self, self._slices, weights)

  @classmethod
  def from_dense(cls, layer, devices: Sequence[str], *, split: str = "columns"):
    """The same layer split over `devices`; a built `layer`'s weights are copied in.

    Raises:
      TypeError: `layer` is not a Dense of the same Keras.
      TfKerasNotInstalled: `SplitDense` where tf_keras is not installed.
    """
    if cls._keras is None:  # SplitDense where tf_keras is not installed.
      raise keras_support.tf_keras_missing(f"tfdist.placement.{cls.__name__}")
    return _from_dense(cls, cls._keras, cls._dense_name, layer, devices, split)

  def get_config(self):
    return _config(self._keras, self, super().get_config())


# Keras 3 alone: the module imports (Keras3SplitDense shares it); SplitDense says what to install.
class SplitDense(SplitDenseMethods, keras_support.tf_keras_base("layers.Layer",
                                                                "tfdist.placement.SplitDense")):
  """A `Dense` layer whose kernel is split over `devices`, by output columns or input rows.

  It computes what `keras.layers.Dense(units, activation, use_bias)` computes,
  to float32's last bits (the row split sums its partial products in another
  order), and trains under `fit` like any layer. Each device holds its slice of
  the kernel (and of the bias, split by columns; the whole bias on the first
  device, split by rows) and runs that slice's multiply; the concatenation or
  sum, and the activation, run on the first device. The kernel is drawn once
  for the whole layer and then sliced, so a split layer starts from the same
  distribution as the unsplit one.

  Args:
    units: the layer's outputs, as for Dense.
    devices: one device per slice, e.g. ["/cpu:0", "/cpu:1"] (logical devices
      from `tfdist.devices.split_physical_device` stand in for GPUs).
    split: "columns" (concatenate the output slices) or "rows" (sum the partial
      products).
    activation: as for Dense, applied after the concatenation or the sum.
    use_bias: as for Dense.
    kernel_initializer: as for Dense, drawn for the whole kernel, then sliced.
    bias_initializer: as for Dense.

  This is a tf_keras layer (`tfdist.keras`); for a Keras 3 model use
  `Keras3SplitDense`, the same layer. Under a data-parallel strategy
  (MirroredStrategy over the same devices) it trains as the unsplit layer
  does, but each replica then holds every slice: the split saves no memory
  there, only under a strategy with one device per worker, or none.

  Example:

      >>> layer = SplitDense(4096, ["/cpu:0", "/cpu:1"], split="columns")
      >>> layer.build((None, 1024))
      >>> [v.device[-5:] for v in layer.kernels]
      ['CPU:0', 'CPU:1']
      >>> split = SplitDense.from_dense(trained_dense, ["/cpu:0", "/cpu:1"], split="rows")
  """

  _keras = keras_support.optional_tf_keras()
  _dense_name = "tfdist.keras.layers.Dense"

  def __call__(self, inputs, *args, **kwargs):
    # tf_keras would fail on it with "'tuple' object has no attribute 'rank'".
    if _is_keras3(inputs):
      raise TypeError(
          "SplitDense is a tf_keras layer (tfdist.keras) and cannot take a Keras 3 tensor; in a "
          "Keras 3 model use tfdist.placement.Keras3SplitDense, the same layer. Received: "
          f"{type(inputs).__module__}.{type(inputs).__name__}")
    return super().__call__(inputs, *args, **kwargs)

  def compute_output_shape(self, input_shape):
    return tf.TensorShape(input_shape)[:-1].concatenate([self.units])


def _is_keras3(value) -> bool:
  return type(value).__module__.startswith("keras.")


def _configure(layer, keras_module, units, devices, split, activation, use_bias,
               kernel_initializer, bias_initializer):
  """Checks and keeps a split layer's arguments (either Keras; `keras_module` is its package)."""
  if isinstance(units, bool) or not isinstance(units, (int, np.integer)) or units < 1:
    raise ValueError(f"`units` must be an integer >= 1. Received: units={units!r}")
  if isinstance(devices, str) or not devices or \
      not all(isinstance(d, str) for d in devices):
    raise ValueError("`devices` must be a non-empty list of device names, e.g. "
                     f"['/cpu:0', '/cpu:1']. Received: devices={devices!r}")
  if split not in SPLITS:
    raise ValueError(f"`split` must be one of {list(SPLITS)}. Received: split={split!r}")
  if split == "columns" and units < len(devices):
    raise ValueError(
        f"Split by columns needs at least one output per device: {units} unit(s) on "
        f"{len(devices)} device(s). Use fewer devices or split='rows'. "
        f"Received: units={units}, devices={list(devices)}")
  layer.units, layer.devices, layer.split = int(units), list(devices), split
  layer.activation = keras_module.activations.get(activation)
  layer.use_bias = use_bias
  layer.kernel_initializer = keras_module.initializers.get(kernel_initializer)
  layer.bias_initializer = keras_module.initializers.get(bias_initializer)
  layer.kernels, layer.biases = [], []


def _build(layer, input_shape) -> List[slice]:
  """Makes the kernel's slices, each on its device (and the bias); returns the slices."""
  input_shape = tf.TensorShape(input_shape)
  if input_shape.rank is None or input_shape[-1] is None:
    raise ValueError("SplitDense needs the inputs' last dimension to split the kernel; "
                     "give the model an input with it, e.g. keras.Input((features,)). "
                     f"Received: input_shape={input_shape}")
  inputs = int(input_shape[-1])
  parts = len(layer.devices)
  if layer.split == "rows" and inputs < parts:
    raise ValueError(
        f"Split by rows needs at least one input per device: {inputs} input(s) on "
        f"{parts} device(s). Use fewer devices or split='columns'. "
        f"Received: input_shape={input_shape}, devices={layer.devices}")
  full = {}

  # Drawn once for the whole (inputs, units) kernel and sliced: Glorot's
  # limits depend on the whole shape, not a slice's.
  def kernel_slice(rows, cols):
    def initializer(shape, dtype=None, **_):
      if "kernel" not in full:
        full["kernel"] = layer.kernel_initializer((inputs, layer.units), dtype=dtype)
      return full["kernel"][rows, cols]
    return initializer

  slices = _slices(layer.units if layer.split == "columns" else inputs, parts)
  for i, (device, part) in enumerate(zip(layer.devices, slices)):
    rows, cols = (slice(None), part) if layer.split == "columns" else (part, slice(None))
    shape = (inputs, part.stop - part.start) if layer.split == "columns" \
        else (part.stop - part.start, layer.units)
    with tf.device(device):
      layer.kernels.append(layer.add_weight(
          name=f"kernel_{i}", shape=shape, initializer=kernel_slice(rows, cols)))
      if layer.use_bias and layer.split == "columns":
        layer.biases.append(layer.add_weight(
            name=f"bias_{i}", shape=(shape[1],), initializer=layer.bias_initializer))
  if layer.use_bias and layer.split == "rows":
    with tf.device(layer.devices[0]):
      layer.biases.append(layer.add_weight(
          name="bias", shape=(layer.units,), initializer=layer.bias_initializer))
  return slices


def _call(layer, slices, inputs):
  """Each slice's multiply on its device; the concatenation or sum on the first."""
  # Rank > 2 (sequences, images): the last axis is contracted, as Dense does.
  rows = tf.reshape(inputs, [-1, tf.shape(inputs)[-1]]) if inputs.shape.rank != 2 else inputs
  if layer.split == "columns":
    outputs = [_affine_on(device, rows, kernel, layer.biases[i] if layer.use_bias else None)
               for i, (device, kernel) in enumerate(zip(layer.devices, layer.kernels))]
    with tf.device(layer.devices[0]):
      # After the concatenation: an activation such as softmax needs every column.
      y = tf.concat(outputs, axis=-1)
  else:
    with tf.device(layer.devices[0]):
      # Sliced where the input is, so each device receives only its rows.
      parts = tf.split(rows, [part.stop - part.start for part in slices], axis=-1)
    partials = [_affine_on(device, part, kernel, None)
                for device, part, kernel in zip(layer.devices, parts, layer.kernels)]
    with tf.device(layer.devices[0]):
      y = tf.add_n(partials)
      if layer.use_bias:
        y = y + layer.biases[0]
  with tf.device(layer.devices[0]):
    if inputs.shape.rank != 2:
      y = tf.reshape(y, tf.concat([tf.shape(inputs)[:-1], [layer.units]], axis=0))
    return layer.activation(y)


def _dense_weights(layer) -> List[np.ndarray]:
  axis = 1 if layer.split == "columns" else 0
  weights = [np.concatenate([k.numpy() for k in layer.kernels], axis=axis)]
  if layer.use_bias:
    weights.append(np.concatenate([b.numpy() for b in layer.biases]))
  return weights


def _set_dense_weights(layer, slices, weights: Sequence[np.ndarray]) -> None:
  expected = 2 if layer.use_bias else 1
  if not layer.built or len(weights) != expected:
    raise ValueError(
        f"set_dense_weights takes a built layer and {expected} array(s) ([kernel, bias] "
        f"of a Dense with use_bias={layer.use_bias}); build the layer first. "
        f"Received: {len(weights)} array(s), built={layer.built}")
  kernel = np.asarray(weights[0])
  for part, variable in zip(slices, layer.kernels):
    variable.assign(kernel[:, part] if layer.split == "columns" else kernel[part, :])
  if layer.use_bias:
    bias = np.asarray(weights[1])
    if layer.split == "columns":
      for part, variable in zip(slices, layer.biases):
        variable.assign(bias[part])
    else:
      layer.biases[0].assign(bias)


def _from_dense(cls, keras_module, expected, layer, devices, split):
  if not isinstance(layer, keras_module.layers.Dense):
    raise TypeError(f"{cls.__name__}.from_dense takes a {expected} layer. "
                    f"Received: {type(layer).__module__}.{type(layer).__name__}")
  config = layer.get_config()
  split_layer = cls(config["units"], devices, split=split, activation=config["activation"],
                    use_bias=config["use_bias"],
                    kernel_initializer=config["kernel_initializer"],
                    bias_initializer=config["bias_initializer"], name=f"{layer.name}_split")
  if layer.built:
    split_layer.build((None, int(layer.kernel.shape[0])))
    split_layer.set_dense_weights(layer.get_weights())
  return split_layer


def _config(k, layer, config):
  config.update(
      units=layer.units, devices=list(layer.devices), split=layer.split,
      activation=k.activations.serialize(layer.activation), use_bias=layer.use_bias,
      kernel_initializer=k.initializers.serialize(layer.kernel_initializer),
      bias_initializer=k.initializers.serialize(layer.bias_initializer))
  return config


def _affine_on(device, x, kernel, bias):
  """x @ kernel (+ bias) on `device`, forward and backward.

  A gradient tape places the backward ops of a `tf.device` block nowhere in
  particular (the default device runs them); here each slice's gradients are
  computed on its own device, as model parallelism means.
  """
  variables = [kernel] if bias is None else [kernel, bias]
  with tf.device(device):
    values = [tf.convert_to_tensor(v) for v in variables]

  @tf.custom_gradient
  def affine(x, *values):
    with tf.device(device):
      y = tf.matmul(x, values[0])
      if len(values) == 2:
        y = y + values[1]

    def grad(dy):
      with tf.device(device):
        grads = [tf.matmul(dy, values[0], transpose_b=True),
                 tf.matmul(x, dy, transpose_a=True)]
        if len(values) == 2:
          grads.append(tf.reduce_sum(dy, axis=0))
      return grads
    return y, grad
  with tf.device(device):  # and the identities custom_gradient wraps around it
    return affine(x, *values)
