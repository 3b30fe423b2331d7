"""Model parallelism by blocks: a model's layers, in blocks, on different devices.

Each device holds only its block's variables and runs only its block's ops;
activations move between devices. With micro-batches, the blocks work on
different parts of a batch at once (GPipe's schedule). The devices are
`tfdist.devices`'s business: logical CPUs stand in for GPUs here.

Example:

    >>> model = place_layers(trained_sequential, ["/cpu:0", "/cpu:1"], micro_batches=4)
    >>> model.placement()
    {'/cpu:0': ['dense'], '/cpu:1': ['dense_1']}
"""

from typing import TYPE_CHECKING, Dict, List, Sequence

import tensorflow as tf

from tfdist import _keras_support as keras_support

if TYPE_CHECKING:  # Annotations only: Keras 3 alone has no tf_keras.
  import tf_keras


def split_layers(num_layers: int, num_devices: int) -> List[range]:
  """Consecutive, near-equal blocks of layer indices, one per device.

  >>> split_layers(5, 2)
  [range(0, 3), range(3, 5)]
  """
  if num_devices < 1 or num_layers < num_devices:
    raise ValueError(
        f"Need at least one layer per device: {num_layers} layer(s) on "
        f"{num_devices} device(s). Use fewer devices. "
        f"Received: num_layers={num_layers}, num_devices={num_devices}")
  base, extra = divmod(num_layers, num_devices)
  blocks, start = [], 0
  for i in range(num_devices):
    size = base + (1 if i < extra else 0)
    blocks.append(range(start, start + size))
    start += size
  return blocks


class PlacedSequential(keras_support.tf_keras_base("Model", "tfdist.placement.PlacedSequential")):
  """A sequential model whose consecutive blocks of layers live on different devices.

  This is model parallelism: each device holds only its block's variables and
  runs only its block's ops, and activations move between devices. Without
  pipelining, one device computes while the others wait. With
  `micro_batches=m`, each batch is split into m parts that flow through the
  blocks one after another, so inside a `tf.function` device 0 already works
  on part 2 while device 1 works on part 1 (GPipe's schedule; the idle share
  falls from (k-1)/k to (k-1)/(m+k-1) for k devices). Each block computes
  its gradients on its own device too, so between the blocks only
  activations and their gradients cross. The gradients still go where the
  optimizer updates: a tf_keras optimizer in `fit` runs its updates on the
  first device, so each block's gradients go there and the new weights back
  (a custom step avoids it by updating each variable under its device); with
  micro-batches, each part's gradients go to the device that sums them.

  Example:

      >>> model = PlacedSequential(
      ...     [keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)],
      ...     devices=["/cpu:0", "/cpu:1"])
      >>> model.placement()
      {'/cpu:0': ['dense'], '/cpu:1': ['dense_1']}
  """

  def __init__(self, layers: Sequence["tf_keras.layers.Layer"], devices: Sequence[str],
               *, micro_batches: int = 1, **kwargs):
    super().__init__(**kwargs)
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) \
        or micro_batches < 1:
      raise ValueError(f"`micro_batches` must be an integer >= 1. Received: {micro_batches!r}")
    self.micro_batches = micro_batches
    built = [layer.name for layer in layers if layer.built]
    if built:
      raise ValueError(
          "PlacedSequential needs unbuilt layers: a built layer's variables already "
          "live on some device. Use place_layers(model, devices), which copies them. "
          f"Received: built layers {built}")
    self.placed_layers = list(layers)
    self.devices = list(devices)
    self._blocks = split_layers(len(self.placed_layers), len(self.devices))

  def placement(self) -> Dict[str, List[str]]:
    """Device -> names of the layers placed on it."""
    return {device: [self.placed_layers[i].name for i in block]
            for device, block in zip(self.devices, self._blocks)}

  def build(self, input_shape):
    # Build each layer under its device, so its variables are created there.
    shape = tf.TensorShape(input_shape)
    for device, block in zip(self.devices, self._blocks):
      with tf.device(device):
        for i in block:
          layer = self.placed_layers[i]
          layer.build(shape)
          shape = tf.TensorShape(layer.compute_output_shape(shape))
    super().build(input_shape)

  def call(self, inputs, training=None):
    if self.micro_batches == 1:
      return self._forward(inputs, training)
    # Near-equal parts that work for any batch size, static or not.
    size = tf.shape(inputs)[0]
    base = size // self.micro_batches
    sizes = tf.concat([tf.fill([self.micro_batches - 1], base),
                       [size - base * (self.micro_batches - 1)]], axis=0)
    parts = tf.split(inputs, sizes, num=self.micro_batches)
    return tf.concat([self._forward(part, training) for part in parts], axis=0)

  def _forward(self, x, training):
    for device, block in zip(self.devices, self._blocks):
      x = _block_on(device, [self.placed_layers[i] for i in block], x, training)
    return x


def _block_on(device: str, layers, x, training):
  """The layers applied to `x` on `device`, forward and backward.

  A gradient tape runs backward ops where `tape.gradient` is called, not where
  their forward ops ran (tensorflow/tensorflow#33688): Keras's `fit` would
  compute every block's gradients on the first device, with each block's
  weights sent there every step. Here the block's own tape computes them on its
  device: between blocks only activations and their gradients cross (the
  gradients still go where the optimizer updates; see `PlacedSequential`).
  """

  @tf.custom_gradient
  def block(inputs):
    # Persistent: an outer tape may ask for gradients more than once.
    with tf.device(device), tf.GradientTape(persistent=True) as tape:
      tape.watch(inputs)
      outputs = inputs
      for layer in layers:
        outputs = layer(outputs, training=training)

    def grad(upstream, variables=None):
      variables = list(variables or [])
      with tf.device(device):
        grads = tape.gradient(outputs, [inputs] + variables, output_gradients=upstream)
      return (grads[0], grads[1:]) if variables else grads[0]
    return outputs, grad

  with tf.device(device):
    return block(x)


def place_layers(model: "tf_keras.Sequential", devices: Sequence[str], *,
                 micro_batches: int = 1) -> PlacedSequential:
  """Model parallelism for a `Sequential`: its layers, in blocks, on `devices`.

  The layers are rebuilt from their configs under their devices; if `model` is
  built, its weights are copied in, so a trained model keeps what it learned.

  Raises:
    TypeError: `model` is not a tf_keras Sequential.
    ValueError: fewer layers than devices.
  """
  tf_keras = keras_support.require_tf_keras("tfdist.placement.place_layers")
  if not isinstance(model, tf_keras.Sequential):
    raise TypeError(
        "place_layers takes a tfdist.keras.Sequential model. "
        f"Received: {type(model).__module__}.{type(model).__name__}")
  layers = [type(layer).from_config(layer.get_config()) for layer in model.layers]
  placed = PlacedSequential(layers, devices, micro_batches=micro_batches,
                            name=f"{model.name}_placed")
  if model.built:
    placed.build(model.input_shape)
    placed.set_weights(model.get_weights())
  return placed
