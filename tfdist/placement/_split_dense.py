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
all-reduce of every gradient. Notebook 16 counts both.

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
import tf_keras

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


class SplitDense(tf_keras.layers.Layer):
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

  Example:

      >>> layer = SplitDense(4096, ["/cpu:0", "/cpu:1"], split="columns")
      >>> layer.build((None, 1024))
      >>> [v.device[-5:] for v in layer.kernels]
      ['CPU:0', 'CPU:1']
      >>> split = SplitDense.from_dense(trained_dense, ["/cpu:0", "/cpu:1"], split="rows")
  """

  def __init__(self, units: int, devices: Sequence[str], *, split: str = "columns",
               activation=None, use_bias: bool = True,
               kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
    super().__init__(**kwargs)
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
    self.units, self.devices, self.split = int(units), list(devices), split
    self.activation = tf_keras.activations.get(activation)
    self.use_bias = use_bias
    self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)
    self.bias_initializer = tf_keras.initializers.get(bias_initializer)
    self.kernels, self.biases, self._slices = [], [], []

  def build(self, input_shape):
    input_shape = tf.TensorShape(input_shape)
    if input_shape.rank is None or input_shape[-1] is None:
      raise ValueError("SplitDense needs the inputs' last dimension to split the kernel; "
                       "give the model an input with it, e.g. keras.Input((features,)). "
                       f"Received: input_shape={input_shape}")
    inputs = int(input_shape[-1])
    parts = len(self.devices)
    if self.split == "rows" and inputs < parts:
      raise ValueError(
          f"Split by rows needs at least one input per device: {inputs} input(s) on "
          f"{parts} device(s). Use fewer devices or split='columns'. "
          f"Received: input_shape={input_shape}, devices={self.devices}")
    full = {}

    # Drawn once for the whole (inputs, units) kernel and sliced: Glorot's
    # limits depend on the whole shape, not a slice's.
    def kernel_slice(rows, cols):
      def initializer(shape, dtype=None, **_):
        if "kernel" not in full:
          full["kernel"] = self.kernel_initializer((inputs, self.units), dtype=dtype)
        return full["kernel"][rows, cols]
      return initializer

    self._slices = _slices(self.units if self.split == "columns" else inputs, parts)
    for i, (device, part) in enumerate(zip(self.devices, self._slices)):
      rows, cols = (slice(None), part) if self.split == "columns" else (part, slice(None))
      shape = (inputs, part.stop - part.start) if self.split == "columns" \
          else (part.stop - part.start, self.units)
      with tf.device(device):
        self.kernels.append(self.add_weight(
            f"kernel_{i}", shape=shape, initializer=kernel_slice(rows, cols)))
        if self.use_bias and self.split == "columns":
          self.biases.append(self.add_weight(
              f"bias_{i}", shape=(shape[1],), initializer=self.bias_initializer))
    if self.use_bias and self.split == "rows":
      with tf.device(self.devices[0]):
        self.biases.append(self.add_weight(
            "bias", shape=(self.units,), initializer=self.bias_initializer))
    super().build(input_shape)

  def call(self, inputs):
    # Rank > 2 (sequences, images): the last axis is contracted, as Dense does.
    rows = tf.reshape(inputs, [-1, tf.shape(inputs)[-1]]) if inputs.shape.rank != 2 else inputs
    if self.split == "columns":
      outputs = [_affine_on(device, rows, kernel, self.biases[i] if self.use_bias else None)
                 for i, (device, kernel) in enumerate(zip(self.devices, self.kernels))]
      with tf.device(self.devices[0]):
        # After the concatenation: an activation such as softmax needs every column.
        y = tf.concat(outputs, axis=-1)
    else:
      with tf.device(self.devices[0]):
        # Sliced where the input is, so each device receives only its rows.
        parts = tf.split(rows, [part.stop - part.start for part in self._slices], axis=-1)
      partials = [_affine_on(device, part, kernel, None)
                  for device, part, kernel in zip(self.devices, parts, self.kernels)]
      with tf.device(self.devices[0]):
        y = tf.add_n(partials)
        if self.use_bias:
          y = y + self.biases[0]
    with tf.device(self.devices[0]):
      if inputs.shape.rank != 2:
        y = tf.reshape(y, tf.concat([tf.shape(inputs)[:-1], [self.units]], axis=0))
      return self.activation(y)

  def compute_output_shape(self, input_shape):
    return tf.TensorShape(input_shape)[:-1].concatenate([self.units])

  def dense_weights(self) -> List[np.ndarray]:
    """[kernel, bias] (or [kernel]) as the unsplit Dense's `get_weights()` would give them."""
    axis = 1 if self.split == "columns" else 0
    weights = [np.concatenate([k.numpy() for k in self.kernels], axis=axis)]
    if self.use_bias:
      weights.append(np.concatenate([b.numpy() for b in self.biases]))
    return weights

  def set_dense_weights(self, weights: Sequence[np.ndarray]) -> None:
    """Takes an unsplit Dense's [kernel, bias] (or [kernel]) and gives each device its slice."""
    expected = 2 if self.use_bias else 1
    if not self.built or len(weights) != expected:
      raise ValueError(
          f"set_dense_weights takes a built layer and {expected} array(s) ([kernel, bias] "
          f"of a Dense with use_bias={self.use_bias}); build the layer first. "
          f"Received: {len(weights)} array(s), built={self.built}")
    kernel = np.asarray(weights[0])
    for part, variable in zip(self._slices, self.kernels):
      variable.assign(kernel[:, part] if self.split == "columns" else kernel[part, :])
    if self.use_bias:
      bias = np.asarray(weights[1])
      if self.split == "columns":
        for part, variable in zip(self._slices, self.biases):
          variable.assign(bias[part])
      else:
        self.biases[0].assign(bias)

  @classmethod
  def from_dense(cls, layer: tf_keras.layers.Dense, devices: Sequence[str], *,
                 split: str = "columns") -> "SplitDense":
    """The same layer split over `devices`; a built `layer`'s weights are copied in.

    Raises:
      TypeError: `layer` is not a tf_keras Dense.
    """
    if not isinstance(layer, tf_keras.layers.Dense):
      raise TypeError("SplitDense.from_dense takes a tfdist.keras.layers.Dense layer. "
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

  def get_config(self):
    config = super().get_config()
    config.update(
        units=self.units, devices=list(self.devices), split=self.split,
        activation=tf_keras.activations.serialize(self.activation), use_bias=self.use_bias,
        kernel_initializer=tf_keras.initializers.serialize(self.kernel_initializer),
        bias_initializer=tf_keras.initializers.serialize(self.bias_initializer))
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
