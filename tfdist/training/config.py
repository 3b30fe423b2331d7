"""`TrainConfig`: what the default job trains and how, with its rules checked once.

Flag values become a `TrainConfig` at the edge of `tfdist train`; a config that
breaks a rule (an evaluator with nothing to read, float16 gradients where
there is no all-reduce) is a one-line `ValueError` when it is made, before
anything starts. Imports no TensorFlow, so the main checks it first. (Whether
the model's own optimizer can compress is known once it is built: `job.train`.)

Example:

    >>> TrainConfig(strategy="mirrored", epochs=3)
    >>> TrainConfig(strategy="parameter_server", compress_gradients=True)
    ValueError: `compress_gradients` compresses the all-reduce, and parameter-server ...
"""

import dataclasses
from typing import Any, Callable, Dict, Optional

from tfdist import _choices as choices
from tfdist import _keras_support as keras_support
from tfdist.training import _local_sgd as local_sgd_lib

# The strategies whose cluster can have an evaluator task beside it.
MULTI_WORKER = tuple(s.name for s in choices.STRATEGIES if s.takes_cluster)
# The strategies that keep one copy of the weights per replica, for local SGD.
LOCAL_SGD_STRATEGIES = tuple(s.name for s in choices.STRATEGIES if s.copy_per_replica)
_ASYNCHRONOUS = tuple(s.name for s in choices.STRATEGIES if not s.synchronous)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """What to train and how. Flag values become this at the edge of `tfdist train`.

  Raises:
    ValueError: fields that cannot go together, naming them and the fix.
  """

  strategy: str = choices.Name.ONE_DEVICE
  epochs: int = 15
  batch_size: int = 64  # Global: split across replicas.
  learning_rate: float = 1e-2
  lr_scaling: str = "none"
  warmup_steps: int = 0
  strategy_options: Dict[str, Any] = dataclasses.field(default_factory=dict)
  seed: int = 42
  verbose: int = 2
  checkpoint_dir: Optional[str] = None  # Backup to resume from, and the final model.
  tensorboard_dir: Optional[str] = None
  export_dir: Optional[str] = None  # A SavedModel for serving: export_dir/<version>.
  # Epoch checkpoints in checkpoint_dir for a sidecar evaluator task (`evaluate_sidecar`).
  evaluator: bool = False
  compress_gradients: bool = False  # All-reduce in float16 (tfdist.training.compression).
  # Each global batch computed in this many micro-batches, one update (tfdist.training.accumulation).
  accumulate_steps: int = 1
  # Local SGD or DiLoCo (tfdist.training.LocalSGDOptions): each replica steps alone,
  # the weights averaged every `sync_every` steps; None: every step synchronous.
  local_sgd: Optional[local_sgd_lib.LocalSGDOptions] = None
  precision: str = "float32"  # Or mixed_bfloat16, mixed_float16 (see tfdist.training.precision).
  # The Keras of the default model, "tf_keras" or "keras3" (default: tf_keras where it is
  # installed, else Keras 3); a model_fn's model is trained with its own Keras, whichever it is.
  keras: str = dataclasses.field(default_factory=keras_support.default_keras)
  # The user's own job; None for the default CNN on the embedded digits.
  model_fn: Optional[Callable[[], Any]] = None
  dataset_fn: Optional[Callable[..., Any]] = None  # input_context -> tf.data.Dataset
  steps_per_epoch: Optional[int] = None  # Needed for a dataset_fn that repeats forever.

  def __post_init__(self):
    self._check_local_sgd()
    if not keras_support.tf_keras_installed():  # Keras 3 alone: refused before anything starts.
      needs = {f"keras={self.keras!r}": self.keras == keras_support.TF_KERAS,
               "compress_gradients=True": self.compress_gradients,
               "evaluator=True (its checkpoints and evaluation are tf_keras's)": self.evaluator}
      for what, used in needs.items():
        if used:
          raise ValueError(str(keras_support.tf_keras_missing(
              what, keras3_instead=what.startswith("keras="))))
    if self.evaluator and (not self.checkpoint_dir or self.strategy not in MULTI_WORKER):
      raise ValueError(
          "`evaluator` adds an evaluator task to the cluster of multi_worker_mirrored or "
          "parameter_server, and it reads the chief's checkpoints in `checkpoint_dir`: give "
          f"both. Received: strategy={self.strategy!r}, checkpoint_dir={self.checkpoint_dir!r}")
    if self.compress_gradients and self.strategy in _ASYNCHRONOUS:
      raise ValueError(
          "`compress_gradients` compresses the all-reduce, and parameter-server training has "
          f"none; drop it or use multi_worker_mirrored. Received: strategy={self.strategy!r}, "
          "compress_gradients=True")

  def _check_local_sgd(self):
    if self.local_sgd is None:
      return
    if not isinstance(self.local_sgd, local_sgd_lib.LocalSGDOptions):
      raise TypeError("`local_sgd` takes tfdist.training.LocalSGDOptions(sync_every=H, ...). "
                      f"Received: local_sgd={self.local_sgd!r}")
    sync_every = self.local_sgd.sync_every
    if self.strategy not in LOCAL_SGD_STRATEGIES:
      raise ValueError(
          "`local_sgd` (local SGD, DiLoCo) averages the replicas' own copies of the weights, "
          f"which only {' and '.join(LOCAL_SGD_STRATEGIES)} keep: use one of them or drop "
          f"local_sgd. Received: strategy={self.strategy!r}, sync_every={sync_every}")
    clash = {"accumulate_steps": self.accumulate_steps > 1,
             "compress_gradients": self.compress_gradients,
             "precision": self.precision == "mixed_float16"}
    for field, clashes in clash.items():
      if clashes:
        raise ValueError(
            f"`local_sgd` (each replica applies its own gradients) does not combine "
            f"with `{field}` (accumulation takes one update over every replica's batch; there "
            "is no gradient all-reduce to compress; mixed_float16's loss scale skips steps "
            "together). Drop one. Received: "
            f"{field}={getattr(self, field)!r}, sync_every={sync_every}")

