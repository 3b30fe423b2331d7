"""tfdist.data.tfds_digits: real TFRecord shards, loaded by tfds.load offline."""

import tempfile

import tensorflow as tf
import tensorflow_datasets as tfds

from tfdist import data
from tfdist.data import tfds_digits


def test_prepare_writes_shards_and_tfds_load_reads_them(tmp_path):
  builder = tfds_digits.prepare(str(tmp_path), num_shards=4)
  files = sorted(p.name for p in (tmp_path / "tfdist_digits" / "1.0.0").glob("*train*"))
  assert len(files) == 4 and files[0].startswith("tfdist_digits-train.tfrecord-00000-of-00004")
  assert builder.info.splits["train"].num_examples == 1437
  ds = tfds.load("tfdist_digits", split="test", data_dir=str(tmp_path), as_supervised=True,
                 download=False)
  image, label = next(iter(ds))
  assert image.shape == (8, 8, 1) and image.dtype == tf.float32 and 0 <= int(label) < 10
  assert sum(1 for _ in ds) == 360


def test_file_sharding_splits_files_between_pipelines(tmp_path):
  counts = []
  for pipeline in range(2):
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline)
    ds = data.from_tfds("tfdist_digits", split="train", data_dir=str(tmp_path),
                        input_context=context)
    counts.append(sum(1 for _ in ds))
  assert sum(counts) == 1437 and abs(counts[0] - counts[1]) <= 1


def test_prepare_leaves_no_temporary_folder(tmp_path, monkeypatch):
  """A fresh data_dir once made TFDS leave an empty folder in the temporary directory."""
  temporary = tmp_path / "temporary"
  temporary.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # What tempfile.mkdtemp uses.
  for data_dir in ("first", "second"):  # Each unprepared data_dir made one.
    tfds_digits.prepare(str(tmp_path / data_dir), num_shards=1)
  tfds_digits.prepare(str(tmp_path / "first"), num_shards=1)  # Prepared: it reads it back.
  assert list(temporary.iterdir()) == []
  assert tfds_digits.prepare(str(tmp_path / "second")).info.splits["test"].num_examples == 360
