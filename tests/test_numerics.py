"""cov, corrcoef, dist, renorm, trapezoid & co. and gradient (ember/_numerics.py) against
torch: values, gradients and errors."""
import numpy as np
import pytest

import ember
from oracle import assert_close, same, torch

RNG = np.random.default_rng(0)
M = RNG.standard_normal((3, 5))
V = RNG.standard_normal(6)
X = np.cumsum(RNG.uniform(0.2, 1.0, 5))
C = M + 1j * RNG.standard_normal((3, 5))
P3 = RNG.standard_normal((2, 10, 2))


def _t(lib, a, grad=False):
    return lib.tensor(a, requires_grad=grad)


CALLS = {
    "cov": lambda lib: [lib.cov(_t(lib, M)), lib.cov(_t(lib, V)), _t(lib, M).cov(correction=0),
                        lib.cov(_t(lib, M), fweights=lib.tensor([1, 2, 1, 3, 1])),
                        lib.cov(_t(lib, M), aweights=_t(lib, np.linspace(0.1, 1, 5))),
                        lib.cov(_t(lib, M), correction=2, fweights=lib.tensor([1, 2, 1, 3, 1]),
                                aweights=_t(lib, np.linspace(0.1, 1, 5))),
                        lib.cov(lib.tensor([[1, 2, 3], [2, 2, 5]])), lib.cov(_t(lib, C))],
    "cov_errors": lambda lib: lib.cov(_t(lib, np.ones((2, 2, 2)))),
    "cov_fweights_error": lambda lib: lib.cov(_t(lib, M), fweights=_t(lib, np.ones(5))),
    "corrcoef": lambda lib: [lib.corrcoef(_t(lib, M)), _t(lib, M[:2]).corrcoef(),
                             lib.corrcoef(_t(lib, V)), lib.corrcoef(_t(lib, C))],
    "dist": lambda lib: [lib.dist(_t(lib, M), _t(lib, M[0])), _t(lib, V).dist(_t(lib, V * 2), 1),
                         lib.dist(_t(lib, M), _t(lib, -M), float("inf")),
                         lib.dist(_t(lib, M), _t(lib, M + 1), 0)],
    "renorm": lambda lib: [lib.renorm(_t(lib, M), 2, 0, 1.5), _t(lib, M).renorm(1, 1, 1.0),
                           _t(lib, M).renorm_(3, -1, 0.5),
                           lib.renorm(_t(lib, M.reshape(3, 5, 1)), 2, 1, 2.0)],
    "renorm_errors": lambda lib: lib.renorm(_t(lib, V), 2, 0, 1.0),
    "trapezoid_positional_dx": lambda lib: lib.trapezoid(_t(lib, V), 0.25),
    "trapezoid": lambda lib: [lib.trapezoid(_t(lib, M)), lib.trapezoid(_t(lib, M), dx=0.5, dim=0),
                              lib.trapezoid(_t(lib, M), _t(lib, X)),
                              lib.trapezoid(_t(lib, M), _t(lib, np.tile(X, (3, 1)))),
                              lib.trapezoid(lib.tensor([1, 4, 9, 16])),
                              lib.trapezoid(_t(lib, V), dx=0.25),
                              lib.trapz(_t(lib, M), _t(lib, X)), lib.trapz(_t(lib, V), dx=2.0),
                              lib.trapezoid(_t(lib, np.ones((2, 0)))),
                              lib.cumulative_trapezoid(_t(lib, M)),
                              lib.cumulative_trapezoid(_t(lib, M), _t(lib, X)),
                              lib.cumulative_trapezoid(_t(lib, M), dx=3.0, dim=0)],
    "gradient": lambda lib: list(lib.gradient(_t(lib, M))) +
    list(lib.gradient(_t(lib, M), spacing=2.0, dim=1, edge_order=2)) +
    list(lib.gradient(_t(lib, M), spacing=[0.5, 3.0])) +
    list(lib.gradient(_t(lib, M), spacing=[_t(lib, X[:3]), _t(lib, X)])) +
    list(lib.gradient(_t(lib, M), spacing=(_t(lib, X),), dim=[1], edge_order=2)) +
    list(lib.gradient(lib.tensor([1, 4, 9, 16, 30]))),
    "gradient_errors": lambda lib: lib.gradient(_t(lib, M), edge_order=3),
    "gradient_too_short": lambda lib: lib.gradient(_t(lib, M[:, :2]), dim=1, edge_order=2),
    "get_device": lambda lib: lib.get_device(_t(lib, M)),
    "histogramdd": lambda lib: [
        list(lib.histogramdd(_t(lib, M.T), bins=[2, 3, 4])),
        list(lib.histogramdd(_t(lib, M.T.astype(np.float32)), 2, range=[-1., 1.] * 3,
                             density=True)),
        list(lib.histogramdd(_t(lib, M[:2].T), bins=[_t(lib, np.array([-2., 0., 2.])),
                                                      _t(lib, np.array([-1., 0., 0.5, 3.]))],
                             weight=_t(lib, np.arange(5.0)))),
        list(lib.histogramdd(_t(lib, np.ones((3, 2))), 2)),
        list(lib.histogramdd(_t(lib, P3), 3))],
    "segment_reduce": lambda lib: [
        lib.segment_reduce(_t(lib, V), r, lengths=lib.tensor([2, 0, 3, 1]), initial=i)
        for r in ("sum", "mean", "max", "min", "prod", "amax") for i in (None, 0.5)] + [
        lib.segment_reduce(_t(lib, V), "sum", offsets=lib.tensor([0, 2, 2, 5, 6])),
        lib.segment_reduce(_t(lib, M), "mean", lengths=lib.tensor([2, 1])),
        lib.segment_reduce(_t(lib, M), "amax", lengths=lib.tensor([[1, 4], [5, 0], [2, 3]]),
                           axis=1)],
    "segment_reduce_bad_axis": lambda lib: lib.segment_reduce(_t(lib, M), "sum", axis=1,
                                                              lengths=lib.tensor([3, 2])),
    "segment_reduce_bad_lengths": lambda lib: lib.segment_reduce(_t(lib, V), "sum",
                                                                 lengths=lib.tensor([2, 2])),
    "segment_reduce_bad_reduce": lambda lib: lib.segment_reduce(_t(lib, V), "std",
                                                                lengths=lib.tensor([6])),
    "histogramdd_int": lambda lib: lib.histogramdd(lib.ones(3, 2, dtype=lib.int64), 2),
    "histogramdd_bins": lambda lib: lib.histogramdd(lib.ones(3, 2), [2, 2, 2]),
    "histogramdd_1d": lambda lib: lib.histogramdd(lib.ones(3), 2),
}


@pytest.mark.parametrize("name", CALLS)
def test_matches_torch(name):
    same(CALLS[name])


@pytest.mark.parametrize("fn", [
    lambda lib, a: lib.cov(a, aweights=_t(lib, np.linspace(0.1, 1, 5))),
    lambda lib, a: lib.corrcoef(a),
    lambda lib, a: lib.dist(a, a.flip(0), 3),
    lambda lib, a: lib.renorm(a, 2, 0, 1.5),
    lambda lib, a: lib.trapezoid(a, _t(lib, X)),
    lambda lib, a: lib.cumulative_trapezoid(a, dim=0),
    lambda lib, a: lib.gradient(a, spacing=[_t(lib, X[:3]), _t(lib, X)], edge_order=2)[1],
    lambda lib, a: lib.segment_reduce(a, "mean", lengths=lib.tensor([1, 0, 2]), initial=1.0),
    lambda lib, a: lib.segment_reduce(a, "sum", lengths=lib.tensor([[4, 1]] * 3), axis=1),
], ids=["cov", "corrcoef", "dist", "renorm", "trapezoid", "cumulative_trapezoid", "gradient",
        "segment_mean", "segment_sum"])
def test_grads_match_torch(fn):
    def run(lib):
        a = _t(lib, M, True)
        out = fn(lib, a)
        (out * _t(lib, np.linspace(-1, 1, out.numel()).reshape(tuple(out.shape)))).sum() \
            .backward()
        return out, a.grad
    for e, t in zip(run(ember), run(torch)):
        assert_close(e, t)


def test_cov_warns_on_no_degrees_of_freedom():
    with pytest.warns(RuntimeWarning, match="degrees of freedom is <= 0"):
        c = ember.cov(ember.tensor([1.0]))
    assert np.isnan(c.item()) or np.isinf(c.item())
