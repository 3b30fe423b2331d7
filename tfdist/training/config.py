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

from tfdist import _keras_support as keras_support

# The strategies whose cluster can have an evaluator task beside it.
MULTI_WORKER = ("multi_worker_mirrored", "parameter_server")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """What to train and how. Flag values become this at the edge of `tfdist train`.

  Raises:
    ValueError: fields that cannot go together, naming them and the fix.
  """

  strategy: str = "one_device"
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
  precision: str = "float32"  # Or mixed_bfloat16, mixed_float16 (see tfdist.training.precision).
  # The Keras of the default model, "tf_keras" or "keras3"; a model_fn's model
  # is trained with its own Keras, whichever it is.
  keras: str = keras_support.TF_KERAS
  # The user's own job; None for the default CNN on the embedded digits.
  model_fn: Optional[Callable[[], Any]] = None
  dataset_fn: Optional[Callable[..., Any]] = None  # input_context -> tf.data.Dataset
  steps_per_epoch: Optional[int] = None  # Needed for a dataset_fn that repeats forever.

  def __post_init__(self):
    if self.evaluator and (not self.checkpoint_dir or self.strategy not in MULTI_WORKER):
      raise ValueError(
          "`evaluator` adds an evaluator task to the cluster of multi_worker_mirrored or "
          "parameter_server, and it reads the chief's checkpoints in `checkpoint_dir`: give "
          f"both. Received: strategy={self.strategy!r}, checkpoint_dir={self.checkpoint_dir!r}")
    if self.compress_gradients and self.strategy == "parameter_server":
      raise ValueError(
          "`compress_gradients` compresses the all-reduce, and parameter-server training has "
          "none; drop it or use multi_worker_mirrored. Received: strategy='parameter_server', "
          "compress_gradients=True")
