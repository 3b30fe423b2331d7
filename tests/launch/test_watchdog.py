"""tfdist.launch.watchdog: a job whose tasks are alive but stopped moving is named, dumped, ended."""

import os
import re
import shutil

import pytest

import helpers
from tfdist import launch
from tfdist.task import progress
from tfdist.cluster import ClusterSpec
from tfdist.launch import watchdog

# A faulthandler dump of a task blocked in its input function, beside one waiting in TF.
BLOCKED = """Thread 0x00007fa65efa56c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/home/me/train.py", line 27 in wait_forever
  File "/home/me/train.py", line 34 in read
  File "/venv/lib/python3.11/site-packages/tensorflow/python/ops/script_ops.py", line 152 in _call

Current thread 0x00007fa730e4fb80 (most recent call first):
  File "/venv/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 53 in quick_execute
  File "/home/me/train.py", line 52 in <module>
"""
WAITING = """Current thread 0x00007fa730e4fb80 (most recent call first):
  File "/venv/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 53 in quick_execute
  File "/home/me/train.py", line 52 in <module>
"""


def test_the_timeout_is_explicit_else_the_environment_else_a_default_for_two_tasks():
  assert watchdog.resolve_timeout(7, 2, {watchdog.STALL_TIMEOUT_ENV: "9"}) == 7
  assert watchdog.resolve_timeout(None, 2, {watchdog.STALL_TIMEOUT_ENV: "9"}) == 9
  assert watchdog.resolve_timeout(None, 2, {}) == watchdog.DEFAULT_STALL_TIMEOUT
  assert watchdog.resolve_timeout(None, 1, {}) == 0  # One task waits for nobody.
  assert watchdog.resolve_timeout(0, 2, {}) == 0
  with pytest.raises(ValueError, match=r"`TFDIST_STALL_TIMEOUT` must be a number of seconds "
                     r">= 0 .* Received: TFDIST_STALL_TIMEOUT='soon'"):
    watchdog.resolve_timeout(None, 2, {watchdog.STALL_TIMEOUT_ENV: "soon"})
  with pytest.raises(ValueError, match=r"`stall_timeout` must be .* Received: stall_timeout=-1"):
    watchdog.resolve_timeout(-1, 2, {})


def test_the_task_in_code_of_its_own_is_named_not_the_one_waiting_in_tensorflow():
  assert watchdog.own_code_frames(BLOCKED) == ["wait_forever (/home/me/train.py:27)"]
  assert watchdog.own_code_frames(WAITING) == []
  reports = {"worker:0": watchdog.Report(1, 8, 9, progress.STEP, 0.1),
             "worker:1": watchdog.Report(2, 8, 9, progress.STEP, 0.1)}
  stall = watchdog.Stall(12, 4, reports)
  assert watchdog.culprit(stall, {"worker:0": WAITING, "worker:1": BLOCKED}) == (
      "worker:1 is not waiting inside TensorFlow (a collective waits there): it is in "
      "wait_forever (/home/me/train.py:27)")
  assert "every task waits inside TensorFlow at step 8" in watchdog.culprit(
      stall, {"worker:0": WAITING, "worker:1": WAITING})


def test_no_stall_before_any_report_nor_while_one_moves(tmp_path):
  now = [0.0]
  dog = watchdog.StallWatchdog(str(tmp_path), timeout=5, clock=lambda: now[0])
  now[0] = 100
  assert dog.check() is None  # Nothing reports: no task has started.
  path = tmp_path / ("worker-0" + progress.PROGRESS_SUFFIX)
  path.write_text("1 0 1 started 0")  # Start-up is watched, with a limit of its own.
  assert dog.check() is None
  now[0] += watchdog.START_UP_SECONDS - 1  # Pods may start minutes apart.
  assert dog.check() is None
  now[0] += 2
  assert dog.check().limit == watchdog.START_UP_SECONDS
  path.write_text("1 0 2 build 0")  # A variable made: the model's build moves.
  now[0] += watchdog.BOUNDARY_SECONDS - 1
  assert dog.check() is None
  path.write_text("1 0 2 boundary 0")
  assert dog.check() is None
  now[0] += watchdog.BOUNDARY_SECONDS - 1  # A first step may compile for a minute.
  assert dog.check() is None
  path.write_text("1 1 3 step 0")
  assert dog.check() is None
  now[0] += 4
  assert dog.check() is None
  now[0] += 2
  stall = dog.check()
  assert stall is not None and stall.limit == 5
  path.write_text("1 3 4 step 2.0")  # Steps of 2 s: 20 of them fit in the limit.
  assert dog.check() is None
  now[0] += 39
  assert dog.check() is None
  now[0] += 2
  assert dog.check().limit == 40
  path.write_text("1 3 5 end 2.0")  # Training is over: a slow exit is no stall.
  now[0] += 1000
  assert dog.check() is None


def test_a_model_built_after_training_began_is_no_start_up():
  reports = {"worker:0": watchdog.Report(1, 40, 50, progress.CHECK, 0.01),
             "worker:1": watchdog.Report(2, 40, 49, progress.BUILD, 0.01)}
  assert watchdog.phases(reports).startswith("the job stalled while a model was built: ")


@pytest.mark.parametrize("phase", [progress.STARTED, progress.BUILD, progress.CHECK])
def test_a_job_stalled_before_its_first_step_is_named_in_start_up_with_each_tasks_phase(
    tmp_path, phase):
  now = [0.0]
  dog = watchdog.StallWatchdog(str(tmp_path), timeout=5, clock=lambda: now[0])
  (tmp_path / ("worker-0" + progress.PROGRESS_SUFFIX)).write_text("1 0 3 check 0")
  (tmp_path / ("worker-1" + progress.PROGRESS_SUFFIX)).write_text(f"2 0 2 {phase} 0")
  assert dog.check() is None
  now[0] += watchdog.BOUNDARY_SECONDS + 1
  stall = dog.check()
  assert stall is not None and stall.limit == watchdog.BOUNDARY_SECONDS
  assert watchdog.describe(stall).endswith(
      "the job stalled in start-up, before its first step: worker:0 comparing its model with "
      "the other tasks' (waiting for one of them), worker:1 " + progress.PHASES[phase])


def test_a_task_that_ended_while_the_others_never_trained_is_named():
  # One task built no strategy over the cluster and trained alone; the other waits for it.
  reports = {"worker:0": watchdog.Report(1, 0, 1, progress.STARTED, 0.0),
             "worker:1": watchdog.Report(2, 2, 9, progress.END, 0.006)}
  stall = watchdog.Stall(61, 60, reports)
  assert watchdog.culprit(stall, {"worker:0": WAITING}) == (
      "worker:1 ended while worker:0 never began training: a task that builds no strategy over "
      "the cluster (or another strategy, or exits early) leaves the others waiting for it")
  assert "the job stalled in start-up" in watchdog.describe(stall)
  assert "worker:1 done training" in watchdog.describe(stall)


def _launch(tmp_path, **kwargs):
  output = tmp_path / "output"
  with open(output, "w") as out:
    code = launch.launch_local(
        helpers.python(os.path.join(helpers.SCRIPTS, "stall_loop.py"), str(tmp_path)),
        ClusterSpec.local(workers=2),
        launch.LaunchOptions(output=out, timeout=60, stall_timeout=1, grace_period=2, **kwargs))
  return code, output.read_text()


@pytest.mark.slow
def test_a_stalled_custom_loop_is_dumped_named_and_ended(tmp_path):
  code, output = _launch(tmp_path)
  assert code == launch.STALL_EXIT_CODE, output
  assert "[tfdist launch] worker:1's Python stacks:" in output
  assert re.search(r"\[worker:1\]   File \".*stall_loop.py\", line \d+ in wait_forever", output)
  assert re.search(r"stalled: no training step completed anywhere for \d+s .*; worker:1 is "
                   r"furthest behind: 3 steps, the others up to 5; stopping", output), output
  assert "] done" not in output


@pytest.mark.slow
def test_a_stalled_job_restarts_under_max_restarts_and_finishes(tmp_path):
  code, output = _launch(tmp_path, max_restarts=1)
  assert code == 0, output
  assert "worker:1 is furthest behind: 3 steps, the others up to 5; restarting every task" \
      in output
  assert "[worker:0] done" in output and "[worker:1] done" in output


@pytest.mark.slow
def test_a_worker_blocked_in_its_input_pipeline_is_named_and_the_job_ends(tmp_path):
  # Keras fit in plain TensorFlow; the restart is the custom loop's test above (cheaper).
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--workers=2", "--stall_timeout=4", "--grace_period=2",
      "--", *helpers.python(os.path.join(helpers.SCRIPTS, "stall.py"), "block",
                            str(tmp_path))), timeout=240)
  assert result.returncode == launch.STALL_EXIT_CODE, result.stdout[-4000:]
  assert re.search(r"\[worker:1\]   File \".*stall.py\", line \d+ in wait_forever",
                   result.stdout)
  assert re.search(r"worker:1 is not waiting inside TensorFlow \(a collective waits there\): "
                   r"it is in wait_forever \(.*stall.py:\d+\); stopping the other tasks",
                   result.stdout), result.stdout[-4000:]
  assert "final weights" not in result.stdout



def test_the_least_limit_outside_the_steps_is_a_minute_unless_told(tmp_path):
  now = [100.0]
  path = tmp_path / ("worker-0" + progress.PROGRESS_SUFFIX)
  for environ, least in (({}, watchdog.BOUNDARY_SECONDS), ({"TFDIST_BOUNDARY_SECONDS": "7"}, 7),
                         ({"TFDIST_BOUNDARY_SECONDS": "600"}, 600)):
    dog = watchdog.StallWatchdog(str(tmp_path), timeout=2, clock=lambda: now[0], environ=environ)
    path.write_text("1 0 2 boundary 0")
    assert dog.check() is None
    now[0] += least - 0.5  # 3 x 2 s is less than the least limit: the least limit holds.
    assert dog.check() is None
    now[0] += 1
    assert dog.check().limit == max(6, least)
    now[0] += 1000
  for text in ("a minute", "-1", "nan", "inf"):
    with pytest.raises(ValueError, match=re.escape(
        "`TFDIST_BOUNDARY_SECONDS` must be a number of seconds >= 0: the least time a first "
        f"step may take. Received: TFDIST_BOUNDARY_SECONDS={text!r}")):
      watchdog.StallWatchdog(str(tmp_path), timeout=2, environ={"TFDIST_BOUNDARY_SECONDS": text})

@pytest.mark.slow
def test_a_worker_that_hangs_while_building_its_model_is_named_in_start_up_with_its_stack():
  # Its strategy exists; its peer waits in the variable check. A first step's limit: 3 x 5 s,
  # at least TFDIST_BOUNDARY_SECONDS (a minute unless told).
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--workers=2", "--stall_timeout=5", "--grace_period=2", "--",
      *helpers.python(os.path.join(helpers.SCRIPTS, "disagree.py"), "hang_build")), timeout=240,
      env={watchdog.BOUNDARY_SECONDS_ENV: "20"})
  assert result.returncode == launch.STALL_EXIT_CODE, result.stdout[-4000:]
  assert re.search(r"\[worker:1\]   File \".*disagree.py\", line \d+ in build_model",
                   result.stdout)
  assert re.search(r"stalled: .*the job stalled in start-up, before its first step: worker:0 "
                   r"comparing its model with the other tasks' \(waiting for one of them\), "
                   r"worker:1 building its model under its strategy; worker:1 is not waiting "
                   r"inside TensorFlow \(a collective waits there\): it is in build_model "
                   r"\(.*disagree.py:\d+\); stopping the other tasks", result.stdout), \
      result.stdout[-4000:]
  # The waiting task said so in its log while it waited.
  assert re.search(r"\[worker:0\] tfdist: worker:0 has waited \d+s for worker:1 to reach ",
                   result.stdout)


@pytest.mark.slow
@pytest.mark.versions
def test_a_slow_but_moving_worker_gets_no_alarm_and_is_named_the_input_bound_straggler(tmp_path):
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--workers=2", "--stall_timeout=3", "--",
      *helpers.python(os.path.join(helpers.SCRIPTS, "stall.py"), "slow", str(tmp_path))),
      timeout=240)
  assert result.returncode == 0, result.stdout[-4000:]
  assert "stalled" not in result.stdout
  assert len(re.findall(r"\[worker:\d\] final weights", result.stdout)) == 2
  # Its input sleeps 0.1 s a batch: the chief (worker:0) names it at the epoch's end, and
  # the launcher's table at the job's end has both tasks' 24 timed steps (the first compiles).
  straggler = r"worker:1 holds the others back, waiting for its input \(\d+% of its steps; "
  assert re.search(r"^\[worker:0\] tfdist: " + straggler, result.stdout, re.M), result.stdout
  assert "[tfdist launch] per task, its training steps:\ntask " in result.stdout
  for task in ("worker:0", "worker:1"):
    assert re.search(rf"^{task} +25( +[\d.]+){{4}} +\d+%$", result.stdout, re.M), result.stdout
  assert re.search(r"^" + straggler, result.stdout, re.M), result.stdout


@pytest.mark.slow
def test_every_task_is_profiled_into_one_log_directory_with_its_table(tmp_path):
  # TF 2.21's profiler aborts a non-chief task now and then when it collects the trace (a
  # use-after-free in TensorFlow, docs/known_issues.md; 3 runs of 20 of this job,
  # docs/measuring.md): the launch names it, and the job runs again, as the guide tells
  # users to. Three aborts in a row (under 1% by that rate) fail the test.
  profile_dir = tmp_path / "profile"
  for _ in range(3):
    shutil.rmtree(profile_dir, ignore_errors=True)
    result = helpers.run(helpers.tfdist_cli(
        "launch", "--workers=2", "--profile=3-5", f"--profile_dir={profile_dir}",
        "--timeout=120", "--",
        *helpers.python(os.path.join(helpers.SCRIPTS, "stall.py"), "plain", str(tmp_path))),
        timeout=240)
    if not (result.returncode in (134, 139) and "profiler can corrupt" in result.stdout):
      break
  assert result.returncode == 0, result.stdout[-4000:]
  assert len(re.findall(r"\[worker:\d\] final weights", result.stdout)) == 2
  # One run per task under one log directory, each with its trace.
  assert sorted(os.listdir(profile_dir)) == ["worker-0", "worker-1"]
  for run in ("worker-0", "worker-1"):
    traces = [f for _, _, files in os.walk(profile_dir / run) for f in files
              if f.endswith(".xplane.pb")]
    assert len(traces) == 1, run
  assert f"[tfdist launch] profile of steps 3-5: {profile_dir}, one run per task: " \
      "['worker-0', 'worker-1']" in result.stdout
  # Traced tasks are not stamped (TF's profiler aborts beside a Python function in the
  # input, docs/known_issues.md): the continuous table has no input wait.
  assert re.search(r"^worker:1 +25 +[\d.]+ +[\d.]+ +- +- +-$", result.stdout, re.M), \
      result.stdout[-3000:]
  # The per-task table of the traced steps, the same table with the collectives' wait (which
  # task is named the straggler depends on timings: not asserted).
  for task in ("worker:0", "worker:1"):
    assert re.search(rf"^{task} +3 +[\d.]+ +- +[\d.]+ +- +\d+% +[\d.]+$", result.stdout, re.M), \
        result.stdout[-3000:]


def test_keep_steps_copies_only_rows_a_task_writes(tmp_path):
  from tfdist.task import _step_times as step_times
  source, kept = tmp_path / "task.progress", tmp_path / "records"
  source.mkdir()
  kept.mkdir()
  (source / "worker-1.steps").write_text(step_times.to_text(
      step_times.summarize("worker:1", 7, [0.1] * 7)))
  (source / "worker-2.steps").write_text('{"task": "worker:3", "steps": 1}')  # Not its own.
  (source / "worker-0.steps").write_text("{half a li")
  watchdog.keep_steps(str(source), str(kept))
  assert sorted(os.listdir(kept)) == ["worker-1.steps"]
  assert [r.steps for r in step_times.read(str(kept))] == [7]
  watchdog.keep_steps(str(source), str(tmp_path / "gone"))  # No folder: nothing, no error.
  assert not (tmp_path / "gone").exists()
