"""Strategies on this machine's devices: default, one_device, mirrored, central_storage.

Without GPUs, logical CPU devices stand in for them (`tfdist.devices`), so
mirrored and central_storage get one replica per logical device.
"""

import contextlib
import logging
from typing import List, Optional, Sequence

import tensorflow as tf

from tfdist._choices import CROSS_DEVICE_OPS  # Re-exported as tfdist.strategies.CROSS_DEVICE_OPS.
from tfdist._choices import Name
from tfdist.strategies import _keras_guard as keras_guard

logger = logging.getLogger("tfdist")


def default() -> tf.distribute.Strategy:
  """TensorFlow's default strategy: no distribution at all."""
  return tf.distribute.get_strategy()


def one_device(device: Optional[str] = None) -> tf.distribute.Strategy:
  """One device: the first GPU if there is one, else the CPU."""
  if device is None:
    device = "/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0"
  _check_devices("device", [device])
  return tf.distribute.OneDeviceStrategy(device)


def mirrored(devices: Optional[Sequence[str]] = None,
              cross_device_ops: str = "auto") -> tf.distribute.Strategy:
  """Synchronous replicas on this machine's devices.

  `devices` defaults to every GPU or, with none, every logical CPU device, so a
  CPU split by `tfdist.devices.split_physical_device(2)` gives two replicas.
  `cross_device_ops="auto"` uses NCCL with 2+ GPUs, else reduction to one device.
  """
  devices = _compute_devices(devices)
  return MirroredStrategy(
      devices, cross_device_ops=_cross_device_ops(cross_device_ops, devices))


class MirroredStrategy(keras_guard.RefusesJitCompile, tf.distribute.MirroredStrategy):
  """`tf.distribute.MirroredStrategy` that refuses XLA steps on several CPU devices.

  There XLA compiles each replica's step for one device while its variables
  live on the others ("Trying to access resource ... located in device CPU:1
  from device CPU:0", https://www.tensorflow.org/xla/known_issues#tfvariable_on_a_different_device;
  keras-team/keras#18145). Not measured on GPUs here, so not refused there.
  """

  _tfdist_name = Name.MIRRORED

  def _jit_failure(self):
    if len(self.extended.worker_devices) > 1 and keras_guard.on_cpus(self):
      return keras_guard.XLA_OTHER_DEVICES
    return None


class CentralStorageStrategy(tf.distribute.experimental.CentralStorageStrategy):
  """`CentralStorageStrategy` under which Keras's own state variables work.

  Under central storage a variable is an AggregatingVariable, and assigning
  one in replica context raises "You must specify an aggregation method" when
  it was created without one. Keras creates several that way and assigns them
  inside the step: tf_keras's optimizer keeps a schedule's current value in
  one, and Keras 3 creates batch normalization's moving statistics and its
  random layers' seed state without an aggregation. Here they get one:
  replicas that compute the same value (the learning rate, a seed) give the
  first replica's, which is exact; moving statistics, which differ per
  replica, are averaged, as tf_keras's own (sync-on-read, mean) are.
  """

  def scope(self):
    stack = contextlib.ExitStack()
    stack.enter_context(super().scope())
    stack.enter_context(tf.variable_creator_scope(_aggregate_keras_state))
    return stack


def _aggregate_keras_state(next_creator, **kwargs):
  if kwargs.get("aggregation") in (None, tf.VariableAggregation.NONE) and (
      kwargs.get("name") == "current_learning_rate" or kwargs.get("trainable") is False):
    dtype = tf.as_dtype(kwargs.get("dtype") or tf.float32)
    averaged = dtype.is_floating and kwargs.get("name") != "current_learning_rate"
    kwargs["aggregation"] = (tf.VariableAggregation.MEAN if averaged
                             else tf.VariableAggregation.ONLY_FIRST_REPLICA)
  return next_creator(**kwargs)


def central_storage(devices: Optional[Sequence[str]] = None,
                     parameter_device: Optional[str] = None) -> tf.distribute.Strategy:
  """Replicated compute, variables kept once on `parameter_device` (default the CPU)."""
  devices = _compute_devices(devices)
  if parameter_device is not None:
    _check_devices("parameter_device", [parameter_device])
  return CentralStorageStrategy(compute_devices=devices, parameter_device=parameter_device)


def _compute_devices(devices: Optional[Sequence[str]]) -> List[str]:
  if devices is None:
    found = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    return [d.name for d in found]
  if isinstance(devices, str) or not devices:
    raise ValueError(
        "`devices` must be a non-empty list of device names, e.g. "
        f"['/cpu:0', '/cpu:1']. Received: devices={devices!r}")
  _check_devices("devices", devices)
  return list(devices)


def _check_devices(field: str, devices: Sequence[str]) -> None:
  known = [d.name for d in tf.config.list_logical_devices()]
  # Compare type and index only: '/cpu:0' and '/job:localhost/device:CPU:0' are one device.
  available = {_type_and_index(tf.DeviceSpec.from_string(d)) for d in known}
  for device in devices:
    try:
      spec = tf.DeviceSpec.from_string(device)
    except (ValueError, TypeError):
      spec = None
    if spec is None or not spec.device_type:
      raise ValueError(
          f"`{field}` entry is not a device name like '/cpu:0' or '/gpu:1'. "
          f"Received: {device!r}")
    if _type_and_index(spec) not in available:
      raise ValueError(
          f"`{field}` names a device this process does not have. Available: "
          f"{known}. To get more CPU devices, call "
          "tfdist.devices.split_physical_device(n) before TensorFlow starts. "
          f"Received: {device!r}")


def _type_and_index(spec: "tf.DeviceSpec"):
  return spec.device_type.upper(), spec.device_index or 0


def _cross_device_ops(name: str, devices: Sequence[str]):
  if name not in CROSS_DEVICE_OPS:
    raise ValueError(
        f"`cross_device_ops` must be one of {list(CROSS_DEVICE_OPS)}. Received: {name!r}")
  num_gpus = sum("GPU" in d.upper() for d in devices)
  if name == "auto":
    if num_gpus >= 2:
      return tf.distribute.NcclAllReduce()
    # Not TF's default (CollectiveAllReduce): its collective keys restart with every
    # new strategy, so a second MirroredStrategy in the same process (a notebook
    # cell run twice, models trained in a loop) aborts with "Shape mismatch in the
    # collective instance 100" (tensorflow/tensorflow#62790). Reducing on one
    # device keeps no such state and costs little without GPUs.
    name = "reduction_to_one_device"
  if name == "nccl" and num_gpus < 2:
    logger.warning(
        "cross_device_ops='nccl' needs 2 or more GPUs, but the replicas are on %s; "
        "falling back to 'reduction_to_one_device'. Pass "
        "cross_device_ops='reduction_to_one_device' to silence this.", list(devices))
    name = "reduction_to_one_device"
  return {
      "nccl": tf.distribute.NcclAllReduce,
      "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
      "reduction_to_one_device": tf.distribute.ReductionToOneDevice,
  }[name]()
