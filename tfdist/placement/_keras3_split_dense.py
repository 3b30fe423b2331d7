"""`Keras3SplitDense`: `SplitDense` for a Keras 3 model, one class per Keras.

The layer's work is `SplitDenseMethods` (`_split_dense.py`); this class only
names its Keras and its output shape in Keras 3's terms.
"""

import keras  # Keras 3

from tfdist.placement._split_dense import SplitDenseMethods


class Keras3SplitDense(SplitDenseMethods, keras.layers.Layer):
  """`SplitDense` for a Keras 3 model: the same layer, split the same ways.

  Args, methods and behaviour are `SplitDense`'s; `from_dense` takes a Keras 3
  `keras.layers.Dense`. It trains under `fit` on one device and under
  MirroredStrategy (each replica then holds every slice, as for `SplitDense`).

  Example:

      >>> import keras
      >>> model = keras.Sequential([
      ...     keras.Input((64,)),
      ...     placement.Keras3SplitDense(256, ["/cpu:0", "/cpu:1"], activation="relu"),
      ...     placement.Keras3SplitDense(10, ["/cpu:0", "/cpu:1"], split="rows")])
  """

  _keras = keras
  _dense_name = "keras.layers.Dense (Keras 3)"

  def compute_output_shape(self, input_shape):
    """The input's shape with its last axis replaced by `units`, as for Dense."""
    return tuple(input_shape)[:-1] + (self.units,)
