"""Serves exported SavedModels with TensorFlow alone: no strategy, no tfdist.

Usage: python -I load_saved_model.py INPUTS.npy [SAVED_MODEL OUTPUTS.npy]...
Prints one RESULT line of JSON: per SavedModel, the largest difference between
its `serving_default` outputs and the expected ones, and whether tfdist was imported.
"""
import json
import sys

import numpy as np
import tensorflow as tf

x = np.load(sys.argv[1])
differences = []
for path, expected in zip(sys.argv[2::2], sys.argv[3::2]):
  serve = tf.saved_model.load(path).signatures["serving_default"]
  (outputs,) = serve(tf.constant(x)).values()
  differences.append(float(np.max(np.abs(outputs.numpy() - np.load(expected)))))
print("RESULT " + json.dumps({"differences": differences, "tfdist": "tfdist" in sys.modules}))
