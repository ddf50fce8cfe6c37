"""The benchmark workloads run on ember and agree with their NumPy twins (so the suite cannot
rot into timing something broken), and the report renders."""
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import ember

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import run  # noqa: E402
from benchmarks.workloads import WORKLOADS  # noqa: E402


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda w: w.name)
def test_workload_runs_and_matches_numpy(w):
    r = w.build(ember)()
    if w.numpy is not None and r is not None:
        ref = w.numpy(np)()
        ref = ref[0] if isinstance(ref, tuple) else ref
        # absolute part scaled: an element that cancels to ~0 keeps its big terms' rounding
        np.testing.assert_allclose(r.detach().numpy(), ref, rtol=1e-4,
                                   atol=1e-5 * float(np.abs(ref).max(initial=0)))


def test_table_renders():
    data = {"results": {"1": {w.name: {"ember": 2.0, "torch": 1.0} for w in WORKLOADS}},
            "import_s": {"ember": 0.1, "torch": 1.0, "numpy": 0.05}}
    out = run.table(data)
    assert "| add 1 elem | us | 2 | 1 | - | 2.00 |" in out
    assert "| matmul 256 f32 | GFLOP/s | 2 | 1 | - | 0.50 |" in out
    assert "| import | ms | 100 | 1000 | 50 | 0.10 |" in out


def test_ops_large_cases_run():
    """Every 1M-element op workload runs on ember (its ratios to torch are benchmarks/ops_large's
    business, not a test's)."""
    from benchmarks import ops_large
    assert {w.name for w in ops_large.WORKLOADS} <= {w.name for w in run._workloads()}
    for name, fn in ops_large._cases(ember, list(ops_large.CASES)).items():
        fn()


def test_only_picks_workloads_and_table_skips_the_rest():
    assert {w.name for w in run._workloads("1M cumsum")} == {"1M cumsum", "1M cumsum fwd+bwd"}
    out = run.table({"results": {"2": {"1M cumsum": {"ember": 1.0, "torch": 2.0}}},
                     "import_s": {}})
    assert "| 1M cumsum | ms | 1 | 2 | - | 0.50 |" in out and "import" not in out


def test_timers_return_seconds():
    """The timing helpers run (a workload's median per call; an import in fresh interpreters,
    after one that may write bytecode)."""
    assert 0 < run._time(lambda: sum(range(100)), quick=True) < 0.01
    assert 0 < run._import_time("json", 1) < 5


def test_ops_benchmark_is_generated_from_the_registry():
    """benchmarks.ops times every OpDef that has float32 samples, forward and forward+backward,
    and its small cases run on ember; its table and summary render from results."""
    from benchmarks import ops
    cases = ops.cases(only="tanh")
    names = {c.name for c in cases}
    assert {"tanh small", "tanh small fwd+bwd", "tanh large", "tanh large fwd+bwd"} <= names
    large = next(c for c in cases if c.name == "tanh large")
    assert np.prod(large.args[0].shape) >= ops.N_LARGE
    for c in cases:
        if c.size == "small":
            c.build(ember)()
    results = {"1": {"tanh small": {"ember": 2e-6, "torch": 1e-6},
                     "tanh large": {"ember": 1e-3, "torch": 2e-3},
                     "erfinv large": {"torch": 1e-3, "ember_error": "RuntimeError: x"}}}
    s = ops.summary(results)["1"]
    assert s["ops"] == 1 and s["median"] == {"small": 2.0, "large": 0.5}
    assert s["worst"][0] == ("tanh small", 2.0) and "erfinv large" in s["errors"]
    assert "| tanh small | 2.0 | 1.0 | 2.00 |" in ops.table(results)


def test_ops_benchmark_grows_samples_with_nan_and_infinities():
    """A sample holding nan or infinities (nan_to_num's) grows by tiling its values, which
    keeps them: a uniform draw between infinite bounds cannot be made."""
    from benchmarks import ops
    large = next(c for c in ops.cases(only="nan_to_num") if c.name == "nan_to_num large")
    x = large.args[0].make()
    assert x.size >= ops.N_LARGE and np.isnan(x).any() and np.isinf(x).any()
    assert np.isfinite(large.build(ember)().numpy()).all()


def test_ops_benchmark_grows_shape_arguments_and_leading_dims():
    """Where growing every dimension makes the call invalid, the benchmark grows the ints that
    name a grown size (layer_norm's normalized_shape, its weight with it), then only the
    leading dimension (view_as_complex keeps its trailing 2); a grown call that still fails
    is never a case."""
    from benchmarks import ops
    ln = next(c for c in ops.cases(only="layer_norm") if c.name == "layer_norm large")
    x, shape = ln.args[0], ln.args[1]
    assert math.prod(x.shape) >= ops.N_LARGE and shape in (x.shape[-1], [x.shape[-1]],
                                                          (x.shape[-1],))
    assert ln.build(ember)().shape == x.shape
    vc = next(c for c in ops.cases(only="view_as_complex") if c.name == "view_as_complex large")
    assert vc.args[0].shape[-1] == 2 and vc.build(ember)().numel() >= ops.N_LARGE // 2
    assert not [c for c in ops.cases(only="_avg_pool_nd_backward") if c.size == "large"]
