"""In-process parameter-server training: fit, evaluate, predict and variable sharding.

Prints one JSON line starting with RESULT. Usage: python pss_train.py [num_ps_shards]
"""

import json
import sys

import tfdist

num_ps_shards = int(sys.argv[1]) if len(sys.argv) > 1 else None
spec = tfdist.ClusterSpec.local(workers=2, ps=2, chief=True)
strategy = tfdist.make_strategy("parameter_server", cluster=spec, in_process=True, network="host",
                                num_ps_shards=num_ps_shards)

import numpy as np
import tensorflow as tf
from tfdist import keras

rng = np.random.default_rng(0)
x = rng.random((256, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")).astype("float32")


def dataset_fn(input_context):
  return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)


with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
history = model.fit(keras.utils.experimental.DatasetCreator(dataset_fn), epochs=5,
                    steps_per_epoch=20, verbose=0)
# Under PSS, evaluate runs on the workers as closures: give it a repeated dataset and steps.
evaluation = model.evaluate(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64), steps=4,
                            verbose=0, return_dict=True)
predictions = model.predict(tf.data.Dataset.from_tensor_slices(x).batch(64), verbose=0)
kernel = model.layers[0].kernel
shards = getattr(kernel, "variables", [kernel])
print("RESULT " + json.dumps({
    "losses": history.history["loss"],
    "eval_loss": evaluation["loss"],
    "predictions_shape": list(predictions.shape),
    "prediction_mse": float(np.mean((predictions - y) ** 2)),
    "kernel_shards": [v.device for v in shards],
    # TF keeps one coordinator per strategy; Keras used this same one.
    "one_coordinator": strategy.coordinator is
        tf.distribute.experimental.coordinator.ClusterCoordinator(strategy),
}), flush=True)
