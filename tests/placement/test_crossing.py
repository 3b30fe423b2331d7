"""placement._crossing: the bytes a traced step reads across devices, counted in its graph."""

import logging

import pytest
import tensorflow as tf

from tfdist import placement
from tfdist.placement import _crossing

N = 64  # A (N, N) float32 matrix: 16 KiB.
MATRIX = N * N * 4


def _matrix(device):
  with tf.device(device):
    return tf.random.normal((N, N))


def test_nothing_crosses_on_one_device():
  x = _matrix("/cpu:0")

  @tf.function
  def step():
    return tf.nn.relu(tf.matmul(x, x))

  assert placement.bytes_crossing(step) == {}


def test_an_input_read_on_the_other_device_counts_once_however_many_ops_read_it():
  x = _matrix("/cpu:0")

  @tf.function
  def step():
    with tf.device("/cpu:1"):
      return tf.matmul(x, x) + tf.reduce_sum(x)  # Three reads of x on CPU:1.

  crossing = placement.bytes_crossing(step)
  # x to CPU:1 once; and the result back to CPU:0, where a function's results return.
  assert sorted(crossing.values()) == [MATRIX, MATRIX], crossing
  assert sorted(device for _, device in crossing) == ["CPU:0", "CPU:1"], crossing


def _two_layers():
  with tf.device("/cpu:0"):
    first = tf.Variable(tf.ones((N, N)))
  with tf.device("/cpu:1"):
    second = tf.Variable(tf.ones((N, N)))
  return first, second


def test_the_backward_pass_runs_where_the_tape_is_asked_so_a_weight_crosses_and_back():
  first, second = _two_layers()
  x = _matrix("/cpu:0")

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      with tf.device("/cpu:0"):
        h = tf.matmul(x, first)
      with tf.device("/cpu:1"):
        loss = tf.reduce_sum(tf.matmul(h, second))
    gradients = tape.gradient(loss, [first, second])  # Asks for no device: CPU:0.
    for variable, gradient in zip([first, second], gradients):
      with tf.device(variable.device):
        variable.assign_sub(gradient)

  crossing = placement.bytes_crossing(step)
  # h to CPU:1; second's value to CPU:0 for the backward pass, and its gradient back.
  assert sorted(crossing.values()) == [MATRIX] * 3, crossing
  assert sorted(device for _, device in crossing) == ["CPU:0", "CPU:1", "CPU:1"], crossing
  assert any(name.endswith("ReadVariableOp:0") and device == "CPU:0"
             for name, device in crossing), crossing


def test_a_backward_pass_kept_on_each_device_moves_only_the_activation_and_its_gradient():
  first, second = _two_layers()
  x = _matrix("/cpu:0")

  def on(device, a, variable):  # As SplitDense does: the backward ops on the device too.
    with tf.device(device):
      w = tf.convert_to_tensor(variable)

    @tf.custom_gradient
    def matmul(a, w):
      with tf.device(device):
        y = tf.matmul(a, w)

      def grad(dy):
        with tf.device(device):
          return tf.matmul(dy, w, transpose_b=True), tf.matmul(a, dy, transpose_a=True)
      return y, grad
    with tf.device(device):
      return matmul(a, w)

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      h = on("/cpu:0", x, first)
      with tf.device("/cpu:1"):
        loss = tf.reduce_sum(on("/cpu:1", h, second))
    with tf.device("/cpu:1"):  # Where the loss is.
      gradients = tape.gradient(loss, [first, second])
    for variable, gradient in zip([first, second], gradients):
      with tf.device(variable.device):
        variable.assign_sub(gradient)

  crossing = placement.bytes_crossing(step)
  # h to CPU:1, and its gradient back to CPU:0: nothing else.
  assert sorted(crossing.values()) == [MATRIX] * 2, crossing
  assert sorted(device for _, device in crossing) == ["CPU:0", "CPU:1"], crossing


def test_a_step_is_traced_for_the_arguments_given():
  @tf.function
  def step(a):
    with tf.device("/cpu:1"):
      return tf.nn.relu(a)

  with tf.device("/cpu:0"):
    small, large = tf.ones((2, 2)), tf.ones((8, 8))
  # The argument there, the result back.
  assert sum(placement.bytes_crossing(step, small).values()) == 2 * 2 * 4 * 2
  assert sum(placement.bytes_crossing(step, large).values()) == 8 * 8 * 4 * 2
  # An op that asks for no device runs on the default one: here that is CPU:1, so
  # neither the argument nor the result (placed nowhere) crosses.
  assert placement.bytes_crossing(step, small, default_device="/cpu:1") == {}


def test_a_plain_function_is_refused_naming_what_to_do():
  with pytest.raises(TypeError, match=r"pass a tf.function .* Received: <function"):
    placement.bytes_crossing(lambda: None)


def test_an_unknown_shape_is_refused_naming_the_tensor():
  @tf.function(input_signature=[tf.TensorSpec((None, 4))])
  def step(a):
    with tf.device("/cpu:1"):
      return tf.nn.relu(a)

  with pytest.raises(ValueError, match=r"crosses to CPU:1 with an unknown shape.*"
                                       r"Received: shape \(None, 4\)"):
    placement.bytes_crossing(step)


def test_a_variable_read_under_another_devices_scope_is_read_where_it_lives():
  _, second = _two_layers()  # On CPU:1.
  x = _matrix("/cpu:0")

  @tf.function
  def step():
    with tf.device("/cpu:0"):  # The read asks for CPU:0; it runs beside the variable.
      return tf.matmul(x, second)

  crossing = placement.bytes_crossing(step)
  assert list(crossing.values()) == [MATRIX], crossing  # The weight's value to CPU:0.
  assert [device for _, device in crossing] == ["CPU:0"], crossing


def test_an_op_that_reads_only_a_shape_and_asks_for_no_device_runs_beside_its_input():
  x = _matrix("/cpu:0")

  @tf.function
  def step():
    with tf.device("/cpu:1"):
      y = tf.nn.relu(x)  # x to CPU:1.
    return tf.raw_ops.Shape(input=y)  # Beside y: only the shape (2 int32) comes back.

  assert sorted(placement.bytes_crossing(step).values()) == [8, MATRIX]


def test_a_step_that_calls_functions_says_their_bodies_are_not_counted(caplog):
  x = _matrix("/cpu:0")

  @tf.function
  def step(flag):
    return tf.cond(flag, lambda: x * 2, lambda: x)

  with caplog.at_level(logging.WARNING, logger=_crossing.__name__):
    placement.bytes_crossing(step, tf.constant(True))
  assert "their bodies move between devices is not counted" in caplog.text, caplog.text
  assert "If" in caplog.text, caplog.text


def test_devices_of_other_tasks_keep_their_job_and_task():
  assert _crossing._short("/job:localhost/replica:0/task:0/device:CPU:1") == "CPU:1"
  assert _crossing._short("/cpu:1") == "CPU:1"
  assert _crossing._short("/job:worker/replica:0/task:1/device:CPU:0") == (
      "/job:worker/task:1/CPU:0")
