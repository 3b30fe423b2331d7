"""tfdist.advice.decision: the decision table, including the branches that cannot run here.

Measurements are given, not measured: slow links, many workers and a model
larger than one device are what this machine cannot show. `tests/advice/test_advice.py`
measures for real.
"""

import pytest

from tfdist.advice import decision
from tfdist.advice import memory

MB = 2**20
# A compute-bound model: 1 MB of gradients, 40 ms of compute at batch 64.
CONVNET = memory.Footprint(weights=1 * MB, gradients=1 * MB, slots=2 * MB, activations=4 * MB)


def measurements(step, links=None, footprint=CONVNET, **kwargs):
  return decision.Measurements(batch_size=64, footprint=footprint, step=step, links=links,
                              **kwargs)


def names(advice):
  return [o.name for o in advice.options]


def test_fast_links_and_many_workers_pick_multi_worker_mirrored_with_scaled_learning_rate():
  m = measurements({"one_device": 0.040},
                   links=decision.Links(busbw=10e9, latency=0.0005))
  advice = decision.decide(m, decision.Cluster(workers=16, colocated=False), learning_rate=0.1)
  assert advice.pick.name == "multi_worker_mirrored"
  assert advice.pick.source == "predicted (α-β)" and advice.pick.global_batch == 64 * 16
  # 40 ms compute + 15 x 0.5 ms latency + 2*15/16 MB / 10 GB/s.
  step = 0.040 + 15 * 0.0005 + MB * 2 * 15 / 16 / 10e9
  assert advice.pick.step_seconds == pytest.approx(step)
  assert advice.efficiency == pytest.approx(0.040 / step)
  text = str(advice)
  assert "learning rate 0.1 x 16 = 1.6" in text and "--lr_scaling linear" in text
  assert "float16 gradients would not help" in text  # Latency, not bytes, dominates.
  assert "parameter_server: not ranked" in text


def test_slow_links_keep_training_on_one_machine():
  m = measurements({"one_device": 0.040, "mirrored": 0.045},
                   links=decision.Links(busbw=0.05e9, latency=0.100))
  advice = decision.decide(m, decision.Cluster(workers=8, devices_per_worker=4, colocated=False))
  assert advice.pick.name == "mirrored"
  multi = advice.options[names(advice).index("multi_worker_mirrored")]
  assert multi.examples_per_second < advice.pick.examples_per_second
  assert "8 workers on separate machines like this one are predicted at" in str(advice)


def test_bytes_bound_links_advise_float16_gradients():
  big = memory.Footprint(weights=100 * MB, gradients=100 * MB, slots=200 * MB, activations=0)
  m = measurements({"one_device": 0.200}, links=decision.Links(busbw=5e9, latency=0.001),
                   footprint=big)
  advice = decision.decide(m, decision.Cluster(workers=4, colocated=False))
  assert advice.pick.name == "multi_worker_mirrored"
  text = str(advice)
  assert "25 all-reduce pack(s) of tfdist's 4 MB" in text
  assert "bytes-bound, so send float16 gradients (--compress_gradients" in text


def test_one_device_is_picked_when_more_replicas_add_no_speed():
  # Logical devices sharing cores: the replicas' batch on one device is as fast.
  m = measurements({"one_device": 0.010, "mirrored": 0.021, "central_storage": 0.020,
                    decision.ONE_DEVICE_LARGE: 0.0195})
  advice = decision.decide(m, decision.Cluster(devices_per_worker=2))
  assert advice.pick.name == decision.ONE_DEVICE_LARGE and advice.pick.global_batch == 128
  assert "128 on one replica; learning rate 0.01 x 2 = 0.02" in str(advice)


def test_within_three_percent_the_simpler_way_wins():
  m = measurements({"one_device": 0.010, "mirrored": 0.0198})  # mirrored 1% faster.
  advice = decision.decide(m, decision.Cluster(devices_per_worker=2))
  assert advice.pick.name == "one_device"
  assert "within 1% of mirrored with fewer replicas" in str(advice)
  m = measurements({"one_device": 0.010, "mirrored": 0.015})  # mirrored 33% faster.
  assert decision.decide(m, decision.Cluster(devices_per_worker=2)).pick.name == "mirrored"


def test_two_colocated_workers_use_the_step_measured_here():
  m = measurements({"one_device": 0.010},
                   links=decision.Links(busbw=1e9, latency=0.005, two_workers=0.030))
  advice = decision.decide(m, decision.Cluster(workers=2))
  multi = advice.options[names(advice).index("multi_worker_mirrored")]
  assert multi.source == "measured here" and multi.step_seconds == 0.030
  assert advice.pick.name == "one_device"
  # Four workers on this machine share its cores: predicted, 4x the compute.
  advice = decision.decide(m, decision.Cluster(workers=4))
  multi = advice.options[names(advice).index("multi_worker_mirrored")]
  assert multi.step_seconds == pytest.approx(4 * 0.010 + 3 * 0.005 + MB * 2 * 3 / 4 / 1e9)


def test_a_model_too_big_for_one_device_gets_model_parallelism_and_its_bubble():
  big = memory.Footprint(weights=3 * MB, gradients=3 * MB, slots=6 * MB, activations=1 * MB)
  m = measurements({"one_device": 0.010, "mirrored": 0.012, "model_parallel": 0.020},
                   footprint=big, micro_batches=4)
  advice = decision.decide(m, decision.Cluster(devices_per_worker=2, memory_per_device=8 * MB))
  assert advice.pick.name == "model_parallel (2 devices, 4 micro-batches)"
  assert [o.fits for o in advice.options if o.name in ("one_device", "mirrored")] == [False] * 2
  text = str(advice)
  assert "13.0 MB" in text and "more than 8 MB per device" in text
  assert "place_layers; 2 needed) with 4 micro-batches" in text and "= 20%" in text
  assert "(does not fit)" in text


def test_a_model_too_big_for_every_device_of_a_worker_gets_the_ways_to_shrink_it():
  big = memory.Footprint(weights=30 * MB, gradients=30 * MB, slots=60 * MB, activations=10 * MB)
  m = measurements({"one_device": 0.010, "mirrored": 0.012, "model_parallel": 0.020},
                   footprint=big)
  advice = decision.decide(m, decision.Cluster(devices_per_worker=2, memory_per_device=8 * MB))
  assert advice.pick is None
  text = str(advice)
  assert text.startswith("recommendation: nothing fits")
  assert "split over 17 devices" in text and "mixed_bfloat16" in text


def test_input_bound_at_scale_points_to_tf_data_service():
  m = measurements({"one_device": 0.010}, links=decision.Links(busbw=1e9, latency=0.001),
                   input_share=0.35)
  text = str(decision.decide(m, decision.Cluster(workers=4, colocated=False)))
  assert "35% of each step waits for data (highly input-bound)" in text
  assert "tf.data service" in text
  m = measurements({"one_device": 0.010}, input_share=0.02)
  assert "the pipeline keeps up" in str(decision.decide(m, decision.Cluster()))
  assert "pass --data" in str(decision.decide(measurements({"one_device": 0.010}),
                                             decision.Cluster()))


@pytest.mark.parametrize("field, value", [("workers", 0), ("devices_per_worker", 1.5),
                                          ("memory_per_device", -1.0)])
def test_a_bad_cluster_names_the_field_and_the_value(field, value):
  with pytest.raises(ValueError, match=f"`{field}` must be .*Received: {field}={value!r}"):
    decision.Cluster(**{field: value})
