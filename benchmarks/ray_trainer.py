"""tfdist on Ray against Ray Train's TensorflowTrainer: the same 2-worker job, side by side.

    python benchmarks/ray_trainer.py [--repeats=3]

Needs `pip install 'ray[train]'`. Starts a 2-node Ray cluster on this machine
(two raylets, `ray.cluster_utils.Cluster`) inside a private network namespace
with loopback only, so that Ray binds and advertises 127.0.0.1, and runs
benchmarks/ray_trainer_job.py (a multi-worker mirrored `fit` of 60 steps,
tf_keras) both ways, alternately, `--repeats` times each:

- `tfdist launch --ray=ADDRESS --workers 2 -- python ray_trainer_job.py`;
- `TensorflowTrainer(train, scaling_config=ScalingConfig(num_workers=2))`.

It prints, per way, the median start-up (from the command or `fit()` call to
the end of the first training step) and the median step time (after the
first ten), and the ratios tfdist ÷ TensorflowTrainer.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

_REPEATS = flags.DEFINE_integer("repeats", 3, "Runs of each way.", lower_bound=1)
_IN_NAMESPACE = "TFDIST_BENCH_IN_NAMESPACE"
HERE = os.path.dirname(os.path.abspath(__file__))


def _tfdist(address: str) -> dict:
  start = time.time()
  result = subprocess.run(
      [sys.executable, "-m", "tfdist", "launch", f"--ray={address}", "--workers=2", "--",
       sys.executable, os.path.join(HERE, "ray_trainer_job.py")],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
  times = [json.loads(line.split("TIMES ", 1)[1]) for line in result.stdout.splitlines()
           if "] TIMES " in line]
  if result.returncode or len(times) != 2:
    raise SystemExit(f"tfdist launch --ray failed ({result.returncode}):\n"
                     f"{result.stdout[-3000:]}")
  return {"startup": max(t["first_step_end"] for t in times) - start,
          "step": statistics.median(t["step_seconds"] for t in times)}


def _ray_train(storage: str) -> dict:
  import ray
  from ray.train import RunConfig, ScalingConfig
  from ray.train.tensorflow import TensorflowTrainer
  sys.path.insert(0, HERE)
  import ray_trainer_job

  out = tempfile.mkdtemp(dir=storage)

  def loop():
    import ray.train
    rank = ray.train.get_context().get_world_rank()
    with open(os.path.join(out, f"times-{rank}.json"), "w") as f:
      json.dump(ray_trainer_job.train(), f)  # Train V2 keeps only checkpointed metrics.

  trainer = TensorflowTrainer(
      loop, scaling_config=ScalingConfig(num_workers=2),
      run_config=RunConfig(storage_path=storage, name=f"bench-{time.time_ns()}"))
  start = time.time()
  trainer.fit()
  del ray
  times = []
  for name in sorted(os.listdir(out)):
    with open(os.path.join(out, name)) as f:
      times.append(json.load(f))
  return {"startup": max(t["first_step_end"] for t in times) - start,
          "step": statistics.median(t["step_seconds"] for t in times)}


def main(argv):
  del argv
  if os.environ.get(_IN_NAMESPACE) != "1":
    os.execvpe("unshare", ["unshare", "--user", "--map-root-user", "--net", "--",
                           sys.executable, *sys.argv], {**os.environ, _IN_NAMESPACE: "1"})
  from tfdist.launch import private_network
  private_network.loopback_up()
  import ray
  from ray import cluster_utils
  cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={
      "num_cpus": 2, "node_ip_address": "127.0.0.1", "include_dashboard": False})
  cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1")
  cluster.wait_for_nodes()
  os.environ["RAY_ADDRESS"] = cluster.address
  storage = tempfile.mkdtemp(prefix="tfdist-bench-ray-")
  runs = {"tfdist": [], "TensorflowTrainer": []}
  try:
    for i in range(_REPEATS.value):
      for way in (("tfdist", "TensorflowTrainer") if i % 2 == 0
                  else ("TensorflowTrainer", "tfdist")):
        if way == "tfdist":
          runs[way].append(_tfdist(cluster.address))
        else:
          ray.init(address=cluster.address, logging_level="ERROR")
          try:
            runs[way].append(_ray_train(storage))
          finally:
            ray.shutdown()
        print(f"  {way}: {runs[way][-1]}", flush=True)
  finally:
    cluster.shutdown()
  medians = {way: {k: statistics.median(r[k] for r in rs) for k in ("startup", "step")}
             for way, rs in runs.items()}
  print(f"\n{'way':20} {'start-up (s)':>13} {'step (ms)':>10}")
  for way, m in medians.items():
    print(f"{way:20} {m['startup']:13.1f} {m['step'] * 1000:10.1f}")
  print(f"tfdist ÷ TensorflowTrainer: start-up {medians['tfdist']['startup'] / medians['TensorflowTrainer']['startup']:.2f}, "
        f"step {medians['tfdist']['step'] / medians['TensorflowTrainer']['step']:.2f} "
        f"({_REPEATS.value} runs each, medians)")


if __name__ == "__main__":
  app.run(main)
