"""Submitting a tfdist job to SLURM with sbatch, and waiting for it.

`submit_and_wait(["python", "train.py"], ntasks=2)` renders the sbatch template
(`tfdist/launch/slurm/templates/slurm.sbatch`; `launch/slurm/tfdist.sbatch`, where
users read and copy it, is a link to it, checked by a test), submits it,
streams the job's output as it grows, and returns the job's exit code. The
script it submits runs

    srun --kill-on-bad-exit=1 --label --ntasks=N python -m tfdist.launch._task -- python train.py

so every task's line starts with its rank, and one failing task ends the job.
srun then returns the highest exit code of its tasks, 143 for those it
stopped; the launch returns the code of the task that failed first instead,
and names it (`tfdist.launch._first_failure`).
The task wrapper (`tfdist.launch._task`, as `tfdist task` runs it) gives each
task its `TF_CONFIG`, built from
SLURM's variables (`tfdist.cluster._slurm`), and tfdist's task site, and in a
job of two or more training tasks watches its steps for stalls beside it
(`tfdist.launch.watchdog.watch_task`; `--stall_timeout` reaches it as
`TFDIST_STALL_TIMEOUT`): a stalled task prints its stacks and where it is,
and exits 3, which ends the step. At the end the launch says when no two
tasks ever joined a collective (`tfdist.task._trains_alone`; the tasks
leave their records in a folder of the job's work directory, which its nodes
share, as they share the job's output). A job of one task runs its command
as it is.

The script goes to sbatch on stdin, as rendered; a copy for the user to read is
written beside the job's output under a fresh name, readable by its owner only.
Job names and extra directives are checked (one line, sane characters: a newline
in a `#SBATCH` line would add shell lines) and paths are shell-quoted. The
tasks' TensorFlow servers listen on ports every host that reaches the nodes can
reach; the launch says which (`tfdist.launch._exposure`). Where every task is on
one node, the script runs them in a private network namespace with only
loopback, as local launches do (`TFDIST_NETWORK=host` at submission opts out).
"""

import os
import re
import shlex
import string
import subprocess
import sys
import tempfile
import time
from typing import Mapping, Optional, Sequence, TextIO

from tfdist.cluster import _data_service as data_service_lib
from tfdist.cluster import _slurm as slurm_cluster
from tfdist.launch import _exposure as exposure
from tfdist.launch import _first_failure as first_failure
from tfdist.launch import _launcher as launcher_lib
from tfdist.task import _trains_alone as trains_alone
from tfdist.launch import watchdog

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "slurm.sbatch")
_POLL_SECONDS = 1.0
# What sbatch takes in --job-name here: no spaces or shell characters.
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class SlurmError(launcher_lib.LaunchError):
  """sbatch, squeue or scontrol failed or said something unexpected."""


# The tf.data service's steps, when there are data workers. They run beside the
# training step on the allocation's CPUs (--overlap), in the background, and
# end with the job; their output goes to files beside the job's. The
# dispatcher takes a free port of the first node (where this script runs);
# data workers take any port and register as "<their node>:<port>" (TF fills
# in %port%). SLURM does not restart a lost one: the job then stops at its
# time limit or --timeout (a local launch restarts them).
_DATA_SERVICE = """\
# tf.data service (tfdist launch --data_workers): a dispatcher on this node and
# ${data_workers} data worker(s), beside the training step; trainers read
# through it with tfdist.data.service.distribute.
data_host=$${tfdist_host:-$$(hostname)}
data_port=$$(${net}${python} -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
export ${service_env}="${protocol}://$$data_host:$$data_port"
export ${job_env}="slurm-$$SLURM_JOB_ID"
srun --overlap --nodes=1 --ntasks=1 --relative=0 --output=${dispatcher_output} \\
  ${net}${python} -m tfdist.launch._serve_data_service --role=dispatcher --port="$$data_port" ${journal} &
srun --overlap --ntasks=${data_workers} --output=${data_worker_output} \\
  ${net}bash -c 'exec "$$0" -m tfdist.launch._serve_data_service --role=worker --port=0 \\
    --dispatcher_address="$$1" --worker_address="$${2:-$$(hostname)}:%port%"' \\
  ${python} "$$data_host:$$data_port" "$${tfdist_host:-}" &
"""

# Where every task is on one node, they run in a private network namespace
# with only loopback, as `tfdist launch` runs them locally
# (`tfdist.launch.private_network`): a holder process makes it and each task
# joins it (nsenter), with `localhost` in its cluster (`tfdist.cluster._slurm`).
# Where none can be made, the job says so and runs on the node's network.
_PRIVATE_NETWORK = """\
# One node: a private network namespace with only loopback, which nothing
# outside reaches (TFDIST_NETWORK=host at submission keeps the node's network).
tfdist_net=""  # Words without spaces: expanded unquoted, also by bash before 4.4.
if [ "$${SLURM_JOB_NUM_NODES:-1}" = 1 ] && [ "$${TFDIST_NETWORK:-auto}" != host ]; then
  coproc tfdist_holder { exec unshare --user --map-root-user --net -- ${python} -c \\
    'from tfdist.launch import private_network as p; p.loopback_up(); print("ready", flush=True); input()' \\
    2>/dev/null; }
  # Bash unsets the array once the holder has exited (unshare refused): under set -u, a default.
  tfdist_holder_out="$${tfdist_holder[0]:-}"
  if [ -n "$$tfdist_holder_out" ] && read -r -t 30 tfdist_ready <&"$$tfdist_holder_out" \
      && [ "$$tfdist_ready" = ready ]; then
    tfdist_net="nsenter --target=$$tfdist_holder_PID --user --net --preserve-credentials --"
    tfdist_host=localhost
    export ${loopback_env}=1
    echo "tfdist: every task is on $$(hostname): they run in a private network namespace with only loopback"
  else
    echo "tfdist: WARNING: no private network namespace on $$(hostname) (are unprivileged user namespaces disabled?): the tasks listen on its network"
  fi
fi
"""


def check_names(job_name: str, extra_directives: Sequence[str], *paths: str) -> None:
  """Raises ValueError for a job name, directive or path that would not stay on its line.

  A newline in a `#SBATCH` line would start a line of the script's shell.
  """
  if not isinstance(job_name, str) or not _JOB_NAME.fullmatch(job_name):
    raise ValueError("`job_name` must be 1-64 letters, digits, '.', '_' or '-', starting with "
                     f"a letter or digit, e.g. 'tfdist-mnist'. Received: job_name={job_name!r}")
  for i, directive in enumerate(extra_directives):
    if (not isinstance(directive, str) or not directive.startswith("-")
        or any(c in directive for c in "\n\r\0")):
      raise ValueError(f"--sbatch (extra_directives[{i}]) must be one sbatch option on one "
                       "line, e.g. --sbatch=--partition=gpu; put several in several --sbatch "
                       f"flags. Received: {directive!r}")
  for path in paths:
    if path is not None and any(c in path for c in "\n\r\0"):
      raise ValueError("A path of the job (--work_dir, --data_work_dir) must not "
                       f"hold a newline: it would break the sbatch script. Received: {path!r}")


def render(command: Sequence[str], *, ntasks: int, output: str, num_ps: int = 0,
           job_name: str = "tfdist", time_minutes: int = 60,
           extra_directives: Sequence[str] = (), template: Optional[str] = None,
           data_workers: int = 0, data_work_dir: Optional[str] = None,
           max_restarts: int = 0) -> str:
  """The sbatch script text for `command`.

  `max_restarts`: a failed step runs again this many times in all, in the
  same allocation (no new wait in the queue); the command resumes from its
  backup.

  Raises:
    ValueError: too few tasks, a template field left unfilled, data workers
      or restarts with a template that has no place for them, or a job name,
      directive or path that would not stay on its line (`check_names`).
  """
  if ntasks < 1:
    raise ValueError(f"`ntasks` must be >= 1. Received: {ntasks!r}")
  if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
    raise ValueError(f"`max_restarts` must be an int >= 0. Received: {max_restarts!r}")
  check_names(job_name, extra_directives, output, data_work_dir)
  with open(template or TEMPLATE) as f:
    text = f.read()
  # A template without the field (a user's older copy) runs on the nodes' network.
  private = "${private_network}" in text
  net = "$tfdist_net " if private else ""
  data_service = ""
  if data_workers:
    if "${data_service}" not in text:
      raise ValueError(
          f"The sbatch template {template or TEMPLATE} has no ${{data_service}} line, where the tf.data "
          "service's steps go: add one before the training srun, as in "
          f"{TEMPLATE}. Received: data_workers={data_workers}")
    journal = f"--work_dir={shlex.quote(data_work_dir)}" if data_work_dir else ""
    data_service = string.Template(_DATA_SERVICE).substitute(
        data_workers=data_workers, python=shlex.quote(sys.executable), journal=journal, net=net,
        dispatcher_output=shlex.quote(f"{output}.dispatcher"),
        data_worker_output=shlex.quote(f"{output}.data_worker_%t"),
        service_env=data_service_lib.SERVICE_ENV,
        job_env=data_service_lib.JOB_ENV, protocol=data_service_lib.PROTOCOL)
  if max_restarts and "${max_restarts}" not in text:
    raise ValueError(
        f"The sbatch template {template or TEMPLATE} has no ${{max_restarts}} field, where "
        f"a failed step runs again: copy the srun loop of {TEMPLATE}. "
        f"Received: max_restarts={max_restarts}")
  if ntasks > 1:  # One task is no cluster the task wrapper knows (`tfdist.cluster._slurm`).
    command = [sys.executable, "-m", "tfdist.launch._task", "--", *command]
  try:
    return string.Template(text).substitute(
        job_name=job_name, ntasks=ntasks, output=shlex.quote(output), time_minutes=time_minutes,
        num_ps=num_ps, command=net + shlex.join(command), data_service=data_service,
        max_restarts=max_restarts,
        private_network=string.Template(_PRIVATE_NETWORK).substitute(
            python=shlex.quote(sys.executable), loopback_env=slurm_cluster.LOOPBACK_ENV),
        # srun cannot start more tasks in a step than the job has.
        allocated_tasks=max(ntasks, data_workers),
        extra_directives="\n".join(f"#SBATCH {d}" for d in extra_directives))
  except (KeyError, ValueError) as e:
    raise ValueError(f"The sbatch template {template or TEMPLATE} has a field tfdist does "
                     f"not fill. Received: {e}") from e


def _ports(job_id: str, ntasks: int, env: Mapping[str, str]) -> str:
  """The ports the job's tasks take on their nodes (`tfdist.cluster._slurm`), in words."""
  try:
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                            timeout=60, env=dict(env)).stdout
  except (OSError, subprocess.SubprocessError):
    config = ""
  reserved = re.search(r"^MpiParams\s*=\s*ports=(\d+-\d+)", config, re.M)
  if reserved:  # SLURM hands each step some of these (SLURM_STEP_RESV_PORTS).
    where = f"ports in {reserved.group(1)} (SLURM's MpiParams=ports=)"
  else:
    base = slurm_cluster.port_base({**env, "SLURM_JOB_ID": job_id})
    where = exposure.ranges(range(base, base + ntasks))
  return (f"{where}, and any free port for a tf.data service, if its tasks span several "
          "nodes (on one node they run in a private network namespace; the job's first "
          "lines say which),")


def _run(args: Sequence[str], env: Optional[Mapping[str, str]],
         stdin: Optional[str] = None) -> str:
  try:
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=60,
                            env=None if env is None else dict(env), input=stdin)
  except FileNotFoundError as e:
    raise SlurmError(
        f"`{args[0]}` is not installed here: run on a SLURM login node, or install "
        f"SLURM's client tools (Debian: slurm-client). Received: {e}") from e
  if result.returncode != 0:
    raise SlurmError(f"`{shlex.join(args)}` failed with exit code {result.returncode}: "
                     f"{result.stderr.strip() or result.stdout.strip()}")
  return result.stdout


def job_state(job_id: str, env=None) -> Optional[str]:
  """The job's state (RUNNING, COMPLETED, ...), or None once SLURM forgot it."""
  out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True,
                       timeout=60, env=None if env is None else dict(env)).stdout
  match = re.search(r"JobState=(\w+)", out)
  return match.group(1) if match else None


def exit_code(job_id: str, env=None) -> int:
  """The job's exit code (a signal counts as 128 + signal)."""
  out = _run(["scontrol", "show", "job", job_id], env)
  match = re.search(r"\bExitCode=(\d+):(\d+)", out)
  if not match:
    raise SlurmError(f"No ExitCode in `scontrol show job {job_id}`. Received: {out[:500]!r}")
  code, signal_number = int(match.group(1)), int(match.group(2))
  return code if code or not signal_number else 128 + signal_number


_DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def submit_and_wait(command: Sequence[str], *, ntasks: int, num_ps: int = 0,
                    options: Optional[launcher_lib.LaunchOptions] = None,
                    workdir: Optional[str] = None, **render_options) -> int:
  """Submits `command` as an ntasks-task job, streams its output, returns its exit code.

  Args:
    command: what every task runs.
    ntasks: SLURM tasks, one TensorFlow task each.
    num_ps: parameter servers among them (task 0 is then the chief).
    options: what every launcher shares (`tfdist.launch.LaunchOptions`). Here
      `timeout` cancels the job (exit code 124); sbatch exports `env` (default:
      this process's) with the tasks' Keras and the stall watch, profile and
      trains-alone settings; `output` gets the job's lines; a failed step runs
      again up to `max_restarts` times in the same allocation. SLURM's own
      KillWait, not `grace_period`, is the time between SIGTERM and SIGKILL.
    workdir: where the script and the job's output go (default: current dir).
    **render_options: passed to `render` (job_name, time_minutes, template,
      extra_directives, data_workers).

  Returns:
    The job's exit code; 124 after `timeout`; TRAINS_ALONE_EXIT_CODE of
    `tfdist.task._trains_alone` for a job that passed although no two tasks
    joined a collective, under TFDIST_TRAINS_ALONE=error.

  Raises:
    SlurmError: sbatch failed, e.g. no SLURM controller.
    ValueError: a bad TFDIST_TRAINS_ALONE or TFDIST_STALL_TIMEOUT, what `render` refuses,
      or tf_keras chosen where it is not installed (`LaunchOptions.environment`).
  """
  options = options or launcher_lib.LaunchOptions()
  output, timeout = options.output or sys.stdout, options.timeout
  render_options.update(max_restarts=options.max_restarts,
                        data_work_dir=options.data_work_dir)
  env = options.environment(here=True)  # The tasks run this Python (`render`).
  # A bad TFDIST_TRAINS_ALONE or TFDIST_STALL_TIMEOUT fails now, not after the job or in every task.
  trains_alone.mode(env)
  watchdog.resolve_timeout(None, ntasks, env)
  workdir = os.path.abspath(workdir or os.getcwd())
  log_path = os.path.join(workdir, "tfdist-slurm-%j.out")
  script = render(command, ntasks=ntasks, num_ps=num_ps, output=log_path, **render_options)
  # A copy to read: a fresh name (O_EXCL), mode 0600, never an existing file or link.
  descriptor, script_path = tempfile.mkstemp(prefix="tfdist-job-", suffix=".sbatch",
                                             dir=workdir)
  with os.fdopen(descriptor, "w") as f:
    f.write(script)

  def report(line: str) -> None:
    output.write(f"[tfdist launch] {line}\n")
    output.flush()

  # The tasks' records of joining a collective, where every node reads the job's files.
  with trains_alone.joined_folder(env, parent=workdir) as joined_dir:
    # sbatch reads what was rendered, not a file someone could change in between.
    job_id = _run(["sbatch", "--parsable", f"--chdir={workdir}"], env,
                  script).strip().split(";")[0]
    report(f"submitted SLURM job {job_id} ({script_path})")
    report(exposure.warning("slurm", _ports(job_id, ntasks, env)))
    code = _follow(job_id, log_path.replace("%j", job_id), timeout, env, output)
    # A job that passed, or that the launch cancelled, keeps its code whatever was left.
    found = None if code in (0, 124) else first_failure.first(joined_dir)
    if found and found[1] != code:
      # srun returns the highest code, 143 for the peers it stopped: the cause is the first.
      report(f"{found[0]} failed first, with exit code {found[1]}; SLURM then stopped the "
             f"other tasks, and srun's {code} is theirs. The launch exits {found[1]} (only "
             "training tasks leave this record; a parameter server does not)")
      code = found[1]
    summary = watchdog.step_summary(joined_dir)  # The rows the tasks' wrappers kept.
    if summary:
      report(summary)
    return trains_alone.job_end(code, joined_dir, env, report)


def _follow(job_id: str, log_path: str, timeout: Optional[float], env: Mapping[str, str],
            output: TextIO) -> int:
  """Streams the job's output until it ends (or is cancelled after `timeout`); its exit code."""
  deadline = None if timeout is None else time.monotonic() + timeout
  position = 0
  while True:
    state = job_state(job_id, env)
    position = _stream(log_path, position, output)
    if state is None or state in _DONE:
      break
    if deadline is not None and time.monotonic() > deadline:
      subprocess.run(["scancel", job_id], env=None if env is None else dict(env),
                     capture_output=True, timeout=60)
      output.write(f"[tfdist launch] timeout after {timeout:g}s: cancelled job {job_id}\n")
      return 124
    time.sleep(_POLL_SECONDS)
  time.sleep(_POLL_SECONDS)  # Let the last lines reach the file.
  _stream(log_path, position, output)
  code = exit_code(job_id, env)
  output.write(f"[tfdist launch] SLURM job {job_id} ended {state}, exit code {code}\n")
  output.flush()
  return code


def _stream(path: str, position: int, output: TextIO) -> int:
  if not os.path.exists(path):
    return position
  with open(path, "rb") as f:
    f.seek(position)
    data = f.read()
  # Only whole lines: a half-written one comes next time.
  end = data.rfind(b"\n") + 1
  if end:
    output.write(data[:end].decode("utf-8", errors="replace"))
    output.flush()
  return position + end


class SlurmLauncher(launcher_lib.Launcher):
  """One SLURM task per TF task, submitted with sbatch (`submit_and_wait`)."""

  name = "slurm"

  def __init__(self, options: Optional[launcher_lib.LaunchOptions] = None, *,
               workdir: Optional[str] = None, job_name: str = "tfdist",
               time_minutes: int = 60, extra_directives: Sequence[str] = (),
               template: Optional[str] = None):
    super().__init__(options)
    self.workdir = workdir
    self.render_options = dict(job_name=job_name, time_minutes=time_minutes,
                               extra_directives=tuple(extra_directives), template=template)

  def launch(self, command: Sequence[str], job: launcher_lib.Job) -> int:
    job, note = launcher_lib.with_coordinator(job)
    if note:
      (self.options.output or sys.stdout).write(f"[tfdist launch] {note}\n")
    return submit_and_wait(command, ntasks=job.num_tasks, num_ps=job.ps, options=self.options,
                           workdir=self.workdir, data_workers=job.data_workers,
                           **self.render_options)
