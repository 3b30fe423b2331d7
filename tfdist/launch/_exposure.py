"""What a job's TensorFlow servers leave open on the network, and the fix, per launcher.

TensorFlow's gRPC servers (every cluster task) and the tf.data service's
servers listen on every interface and take requests without authentication:
whoever reaches a port can run graph ops, hence read and write files and run
code, as the job's user (TensorFlow's SECURITY.md: the distributed runtime
"is not built for use in an untrusted network"). Locally, tfdist runs the
tasks in a private network namespace (`tfdist.launch.private_network`); on
nodes it does not own (SLURM, Ray) it cannot close the ports, so it names
them at launch, and `tfdist doctor` names them too.

Example:

    >>> exposure.warning("slurm", "ports 20042-20043")
    "TensorFlow's servers of this job listen on ports 20042-20043 of every interface ..."
"""

from typing import Iterable

# Where the ports are, and what closes them, per launcher.
PORTS = {
    "slurm": ("ports 20000-39999 of the compute nodes (20000 + job id % 20000 + the "
              "task's index on its node; `squeue` shows node and job id to every user), "
              "or the range SLURM reserves with MpiParams=ports=, where a job's tasks span "
              "several nodes (on one node they run in a private network namespace)"),
    "ray": ("a free port per task, and the tf.data service's, on each task's Ray node; "
            "Ray's token authentication covers Ray's own ports, not these"),
}
FIXES = {
    "slurm": ("run the nodes on a fabric only the cluster's own hosts reach, or firewall "
              "the port range to them (e.g. MpiParams=ports=12000-12999 in slurm.conf, "
              "and a rule that admits that range from the compute nodes only)"),
    "ray": ("keep the Ray nodes on a network only they reach, or firewall every port "
            "but Ray's to the cluster's own hosts; turn on Ray's token authentication "
            "(RAY_AUTH_MODE=token) for Ray's own ports"),
}
GUIDE = "docs/guides/security.md"


def ranges(ports: Iterable[int]) -> str:
  """"ports 20042-20043, 20050" for [20042, 20043, 20050]."""
  ordered, spans = sorted(set(ports)), []
  for port in ordered:
    if spans and port == spans[-1][1] + 1:
      spans[-1][1] = port
    else:
      spans.append([port, port])
  text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
  return f"port{'s' if len(ordered) != 1 else ''} {text}"


def warning(launcher: str, ports: str) -> str:
  """One line for the launch: `ports` ("ports 20042-20043") open on the nodes, and the fix."""
  return (f"TensorFlow's servers of this job listen on {ports} of every interface of its "
          f"nodes, without authentication: any host that reaches a node can run code there "
          f"as this job's user. Fix: {FIXES[launcher]}. See {GUIDE}")


def doctor_row(launcher: str) -> str:
  """What `tfdist doctor` says of `launcher`'s servers."""
  return (f"{PORTS[launcher]}: reachable from every host that reaches the nodes, without "
          f"authentication. Fix: {FIXES[launcher]}")
