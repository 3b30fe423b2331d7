"""The SLURM backend: a job submitted with sbatch and followed to its end (`--slurm`).

`_launcher` renders `templates/slurm.sbatch` and waits for the job
(`SlurmLauncher`).
"""

from tfdist.launch.slurm._launcher import SlurmLauncher

__all__ = ["SlurmLauncher"]
