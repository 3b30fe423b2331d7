"""The only place tfdist touches private TensorFlow and Keras code.

One module per library: `tensorflow`, `tf_keras` and `keras` (Keras 3), and
`frames`, which the two Keras modules use to find what a running `fit` reads. Each
imports from `tensorflow.python`, `tf_keras.src` or `keras.src`, or reads or
replaces a private attribute, so that the rest of tfdist does neither
(`tests/test_architecture.py` fails on a new one outside this package, and
on one inside that is not in its inventory).
Each names the versions it was tested with (`TESTED`), checks them before it
changes anything (`versions.check`: a warning naming the version on others,
and nothing changed), and each patch comes as `enable_<name>()` with its undo
`disable_<name>()` and the public issue it works around, listed in `PATCHES`.
docs/architecture.md lists each use (Private TensorFlow and Keras code), and
docs/known_issues.md tells why each is needed.
"""
