"""The embedded digits as a TFDS dataset: real TFRecord shards in a local data_dir.

`tfds.load` of an unprepared dataset needs the network; this builder writes the
digits that ship with tfdist (`tfdist.data.digits`) instead, so `tfds.load`,
file-based auto-sharding and per-worker file assignment all run for real offline.

Example:

    >>> prepare("/tmp/tfds", num_shards=4)
    >>> ds = tfds.load("tfdist_digits", split="train", data_dir="/tmp/tfds", as_supervised=True)
"""

import os
from typing import Optional

import numpy as np
import tensorflow_datasets as tfds

from tfdist.data import digits

NAME = "tfdist_digits"


class _LocalInfo(tfds.core.DatasetInfo):
  """The dataset's info, never looked up in TFDS's GCS bucket: these digits are not there.

  `tfds.core.DatasetInfo.initialize_from_bucket`, which a builder calls when its data_dir
  holds no prepared copy yet, makes a temporary folder before it finds nothing to fetch,
  and leaves that folder behind (tensorflow-datasets 4.9.10): one per `prepare` of a
  fresh data_dir.
  """

  def initialize_from_bucket(self) -> None:
    pass


class TfdistDigits(tfds.core.GeneratorBasedBuilder):
  """The 1,797 embedded 8x8 handwritten digits, split as `tfdist.data.digits`."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Images float32 in [0, 1], shape (8, 8, 1); fixed split."}

  def _info(self) -> tfds.core.DatasetInfo:
    # What `dataset_info_from_configs` adds, the config files' description and citation,
    # this builder has none of.
    return _LocalInfo(
        builder=self,
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Tensor(shape=digits.IMAGE_SHAPE, dtype=np.float32),
            "label": tfds.features.ClassLabel(num_classes=digits.NUM_CLASSES),
        }),
        supervised_keys=("image", "label"),
        homepage="https://doi.org/10.24432/C50P49",
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download: the data ships with tfdist.
    (x_train, y_train), (x_test, y_test) = digits.load_digits()
    return {"train": self._generate_examples(x_train, y_train),
            "test": self._generate_examples(x_test, y_test)}

  def _generate_examples(self, images, labels):
    for index, (image, label) in enumerate(zip(images, labels)):
      yield index, {"image": image, "label": int(label)}


def prepare(data_dir: str, *, num_shards: Optional[int] = 4) -> tfds.core.DatasetBuilder:
  """Writes the TFRecord shards into `data_dir` (once; later calls reuse them).

  Args:
    data_dir: the TFDS data directory.
    num_shards: files per split; FILE sharding needs at least one per worker.

  Returns:
    The prepared builder; `builder.as_dataset(split=...)` or `tfds.load` read it.
  """
  builder = TfdistDigits(data_dir=os.fspath(data_dir))
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
      num_shards=num_shards, try_download_gcs=False))  # Never reach for the network.
  return builder
