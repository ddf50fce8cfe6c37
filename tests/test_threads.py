"""NumPy's loops split over ember's threads (pointwise.split_rows: ufuncs, copies, whole-array
reductions): at 2 threads the same values, bit for bit, dtype and layout as one NumPy call, for
odd shapes, non-contiguous and broadcast operands, in-place writes, and nan/inf/-0.0; with or
without the C kernels (this path is Python's)."""
import numpy as np
import pytest

import ember
from ember._ops import joining, pointwise as P

SHAPE = (517, 301)          # (above PAR_MIN elements as lowered below, rows not a multiple of 2)


@pytest.fixture(autouse=True)
def _small_split_threshold(monkeypatch):
    """The split path at SHAPE's size (its threshold keeps 1M-element loops on one thread)."""
    from ember._ops import reorder
    for m in (P, joining, reorder):
        monkeypatch.setattr(m, "PAR_MIN", 1 << 17)
EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3.0, 2.5, -2.5, 0.5]

CASES = [
    ("add", lambda a, b: a + b), ("mul", lambda a, b: a * b), ("div", lambda a, b: a / b),
    ("mul_row", lambda a, b: a * b[3]), ("mul_column", lambda a, b: a * b[:, :1]),
    ("mul_number", lambda a, b: 0.5 * a), ("neg", lambda a, b: -a), ("abs", lambda a, b: a.abs()),
    ("maximum", ember.maximum), ("minimum", ember.minimum),
    ("clamp", lambda a, b: a.clamp(-1.0, 2.0)), ("floor", lambda a, b: a.floor()),
    ("round", lambda a, b: a.round()), ("trunc", lambda a, b: a.trunc()),
    ("eq", lambda a, b: a == b), ("lt", lambda a, b: a < b), ("ge", lambda a, b: a >= b),
    ("logical_or", ember.logical_or), ("logical_and", ember.logical_and),
    ("pow", lambda a, b: a.abs() ** b), ("pow_number", lambda a, b: a ** 3),
    ("float_power", lambda a, b: ember.float_power(a, 2)), ("sqrt", lambda a, b: a.abs().sqrt()),
    ("mul_", lambda a, b: a.clone().mul_(b)), ("clone", lambda a, b: a.clone()),
    ("flip", lambda a, b: a.flip(0)), ("flipud", lambda a, b: a.flipud()),
    ("hstack", lambda a, b: ember.hstack([a, b[:, :7], a])),
    ("cat", lambda a, b: ember.cat([a, b[:5], a])), ("chunk_backward", None),
    ("count_nonzero", lambda a, b: ember.count_nonzero(a.round())),
    ("amax", lambda a, b: a.amax()), ("amin_keepdim", lambda a, b: a.amin((0, 1), True)),
    ("aminmax", lambda a, b: ember.stack(list(ember.aminmax(a)))),
    ("where", lambda a, b: ember.where(a > b, a, b)), ("where_number", lambda a, b: ember.where(
        a > 0, a, 0)), ("masked_fill", lambda a, b: a.masked_fill(a > b, 7)),
    ("masked_fill_row", lambda a, b: a.masked_fill(b[0] > 0, 7)), ("tanh_backward", None),
    ("to_float", lambda a, b: (a > b).to(ember.float32)), ("and", lambda a, b: (a > 0) & (b > 0)),
    ("xor_int", lambda a, b: (a > 0).long() ^ (b > 1).long()), ("tensor_split_backward", None),
    ("fmax", ember.fmax), ("fmin", ember.fmin), ("square", lambda a, b: a.square()),
    ("isnan", lambda a, b: a.isnan()), ("isfinite", lambda a, b: a.isfinite())]


def _arrays(dtype, layout):
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal(SHAPE) * 3 for _ in range(2))
    if dtype.kind == "f":
        a.flat[::1009], b.flat[::997] = np.resize(EDGES, a.flat[::1009].size), \
            np.resize(EDGES[::-1], b.flat[::997].size)
    a, b = a.astype(dtype), b.astype(dtype)
    if layout == "transposed":
        a, b = np.ascontiguousarray(a.T).T, np.ascontiguousarray(b.T).T
    elif layout == "strided":
        a, b = np.repeat(a, 2, 1)[:, ::2], np.repeat(b, 2, 1)[:, ::2]
    return a, b


def _run(name, fn, a, b):
    if fn is None and name == "tanh_backward":
        return P.tanh_backward(ember.tensor(a), ember.tensor(b).tanh()).numpy()
    if fn is None:          # chunk's, tensor_split's backward: the pieces' gradients joined
        x = ember.tensor(a, requires_grad=True)
        parts = x.chunk(3, 0) if name == "chunk_backward" else x.tensor_split([5, 100, 300], 1)
        sum(p.sum() * (i + 1) for i, p in enumerate(parts)).backward()
        return x.grad.numpy()
    return fn(ember.tensor(a), ember.tensor(b)).numpy()


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_split_loops_match_one_call(name, fn, dtype, layout, monkeypatch):
    dtype = np.dtype(dtype)
    if dtype.kind == "i" and name in ("chunk_backward", "tanh_backward", "tensor_split_backward",
                                      "div", "pow", "float_power", "sqrt", "round", "floor",
                                      "trunc", "pow_number", "isnan", "isfinite"):
        pytest.skip("float ops")
    a, b = _arrays(dtype, layout)
    before = ember.get_num_threads()
    try:
        ember.set_num_threads(1)
        ref = _run(name, fn, a, b)
        calls = []
        split = P.split_rows
        spy = lambda f, n: calls.append(n) or split(f, n)
        monkeypatch.setattr(P, "split_rows", spy)
        monkeypatch.setattr(joining, "split_rows", spy)
        ember.set_num_threads(2)
        got = _run(name, fn, a, b)
    finally:
        ember.set_num_threads(before)
    assert got.dtype == ref.dtype and got.shape == ref.shape and got.strides == ref.strides
    assert got.tobytes() == ref.tobytes()
    if layout == "contiguous" and name not in ("aminmax", "clamp", "abs", "sqrt", "neg"):
        assert calls, "no split at 2 threads"      # (those run C kernels on threads instead)


def test_split_errors_reach_the_caller_and_the_pool_survives():
    before = ember.get_num_threads()
    ember.set_num_threads(3)
    try:
        def f(lo, hi):
            if lo:
                raise ValueError(f"rows {lo}:{hi}")
            return hi
        with pytest.raises(ValueError, match="rows"):
            P.split_rows(f, 9)
        assert P.split_rows(lambda lo, hi: (lo, hi), 9) == [(0, 3), (3, 6), (6, 9)]
        assert P.split_rows(lambda lo, hi: (lo, hi), 1) is None
    finally:
        ember.set_num_threads(before)


def test_forked_child_splits_with_a_pool_of_its_own():
    """A child forked after the pool started has none of its threads: it starts its own (a
    job queued to the parent's would never come back)."""
    import os
    before = ember.get_num_threads()
    ember.set_num_threads(2)
    try:
        a = ember.tensor(_arrays(np.dtype(np.float32), "contiguous")[0])
        a * a                   # (the parent's pool starts)
        assert P._POOL["pid"] == os.getpid()
        pid = os.fork()
        if pid == 0:    # (a child of a process that loaded the C kernels starts on one thread)
            ember.set_num_threads(2)
            ok = P.split_rows(lambda lo, hi: (lo, hi), 9) == [(0, 4), (4, 9)]
            os._exit(0 if ok and P._POOL["pid"] == os.getpid() else 3)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    finally:
        ember.set_num_threads(before)
