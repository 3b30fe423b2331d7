"""A user's Keras 3 model module for `tfdist train --model`: plain `import keras`."""

import keras


def model_fn():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                            keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
  return model
