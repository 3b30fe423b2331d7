"""Every gated use of private TensorFlow and Keras code, and whether it applies here.

Each module of `tfdist.internals` names its uses in `GATES` (a `versions.Gate`
each: the versions it was run with, the public issue, what a user loses without
it). `tfdist doctor` reports them all on the installed versions, read from
package metadata, so the report imports nothing it describes.

Example:

    >>> from tfdist.internals import gates
    >>> [name for name, _, reason in gates.report(gates.installed()) if reason]  # Not applied.
    []
"""

from typing import Dict, List, Optional, Tuple

from tfdist import _stack
from tfdist.internals import fit_callbacks
from tfdist.internals import keras
from tfdist.internals import keras_callbacks
from tfdist.internals import strategy_scope
from tfdist.internals import strategy_watch
from tfdist.internals import tensorflow
from tfdist.internals import tf_keras
from tfdist.internals import versions
from tfdist.internals import xplane

# The modules with gates, in the order a report lists them.
MODULES = (tensorflow, strategy_watch, strategy_scope, xplane, tf_keras, fit_callbacks, keras,
           keras_callbacks)
# A gate's library -> the distributions that install it, the first found is used.
_DISTRIBUTIONS = {
    "TensorFlow": _stack.TENSORFLOW_DISTRIBUTIONS,
    "tf_keras": _stack.TF_KERAS_DISTRIBUTIONS,
    "Keras": _stack.KERAS_DISTRIBUTIONS,
}


def gates() -> List[Tuple[str, versions.Gate]]:
  """[("module.name", gate)] of every gated use, e.g. ("keras.multi_worker", ...)."""
  return [(f"{module.__name__.rsplit('.', 1)[1]}.{name}", gate) for module in MODULES
          for name, gate in module.GATES.items()]


def installed() -> Dict[str, Optional[versions.Version]]:
  """{library: (major, minor) or None} of each gate's library, from package metadata."""
  found = {}
  for library, distributions in _DISTRIBUTIONS.items():
    found[library] = None
    for distribution in distributions:
      text = _stack.installed(distribution)
      if text is None:
        continue
      version = versions.parse(text)
      # Keras 2 (under TF 2.15 and older) is not Keras 3: none of its gates can apply.
      found[library] = version if library != "Keras" or version[0] == 3 else None
      break
  return found


def report(libraries: Dict[str, Optional[versions.Version]]
           ) -> List[Tuple[str, versions.Gate, Optional[str]]]:
  """[(name, gate, why it is not applied or None)] for the versions in `libraries`."""
  return [(name, gate, gate.reason(libraries.get(gate.library))) for name, gate in gates()]
