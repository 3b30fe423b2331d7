"""Recipe: synchronous training across machines (MultiWorkerMirroredStrategy).

Every worker runs this same file; TF_CONFIG tells each which task it is:

    tfdist launch --workers 2 -- python strategies/multi_worker_mirrored.py

On a real cluster, set TF_CONFIG per machine (tfdist.ClusterSpec.tf_config makes it).
"""

import tfdist
from tfdist.data import digits

# First, before any other TF op: it configures collectives for the whole process.
strategy = tfdist.make_strategy("multi_worker_mirrored", communication="ring")

import tensorflow as tf
from tfdist import keras

(x_train, y_train), _ = digits.load_digits()
GLOBAL_BATCH = 64


def dataset_fn(input_context):
  # Each worker reads its own shard and batches its share of the global batch.
  batch = input_context.get_per_replica_batch_size(GLOBAL_BATCH)
  ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
  ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  return ds.shuffle(2048, seed=1).repeat().batch(batch, drop_remainder=True).prefetch(2)


with strategy.scope():
  keras.utils.set_random_seed(1)  # Same initial weights everywhere (MWMS also syncs them).
  model = keras.Sequential([
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(16, 3, activation="relu"),
      keras.layers.Flatten(),
      keras.layers.Dense(10),
  ])
  model.compile(optimizer=keras.optimizers.Adam(2e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])

history = model.fit(strategy.distribute_datasets_from_function(dataset_fn), epochs=5,
                    steps_per_epoch=len(x_train) // GLOBAL_BATCH, verbose=2)
task = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
print(f"{task[0]}:{task[1]} final loss {history.history['loss'][-1]:.6f} "
      f"weights sum {sum(float(tf.reduce_sum(w)) for w in model.weights):.6f}")
