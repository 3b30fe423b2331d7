"""`tfdist doctor`: what this process would run with, and what is wrong with it.

`diagnose()` returns a `Report`: sections of (label, value) lines, and a list of
problems, each saying what to do. The CLI prints it and exits non-zero when
there is any problem.
"""

import dataclasses
import os
import platform
from typing import List, Mapping, Optional, Tuple

from tfdist import _choices as choices
from tfdist import cluster as cluster_lib
from tfdist import _keras_support as keras_support
from tfdist import _stack
from tfdist.cluster import preflight
from tfdist.internals import gates as gates_lib
from tfdist.internals import versions as versions_lib


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


def _supported(version: str, library: str) -> str:
  reason = _stack.outside(library, version)
  return version if reason is None else f"{version} (UNSUPPORTED: {reason})"


def _stack_rows(report: Report) -> List[Tuple[str, str]]:
  """The installed stack from package metadata, its problems, and the line that pins it."""
  import tfdist
  rows = [("python", platform.python_version()), ("tfdist", tfdist.__version__)]
  python = tuple(int(p) for p in platform.python_version_tuple()[:2])
  if not _stack.PYTHON[0] <= python <= _stack.PYTHON[1]:
    (low, high) = _stack.PYTHON
    report.problems.append(f"Python {platform.python_version()} is outside what tfdist "
                           f"supports ({low[0]}.{low[1]} to {high[0]}.{high[1]}).")
  found = _stack.tensorflow_distributions()
  if not found:
    rows.append(("tensorflow", "not installed"))
    report.problems.append(_stack.missing("tensorflow"))
  for name, version in found:
    untested = " (a nightly: accepted, untested)" if name in _stack.NIGHTLIES else ""
    rows.append(("tensorflow", f"{_supported(version, 'tensorflow')} ({name}){untested}"))
    if _stack.outside("tensorflow", version) and not untested:
      report.problems.append(f"{_stack.outside('tensorflow', version)}: tfdist's patches for "
                             "it are not applied (see `patches` above).")
  _overwritten(report, "TensorFlow", [name for name, _ in found],
               " (a requirement on `tensorflow` beside `tensorflow-cpu` does this)")
  tf_kerases = [(name, version) for name in _stack.TF_KERAS_DISTRIBUTIONS
                for version in [_stack.installed(name)] if version is not None]
  _overwritten(report, "tf_keras", [name for name, _ in tf_kerases])
  tf_keras = tf_kerases[0][1] if tf_kerases else None
  rows.append(("tf_keras", "not installed (Keras 3 only)" if tf_keras is None
               else _supported(tf_keras, "tf_keras")))
  if tf_keras is not None and found:
    tf_minor = versions_lib.parse(found[0][1])
    if versions_lib.parse(tf_keras) != tf_minor:
      report.problems.append(
          f"tf_keras {tf_keras} is not the tf_keras of TensorFlow {found[0][1]}: tf_keras "
          f"follows its TensorFlow's minor version (pip install 'tf-keras=="
          f"{tf_minor[0]}.{tf_minor[1]}.*'; where none is released yet, pip install "
          f"--no-deps 'tf-keras-nightly~={tf_minor[0]}.{tf_minor[1]}.0.dev', or use Keras 3).")
  keras = next(filter(None, map(_stack.installed, _stack.KERAS_DISTRIBUTIONS)), None)
  rows.append(("keras", "not installed" if keras is None else _supported(keras, "keras")))
  rows.append(("tf.keras is", _tf_keras_is()))
  rows.append(("tensorboard", _stack.installed("tensorboard") or
               "not installed (Keras's TensorBoard callback, --tensorboard_dir, needs it)"))
  rows.append(("tensorflow-datasets", _tfds(report)))
  rows.append(("pin this stack", "printf '%s\\n' " + " ".join(_stack.constraints())
               + " > constraints.txt; pip install -c constraints.txt ..."))
  return rows


def _overwritten(report: Report, library: str, distributions: List[str], cause: str = ""):
  """A problem where two or more distributions of `library` share one package folder."""
  if len(distributions) > 1:
    report.problems.append(
        f"{len(distributions)} {library} distributions are installed over one package folder "
        f"({', '.join(distributions)}): each overwrote the other's files. Uninstall all and "
        f"install one{cause}.")


def _tfds(report: Report) -> str:
  """TensorFlow Datasets' version, and whether it imports (it fails on protobuf mismatches)."""
  version = _stack.installed("tensorflow-datasets")
  if version is None:
    return "not installed (real TFDS files: in a clone of tfdist, pip install '.[tfds]')"
  if not _stack.tensorflow_distributions():
    return f"{version} (needs TensorFlow)"  # Its import would fail for that alone.
  try:
    import tensorflow_datasets as tfds
    tfds.core  # pylint: disable=pointless-statement  A broken install fails here, not at import.
  except Exception as e:  # pylint: disable=broad-except  Reported, not raised.
    cause = e.__cause__ or e.__context__ or e
    report.problems.append(
        f"tensorflow_datasets {version} does not import: {type(cause).__name__}: "
        f"{str(cause).splitlines()[0] if str(cause) else ''}. With an older TensorFlow, its "
        "tensorflow-metadata can need a newer protobuf than that TensorFlow allows: pip install "
        f"'tensorflow-metadata<1.18' fixes it (installed: tensorflow-metadata "
        f"{_stack.installed('tensorflow-metadata')}, protobuf {_stack.installed('protobuf')}).")
    return f"{version} (DOES NOT IMPORT)"
  return version


def _patches(report: Report) -> List[Tuple[str, str]]:
  """Each of tfdist's gated uses of private code: applied here, or what is lost and why."""
  libraries = gates_lib.installed()
  rows = []
  for name, gate, reason in gates_lib.report(libraries):
    if libraries.get(gate.library) is None:
      rows.append((name, f"n/a: {gate.library} is not installed"))
    elif reason is None:
      rows.append((name, f"applies ({gate.library} {'.'.join(map(str, libraries[gate.library]))})"))
    else:
      rows.append((name, f"NOT APPLIED: {gate.without}"))
      report.problems.append(f"{reason}: {gate.without}.")
  return rows


def _tf_keras_is() -> str:
  """What `tf.keras` is, or will resolve to, in this process."""
  flavour = keras_support.tf_keras_flavour()
  if flavour is None:  # Not loaded yet: say what it will resolve to.
    legacy = os.environ.get(keras_support.LEGACY_KERAS_ENV, "") in ("1", "true", "True")
    flavour = (f"{keras_support.TF_KERAS if legacy else keras_support.KERAS3} "
               f"({keras_support.LEGACY_KERAS_ENV}={os.environ.get(keras_support.LEGACY_KERAS_ENV, '')!s})")
  return flavour


def _devices() -> List[Tuple[str, str]]:
  from tfdist import devices
  listed = devices.list_devices()
  return [("physical", ", ".join(listed.physical)), ("logical", ", ".join(listed.logical))]


def _matrix() -> List[Tuple[str, str]]:
  """The documented matrix, with the installed Keras: a cell whose patch does not apply says so."""
  from tfdist.internals import keras as keras_internals  # Imports no Keras.
  libraries = gates_lib.installed()
  version = libraries["Keras"]
  rows = []
  for (flavour, strategy), (raw, tfdist) in keras_support.SUPPORT.items():
    # Before: tf_keras's cells said "works" where only Keras 3 is installed (TensorFlow 2.22).
    if libraries["tf_keras" if flavour == keras_support.TF_KERAS else "Keras"] is None:
      package = "tf-keras" if flavour == keras_support.TF_KERAS else "keras"
      rows.append((f"{flavour:8} {strategy}", f"NOT HERE: {package} is not installed"))
      continue
    patch = keras_support.RESTS_ON_PATCH.get((flavour, strategy))
    reason = None if patch is None or version is None else keras_internals.GATES[patch].reason(
        version)
    if reason is not None:  # Before: "works" on Keras 3.16, where the patch is refused.
      tfdist = f"NOT HERE: {keras_internals.GATES[patch].without} ({reason})"
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
  tf_keras = keras_support.optional_tf_keras()
  if tf_keras is None:  # Keras 3 alone: its one-step fits are tf_keras models.
    return [("every strategy", f"not measured: {keras_support.tf_keras_missing('this check')}")]
  import numpy as np
  from tfdist import strategies
  from tfdist.strategies import _keras_guard as keras_guard
  x = np.zeros((8, 2), "float32")
  rows = []
  for name in choices.strategy_names(choices.SINGLE_MACHINE):
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
  rows += [(name, "refused before the first step on CPUs: " + keras_guard.XLA_CPU_COLLECTIVES)
           for name in choices.strategy_names(choices.COLLECTIVE)]
  rows += [(name, "refused before the first step: " + keras_guard.XLA_PS_VARIABLES)
           for name in choices.strategy_names(choices.PARAMETER_SERVER)]
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
  low, high = _stack.SUPPORTED["tensorflow"]
  report.sections.append((f"stack (tfdist supports TensorFlow {low[0]}.{low[1]} to "
                          f"{high[0]}.{high[1]})", _stack_rows(report)))
  report.sections.append(("patches (tfdist.internals: each gated on the versions it was run "
                          "with)", _patches(report)))
  if not _stack.tensorflow_distributions():
    return report  # The rest needs TensorFlow.
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
