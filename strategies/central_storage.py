"""Recipe: replicated compute, variables kept once on the CPU (CentralStorageStrategy).

    python strategies/central_storage.py

Worth it when the accelerators are many and small and the model's variables fit
comfortably in host memory: each step reads them from the CPU instead of keeping
a copy per device.
"""

import tfdist
from tfdist.data import digits

tfdist.devices.split_physical_device(2)  # Only for CPU-only machines; before any TF op.

import tensorflow as tf
from tfdist import keras

strategy = tfdist.make_strategy("central_storage")
print(f"replicas: {strategy.num_replicas_in_sync}")

(x_train, y_train), (x_test, y_test) = digits.load_digits()
global_batch = tfdist.global_batch_size(32, strategy)
train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2048).batch(global_batch)

with strategy.scope():
  model = keras.Sequential([
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(16, 3, activation="relu"),
      keras.layers.Flatten(),
      keras.layers.Dense(10),
  ])
  # Learning-rate schedules work here too (tfdist fixes a tf_keras bug for them).
  schedule = keras.optimizers.schedules.CosineDecay(2e-3, decay_steps=5 * len(train))
  model.compile(optimizer=keras.optimizers.Adam(schedule),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])

model.fit(train, epochs=5, verbose=2)
print(f"variables live on: {model.weights[0].device}")
loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
print(f"test accuracy: {accuracy:.3f}")
