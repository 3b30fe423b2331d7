"""`tfdist doctor`: what this process would run with, and what is wrong with it.

`diagnose()` returns a `Report`: sections of (label, value) lines, and a list of
problems, each saying what to do. The CLI prints it and exits non-zero when
there is any problem.
"""

import dataclasses
import os
import platform
from typing import List, Mapping, Optional, Tuple

from tfdist import cluster as cluster_lib
from tfdist import keras_support
from tfdist.cluster import preflight


@dataclasses.dataclass
class Report:
  sections: List[Tuple[str, List[Tuple[str, str]]]] = dataclasses.field(default_factory=list)
  problems: List[str] = dataclasses.field(default_factory=list)

  def __str__(self) -> str:
    lines = []
    for title, rows in self.sections:
      lines.append(title)
      width = max((len(label) for label, _ in rows), default=0)
      lines += [f"  {label.ljust(width)}  {value}" for label, value in rows]
      lines.append("")
    lines.append("problems:" if self.problems else "no problems found")
    lines += [f"  - {p}" for p in self.problems]
    return "\n".join(lines)


def _versions() -> List[Tuple[str, str]]:
  import tensorflow as tf
  import tf_keras
  import tfdist
  rows = [("python", platform.python_version()), ("tfdist", tfdist.__version__),
          ("tensorflow", tf.__version__), ("tf_keras", tf_keras.__version__)]
  try:
    import keras
    rows.append(("keras", keras.__version__))
  except ImportError:
    rows.append(("keras", "not installed"))
  flavour = keras_support.tf_keras_flavour()
  if flavour is None:  # Not loaded yet: say what it will resolve to.
    legacy = os.environ.get(keras_support.LEGACY_KERAS_ENV, "") in ("1", "true", "True")
    flavour = (f"{keras_support.TF_KERAS if legacy else keras_support.KERAS3} "
               f"({keras_support.LEGACY_KERAS_ENV}={os.environ.get(keras_support.LEGACY_KERAS_ENV, '')!s})")
  rows.append(("tf.keras is", flavour))
  return rows


def _devices() -> List[Tuple[str, str]]:
  from tfdist import devices
  listed = devices.list_devices()
  return [("physical", ", ".join(listed.physical)), ("logical", ", ".join(listed.logical))]


def _matrix() -> List[Tuple[str, str]]:
  rows = []
  for (flavour, strategy), (raw, tfdist) in keras_support.SUPPORT.items():
    rows.append((f"{flavour:8} {strategy}", tfdist if raw == tfdist else f"{tfdist}; raw {raw}"))
  return rows


def _cluster(report: Report, environ: Mapping[str, str], timeout: float) -> None:
  rows = []
  source = ("TF_CONFIG" if environ.get("TF_CONFIG") else
            "SLURM" if "SLURM_JOB_ID" in environ else None)
  rows.append(("source", source or "none: a single process"))
  try:
    spec = cluster_lib.ClusterSpec.from_env(environ)
  except (ValueError, TypeError, RuntimeError) as e:
    report.problems.append(f"{source or 'the environment'} is invalid: {e}")
    report.sections.append(("cluster", rows))
    return
  if spec is not None:
    rows.append(("spec", repr(spec)))
    for task in spec.tasks():
      address = spec.address(task)
      if address is None:
        continue
      ok = preflight.reachable(address, timeout=timeout)
      mine = " (this task)" if task == spec.task else ""
      rows.append((f"{task}{mine}", f"{address} {'reachable' if ok else 'UNREACHABLE'}"))
      if not ok and task != spec.task:
        report.problems.append(
            f"task {task} at {address} does not answer: start it, or fix its address.")
  report.sections.append(("cluster", rows))


def diagnose(environ: Optional[Mapping[str, str]] = None, *,
             reachability_timeout: float = 2.0,
             keras_measured: Optional[Tuple[List[Tuple[str, str]], List[str]]] = None
             ) -> Report:
  """Checks versions, devices, the Keras matrix and the cluster of `environ`.

  Args:
    environ: the environment to read the cluster from (default: os.environ).
    reachability_timeout: seconds to wait for each task of the cluster.
    keras_measured: (rows, problems) of a measured Keras x strategy matrix
      (`tfdist doctor --check_keras` measures it), shown beside the documented one.
  """
  environ = os.environ if environ is None else environ
  report = Report()
  report.sections.append(("versions", _versions()))
  report.sections.append(("devices", _devices()))
  report.sections.append(("keras x strategy (fit; documented, `--check_keras` measures)",
                          _matrix()))
  if keras_measured is not None:
    rows, problems = keras_measured
    report.sections.append(("keras x strategy (tfdist train, measured here)", rows))
    report.problems += problems
  report.sections.append(("network", _network()))
  _cluster(report, environ, reachability_timeout)
  return report


def _network() -> List[Tuple[str, str]]:
  """Who can reach the TF servers tfdist starts here (TensorFlow binds every interface)."""
  from tfdist.launch import private_network  # Deferred: only this section needs it.
  reason = private_network.unavailable_reason()
  local = ("a private loopback-only network: unreachable from other machines" if reason is None
           else f"refused: no private network can be made ({reason}); --network=host or "
                "TFDIST_NETWORK=host runs them on this machine's network")
  return [("tfdist launch tasks", local),
          ("tfdist train --in_process", local),
          ("in-process servers", "this machine's network, reachable from other machines: "
           "TensorFlow binds 0.0.0.0 (in_process=True in your own process, e.g. a "
           "notebook), so tfdist refuses them unless network='host' accepts that; "
           "firewall their ports, or use `tfdist launch`")]
