"""Models for `tfdist verify --model`: one that trains as on one device, one that does not."""

import tensorflow as tf

from tfdist import keras


class ReplicaShift(keras.layers.Layer):
  """Adds 0.1 x the replica's id: a layer whose output depends on the replica it runs on."""

  def call(self, inputs):
    context = tf.distribute.get_replica_context()
    replica = 0 if context is None else context.replica_id_in_sync_group
    return inputs + 0.1 * tf.cast(replica, inputs.dtype)


def _compiled(layers):
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                            *layers, keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
  return model


def model_fn():
  return _compiled([])


def replica_dependent_model_fn():
  return _compiled([ReplicaShift()])
