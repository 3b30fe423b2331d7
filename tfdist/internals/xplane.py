"""Reading a TensorFlow profiler trace (`.xplane.pb`): TensorFlow's own proto, not a public API.

TensorFlow 2.21 ships the `XSpace` proto as `tensorflow.tsl.profiler.protobuf.xplane_pb2`
and no public reader (TensorBoard's profile plugin and xprof read it; neither is
installed with TensorFlow). `host_events(path)` sums the host plane's events by
name. Gated on the TensorFlow versions tested (`tensorflow.TESTED`); profile
summaries are off elsewhere. Issue: multi-host profiling is not supported by
TensorFlow's profiler (tensorflow/tensorflow#49852).
"""

import collections
from typing import Dict, Optional, Tuple

from tfdist.internals import tensorflow as tf_internals
from tfdist.internals import versions

ISSUE = "tensorflow/tensorflow#49852"
GATES = {"profile_summary": versions.Gate(
    "profile summary", "TensorFlow", tf_internals.TESTED, ISSUE,
    "`tfdist launch --profile` writes each task's trace, without the per-task summary")}


def host_events(path: str) -> Optional[Dict[str, Tuple[float, int]]]:
  """{event name: (total milliseconds, count)} of the trace's host CPU plane; None if untested."""
  import tensorflow  # pylint: disable=unused-import  The proto's module comes with it.
  if not GATES["profile_summary"].check(tf_internals.version()):
    return None
  from tensorflow.tsl.profiler.protobuf import xplane_pb2
  space = xplane_pb2.XSpace()
  with open(path, "rb") as f:
    space.ParseFromString(f.read())
  totals: Dict[str, list] = collections.defaultdict(lambda: [0.0, 0])
  for plane in space.planes:
    if not plane.name.startswith("/host:CPU"):
      continue
    names = {key: value.name for key, value in plane.event_metadata.items()}
    for line in plane.lines:
      for event in line.events:
        total = totals[names.get(event.metadata_id, "")]
        total[0] += event.duration_ps / 1e9
        total[1] += 1
  return {name: (ms, count) for name, (ms, count) in totals.items()}
