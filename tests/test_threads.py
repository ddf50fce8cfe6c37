"""NumPy's loops split over ember's threads (pointwise.par_run: NumPy's own inner loops run by
parloop.h on OpenMP threads; ufuncs, where, copies, whole-array reductions): at 2 threads the
same values, bit for bit, dtype and layout as one NumPy call, for odd shapes, non-contiguous and
broadcast operands, in-place writes, and nan/inf/-0.0; without the C kernels the one call."""
import numpy as np
import pytest

import ember
from ember._C import kernels as _C
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
    ("isnan", lambda a, b: a.isnan()), ("isfinite", lambda a, b: a.isfinite()),
    ("rsub", ember.rsub), ("rsub_number", lambda a, b: 2 - a),
    ("sgn_backward", lambda a, b: _grad(ember.sgn, a, b))]


def _grad(f, a, g):
    """``a``'s gradient through ``f`` for the output's gradient ``g``."""
    a.requires_grad_()
    f(a).backward(g)
    return a.grad


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
                                      "trunc", "pow_number", "isnan", "isfinite",
                                      "sgn_backward"):
        pytest.skip("float ops")
    a, b = _arrays(dtype, layout)
    before = ember.get_num_threads()
    try:
        ember.set_num_threads(1)
        ref = _run(name, fn, a, b)
        calls = _spy(monkeypatch)
        ember.set_num_threads(2)
        got = _run(name, fn, a, b)
    finally:
        ember.set_num_threads(before)
    assert got.dtype == ref.dtype and got.shape == ref.shape and got.strides == ref.strides
    assert got.tobytes() == ref.tobytes()
    if layout == "contiguous" and name not in ("aminmax", "clamp", "abs", "sqrt", "neg",
                                               "count_nonzero", "to_float", "flip") and \
            _C.parloop() is not None:
        assert calls, "no split at 2 threads"      # (those run other C kernels or NumPy)


def _spy(monkeypatch):
    """The list the split's calls of parloop.h append their element counts to."""
    calls, pl = [], _C.parloop()
    if pl is not None:
        spied = (lambda *a: calls.append(a[2] * a[3]) or pl[0](*a),
                 lambda *a: calls.append(a[2]) or pl[1](*a)) + pl[2:]
        monkeypatch.setattr(_C, "parloop", lambda: spied)
    return calls


# NumPy ufuncs x operand dtypes: each called on numbers with nan/inf/-0.0 where they are floats
UFUNCS = ("add subtract multiply divide true_divide floor_divide power float_power remainder fmod "
          "maximum minimum fmax fmin copysign nextafter hypot arctan2 logaddexp ldexp heaviside "
          "equal not_equal less less_equal greater greater_equal logical_and logical_or "
          "logical_xor bitwise_and bitwise_or bitwise_xor left_shift right_shift "
          "negative positive absolute sign sqrt square reciprocal exp exp2 expm1 log log2 log10 "
          "log1p sin cos tan arcsin arccos arctan sinh cosh tanh arcsinh arccosh arctanh floor "
          "ceil trunc rint isnan isinf isfinite signbit logical_not invert frexp modf spacing "
          "cbrt deg2rad").split()


def _operands(u, dt, n, rng):
    """``u``'s inputs of dtype ``dt``, ``n`` elements each (ldexp's exponent int32)."""
    def one(k):
        if dt.kind == "b":
            return rng.random(n) > 0.5
        x = rng.standard_normal(n) * (4 if dt.kind == "f" else 20)
        if dt.kind == "f":
            x[::97] = np.resize(EDGES, x[::97].size)[::1 if k else -1]
        return x.astype(dt) if dt.kind == "f" else np.abs(x).astype(dt) if u.__name__ in (
            "left_shift", "right_shift", "power") else x.astype(dt)
    args = [one(k) for k in range(u.nin)]
    if u.__name__ == "ldexp":
        args[1] = (args[1] % 9).astype(np.int32) if dt.kind != "f" else \
            np.clip(np.nan_to_num(args[1] * 3), -200, 200).astype(np.int32)
    return args


@pytest.mark.parametrize("layout", ["contiguous", "number", "row", "column", "odd", "below",
                                    "out"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_numpy_loops_on_threads_match_one_call(dtype, layout):
    """par_ufunc of every ufunc above whose loop takes these dtypes, bit for bit with NumPy's
    call: both operands arrays, the second a number (a NumPy scalar of it), a row or a column
    broadcast, an odd size (chunks not at 16-element edges), just below PAR_MIN (no split),
    into ``out``."""
    dt, rng = np.dtype(dtype), np.random.default_rng(7)
    n = {"odd": P.PAR_MIN + 4093, "below": P.PAR_MIN - 1}.get(layout, 3 * P.PAR_MIN + 16 * 7)
    before, ran = ember.get_num_threads(), 0
    ember.set_num_threads(2)
    try:
        for name in UFUNCS:
            u = getattr(np, name)
            if layout in ("number", "row", "column") and u.nin == 1:
                continue
            args = _operands(u, dt, n, rng)
            if layout in ("row", "column"):
                args = [a[:n - n % 301].reshape(-1, 301) for a in args]
                args[-1] = args[-1][3] if layout == "row" else args[-1][:, :1]
            if layout == "number":
                args[-1] = args[-1][5]
            with np.errstate(all="ignore"):
                try:
                    ref = u(*args)
                except TypeError:       # (no loop for these dtypes)
                    continue
                out = np.full_like(ref, 3) if layout == "out" and u.nout == 1 else None
                got = P.par_ufunc(u, args, out)
            cast = any(a.dtype != d for a, d in zip(args, u.resolve_dtypes(
                tuple(a.dtype for a in args) + (None,) * u.nout)))
            if layout == "below" or cast or layout == "column" and name == "power" or \
                    _C.parloop() is None:   # (NumPy casts; power's column: see par_run)
                assert got is None
                continue
            assert got is not None, name
            assert out is None or got is out
            for r, g in zip(ref if u.nout > 1 else (ref,), got if u.nout > 1 else (got,)):
                assert g.dtype == r.dtype and g.shape == r.shape and g.strides == r.strides, name
                assert g.tobytes() == r.tobytes(), name
            ran += 1
    finally:
        ember.set_num_threads(before)
    assert layout == "below" or _C.parloop() is None or ran >= (10 if dt.kind == "b" else 20)


def test_where_copy_and_extrema_on_threads():
    """par_where of every element size, a number beside an array; par_copy into a strided
    part; par_reduce's extrema: NumPy's values."""
    rng, n = np.random.default_rng(3), 2 * P.PAR_MIN + 5
    before = ember.get_num_threads()
    ember.set_num_threads(2)
    try:
        c = rng.random(n) > 0.5
        for dt in ("bool", "int8", "float16", "int32", "float32", "float64", "complex64"):
            a, b = (rng.standard_normal(n) * 9).astype(dt), (rng.standard_normal(n) * 9).astype(dt)
            for x, y in ((a, b), (a, 0), (a, b[7:8].reshape(()))):
                assert P.par_where(c, x, y).tobytes() == np.where(c, x, y).tobytes()
        x = rng.standard_normal((n // 301, 301)).astype(np.float32)
        x.flat[::101] = np.resize(EDGES, x.flat[::101].size)
        dst = np.zeros((x.shape[0], 700), np.float32)
        P.par_copy(dst[:, 13:314], x[::-1])
        assert dst[:, 13:314].tobytes() == x[::-1].tobytes() and not dst[:, :13].any() and \
            not dst[:, 314:].any()
        for u, f in ((np.maximum, np.max), (np.minimum, np.min), (np.logical_or, np.any)):
            for y in (x, np.abs(np.nan_to_num(x)), x > 2):
                r = P.par_reduce(u, y)
                assert r is None if _C.parloop() is None or u is np.logical_or and \
                    y.dtype != bool else r.tobytes() == f(y).tobytes()
    finally:
        ember.set_num_threads(before)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_isclose_one_pass_matches_numpy_passes(dtype):
    """isclose by parloop.h's loop (any size from 1024, 1 or 2 threads) against its NumPy
    passes: close pairs, edges (nan, inf, -0.0), a broadcast row, equal_nan."""
    a, b = _arrays(np.dtype(dtype), "contiguous")
    b = np.where(np.arange(b.size).reshape(b.shape) % 3 == 0, a + a * 1e-6, b).astype(dtype)
    before = ember.get_num_threads()
    try:
        for nt in (1, 2):
            ember.set_num_threads(nt)
            for x, y, kw in ((a, b, {}), (a, b, dict(equal_nan=True, atol=0.5)),
                             (a, b[7], dict(rtol=0.1)), (a[:40], b[:40], {})):
                got = ember.isclose(ember.tensor(x), ember.tensor(y), **kw).numpy()
                with _C.disabled():
                    ref = ember.isclose(ember.tensor(x), ember.tensor(y), **kw).numpy()
                assert got.dtype == ref.dtype and got.shape == ref.shape
                assert (got == ref).all() and ref.any() and not ref.all()
    finally:
        ember.set_num_threads(before)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int16", "int32", "int64",
                                   "float16"])
def test_hash_tensor_one_pass_matches_numpy(dtype):
    """hash_tensor by parloop.h's xor_wide (widened and xored in one pass, at 1 and 2 threads)
    against the NumPy reference's cast and xor reduction: odd sizes, nan/inf/-0.0, a strided
    view, one element."""
    a = ember.tensor(_arrays(np.dtype(dtype), "contiguous")[0])
    before = ember.get_num_threads()
    try:
        for nt in (1, 2):
            ember.set_num_threads(nt)
            for x in (a, a[:, ::2], a.reshape(-1)[:1001], a.reshape(-1)[5:6], a[3, 4]):
                got = ember.hash_tensor(x)
                with _C.disabled():
                    ref = ember.hash_tensor(x)
                assert got.dtype == ref.dtype == ember.uint64 and got.shape == ref.shape == ()
                assert got.item() == ref.item()
    finally:
        ember.set_num_threads(before)
