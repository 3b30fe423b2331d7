"""The embedded default dataset: 1,797 real 8x8 handwritten digits.

Nothing is downloaded: the digits ship inside tfdist (`digits.npz`, 45 KB),
the same 1,797 images and labels scikit-learn ships as `load_digits`. They are
the test part of the UCI "Optical Recognition of Handwritten Digits" data
(E. Alpaydin and C. Kaynak, 1998; https://doi.org/10.24432/C50P49), under
CC BY 4.0; tfdist stores them as they are, pixel counts 0 to 16. tfdist does
not depend on scikit-learn: with it installed, importing TensorFlow also
imports it and SciPy (Keras's scikit-learn wrappers), about half a second of
CPU in every process of a job (docs/suite-time.md, "Where the suite's time goes").

The split is fixed (seeded), so every run and every worker sees the same train
and test sets.

Example:

    >>> (x_train, y_train), (x_test, y_test) = load_digits()
    >>> x_train.shape, x_test.shape
    ((1437, 8, 8, 1), (360, 8, 8, 1))
"""

import functools
import importlib.resources
from typing import Tuple

import numpy as np

NUM_CLASSES = 10
IMAGE_SHAPE = (8, 8, 1)
_TEST_FRACTION = 0.2
_SEED = 1234

Arrays = Tuple[np.ndarray, np.ndarray]


@functools.lru_cache(maxsize=1)
def load_digits() -> Tuple[Arrays, Arrays]:
  """Train and test (images, labels); images float32 in [0, 1], shape (n, 8, 8, 1)."""
  with importlib.resources.files(__package__).joinpath("digits.npz").open("rb") as f:
    with np.load(f) as stored:
      images = (stored["images"] / 16.0).astype(np.float32)[..., np.newaxis]
      labels = stored["labels"].astype(np.int32)
  order = np.random.default_rng(_SEED).permutation(len(labels))
  split = int(len(labels) * (1 - _TEST_FRACTION))
  train, test = order[:split], order[split:]
  return (images[train], labels[train]), (images[test], labels[test])
