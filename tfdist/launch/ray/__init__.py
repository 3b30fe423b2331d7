"""The Ray backend: every task of a job on a Ray cluster (`tfdist launch --ray`).

`_launcher` supervises the tasks from this machine (`RayLauncher`),
`_placement` reserves their bundles and addresses, and `_task` is the process
that starts each task's Ray actor. Ray itself loads only when used.
"""

from tfdist.launch.ray._launcher import RayLauncher

__all__ = ["RayLauncher"]
