"""The named choices of strategies and jobs, importable without TensorFlow.

The command line lists them in `--help` and checks flags against them before
anything imports TensorFlow (seconds per process); the modules that act on a
choice raise with the same list.
"""

# MirroredStrategy's all-reduce across the devices of one machine.
CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical_copy", "reduction_to_one_device")
# MultiWorkerMirroredStrategy's collective implementation.
COMMUNICATION = ("auto", "ring", "nccl")
# How the learning rate follows the global batch (tfdist.training.scaling).
SCALING_RULES = ("linear", "sqrt", "none")
