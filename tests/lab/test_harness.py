"""tfdist._lab.harness: interleaved runs and ratios; nothing asserts a speed."""

from tfdist._lab import harness


def test_interleaved_ratio_is_the_median_of_pairs_per_clock():
  a = iter([{"wall": 1.0, "cpu": 2.0}] * 3)
  b = iter([{"wall": 2.0, "cpu": 2.0}, {"wall": 3.0, "cpu": 2.0}, {"wall": 10.0, "cpu": 1.0}])
  result = harness.interleaved_ratio(lambda: next(a), lambda: next(b), repeats=3)
  assert result["wall"] == {"ratio": 3.0, "a_ms": 1000.0, "b_ms": 3000.0}
  assert result["cpu"]["ratio"] == 1.0


def test_interleaved_ratio_alternates_which_runs_first():
  calls = []

  def timed(name):
    def run():
      calls.append(name)
      return {"wall": 1.0}
    return run

  harness.interleaved_ratio(timed("a"), timed("b"), repeats=3)
  assert calls == ["a", "b", "b", "a", "a", "b"]
