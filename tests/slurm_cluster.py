"""A real SLURM on localhost for tests: munged, slurmctld and slurmd (Debian's slurm-wlm).

`.ci/run` installs the packages; `LocalSlurm.start()` writes a munge key and a
slurm.conf in a temp directory, starts the daemons and waits until the node is
idle. `stop()` kills them. Needs root, as SLURM's daemons do. The daemons, and the `srun`
of each step, listen on loopback only (`CommunicationParameters` below).
"""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Optional

from tfdist.cluster import pick_unused_ports

_CONF = """\
ClusterName=tfdist
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
# The daemons bind to the addresses below, loopback, not to every interface: nothing the
# suite starts may be reached from beyond this machine.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
# Ports reserved per job step, as a shared cluster should configure it: tfdist's
# tasks then listen on SLURM_STEP_RESV_PORTS, which no other step on the node gets.
MpiParams=ports=30000-30999
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def unavailable_reason() -> Optional[str]:
  """Why a local SLURM cannot run here, or None if it can."""
  missing = [b for b in ("slurmctld", "slurmd", "munged", "sbatch") if not shutil.which(b)]
  if missing:
    return f"SLURM is not installed ({missing} missing): apt-get install slurm-wlm munge"
  if os.geteuid() != 0:
    return "SLURM's daemons need root here"
  return None


class LocalSlurm:
  """slurmctld + slurmd on this machine, with one partition `debug`."""

  def __init__(self):
    self.root = tempfile.mkdtemp(prefix="tfdist-slurm-")
    self.conf = os.path.join(self.root, "slurm.conf")
    self.host = socket.gethostname().split(".")[0]
    self.env = dict(os.environ, SLURM_CONF=self.conf)
    self._daemons = []

  def start(self, timeout: float = 60) -> "LocalSlurm":
    for sub in ("state", "spool"):
      os.makedirs(os.path.join(self.root, sub))
    # Two distinct ports, below the range outgoing connections take theirs from.
    ctld_port, d_port = pick_unused_ports(2)
    with open(self.conf, "w") as f:
      f.write(_CONF.format(host=self.host, root=self.root, cpus=os.cpu_count(),
                           ctld_port=ctld_port, d_port=d_port))
    self._start_munge()
    for daemon in ("slurmctld", "slurmd"):
      # -D: stay in the foreground, so we own the process and can stop it.
      self._daemons.append(subprocess.Popen(
          [daemon, "-D", "-f", self.conf], env=self.env, stdout=subprocess.DEVNULL,
          stderr=subprocess.DEVNULL, start_new_session=True))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True,
                             text=True, timeout=10).stdout.strip()
      if state in ("idle", "mix", "alloc"):
        return self
      time.sleep(0.5)
    self.stop(keep_logs=True)
    raise RuntimeError(f"SLURM did not come up within {timeout}s; logs in {self.root}")

  def _start_munge(self) -> None:
    # `munge -n` succeeds only when a munged is already answering.
    if subprocess.run(["munge", "-n"], capture_output=True, timeout=30).returncode == 0:
      return
    key = "/etc/munge/munge.key"
    if not os.path.exists(key):
      os.makedirs("/etc/munge", exist_ok=True)
      with open(key, "wb") as f:
        f.write(os.urandom(1024))
    munge = pwd.getpwnam("munge")
    for folder in ("/etc/munge", "/var/lib/munge", "/var/log/munge", "/run/munge"):
      os.makedirs(folder, exist_ok=True)
      os.chown(folder, munge.pw_uid, munge.pw_gid)
    os.chown(key, munge.pw_uid, munge.pw_gid)
    os.chmod(key, 0o400)
    subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True, timeout=30)

  def stop(self, keep_logs: bool = False) -> None:
    """Stops the daemons and removes their folder, unless `keep_logs` (for a failed start)."""
    subprocess.run(["scancel", "--user=root"], env=self.env, capture_output=True, timeout=30)
    for process in self._daemons:
      try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
      except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(process.pid, signal.SIGKILL)
    self._daemons.clear()
    if not keep_logs:
      shutil.rmtree(self.root, ignore_errors=True)
