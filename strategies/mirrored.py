"""Recipe: synchronous training on every device of one machine (MirroredStrategy).

    python strategies/mirrored.py

Copy this file and swap in your model and data. With no GPU, the CPU is split
into two logical devices so that two replicas really run.
"""

import tfdist
from tfdist.data import digits

tfdist.devices.split_physical_device(2)  # Only for CPU-only machines; before any TF op.

import tensorflow as tf
from tfdist import keras

strategy = tfdist.make_strategy("mirrored")
print(f"replicas: {strategy.num_replicas_in_sync}")

(x_train, y_train), (x_test, y_test) = digits.load_digits()
global_batch = tfdist.global_batch_size(32, strategy)  # 32 examples per replica.
train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2048).batch(global_batch)

with strategy.scope():
  model = keras.Sequential([
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(16, 3, activation="relu"),
      keras.layers.Flatten(),
      keras.layers.Dense(10),
  ])
  model.compile(
      optimizer=keras.optimizers.Adam(tfdist.scale_learning_rate(1e-3, strategy, "sqrt")),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=["accuracy"])

model.fit(train, epochs=5, verbose=2)
loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
print(f"test accuracy: {accuracy:.3f}")
