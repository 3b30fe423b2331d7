"""Recipe: asynchronous training with parameter servers (ParameterServerStrategy).

As a real cluster (chief + 2 workers + 1 ps), every task running this same file:

    tfdist launch --chief --workers 2 --ps 1 -- python strategies/parameter_server.py

Or alone, with the whole cluster inside this one process; its servers then
listen on this machine's network (TensorFlow binds every interface), which
`network="host"` accepts:

    python strategies/parameter_server.py

Only the chief runs the training loop; on worker and ps tasks make_strategy()
serves until the job ends.
"""

import tfdist
from tfdist.data import digits

# Inside a cluster (TF_CONFIG, or a SLURM step) use it; alone, make one in-process.
alone = tfdist.ClusterSpec.from_env() is None
strategy = tfdist.make_strategy("parameter_server", in_process=alone,
                                network="host" if alone else "loopback")

import tensorflow as tf
from tfdist import keras

(x_train, y_train), (x_test, y_test) = digits.load_digits()
GLOBAL_BATCH = 64


def dataset_fn(input_context):
  # Runs on each worker: every worker shuffles its own copy of the data.
  ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
  return ds.shuffle(2048).repeat().batch(GLOBAL_BATCH).prefetch(2)


with strategy.scope():
  model = keras.Sequential([
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(16, 3, activation="relu"),
      keras.layers.Flatten(),
      keras.layers.Dense(10),
  ])
  model.compile(optimizer=keras.optimizers.Adam(2e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])

# Parameter-server training needs a DatasetCreator and a fixed number of steps.
model.fit(keras.utils.experimental.DatasetCreator(dataset_fn), epochs=5,
          steps_per_epoch=len(x_train) // GLOBAL_BATCH, verbose=2)
evaluator = keras.models.clone_model(model)  # A local copy to evaluate on the chief.
evaluator.set_weights(model.get_weights())
evaluator.compile(metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
loss, accuracy = evaluator.evaluate(x_test, y_test, verbose=0)
print(f"test accuracy: {accuracy:.3f}")
