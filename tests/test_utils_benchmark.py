"""ember.utils.benchmark: Timer's measurement loops, Measurement's statistics and printout,
Compare's table. No timing is asserted, only the bookkeeping."""
import numpy as np
import pytest

import ember
from ember.utils.benchmark import Compare, Measurement, TaskSpec, Timer


def test_timeit_runs_the_statement_number_times():
    calls = []
    m = Timer("f()", globals={"f": lambda: calls.append(1)}).timeit(50)
    # a warm-up of max(number // 100, 2) runs, then the measured block
    assert len(calls) == 52 and m.number_per_run == 50 and len(m.raw_times) == 1
    assert m.times == [m.raw_times[0] / 50]


def test_torch_global_is_ember_and_callables_work():
    m = Timer("torch.ones(2) + x", globals={"x": ember.ones(2)}).timeit(10)
    assert m.stmt == "torch.ones(2) + x"
    m = Timer(lambda: None).timeit(10)
    assert m.median > 0


def test_blocked_and_adaptive_autorange():
    t = Timer("x * 2", globals={"x": ember.ones(8)}, label="mul", sub_label="8",
              description="ember", num_threads=1)
    m = t.blocked_autorange(min_run_time=0.02)
    assert m.number_per_run >= 1 and len(m.times) >= 1
    assert sum(m.raw_times) >= 0.02
    seen = []
    m = t.adaptive_autorange(threshold=0.5, min_run_time=0.01, max_run_time=0.5,
                             callback=lambda n, s: seen.append(n))
    assert len(m.times) >= 4 or sum(m.raw_times) > 0.5
    assert len(seen) == len(m.raw_times)
    assert (m.label, m.sub_label, m.description, m.num_threads) == ("mul", "8", "ember", 1)


def test_num_threads_is_set_while_timing_and_restored():
    before = ember.get_num_threads()
    seen = []
    Timer("seen.append(torch.get_num_threads())", globals={"seen": seen},
          num_threads=1).timeit(3)
    assert set(seen) == {1} and ember.get_num_threads() == before


def test_measurement_statistics_and_repr():
    times = [1e-6, 2e-6, 3e-6, 4e-6, 100e-6]
    m = Measurement(10, [t * 10 for t in times], TaskSpec("f(x)", "x = 1", label="lbl",
                                                         sub_label="sub", num_threads=2))
    assert m.median == pytest.approx(3e-6) and m.mean == pytest.approx(np.mean(times))
    assert m.iqr == pytest.approx(np.quantile(times, .75) - np.quantile(times, .25))
    text = repr(m)
    assert "lbl: sub" in text and "setup: x = 1" in text
    assert "Median: 3.00 us" in text and "IQR:    2.00 us (2.00 to 4.00)" in text
    assert "5 measurements, 10 runs per measurement, 2 threads" in text
    assert "WARNING: Interquartile range is 66.7%" in text
    one = Measurement(1, [5e-3], TaskSpec("g()", "pass"))
    assert repr(one).splitlines()[1:] == ["g()", "  5.00 ms", "  1 measurement, 1 runs , 1 thread"]


def test_merge_pools_replicates():
    spec = TaskSpec("f()", "pass")
    merged = Measurement.merge([Measurement(2, [2.0, 4.0], spec), Measurement(1, [3.0], spec)])
    assert len(merged) == 1 and merged[0].times == [1.0, 2.0, 3.0]


_CASES = [(1.0, "op", "n=1", "ember", 1), (2.0, "op", "n=1", "numpy", 1),
          (3.0, "op", "n=2", "ember", 1), (0.5, "op", "n=1", "ember", 2),
          (9.0, "other", "n=1", "ember", 1), (1234.5, "other", "n=3", "numpy", 1)]


def _measurements(Measurement, TaskSpec, spread=0.0):
    return [Measurement(1, [t * 1e-6 * (1 + spread * i) for i in range(4)],
                        TaskSpec("f()", "pass", label=lbl, sub_label=sub, description=desc,
                                 num_threads=n))
            for t, lbl, sub, desc, n in _CASES]


def test_compare_table():
    out = str(Compare(_measurements(Measurement, TaskSpec)))
    first = out.split("\n\n")[0].splitlines()
    assert first[0].startswith("[") and " op " in first[0] and first[0].endswith("]")
    assert [c.strip() for c in first[1].split("|")] == ["", "ember", "numpy"]
    assert first[2].startswith("1 threads: ---")
    # the smallest time (0.5 us) sets the unit of the table
    assert [c.strip() for c in first[3].split("|")] == ["n=1", "1000.0", "2000.0"]
    assert [c.strip() for c in first[4].split("|")] == ["n=2", "3000.0", ""]
    assert first[5].startswith("2 threads: ---") and "500.0" in first[6]
    assert "Times are in nanoseconds (ns)." in out and " other " in out
    with pytest.raises(ValueError, match="Measurement"):
        Compare([1.0])


@pytest.mark.parametrize("options", [(), ("trim_significant_figures", "highlight_warnings"),
                                     ("colorize",)])
def test_compare_prints_what_torch_prints(options):
    bench = pytest.importorskip("torch.utils.benchmark")
    spread = 0.2 if options else 0.0
    ours = Compare(_measurements(Measurement, TaskSpec, spread))
    theirs = bench.Compare(_measurements(bench.Measurement, bench.utils.common.TaskSpec, spread))
    for c in (ours, theirs):
        for opt in options:
            getattr(c, opt)()
    assert str(ours) == str(theirs)


def test_measurement_repr_matches_torchs():
    bench = pytest.importorskip("torch.utils.benchmark")
    args = (10, [1e-5, 2e-5, 3e-5, 9e-5], )
    ours = Measurement(*args, TaskSpec("f(x)", "x = 1", label="lbl", sub_label="s"))
    theirs = bench.Measurement(*args, bench.utils.common.TaskSpec("f(x)", "x = 1", label="lbl",
                                                                  sub_label="s"))
    assert repr(ours).splitlines()[1:] == repr(theirs).splitlines()[1:]
    assert ours.significant_figures == theirs.significant_figures
