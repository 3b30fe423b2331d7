"""The embedded default dataset: scikit-learn's 1,797 real 8x8 handwritten digits.

Nothing is downloaded: the digits ship inside scikit-learn. The split is fixed
(seeded), so every run and every worker sees the same train and test sets.

Example:

    >>> (x_train, y_train), (x_test, y_test) = load_digits()
    >>> x_train.shape, x_test.shape
    ((1437, 8, 8, 1), (360, 8, 8, 1))
"""

import functools
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
  from sklearn import datasets  # Deferred: only this loader needs scikit-learn.
  digits = datasets.load_digits()
  images = (digits.images / 16.0).astype(np.float32)[..., np.newaxis]
  labels = digits.target.astype(np.int32)
  order = np.random.default_rng(_SEED).permutation(len(labels))
  split = int(len(labels) * (1 - _TEST_FRACTION))
  train, test = order[:split], order[split:]
  return (images[train], labels[train]), (images[test], labels[test])
