"""tfdist._lab.allreduce: all-reduce timing and bandwidths, measured, never asserted as speeds."""

import tfdist
from tfdist._lab import allreduce


def test_gradient_sizes_split_the_total_into_tensors():
  assert allreduce.gradient_sizes(64 * allreduce.MB) == [allreduce.MB] * 64
  assert allreduce.gradient_sizes(2.5 * allreduce.MB) == [int(1.25 * allreduce.MB)] * 2
  assert allreduce.gradient_sizes(100) == [100]


def test_all_reduce_seconds_times_every_variant():
  strategy = tfdist.make_strategy("mirrored")
  seconds = allreduce.all_reduce_seconds(strategy, [1000, 3000], allreduce.ALL_REDUCE_VARIANTS,
                                     repeats=2)
  assert set(seconds) == {"raw", "tfdist", "tfdist_fp16"}
  assert all(s > 0 for s in seconds.values())
  rates = allreduce.bus_bandwidth(4000, 0.001, replicas=2)
  assert rates == {"algbw": 4e6, "busbw": 4e6, "wire_busbw": 4e6}
  # A float16 wire sends half the bytes: the float32 figure is the effective one.
  halves = allreduce.bus_bandwidth(4000, 0.001, replicas=2, wire="float16")
  assert halves == {"algbw": 4e6, "busbw": 4e6, "wire_busbw": 2e6}


def test_loopback_bandwidth_is_positive():
  assert allreduce.loopback_bandwidth(megabytes=8) > 1e6
