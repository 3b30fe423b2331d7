"""Input: pipelines, the data that ships with tfdist, and what each replica receives.

- `pipeline`: `build` puts a dataset through the known-good order (its names
  are re-exported here, so `tfdist.data.build` is the pipeline builder);
- `digits`: the embedded digits (1,797 real 8x8 images, no download), the default job's data;
- `tfds_digits`: the same digits as a TFDS dataset of TFRecord shards, for
  `tfds.load` and FILE auto-sharding without a network;
- `distributed_input`: shard policies, `explain`, and distributing a dataset or
  a `dataset_fn` under a strategy;
- `input_report`: whether a job waits for its input, measured during `fit`;
- `service`: TF's tf.data service, to run the pipeline on other processes or machines;
- `replay`: reading on where an interrupted job stopped, and what cannot be replayed.
"""

from tfdist.data._pipeline import (AUTOTUNE, Map, PipelineOptions, build, from_files,
                                  from_tensors, from_tfds, random_crop_and_flip)

import importlib

# Public submodules, loaded on first use (tfds_digits imports TFDS).
_SUBMODULES = ("digits", "distributed_input", "input_report", "replay", "service", "tfds_digits")

__all__ = ["AUTOTUNE", "Map", "PipelineOptions", "build", "from_files", "from_tensors",
           "from_tfds", "random_crop_and_flip", *_SUBMODULES]


def __getattr__(name):
  if name not in _SUBMODULES:
    raise AttributeError(f"module 'tfdist.data' has no attribute {name!r}")
  return importlib.import_module(f"{__name__}.{name}")
