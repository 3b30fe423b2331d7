"""tfdist.devices: logical devices, memory growth, placement contexts."""

import pytest
import tensorflow as tf

import helpers
from tfdist import devices


def test_conftest_split_the_cpu_in_two():
  listed = devices.list_devices()
  assert listed.physical == ["/physical_device:CPU:0"]
  assert listed.logical == ["/device:CPU:0", "/device:CPU:1"]
  assert "logical:  /device:CPU:0, /device:CPU:1" in str(listed)


def test_split_again_with_the_same_count_is_a_no_op():
  devices.split_physical_device(2)


def test_split_after_start_is_a_clear_error():
  with pytest.raises(RuntimeError, match=r"TensorFlow has already started with 2.*first thing "
                     r"in the program.*Received: num_devices=3"):
    devices.split_physical_device(3)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_devices": 0}, r"`num_devices` must be an integer >= 1. Received: 0"),
    ({"num_devices": 2, "device_type": "TPU"}, r"`device_type` must be 'CPU' or 'GPU'"),
    ({"num_devices": 2, "device_type": "GPU"}, r"needs `memory_limit_mb`"),
    ({"num_devices": 2, "device_type": "GPU", "memory_limit_mb": 1024},
     r"no physical GPU. Received: device_type='GPU'"),
])
def test_split_errors(kwargs, match):
  with pytest.raises(ValueError, match=match):
    devices.split_physical_device(**kwargs)


def _last_line_in_a_fresh_process(code: str) -> str:
  """Runs `code` in a new Python (TF's runtime config is per process); its last stdout line."""
  result = helpers.run(helpers.python("-c", code), timeout=120)
  lines = result.stdout.strip().splitlines()
  assert lines, result.stdout[-2000:]
  return lines[-1]


@pytest.mark.slow
def test_split_in_a_fresh_process_gives_four_devices():
  assert _last_line_in_a_fresh_process(
      "import tfdist; tfdist.devices.split_physical_device(4); import tensorflow as tf; "
      "print(len(tf.config.list_logical_devices('CPU')))") == "4"


@pytest.mark.slow
def test_split_gives_each_logical_cpu_its_share_of_the_cores():
  line = _last_line_in_a_fresh_process(
      "import os, tfdist; tfdist.devices.split_physical_device(2); import tensorflow as tf; "
      "t = tf.config.threading; tf.constant(1); "
      "print(len(os.sched_getaffinity(0)), t.get_intra_op_parallelism_threads(), "
      "t.get_inter_op_parallelism_threads())")
  cores, intra, inter = map(int, line.split())
  assert (intra, inter) == (max(1, cores // 2), max(cores, 2))


@pytest.mark.slow
def test_split_keeps_thread_counts_the_program_set():
  assert _last_line_in_a_fresh_process(
      "import tensorflow as tf, tfdist; t = tf.config.threading; "
      "t.set_intra_op_parallelism_threads(3); "
      "tfdist.devices.split_physical_device(2); "
      "print(t.get_intra_op_parallelism_threads())") == "3"


def test_memory_growth_is_a_no_op_without_gpus():
  assert devices.set_memory_growth() == []


def test_preprocessing_device_places_ops_on_the_cpu():
  @tf.function
  def preprocess(x):
    with devices.preprocessing_device("/cpu:1"):
      return tf.image.flip_left_right(x)
  graph = preprocess.get_concrete_function(tf.TensorSpec((2, 4, 4, 1))).graph
  flips = [op for op in graph.get_operations() if op.type == "ReverseV2"]
  assert flips and all(op.device.endswith("CPU:1") for op in flips)


@pytest.mark.slow
def test_log_device_placement_logs():
  code = ("import tfdist; import tensorflow as tf; tfdist.devices.log_device_placement(); "
          "tf.constant([1.0]) + tf.constant([2.0])")
  result = helpers.run(helpers.python("-c", code), timeout=120,
                       env={"TF_CPP_MIN_LOG_LEVEL": "0"})
  assert "Executing op AddV2 in device /job:localhost/replica:0/task:0/device:CPU:0" \
      in result.stdout, result.stdout[-2000:]
