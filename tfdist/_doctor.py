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
from tfdist import _keras_support as keras_support
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


def _xla() -> List[Tuple[str, str]]:
  """`jit_compile=True` under each strategy of this machine: a one-step fit, measured."""
  import numpy as np
  import tf_keras
  from tfdist import strategies
  from tfdist.strategies import _keras_guard as keras_guard
  x = np.zeros((8, 2), "float32")
  rows = []
  for name in ("one_device", "mirrored", "central_storage"):
    with strategies.make_strategy(name).scope():
      model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
      model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    try:
      model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0)
      rows.append((name, "trains (measured)"))
    except ValueError as e:  # tfdist's refusal, before the first step.
      rows.append((name, "refused before the first step (measured): "
                   + str(e).split("jit_compile=True cannot run under ")[-1].split(". Compile")[0]))
    except Exception as e:  # pylint: disable=broad-except  # Reported, not raised.
      rows.append((name, f"FAILS (measured): {type(e).__name__}: {str(e).splitlines()[0]}"))
  # Not measured here (they need a cluster): the reasons their guards give.
  rows.append(("multi_worker_mirrored", "refused before the first step on CPUs: "
               + keras_guard.XLA_CPU_COLLECTIVES))
  rows.append(("parameter_server", "refused before the first step: "
               + keras_guard.XLA_PS_VARIABLES))
  return rows


def diagnose(environ: Optional[Mapping[str, str]] = None, *,
             reachability_timeout: float = 2.0,
             keras_measured: Optional[Tuple[List[Tuple[str, str]], List[str]]] = None,
             check_xla: bool = False) -> Report:
  """Checks versions, devices, the Keras matrix and the cluster of `environ`.

  Args:
    environ: the environment to read the cluster from (default: os.environ).
    reachability_timeout: seconds to wait for each task of the cluster.
    keras_measured: (rows, problems) of a measured Keras x strategy matrix
      (`tfdist doctor --check_keras` measures it), shown beside the documented one.
    check_xla: fit one step with `jit_compile=True` under each single-machine
      strategy here (a few seconds), and list what happens under the others.
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
  if check_xla:
    report.sections.append(("jit_compile=True (XLA) x strategy", _xla()))
  from tfdist.launch import private_network  # Deferred: only this section needs it.
  reason = private_network.unavailable_reason()
  report.sections.append(("network", _network(reason)))
  if reason is not None and environ.get(private_network.NETWORK_ENV) != "host":
    report.problems.append(refused_launch(reason))
  _cluster(report, environ, reachability_timeout)
  return report


def refused_launch(reason: str) -> str:
  """The problem when `tfdist launch` will refuse a local cluster here, with the user's choices."""
  return (f"`tfdist launch` and `tfdist train` will refuse to start a local cluster here: no "
          f"private network can be made ({reason}). Either run where unprivileged user "
          "namespaces are allowed (Linux: sysctl kernel.unprivileged_userns_clone=1; Ubuntu "
          "24.04: kernel.apparmor_restrict_unprivileged_userns=0; Docker: --cap-add SYS_ADMIN "
          "with an unconfined seccomp and AppArmor profile; macOS has none), or pass "
          "--network=host: TensorFlow's servers then listen on every interface of this machine "
          "without authentication, and anyone who reaches their ports can read and change the "
          "job.")


def _network(reason: Optional[str]) -> List[Tuple[str, str]]:
  """Who can reach the TF servers tfdist starts here (TensorFlow binds every interface)."""
  from tfdist.launch import _exposure as exposure  # Deferred: only this section needs it.
  local = ("a private loopback-only network: unreachable from other machines" if reason is None
           else f"refused: no private network can be made ({reason}); --network=host or "
                "TFDIST_NETWORK=host runs them on this machine's network")
  return [("tfdist launch tasks", local),
          ("tfdist train --in_process", local),
          ("in-process servers", "this machine's network, reachable from other machines: "
           "TensorFlow binds 0.0.0.0 (in_process=True in your own process, e.g. a "
           "notebook), so tfdist refuses them unless network='host' accepts that; "
           "firewall their ports, or use `tfdist launch`"),
          # Nodes tfdist does not own: it cannot close these, so it names them.
          ("tfdist launch --slurm", exposure.doctor_row("slurm")),
          ("tfdist launch --ray", exposure.doctor_row("ray"))]
