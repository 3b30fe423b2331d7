"""Gradients below 16 bits on the main job: test accuracy and bytes on the wire against float32.

    python benchmarks/sparsified_gradients.py [--output=F]

Trains `tfdist train`'s default job (the small CNN on the embedded digits, 15
epochs, global batch 64, Adam with its cosine rate) under `mirrored` on two
logical CPUs, exchanging the gradients five ways: the float32 all-reduce,
float16 (`tfdist.compress_gradients`), int8 and top-k at 10% and 1% of the
entries (`tfdist.training.sparsification`, with error feedback). Prints each
way's test accuracy and the bytes one replica sends per step, and their ratio
to float32's.
"""

import json

from absl import app
from absl import flags

_OUTPUT = flags.DEFINE_string("output", None, "Also write the results here, as JSON.")

WAYS = (("float32", None, None), ("float16", "float16", None), ("int8", "int8", None),
        ("top_k 10%", "top_k", 0.1), ("top_k 1%", "top_k", 0.01))


def main(argv):
  del argv
  import tfdist  # pylint: disable=import-outside-toplevel
  tfdist.devices.split_physical_device(2)
  from tfdist import keras  # pylint: disable=import-outside-toplevel
  from tfdist.data import digits  # pylint: disable=import-outside-toplevel
  from tfdist.training import job, scaling, sparsification  # pylint: disable=import-outside-toplevel

  config = job.TrainConfig(strategy="mirrored", verbose=0)
  (x_train, _), _ = digits.load_digits()
  total_steps = config.epochs * (len(x_train) // config.batch_size)
  results = {}
  for name, method, fraction in WAYS:
    def model_fn(method=method, fraction=fraction):
      model = job.small_cnn(keras)
      optimizer = keras.optimizers.Adam(scaling.cosine_learning_rate(
          keras, config.learning_rate, 2, config.lr_scaling, total_steps))
      if method == "float16":
        optimizer = tfdist.compress_gradients(optimizer)
      elif method:
        optimizer = sparsification.sparsify_gradients(
            optimizer, model.trainable_variables, method=method, fraction=fraction or 0.01)
      model.compile(optimizer=optimizer,
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    metrics=["accuracy"])
      return model

    result = job.train(job.TrainConfig(strategy="mirrored", verbose=0, model_fn=model_fn))
    variables = model_fn().trainable_variables
    if method in sparsification.METHODS:
      sent = sparsification.wire_bytes(variables, method=method, fraction=fraction or 0.01)
    else:
      sent = sum(int(v.shape.num_elements()) for v in variables) * (2 if method else 4)
    results[name] = {"accuracy": result.accuracy, "bytes_per_step": sent}
  dense = results["float32"]["bytes_per_step"]
  print(f"{'gradients':10s} {'test accuracy':>13s} {'bytes/step':>10s} {'of float32':>10s}")
  for name, row in results.items():
    print(f"{name:10s} {row['accuracy']:13.3f} {row['bytes_per_step']:10d} "
          f"{row['bytes_per_step'] / dense:10.1%}")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  app.run(main)
