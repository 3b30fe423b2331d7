"""The default training job: a small CNN on the embedded digits, under any strategy.

`train(TrainConfig(strategy="mirrored"))` builds the strategy, the model inside
its scope, the distributed input, and runs `fit`; it returns a `TrainResult` with
accuracy and speed. The same code path serves every strategy, which is the point:
only the strategy name changes.
"""

import logging
import contextlib
import dataclasses
import functools
import hashlib
import os
import time
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from tfdist.training import accumulation
from tfdist.training import _local_sgd as local_sgd
from tfdist.training import checkpoints
from tfdist import cluster as cluster_lib
from tfdist import data
from tfdist.cluster import _elastic as elastic
from tfdist.training import compression
from tfdist.training.config import TrainConfig  # The job's config, checked when made.
from tfdist import _keras_support as keras_support
from tfdist.training import loop as loop_lib
from tfdist.training import precision
from tfdist.training import scaling
from tfdist.training import saved_model
from tfdist.training import sidecar
from tfdist import strategies
from tfdist.training import timing
from tfdist.training import fit_step
from tfdist.data import digits
from tfdist.data import distributed_input
from tfdist.data import input_report

logger = logging.getLogger("tfdist")

MODEL_FILE = "model.keras"


@dataclasses.dataclass(frozen=True)
class TrainResult:
  """What happened, in numbers; one row of `tfdist compare`."""

  strategy: str
  keras: str  # The Keras that trained: "tf_keras" or "keras3".
  replicas: int
  sync: bool
  accuracy: float
  losses: List[float]
  examples_per_second: float
  step_time_ms: float
  weights_digest: str
  input_bound: Optional[float]  # Share of step time waiting for data; None under PSS.
  compute_dtype: str = "float32"  # The model's computations (its variables stay float32).
  export_path: Optional[str] = None  # The SavedModel version written (by the chief).

  def as_dict(self) -> dict:
    """As JSON-ready data: what `tfdist train --output` writes."""
    return dataclasses.asdict(self)


def small_cnn(keras=None):
  """The default model: a small CNN for 8x8x1 digits (about 5k parameters).

  Args:
    keras: the Keras package to build it with, `tf_keras` (the default) or `keras` (Keras 3).
  """
  keras = keras or keras_support.keras_module(keras_support.TF_KERAS)
  return keras.Sequential([
      keras.layers.Input(digits.IMAGE_SHAPE),
      keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
      keras.layers.MaxPooling2D(),
      keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
      keras.layers.GlobalAveragePooling2D(),
      # Logits in float32 under a mixed policy, as TF's mixed-precision guide says.
      keras.layers.Dense(digits.NUM_CLASSES, dtype="float32"),
  ], name="small_cnn")


def make_dataset_fn(images: np.ndarray, labels: np.ndarray, global_batch_size: int,
                    seed: int):
  """A `dataset_fn(input_context)`: each input pipeline reads its own shard.

  The per-replica batch comes from the global batch, so the global batch stays
  what the user asked for whatever the number of replicas.
  """
  def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
    source = data.from_tensors(images, labels).shard(
        input_context.num_input_pipelines, input_context.input_pipeline_id)
    return data.build(source, batch_size=input_context.get_per_replica_batch_size(
        global_batch_size), cache="memory", shuffle_buffer=len(images), repeat=True,
                      seed=seed)
  return dataset_fn


def _finite_steps(dataset_fn) -> int:
  """Steps per epoch of a finite dataset: its cardinality, or one counted pass.

  TF knows the cardinality of most pipelines (from tensors, map, batch, take);
  only where it does not (a filter, files of unknown length) is the data read
  once to count it, and that is said, because on a large dataset it takes long.
  """
  dataset = dataset_fn(tf.distribute.InputContext())
  steps = int(dataset.cardinality())
  if steps == tf.data.UNKNOWN_CARDINALITY:
    logger.info("tfdist: the dataset's length is unknown to TensorFlow; reading it once to "
                "count its batches. Give the steps per epoch (STEPS_PER_EPOCH in a --data "
                "module) to skip this.")
    steps = int(dataset.reduce(0, lambda count, _: count + 1))
  if steps <= 0:
    raise ValueError("Give the steps per epoch (TrainConfig.steps_per_epoch; STEPS_PER_EPOCH "
                     "in a `tfdist train --data` module): the dataset_fn repeats "
                     "forever or is empty, so an epoch has no end. Received: "
                     f"{'infinite' if steps == tf.data.INFINITE_CARDINALITY else steps} steps")
  return steps


def weights_digest(weights: List[np.ndarray]) -> str:
  """A short hash of weights, to compare replicas and workers exactly."""
  h = hashlib.sha256()
  for w in weights:
    h.update(np.ascontiguousarray(w).tobytes())
  return h.hexdigest()[:16]


def train(config: TrainConfig, strategy: Optional[tf.distribute.Strategy] = None) -> TrainResult:
  """Trains the default model (or `config.model_fn`) under `config.strategy`.

  Keras 3 trains under every strategy: with `fit`, except under parameter
  servers, where Keras 3's `fit` cannot run (keras-team/keras#18624) and
  `tfdist.training.loop` trains the same compiled model instead.

  Args:
    config: the job.
    strategy: an already-built strategy (else built from `config`).

  Returns:
    A `TrainResult`; accuracy is on the held-out test split of the embedded
    digits, or the last epoch's training accuracy for a user's `dataset_fn`.

  Raises:
    ValueError: a user's infinite `dataset_fn` without `steps_per_epoch`;
      `compress_gradients` for a Keras 3 model.
  """
  if strategy is None:
    # First: multi_worker_mirrored must configure collectives before any TF op.
    strategy = strategies.make_strategy(config.strategy, **config.strategy_options)
  keras_support.keras_module(config.keras).utils.set_random_seed(config.seed)
  replicas = strategy.num_replicas_in_sync
  dataset_fn, steps_per_epoch = _input(config)
  model_fn = config.model_fn or functools.partial(small_cnn,
                                                  keras_support.keras_module(config.keras))
  model, keras, compiled_here = _build(config, strategy, model_fn, steps_per_epoch)
  callbacks = []
  if config.evaluator:
    callbacks.append(sidecar.checkpoint_callback(config.checkpoint_dir, model))
  if keras_support.model_flavour(model) == keras_support.KERAS3 and \
      isinstance(strategy, tf.distribute.ParameterServerStrategy):
    history, times, input_bound = _fit_with_loop(config, strategy, model, keras, dataset_fn,
                                                 steps_per_epoch, compiled_here)
  else:
    history, times, input_bound = _fit(config, strategy, model, keras, dataset_fn,
                                       steps_per_epoch, callbacks)
  export_path = _save(config, strategy, model, model_fn)
  timed = times[1:] or times  # The first epoch includes tracing.
  seconds_per_epoch = float(np.median(timed))
  return TrainResult(
      strategy=config.strategy, keras=keras_support.model_flavour(model), replicas=replicas,
      # Only parameter-server training applies updates asynchronously.
      sync=not isinstance(strategy, tf.distribute.ParameterServerStrategy),
      accuracy=_accuracy(config, model_fn, model, history),
      losses=[float(l) for l in history["loss"]],
      examples_per_second=steps_per_epoch * config.batch_size / seconds_per_epoch,
      step_time_ms=1000 * seconds_per_epoch / steps_per_epoch,
      weights_digest=weights_digest(model.get_weights()), input_bound=input_bound,
      compute_dtype=model.compute_dtype,
      export_path=export_path)


def _input(config: TrainConfig):
  """(dataset_fn, steps per epoch): the embedded digits' training split, or the user's."""
  if config.dataset_fn is None:
    (x_train, y_train), _ = digits.load_digits()
    return (make_dataset_fn(x_train, y_train, config.batch_size, config.seed),
            len(x_train) // config.batch_size)
  if config.steps_per_epoch:
    return config.dataset_fn, config.steps_per_epoch
  steps_per_epoch = _finite_steps(config.dataset_fn)
  # Keras keeps one iterator across epochs when it is given steps_per_epoch.
  return (lambda input_context: config.dataset_fn(input_context).repeat()), steps_per_epoch


def _build(config: TrainConfig, strategy, model_fn, steps_per_epoch: int):
  """(model, its Keras module, whether it was compiled here), built in the strategy's scope."""
  replicas = strategy.num_replicas_in_sync
  # On fewer workers than asked (tfdist launch --min_workers): the same
  # optimisation, with a larger share of the same global batch per replica.
  replicas_asked = elastic.replicas_asked(replicas)
  if replicas_asked != replicas:
    logger.info("tfdist: %d of the %d replicas asked for run now; the global batch stays %d "
                "(%d per replica), and the learning rate stays scaled for %d replicas",
                replicas, replicas_asked, config.batch_size, config.batch_size // replicas,
                replicas_asked)
  # The policy reaches the layers built (and the compile, which adds loss
  # scaling for float16) here, and nothing after train returns.
  with precision.policy(config.precision), strategy.scope():
    model = model_fn()
    flavour = keras_support.model_flavour(model)
    keras = keras_support.keras_module(flavour)  # The model's own, whatever was asked.
    if config.compress_gradients and flavour == keras_support.KERAS3:
      raise ValueError("compress_gradients works with tf_keras optimizers only; build the "
                       "model with tf_keras (`from tfdist import keras`) or train without "
                       "it. Received: a Keras 3 model")
    compiled_here = getattr(model, "optimizer", None) is None
    if compiled_here:  # Left to us: a classifier on logits.
      lr = scaling.cosine_learning_rate(keras, config.learning_rate, replicas_asked,
                                       config.lr_scaling,
                                       config.epochs * steps_per_epoch, config.warmup_steps)
      model.compile(optimizer=keras.optimizers.Adam(lr),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    metrics=["accuracy"])
    if config.compress_gradients:
      compression.compress_gradients(model.optimizer)
    if config.accumulate_steps > 1:  # Before synchronise_once, which then keeps this step.
      accumulation.accumulate(model, config.accumulate_steps)
    if config.local_sgd:  # Local SGD or DiLoCo; synchronise_once then keeps this step.
      local_sgd.local_sgd(model, config.local_sgd)
    if flavour == keras_support.TF_KERAS:
      fit_step.synchronise_once(model, strategy)
  return model, keras, compiled_here


def _save(config: TrainConfig, strategy, model, model_fn) -> Optional[str]:
  """The final model (the chief's copy), and the SavedModel version exported, if asked for."""
  if config.checkpoint_dir:
    checkpoints.save_model(model, os.path.join(config.checkpoint_dir, MODEL_FILE), strategy)
  if config.export_dir:
    return saved_model.export(model, config.export_dir, strategy=strategy, model_fn=model_fn)
  return None


def _accuracy(config: TrainConfig, model_fn, model, history) -> float:
  """On the digits' held-out test split; for a user's data, the last epoch's training accuracy."""
  if config.dataset_fn is not None:  # No held-out split of the user's data here.
    return float(history.get("accuracy", [float("nan")])[-1])
  _, (x_test, y_test) = digits.load_digits()
  # Evaluate on a plain copy: the same numbers for every strategy, PSS included.
  evaluator = model_fn()
  evaluator.set_weights(model.get_weights())
  logits = evaluator.predict(x_test, batch_size=256, verbose=0)
  return float(np.mean(np.argmax(logits, axis=1) == y_test))


def _fit(config, strategy, model, keras, dataset_fn, steps_per_epoch, callbacks):
  """Keras `fit`; returns (history, wall seconds per epoch, input-bound share or None)."""
  timer = timing.EpochClock()
  report = input_report.InputBoundReport(dataset_fn, verbose=config.verbose > 0)
  callbacks = [timer, report, *callbacks]
  if config.checkpoint_dir:
    callbacks.append(checkpoints.backup_and_restore(config.checkpoint_dir, model=model))
  with contextlib.ExitStack() as stack:
    if config.tensorboard_dir:
      log_dir = stack.enter_context(checkpoints.chief_dir(config.tensorboard_dir, strategy))
      callbacks.append(keras.callbacks.TensorBoard(log_dir))
    # shuffle=False: the dataset shuffles itself, and Keras 3 warns at every fit that
    # its default shuffle=True is ignored for a dataset.
    history = model.fit(distributed_input.distribute_function(strategy, dataset_fn),
                        epochs=config.epochs, steps_per_epoch=steps_per_epoch,
                        callbacks=callbacks, verbose=config.verbose, shuffle=False)
  return (history.history, timer.wall_times(),
          report.result.share if report.result else None)


def _fit_with_loop(config, strategy, model, keras, dataset_fn, steps_per_epoch,
                   compiled_here):
  """`tfdist.training.loop` on a compiled Keras 3 model, where its `fit` cannot run; as `_fit`."""
  if config.tensorboard_dir:
    raise ValueError("tensorboard_dir: Keras 3 under parameter servers trains with "
                     "tfdist.training.loop, which writes no TensorBoard logs; drop it or use tf_keras. "
                     f"Received: tensorboard_dir={config.tensorboard_dir!r}")
  # The accuracy of the classifier compiled here; a user's compiled model reports its loss.
  metrics = {"accuracy": keras.metrics.sparse_categorical_accuracy} if compiled_here else {}
  # Whole loops per closure; the largest that divides the epoch (at most 8).
  steps_per_loop = max(k for k in range(1, 9) if steps_per_epoch % k == 0)
  # Under parameter servers only the chief runs this: its backup is the only one.
  backup_dir = (os.path.join(config.checkpoint_dir, checkpoints.BACKUP_SUBDIR)
                if config.checkpoint_dir else None)
  loop = loop_lib.Loop(
      strategy, model, loss=keras.losses.get(model.loss), optimizer=model.optimizer,
      metrics=metrics, steps_per_loop=steps_per_loop, checkpoint_dir=backup_dir,
      accumulate_steps=config.accumulate_steps)
  history: Dict[str, list] = {}
  times = []
  for epoch in range(int(loop.epoch.numpy()), config.epochs):  # Resumes from the backup.
    start = time.perf_counter()
    logs = loop.fit(dataset_fn, epochs=epoch + 1, steps_per_epoch=steps_per_epoch,
                    verbose=False)
    times.append(time.perf_counter() - start)
    for name, values in logs.items():
      history.setdefault(name, []).extend(values)
    if config.verbose:
      shown = " - ".join(f"{name}: {values[-1]:.4f}" for name, values in logs.items()
                         if name != loop_lib.EXAMPLES)
      logger.info("Epoch %d/%d - %.1fs - %s", epoch + 1, config.epochs, times[-1], shown)
  if backup_dir:  # Finished: as Keras's BackupAndRestore, nothing left to resume.
    tf.io.gfile.rmtree(backup_dir)
  return history, times, None


def run_task(config: TrainConfig) -> Optional[TrainResult]:
  """This process's part of `config`'s job: `train(config)`, or None as its evaluator task.

  The evaluator of a cluster (`TF_CONFIG`'s task type "evaluator") is no member
  of it and builds no strategy: it evaluates the chief's checkpoints as they
  appear (`evaluate_sidecar`). Every other task, or a process outside a
  cluster, trains.
  """
  spec = cluster_lib.ClusterSpec.from_env()
  if spec is not None and spec.task is not None and spec.task.type == cluster_lib.EVALUATOR:
    evaluate_sidecar(config)
    return None
  return train(config)


def evaluate_sidecar(config: TrainConfig) -> None:
  """The evaluator task of `train(config)`: evaluates its epoch checkpoints as they appear.

  On the held-out digits for the default job, else on the user's dataset
  (`steps_per_epoch` batches when it repeats); results go to TensorBoard in
  `tensorboard_dir` (or `checkpoint_dir/eval`). Runs under no strategy.
  """
  keras = keras_support.keras_module(config.keras)
  model = (config.model_fn or functools.partial(small_cnn, keras))()
  keras = keras_support.keras_module(keras_support.model_flavour(model))
  if getattr(model, "optimizer", None) is None:  # As `train` compiles it, schedule included.
    model.compile(optimizer=keras.optimizers.Adam(scaling.cosine_learning_rate(
        keras, config.learning_rate, 1, config.lr_scaling, 1, config.warmup_steps)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
  steps = None
  if config.dataset_fn is None:
    _, data = digits.load_digits()
  else:
    data = config.dataset_fn(tf.distribute.InputContext())
    steps = config.steps_per_epoch
  logger.info("sidecar evaluator: evaluating each new checkpoint in %s until epoch %d",
              config.checkpoint_dir, config.epochs)
  sidecar.evaluate_checkpoints(model, data, config.checkpoint_dir, last_epoch=config.epochs,
                               log_dir=config.tensorboard_dir, steps=steps)
  logger.info("sidecar evaluator: evaluated epoch %d's checkpoint; results in %s",
              config.epochs,
              config.tensorboard_dir or os.path.join(config.checkpoint_dir, "eval"))
