"""The small-size paths of indexing, shape, joining and scan ops (issue #35: fewer NumPy calls
per call) against NumPy's reference results: negative and repeated indices, empty and
non-contiguous inputs, nan and -0.0, at 1 and 2 threads, with and without the C kernels."""
import numpy as np
import pytest

import ember
from ember._C import kernels

RNG = np.random.default_rng(7)
ODD = RNG.integers(-2, 3, (5, 7)).astype(np.float32)      # (ties for the stable orders)
ODD[1, 2], ODD[3, 0], ODD[0, 4] = np.nan, -0.0, 0.0


@pytest.fixture(params=[False, True], ids=["C", "numpy"])
def no_c(request):
    if request.param:
        with kernels.disabled():
            yield True
    else:
        yield False


def same(got, want, signs=True, rtol=0):
    got = got.numpy() if isinstance(got, ember.Tensor) else got
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got, want, equal_nan=True) if not rtol else \
        np.allclose(got, want, rtol=rtol, atol=0, equal_nan=True)
    assert not signs or (np.signbit(got) == np.signbit(want)).all()


@pytest.mark.parametrize("a", [ODD, ODD.T, ODD[:, ::2], np.nan_to_num(ODD).astype(np.int64), ODD[:0]],
                         ids=["plain", "transposed", "strided", "int64", "empty"])
def test_sort_and_scans_match_numpy(a, threads, no_c):
    t = ember.tensor(a) if a.flags.c_contiguous else ember.tensor(np.ascontiguousarray(a.T)).t() \
        if a.flags.f_contiguous else ember.tensor(a)
    for d in range(-a.ndim, a.ndim):
        order = np.argsort(a, d, kind="stable")
        values, indices = ember.sort(t, d)
        same(indices, order)
        same(values, np.take_along_axis(a, order, d))
        if a.dtype.kind == "f":
            same(ember.cumsum(t, d), np.cumsum(a, d), signs=False)     # (the kernel's -0.0 + 0)
            same(ember.cummax(t, d).values, np.fmax.accumulate(a, d) if not np.isnan(a).any()
                 else ember.cummax(ember.tensor(np.ascontiguousarray(a)), d).values.numpy())
            with np.errstate(all="ignore"):
                same(ember.logcumsumexp(t, d), np.logaddexp.accumulate(a, d).astype(a.dtype),
                     signs=False, rtol=0 if no_c else 1e-6)    # (C: its own exp and log1p)


@pytest.mark.parametrize("shape", [(12,), (3, 4), (2, 3, 2), (0, 3)])
def test_roll_argwhere_and_splits_match_numpy(shape, threads, no_c):
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 3
    t = ember.tensor(a)
    for s in (1, -5, 13, 0):
        same(ember.roll(t, s), np.roll(a, s))
    same(ember.roll(t.t() if a.ndim == 2 else t, 5), np.roll(a.T if a.ndim == 2 else a, 5))
    same(ember.argwhere(t), np.argwhere(a))
    same(ember.argwhere(t.t() if a.ndim == 2 else t), np.argwhere(a.T if a.ndim == 2 else a))
    if a.ndim >= 2 and a.shape[1] % 2 == 0:
        for got, want in zip(ember.hsplit(t, 2), np.hsplit(a, 2)):
            same(got, want)
    if a.ndim == 3:
        for got, want in zip(ember.dsplit(t, 2), np.dsplit(a, 2)):
            same(got, want)


def test_stacks_of_mixed_ranks_match_numpy(threads, no_c):
    a, b, c = (np.arange(3, dtype=np.float32), np.ones((2, 3), np.float32),
               np.float32(5) * np.ones((), np.float32))
    same(ember.vstack([ember.tensor(a), ember.tensor(b)]), np.vstack([a, b]))
    same(ember.hstack([ember.tensor(c), ember.tensor(a)]), np.hstack([c, a]))
    same(ember.column_stack([ember.tensor(a), ember.tensor(b.T)]), np.column_stack([a, b.T]))
    same(ember.hstack([ember.tensor(b), ember.tensor(b).t().t()]), np.hstack([b, b]))
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        ember.vstack([ember.tensor(b), ember.ones(2, 2)])


def test_indexed_writes_match_numpy(threads, no_c):
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    idx, v = np.array([3, -1, 3, 0]), RNG.standard_normal((4, 3)).astype(np.float32)
    want = x.copy()
    want[idx] = v
    same(ember.tensor(x).index_put([ember.tensor(idx)], ember.tensor(v)), want)
    want = x.copy()
    np.add.at(want, idx, v)
    same(ember.tensor(x).index_put((ember.tensor(idx),), ember.tensor(v), True), want)
    g = np.array([[0, 2, 1], [3, 3, 0]])
    same(ember.tensor(x).gather(0, ember.tensor(g)), np.take_along_axis(x, g, 0))
    same(ember.tensor(x).t().gather(1, ember.tensor(g.T.copy())),
         np.take_along_axis(x.T, g.T, 1))
    want = x.copy()
    np.add.at(want, (g, np.arange(3)), v[:2])
    same(ember.tensor(x).scatter_add(0, ember.tensor(g), ember.tensor(v[:2])), want)
    m = np.array([True, False, True])
    want = x.copy()
    bm = np.broadcast_to(m, x.shape)
    want[bm] = v.reshape(-1)[:bm.sum()]
    same(ember.tensor(x).masked_scatter(ember.tensor(m), ember.tensor(v)), want)
    w = RNG.random(4).astype(np.float32)
    same(ember.bincount(ember.tensor(idx % 4), ember.tensor(w)),
         np.bincount(idx % 4, w.astype(np.float64)).astype(np.float32))
    with pytest.raises(RuntimeError, match="out of bounds"):
        ember.tensor(x).gather(0, ember.tensor(g - 1))


@pytest.mark.parametrize("a", [ODD, ODD.T, ODD[:, ::2], ODD[0, 0], ODD[:0]],
                         ids=["plain", "transposed", "strided", "0-d", "empty"])
def test_isin_small_path_matches_numpy(a):
    t = ember.tensor(a)
    for test in (np.array([np.nan, -0.0, 2.0], np.float32), ODD[2:4, 1:4], ODD[:0]):
        for invert in (False, True):
            same(ember.isin(t, ember.tensor(test), invert=invert), np.isin(a, test, invert=invert))


@pytest.mark.parametrize("a", [ODD, np.nan_to_num(ODD), ODD.T, ODD[:, ::2], ODD.astype(np.float64),
                               np.where(ODD == 1, np.inf, ODD)],
                         ids=["plain", "no-nan", "transposed", "strided", "float64", "inf"])
def test_reduction_fast_paths_match_numpy(a, threads):
    """topk, median, nanmedian, aminmax and vdot's first branches (straight to their kernels or
    NumPy call, before the checks) against the NumPy path."""
    t = ember.tensor(a)
    calls = [lambda: ember.topk(t, 2), lambda: ember.topk(t, 3, largest=False),
             lambda: ember.median(t), lambda: ember.nanmedian(t), lambda: ember.aminmax(t),
             lambda: ember.aminmax(t, keepdim=True)]
    for call in calls:
        got = call()
        with kernels.disabled():
            want = call()
        for g, w in zip(*((r,) if isinstance(r, ember.Tensor) else r for r in (got, want))):
            same(g, w.numpy())
    same(ember.vdot(t[0], t[1]), np.asarray(np.dot(a[0], a[1])))
