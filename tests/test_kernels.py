"""The C kernels (ember/_C/kernels) against the NumPy reference path they replace: forward and
backward, float32 and float64, odd and 3-D shapes, non-contiguous inputs, 1 and 2 threads."""
import contextlib
import math
import multiprocessing
import os

import numpy as np
import pytest

import ember
from ember._C import kernels

F = ember.nn.functional
pytestmark = [pytest.mark.skipif(kernels.kernel("softmax", np.dtype(np.float32)) is None,
                                 reason="C kernels not built, or EMBER_NO_C set"),
              pytest.mark.usefixtures("threads")]   # each test at 1 and 2 threads

# (129, 1400): large enough that the row kernels split it over 2 threads (rowops.h keeps
# smaller ones on one: waking a thread costs more than it saves there)
SHAPES = [(1,), (7,), (3, 1023), (2, 5, 7), (33, 64), (129, 1400)]
TOL = {"float32": dict(rtol=2e-5, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-13)}


def _input(shape, dtype, noncontig, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    if noncontig:
        return (rng.standard_normal(tuple(reversed(shape))) * scale).astype(dtype).T
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _run(fn, arrays, grad_index=(0,)):
    """fn's output and the gradients of the arrays at ``grad_index`` (random output grad)."""
    ts = [ember.tensor(a, requires_grad=i in grad_index) for i, a in enumerate(arrays)]
    out = fn(*ts)
    g = np.random.default_rng(9).standard_normal(tuple(out.shape)).astype(out.dtype.np)
    out.backward(ember.tensor(g))
    return [out.detach().numpy()] + [ts[i].grad.numpy() for i in grad_index]


def check(fn, arrays, grad_index=(0,), rows=1):
    """fn with kernels against fn on the NumPy path: values and gradients. ``rows``: how many
    rows the gradients of arrays after the first sum over (a weight's or bias's): float32
    rounding grows with it on both paths, so their absolute tolerance does too."""
    assert kernels.kernel("softmax", np.dtype(np.float32)) is not None
    fast = _run(fn, arrays, grad_index)
    with kernels.disabled():
        assert kernels.kernel("softmax", np.dtype(np.float32)) is None
        ref = _run(fn, arrays, grad_index)
    for what, a, b in zip(["value"] + [f"grad {i}" for i in grad_index], fast, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, what
        tol = dict(TOL[a.dtype.name])
        if what not in ("value", "grad 0"):
            tol["atol"] *= max(1, rows / 8)
        # a row's sum rounds relative to its largest terms (orders differ per CPU's vector width)
        tol["atol"] *= max(1.0, float(np.abs(b).max(initial=0)))
        np.testing.assert_allclose(a, b, err_msg=what, **tol)


DTYPES = ["float32", "float64"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_every_dim(name, shape, dtype, noncontig):
    x = _input(shape, dtype, noncontig)
    for dim in range(-len(shape), len(shape)):
        check(lambda t: getattr(ember, name)(t, dim), [x])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_infinities(name, dtype):
    x = _input((4, 9), dtype, False)
    x[0, :4] = -np.inf                           # a masked row, as in attention
    x[1, 2] = np.inf
    fast = getattr(ember, name)(ember.tensor(x), -1).numpy()
    with kernels.disabled():
        ref = getattr(ember, name)(ember.tensor(x), -1).numpy()
    np.testing.assert_allclose(fast, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate, shape, dtype, noncontig):
    # NOTE: at scale 3 the 180K-element shape holds |x| ~ 4-6 values where tanh GELU's float32
    # gradient (s (1 - s) cancels) is ~5e-6 off the float64 value on both paths, kernel and
    # NumPy alike: scale 1 keeps the comparison to what the tolerance can tell apart
    x = _input(shape, dtype, noncontig, scale=1.0 if math.prod(shape) > 1e5 else 3.0)
    x.reshape(-1)[:3] = [-12.0, 0.0, 12.0] if x.size >= 3 else x.reshape(-1)[:3]
    check(lambda t: F.gelu(t, approximate=approximate), [x])


@pytest.mark.parametrize("dtype", DTYPES)
# (77, 513): the weight/bias sums flush (every 16 rows) mid-block; (520, 513): two threads of
# 260 rows, forward and backward
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 1023), (2, 5, 7), (77, 513), (520, 513)],
                         ids=str)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
def test_layer_norm(affine, shape, dtype, noncontig):
    n, rows = shape[-1], math.prod(shape[:-1])
    x = _input(shape, dtype, noncontig) + 1.5
    w, b = _input((n,), dtype, False, 1), _input((n,), dtype, False, 2)
    if affine == "none":
        check(lambda t: F.layer_norm(t, (n,)), [x])
    elif affine == "weight":
        check(lambda t, tw: F.layer_norm(t, (n,), tw), [x, w], (0, 1), rows)
    elif affine == "bias":
        check(lambda t, tb: F.layer_norm(t, (n,), None, tb), [x, b], (0, 1), rows)
    else:
        check(lambda t, tw, tb: F.layer_norm(t, (n,), tw, tb), [x, w, b], (0, 1, 2), rows)
    if len(shape) == 3:        # normalized over the last two dims
        check(lambda t: F.layer_norm(t, shape[1:], eps=1e-3), [x])


def test_layer_norm_statistics_hard_rows():
    """float32 rows whose first element (the one-pass sums' shift) is far from the mean, rows
    far from zero, constant rows: the forward against float64 NumPy."""
    rng = np.random.default_rng(5)
    x = (1e4 + rng.standard_normal((6, 1000))).astype(np.float32)
    x[1, 0] = 1e4 + 300.0                       # an outlier as the shift
    x[2] = x[2] - 1e4                           # near zero
    x[3] = 7.0                                  # constant: variance 0
    x[4] = rng.standard_normal(1000) * 1e-3     # tiny variance next to eps
    got = F.layer_norm(ember.tensor(x), (1000,)).numpy()
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    # rows at 1e4: x - mean in float32 is off by up to half an ulp of 1e4 (~5e-4 sigma), as in
    # torch; the others are exact to float32 rounding
    far = [0, 1, 5]
    np.testing.assert_allclose(got[far], want[far], rtol=0, atol=1.5e-3)
    np.testing.assert_allclose(np.delete(got, far, 0), np.delete(want, far, 0), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_norm_rows_with_nan_or_inf_are_nan(norm, dtype):
    """A row holding a nan or an inf: every output of the row nan (the variance is nan, which
    the float32 one-pass kernel's clamp of a negative variance must keep), as NumPy and torch."""
    x = np.random.default_rng(6).standard_normal((3, 40)).astype(dtype)
    x[0, 7], x[1, 39] = np.nan, np.inf
    fn = getattr(F, norm)
    got = fn(ember.tensor(x), (40,)).numpy()
    with kernels.disabled():
        want = fn(ember.tensor(x), (40,)).numpy()
    assert np.isnan(got[0]).all() and np.isnan(got[1]).sum() >= 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 1023), (2, 5, 7), (77, 513)], ids=str)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
def test_rms_norm(shape, dtype, noncontig):
    n, rows = shape[-1], math.prod(shape[:-1])
    x = _input(shape, dtype, noncontig)
    w = _input((n,), dtype, False, 1)
    check(lambda t, tw: F.rms_norm(t, (n,), tw), [x, w], (0, 1), rows)
    check(lambda t: F.rms_norm(t, (n,), eps=1e-2), [x])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, groups", [((2, 4, 5), 2), ((3, 6, 7, 9), 3), ((40, 8, 33), 4),
                                           ((5, 6), 3), ((1, 32, 129, 40), 8)], ids=str)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
def test_group_norm(shape, groups, dtype, noncontig):
    # layer_norm's kernels over (sample, group) rows, the affine per channel taken in turn
    c = shape[1]
    x = _input(shape, dtype, noncontig)
    w, b = _input((c,), dtype, False, 1), _input((c,), dtype, False, 2)
    check(lambda t, tw, tb: F.group_norm(t, groups, tw, tb), [x, w, b], (0, 1, 2),
          math.prod(shape) // c)
    check(lambda t, tw: F.group_norm(t, groups, tw, eps=1e-2), [x, w], (0, 1),
          math.prod(shape) // c)
    check(lambda t: F.group_norm(t, groups), [x])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (5, 1023), (64, 10), (200, 1000)], ids=str)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(reduction, shape, dtype, noncontig):
    x = _input(shape, dtype, noncontig)
    t = np.random.default_rng(3).integers(0, shape[1], shape[0])
    t[1::3] = -100                               # ignored rows
    check(lambda a, b: F.cross_entropy(a, b, reduction=reduction), [x, t])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5,), (1, 1), (7, 3), (64, 10), (3, 4, 5), (2, 3, 4, 2)],
                         ids=str)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_nll_loss(reduction, shape, dtype, noncontig, weighted):
    """rowops.h's nll against the reference: ignored targets, weights, (N, C, d...) inputs;
    a target out of range still raises torch's error."""
    x = _input(shape, dtype, noncontig)
    c = shape[1] if len(shape) > 1 else shape[0]
    t = np.random.default_rng(3).integers(0, c, shape[:1] + shape[2:] if len(shape) > 1 else ())
    if t.ndim:
        t.reshape(-1)[1::3] = -100
    w = np.random.default_rng(4).uniform(0.5, 2, c).astype(dtype)
    check(lambda a, b, *w: F.nll_loss(a, b, *w, reduction=reduction),
          [x, t] + [w] * weighted)
    with pytest.raises(IndexError, match="Target 99 is out of bounds"):
        F.nll_loss(ember.tensor(x), ember.tensor(np.full_like(t, 99)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bad", [5, -1, -101])
def test_cross_entropy_kernel_checks_targets(bad, dtype):
    # the kernel counts the targets it does not ignore and refuses one out of range (-1,
    # nothing written): the reference path then raises torch's error
    fn = ember._C.kernels.kernel("cross_entropy", np.dtype(dtype))
    if fn is None:
        pytest.skip("C kernels not built")
    x = np.zeros((4, 5), dtype)
    out = np.full(6, 7.0, dtype)         # (the losses, their sum and mean)
    for t, want in ((np.array([0, -100, 4, 2]), 3), (np.array([0, bad, 4, 2]), -1)):
        got = fn(x.ctypes.data, t.ctypes.data, None, out.ctypes.data, 4, 5, -100, 1)
        assert got == want
    assert (out != 7.0).all() and np.isclose(out[1], 0)   # (the first call wrote all 6)
    np.testing.assert_allclose(out[4:], [3 * np.log(5), np.log(5)], rtol=1e-6)
    out[:] = 7.0
    fn(x.ctypes.data, np.array([0, bad, 4, 2]).ctypes.data, None, out.ctypes.data, 4, 5, -100, 1)
    assert (out == 7.0).all()
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
        F.cross_entropy(ember.tensor(x), ember.tensor([0, bad, 4, 2]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, inner, index_shape", [(65, 32, (16, 64)), (7, 3, (40,)),
                                                      (3, 1, (2, 50))])
def test_add_rows_is_add_at_bit_for_bit(rows, inner, index_shape, dtype):
    # an embedding's gradient: repeated rows add up in index order, as np.add.at's do
    from ember._backends import add_at
    rng = np.random.default_rng(0)
    idx = rng.integers(0, rows, index_shape)
    g = rng.standard_normal(index_shape + (inner,)).astype(dtype)
    out, ref = np.ones((rows, inner), dtype), np.ones((rows, inner), dtype)
    add_at(np, out, idx, g)
    np.add.at(ref, idx, g)
    assert np.array_equal(out, ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1024, 128), (333, 129), (4096, 65), (16385, 2)])
def test_bias_kernels_are_numpys_bit_for_bit(shape, dtype):
    # a linear layer's bias (out += b) and its gradient (add.reduce over the rows), as NumPy
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape).astype(dtype)
    a[0, 0] = -0.0
    b = rng.standard_normal(shape[1]).astype(dtype)
    s = kernels.sum_rows(a)
    ref = np.add.reduce(a, 0)
    assert np.array_equal(s, ref) and np.array_equal(np.signbit(s), np.signbit(ref))
    out = a.copy()
    assert kernels.add_bias(out, b) and np.array_equal(out, a + b)
    # what they leave to NumPy: one column (summed pairwise there), small or strided arrays
    assert kernels.sum_rows(a[:, :1].copy()) is None and kernels.sum_rows(a[:, ::2]) is None
    assert kernels.sum_rows(a[:8]) is None and not kernels.add_bias(a[:, ::2], b[::2])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b,o,i", [(3, 1000, 33), (128, 64, 784), (5, 3, 4099), (2, 2, 8193)])
def test_outer_kernel_is_numpys_broadcast_multiply_bit_for_bit(b, o, i, dtype):
    # per-sample weight gradients (vmap's linear rule): rows of any length (streaming stores
    # from the first 16-byte boundary of each), as NumPy's g[:, :, None] * x[:, None, :]
    rng = np.random.default_rng(0)
    g, x = (rng.standard_normal(s).astype(dtype) for s in ((b, o), (b, i)))
    g[0, 0] = -0.0
    out, ref = kernels.outer(g, x), g[:, :, None] * x[:, None, :]
    assert np.array_equal(out, ref) and np.array_equal(np.signbit(out), np.signbit(ref))
    assert kernels.outer(g[:, ::2], x[:, ::2]) is None and kernels.outer(g[:1, :1], x[:1]) is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2,), (7, 3), (3, 5, 33), (600, 701)])
def test_diff_and_addr_kernels_are_numpys_bit_for_bit(shape, dtype):
    # diff along the last dim (rowops' diff_rows), outer and addr (rowops' addr: input of the
    # product's shape or one row broadcast, beta 0 reading no input, strided vectors) against
    # the NumPy path, with -0, nan and inf; the last shape splits over 2 threads
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[:3] = -0.0, np.nan, np.inf
    v1, v2 = (rng.standard_normal(2 * n + k).astype(dtype)
              for n, k in ((shape[0], -1), (shape[-1], 1)))
    v1[0] = -0.0
    calls = [lambda: ember.diff(ember.from_numpy(x)), lambda: ember.outer(
        *(ember.from_numpy(v.copy()) for v in (v1[::2], v2[1::2])))]    # (rowops' outer)
    for inp in (x, x[(0,) * (x.ndim - 1)]) if len(shape) == 2 else ():
        for beta, alpha in ((1, 1), (0, 2), (0.5, -3)):
            calls.append(lambda inp=inp, b=beta, a=alpha: ember.addr(
                *map(ember.from_numpy, (inp, v1[::2], v2[1::2])), beta=b, alpha=a))
    for call in calls:
        out = call().numpy()
        with kernels.disabled():
            ref = call().numpy()
        assert np.array_equal(out, ref, equal_nan=True)
        assert np.array_equal(np.signbit(out), np.signbit(ref))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5,), (13, 70), (300, 701)], ids=str)
def test_complex_and_polar_kernels_against_numpy(shape, dtype):
    # rowops' interleave (complex: bit for bit) and pointwise.h's polar (float32: the sine and
    # cosine in double, ~1 ulp) against the NumPy path, gradients included, with -0, nan, inf
    # and angles past 2^20 (libm's); strided or broadcast parts keep NumPy
    a, b = _input(shape, dtype, False), _input(shape, dtype, False, seed=1)
    a.flat[:4], b.flat[:6] = (-0.0, np.nan, np.inf, 2.0), (np.inf, -0.0, 1.0, np.nan, 3e7, -0.0)
    for fn, exact in ((ember.complex, True), (ember.polar, dtype == "float64")):
        for y in (b, b[..., ::-1], b[:1]):
            fast = _run(fn, [a, y], (0, 1))
            with kernels.disabled():
                ref = _run(fn, [a, y], (0, 1))
            for out, r in zip(fast, ref):
                assert np.array_equal(np.isnan(out), np.isnan(r))
                if exact:
                    assert np.array_equal(out, r, equal_nan=True)
                np.testing.assert_allclose(out, r, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,dim", [((5,), 0), ((13, 70), 1), ((9, 600), 0), ((3, 70, 300), 1),
                                       ((2, 5, 3), -1), ((300, 500), 1)])
def test_logcumsumexp_kernel_against_numpy(shape, dim):
    # pointwise.h's logcumsumexp_f32 (8 rows or 256 columns a block; the last shape splits
    # over 2 threads) against NumPy's logaddexp.accumulate, gradients included (two reversed
    # scans), with nan, infinities and equal terms; float16 accumulates in float32 through it
    x = _input(shape, "float32", False) * 10
    x.flat[:6] = np.nan, np.inf, -np.inf, 3.0, 3.0, -0.0
    x.flat[-4:] = -np.inf, -np.inf, 88.0, 88.0
    for a in (x, x.astype(np.float16)):
        fast = _run(lambda t: ember.logcumsumexp(t, dim), [a])
        with kernels.disabled():
            ref = _run(lambda t: ember.logcumsumexp(t, dim), [a])
        tol = 2e-6 if a.dtype == np.float32 else 1e-3
        for out, r, scale in zip(fast, ref, (0, 10 * np.nanmax(np.abs(ref[1])))):
            assert np.array_equal(np.isnan(out), np.isnan(r))
            # (the gradient, a difference of exps, to its largest terms' rounding)
            np.testing.assert_allclose(out, r, rtol=tol, atol=tol * scale + 1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((3,), 0), ((7, 3), 1), ((3, 5, 33), 0), ((4, 3, 9), 1),
                                       ((40000, 3), -1)])
def test_cross_kernel_is_numpys_bit_for_bit(shape, dim, dtype):
    # rowops' cross3 (contiguous operands of one shape; the last splits over 2 threads) against
    # the NumPy path, gradients included, with -0, nan and inf; a strided or broadcast operand
    # keeps NumPy
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    a.flat[:3], b.flat[3:5] = (-0.0, np.nan, np.inf), (np.inf, -0.0)
    for y in (b, b[..., ::-1], b[:1] if dim else b):
        fast = _run(lambda s, t: ember.cross(s, t, dim), [a, y], (0, 1))
        with kernels.disabled():
            ref = _run(lambda s, t: ember.cross(s, t, dim), [a, y], (0, 1))
        for out, r in zip(fast, ref):
            assert np.array_equal(out, r, equal_nan=True)
            assert np.array_equal(np.signbit(out), np.signbit(r))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", [((36,), (36, 54, 36)), ((67, 33), (5, 129)), ((3, 1, 65), (7, 130)),
                                   ((1000,), (4099,)), ((14, 21), (21, 14)), ((3, 64, 64), (4, 5))])
def test_kron_by_the_outer_kernel_is_numpys_product(sa, sb, dtype):
    # kron's leading dims as a batch of outer products (the kernel), or its short last dims
    # merged (the last two cases), against np.kron's multiply: odd shapes, strided inputs, -0,
    # nan and inf
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(dtype) for s in (sa, sb))
    a.flat[:3] = -0.0, np.nan, np.inf
    b.flat[:2] = -np.inf, -0.0
    for sl in (slice(None), slice(1, None, 2)):
        x, y = ember.from_numpy(a)[..., sl], ember.from_numpy(b)[..., sl]
        out, ref = ember.kron(x, y).numpy(), np.kron(a[..., sl], b[..., sl])
        assert np.array_equal(out, ref, equal_nan=True)
        assert np.array_equal(np.signbit(out), np.signbit(ref))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((1024, 1000), -1), ((333, 129), 1), ((16385, 3), -1),
                                       ((7, 5000, 3), None), ((40000,), None), ((3, 4, 4099), 2)],
                         ids=str)
def test_prod_kernel_against_numpy(shape, dim, dtype):
    """prod over the last dim or everything (lanes of partial products, so rounded apart
    from NumPy's element-at-a-time loop), with zeros of both signs, nan and infinities in some
    rows; the values and the gradient (which divides by the input) against the NumPy path."""
    x = np.random.default_rng(0).uniform(0.99, 1.01, shape).astype(dtype)
    rows = x.reshape(-1, shape[-1])
    if dim is not None and rows.shape[0] > 4:
        rows[1, 1], rows[2, 0], rows[3, 2], rows[4, -1] = -0.0, np.nan, np.inf, -np.inf
    fn = (lambda t: t.prod()) if dim is None else (lambda t: t.prod(dim, keepdim=True))
    fast = _run(fn, [x])
    with kernels.disabled():
        ref = _run(fn, [x])
    tol = 1e-4 if dtype == "float32" else 1e-12
    for a, b in zip(fast, ref):
        assert np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(np.signbit(a[a == 0]),
                                                                            np.signbit(b[b == 0]))
        np.testing.assert_allclose(a, b, rtol=tol)
    assert kernels.prod(x, dim, False) is not None
    assert kernels.prod(x[..., ::2], -1, False) is None       # (strided or small: NumPy)
    assert kernels.prod(x.reshape(-1)[:1000], None, False) is None


@pytest.mark.parametrize("bad", [65, -1])
def test_add_rows_kernel_refuses_a_bad_index(bad):
    from ember._backends import _add_rows_kernel
    out, g = np.zeros((65, 4), np.float32), np.ones((40, 4), np.float32)
    idx = np.arange(40)
    idx[7] = bad
    assert _add_rows_kernel(out, idx, g) is False and not out.any()    # nothing written
    w = ember.zeros(65, 4, requires_grad=True)
    with pytest.raises(IndexError, match=f"embedding: expected indices in \\[0, 65\\), got {bad}"):
        F.embedding(ember.tensor(idx), w)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("foreach", [None, False])
def test_adamw_bit_identical(amsgrad, foreach, dtype):
    """The fused update does the NumPy passes' operations in their order: equal bits."""
    def run(ctx):
        rng = np.random.default_rng(0)
        ps = [ember.nn.Parameter(ember.tensor(rng.standard_normal(s).astype(dtype)))
              for s in [(300, 400), (7,), (70000,), (3, 5)]]
        opt = ember.optim.AdamW(ps, lr=1e-2, amsgrad=amsgrad, foreach=foreach)
        with ctx:
            for _ in range(4):
                for p in ps:
                    p.grad = ember.tensor(rng.standard_normal(tuple(p.shape)).astype(dtype))
                opt.step()
        return [p.detach().numpy() for p in ps]
    for a, b in zip(run(contextlib.nullcontext()), run(kernels.disabled())):
        np.testing.assert_array_equal(a, b)


def test_double_backward_uses_ember_ops():
    """With create_graph the backward runs in ember ops, so gradients of gradients exist."""
    x = ember.tensor(_input((3, 8), "float64", False), requires_grad=True)
    for f in (lambda t: F.gelu(t), lambda t: F.layer_norm(t, (8,)), lambda t: t.softmax(-1)):
        (g,) = ember.autograd.grad((f(x) ** 2).sum(), x, create_graph=True)
        assert g.requires_grad
        (gg,) = ember.autograd.grad(g.sum(), x)
        assert np.isfinite(gg.numpy()).all()


def test_num_threads_rejects_zero():
    with pytest.raises(RuntimeError, match="set_num_threads"):
        ember.set_num_threads(0)


def _softmax_in_child():
    assert ember.get_num_threads() == 1
    ember.softmax(ember.randn(512, 1024), -1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_runs_kernels(threads):
    """OpenMP's pool does not survive fork; a child falls back to one thread instead of
    hanging (DataLoader workers are forked)."""
    ember.softmax(ember.randn(512, 1024), -1)          # the parent's pool exists now
    p = multiprocessing.get_context("fork").Process(target=_softmax_in_child)
    p.start()
    p.join(60)
    hung = p.is_alive()
    if hung:
        p.kill()
    assert not hung and p.exitcode == 0


@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
@pytest.mark.parametrize("name", ["erf", "erfc"])
def test_erf_float32(name, noncontig):
    """A few ulp from the float64-evaluated reference (which is within ~2 ulp of exact)."""
    x = _input((3, 1023), "float32", noncontig)
    x.reshape(-1)[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30]
    fast = getattr(ember, name)(ember.tensor(x)).numpy()
    with kernels.disabled():
        ref = getattr(ember, name)(ember.tensor(x)).numpy()
    np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-37)
    grid = np.linspace(-9, 9, 100001, dtype=np.float32)
    fast = getattr(ember, name)(ember.tensor(grid)).numpy()
    with kernels.disabled():
        ref = getattr(ember, name)(ember.tensor(grid)).numpy()
    np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-36)


def _ulps(a, b):
    """How many float32 steps apart a and b are (nan where either is, or the signs differ)."""
    ia, ib = a.view(np.int32).astype(np.int64), b.view(np.int32).astype(np.int64)
    return np.where((np.signbit(a) == np.signbit(b)) & ~np.isnan(a) & ~np.isnan(b),
                    np.abs(ia - ib), np.nan)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pow_float32(threads):
    """pointwise.h's pow of two float32 arrays: C99's special cases as NumPy's powf (signed
    zeros, infinities, nan, negative bases to integers and not, overflow, denormal results),
    the rest within 1 ulp of the float64 power rounded."""
    v = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, np.inf,
                  -np.inf, np.nan, 1e-40, -1e-40, 1e30, -1e30, 16777216.0, -16777215.0, 300.0,
                  -301.0, 150.5], np.float32)
    x, y = (a.ravel().copy() for a in np.meshgrid(v, v))
    got, want = kernels.pointwise("pow", x, other=y), np.power(x, y)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    num = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[num]), np.signbit(want[num]))
    assert np.nanmax(_ulps(got, want)) <= 1
    rng = np.random.default_rng(0)
    x = (rng.uniform(0, 3, 50000) ** 3 * rng.choice([-1, 1], 50000)).astype(np.float32)
    y = np.where(rng.random(50000) < 0.3, rng.integers(-40, 40, 50000),
                 rng.uniform(-40, 40, 50000)).astype(np.float32)
    got, want = kernels.pointwise("pow", x, other=y), np.power(x.astype(np.float64), y)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.nanmax(_ulps(got, want.astype(np.float32))) <= 1



@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
def test_pow_grads_float32(threads, noncontig):
    """pow's gradients of two float32 tensors (the base's by the fused pow_bwd, the exponent's
    from the saved result) as the NumPy path's ops: negative bases, zeros (d/dexp 0 where the exponent >= 0), -0, inf, nan; odd shapes."""
    rng = np.random.default_rng(5)
    x = (rng.uniform(-3, 3, (37, 29)) ** 3).astype(np.float32)
    y = np.where(rng.random((37, 29)) < 0.3, rng.integers(-4, 5, (37, 29)),
                 rng.uniform(-4, 4, (37, 29))).astype(np.float32)
    x.reshape(-1)[:8] = [0.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 0.0]
    y.reshape(-1)[:8] = [2.0, -1.5, 0.5, -2.0, 3.0, 1.0, np.nan, 0.0]

    def grads():
        a, b = ember.tensor(x, requires_grad=True), ember.tensor(y, requires_grad=True)
        out = a.t() ** b.t() if noncontig else a ** b
        ember.autograd.backward([out], [ember.ones_like(out)])
        return a.grad.numpy(), b.grad.numpy()
    fast = grads()
    with kernels.disabled():
        ref = grads()
    for a, b in zip(fast, ref):
        np.testing.assert_allclose(a, b, rtol=4e-6, atol=1e-30, equal_nan=True)


@pytest.mark.parametrize("n", [5, 5000])
@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("c", [False, True], ids=["numpy", "C"])
def test_clamp_keeps_the_input_at_a_tie(n, dt, c, threads):
    """A bound equal to the input (-0.0 against 0.0) gives the input, as torch's clamp, with
    nan kept: clamp, clamp_min and clamp_max, the NumPy path and the kernel."""
    x = np.resize(np.array([0.0, -0.0, 1.0, -1.0, np.nan], dt), n)
    for lo, hi in ((-0.0, None), (0.0, None), (None, -0.0), (None, 0.0), (0.0, -0.0), (-0.0, 0.0)):
        want = x if lo is None else np.where(x < lo, lo, x)
        want = want if hi is None else np.where(want > hi, hi, want).astype(dt)
        with contextlib.nullcontext() if c else kernels.disabled():
            calls = [ember.clamp(ember.tensor(x), lo, hi)] + (
                [ember.clamp_min(ember.tensor(x), lo)] if hi is None else
                [ember.clamp_max(ember.tensor(x), hi)] if lo is None else [])
        for got in calls:
            got = got.numpy()
            assert np.array_equal(got, want, equal_nan=True)
            num = ~np.isnan(want)
            assert np.array_equal(np.signbit(got[num]), np.signbit(want[num])), (lo, hi)


# (name, call, exact): pointwise.h's fused float32 loops; the exact ones (selects) round as
# the NumPy reference bit for bit, the others (exp, log) to ~2 ulp
POINTWISE = [
    ("sigmoid", ember.sigmoid, False), ("silu", F.silu, False),
    ("leaky_relu", lambda t: F.leaky_relu(t, 0.2), True), ("hardsigmoid", F.hardsigmoid, True),
    ("hardswish", F.hardswish, True), ("clamp", lambda t: t.clamp(-0.5, 0.0), True),
    ("clamp_min", lambda t: t.clamp(min=-0.0), True), ("sign", ember.sign, True),
    ("clamp_max", lambda t: t.clamp(max=0.0), True), ("pow", lambda t: t ** t.flip(-1).detach(), False),
    ("pow_exponent", lambda t: t.flip(-1).detach() ** t, False),
    ("nan_to_num", lambda t: ember.nan_to_num(t, 1.5, 7.0), True),
    ("nan_to_num_default", ember.nan_to_num, True), ("elu", F.elu, False),
    ("selu", F.selu, False), ("celu", lambda t: F.celu(t, 2.0), False),
    ("softplus", F.softplus, False), ("softplus_beta", lambda t: F.softplus(t, 2.0, 3.0), False),
    ("logaddexp", lambda t: ember.logaddexp(t, t.flip(-1) * 0.5), False),
    ("logaddexp_same", lambda t: ember.logaddexp(t, t), False),
    ("erfinv", lambda t: ember.erfinv(t * 0.34), False),
    ("remainder", lambda t: ember.remainder(t, 0.7), True),
    ("remainder_tensor", lambda t: ember.remainder(t * 7, t.flip(-1)), True),
    ("angle", ember.angle, True), ("lgamma", ember.lgamma, False),
    ("entr", ember.special.entr, False),
    ("digamma", ember.digamma, False),
    ("ndtri", lambda t: ember.special.ndtri(t.abs() / (t.abs() + 1)), False),
    ("hardshrink", lambda t: F.hardshrink(t, 0.3), True),
    ("softshrink", lambda t: F.softshrink(t, 0.3), True),
    ("threshold", lambda t: F.threshold(t, 0.3, -2.0), True), ("relu", F.relu, True),
    ("fmod", lambda t: ember.fmod(t * 7, 0.7), True),
    ("fmod_tensor", lambda t: ember.fmod(t * 7, t.flip(-1)), True),
    ("floor_divide", lambda t: ember.floor_divide(t * 7, 0.7), True),
    ("floor_divide_tensor", lambda t: ember.floor_divide(t * 7, t.flip(-1)), True),
    ("reciprocal", ember.reciprocal, True), ("rsqrt", ember.rsqrt, True),
    ("mish", F.mish, False), ("logsigmoid", F.logsigmoid, False),
    ("hardtanh", lambda t: F.hardtanh(t, -0.5, 2.0), True), ("frac", ember.frac, True),
    ("logit", lambda t: ember.logit((t * 0.1).clamp(-0.49, 0.49) + 0.5), False),
    ("logit_eps", lambda t: ember.logit((t * 0.1).clamp(-0.49, 0.49) + 0.5, 0.1), False),
    ("bce_logits", lambda t: F.binary_cross_entropy_with_logits(t, t.flip(-1).sigmoid()), False),
    ("bce_logits_sum", lambda t: F.binary_cross_entropy_with_logits(
        t, t.flip(-1).sigmoid().detach(), reduction="sum"), False),
    ("lerp", lambda t: ember.lerp(t, t.flip(-1), 0.3), True),
    ("lerp_far", lambda t: ember.lerp(t, t.flip(-1), 0.8), True),
    ("addcmul", lambda t: ember.addcmul(t, t.flip(-1), t * 0.5, value=0.7), True),
    ("addcdiv", lambda t: ember.addcdiv(t, t.flip(-1), t * 0.5 + 3, value=-2), True),
    ("copysign", lambda t: ember.copysign(t, t.flip(-1)), True),
    ("xlogy", lambda t: ember.xlogy(t, t.flip(-1).abs()), False),
    ("xlog1py", lambda t: ember.special.xlog1py(t, t.flip(-1).abs() - 0.5), False),
    ("sinc", ember.sinc, False), ("sinc_far", lambda t: ember.sinc(t * 3e4), False)] + [
    (f"{n}_{r}", lambda t, n=n, r=r, kw=kw: getattr(F, n)(t, t.flip(-1) * 0.5, reduction=r, **kw),
     r == "none") for n, kw in (("mse_loss", {}), ("smooth_l1_loss", {"beta": 0.5}),
                                ("huber_loss", {"delta": 1.5})) for r in ("none", "mean")] + [
    (f"bce_{r}", lambda t, r=r: F.binary_cross_entropy(
        (t * 0.1).clamp(-0.5, 0.5) + 0.5, (t.flip(-1).detach() if r == "none" else
                                          t.flip(-1)).clamp(-1, 1) * 0.5 + 0.5, reduction=r),
     False)
    for r in ("none", "sum")] + [
    (n, getattr(ember, n), False) for n in (
        "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sinh", "cosh", "tan", "atan",
        "asin", "acos", "atanh", "tanh", "asinh")] + [
    (n, lambda t, n=n: getattr(ember, n)(t, t.flip(-1) * 0.5), False)
    for n in ("atan2", "hypot", "logaddexp2")]
EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, -3.0, 3.0, 100.0, -100.0, 88.8,
         -88.8, 0.3, -0.3, 30.0]


@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
@pytest.mark.parametrize("shape", [(7,), (3, 1023), (2, 5, 7), (129, 1400)], ids=str)
@pytest.mark.parametrize("name,fn,exact", POINTWISE, ids=[c[0] for c in POINTWISE])
def test_pointwise_float32(name, fn, exact, shape, noncontig):
    """Values and gradients against the NumPy path, edge values included (nan, infinities,
    denormals, signed zeros, the kinks of hardswish and hardsigmoid, exp's overflow)."""
    x = _input(shape, "float32", noncontig)
    n = min(len(EDGES), x.size)
    x[np.unravel_index(np.arange(n), x.shape)] = EDGES[:n]
    fast, ref = _run(fn, [x]), None
    with kernels.disabled():
        ref = _run(fn, [x])
    for a, b in zip(fast, ref):
        if exact:      # (the gradient too: fused or ember ops, it must round as the reference)
            np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))
        assert np.array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_every_pointwise_code_has_a_loop(threads):
    """Each op code of ``_POINTWISE`` names a loop in pointwise.h's table (a missing entry would
    be a NULL call)."""
    x = np.linspace(0.05, 0.95, 5000, dtype=np.float32)
    for name in kernels._POINTWISE:
        r = kernels.pointwise(name, x, 0.5, 0.25, other=x[::-1], third=x + 1)
        assert r.shape == x.shape and not np.isnan(r[:100]).all(), name


def test_pointwise_kernel_runs_and_keeps_the_layout():
    """The fused loop takes a contiguous float32 array (a transposed one, and float64, keep
    NumPy; a strided second operand is copied), and a sigmoid far down the tail is its
    split, not 0 / 1."""
    x = np.linspace(-80, 80, 4096, dtype=np.float32)
    assert kernels.pointwise("sigmoid", x) is not None
    assert kernels.pointwise("sigmoid", x.reshape(64, 64).T) is None
    assert kernels.pointwise("sigmoid", x.astype(np.float64)) is None
    assert kernels.pointwise("logaddexp", x, other=x[:-1]) is None
    np.testing.assert_allclose(kernels.pointwise("logaddexp", x, other=x[::-1]),
                               np.logaddexp(x, x[::-1]), rtol=1e-6, atol=1e-6)
    y = kernels.pointwise("sigmoid", x)
    assert y[0] > 0 and y[0] == pytest.approx(math.exp(-80), rel=1e-5)


# (input, weight, padding, groups): 3x3 convolutions with unit stride, >= 16 channels per
# group on one side and >= 12 in the input, which run Winograd (ember/_ops/conv_winograd.py);
# odd sizes leave partial tiles, (1, 1) a single one
WINOGRAD = [((2, 16, 7, 9), (16, 16, 3, 3), 1, 1), ((1, 32, 5, 6), (16, 32, 3, 3), 0, 1),
            ((3, 32, 6, 5), (64, 16, 3, 3), 1, 2), ((2, 12, 9, 4), (32, 12, 3, 3), 1, 1),
            ((1, 32, 1, 1), (16, 32, 3, 3), 1, 1), ((2, 16, 4, 3), (16, 16, 3, 3), (1, 0), 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", WINOGRAD, ids=str)
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
def test_winograd_conv(case, dtype, transposed):
    from ember._ops import conv_winograd
    xs, ws, padding, groups = case
    x, w = _input(xs, dtype, False), _input(ws, dtype, False, seed=1, scale=0.3)
    if transposed:        # (in, out / groups, 3, 3): the same weight read the other way round
        x = _input((xs[0], ws[0]) + xs[2:], dtype, False)
        fn = lambda a, b: F.conv_transpose2d(a, b, padding=padding, groups=groups)  # noqa: E731
    else:
        fn = lambda a, b: F.conv2d(a, b, padding=padding, groups=groups)  # noqa: E731
        p = (padding,) * 2 if isinstance(padding, int) else padding
        assert conv_winograd.forward(x, w, (1, 1), p, (1, 1), groups) is not None
    fast = _run(fn, [x, w], (0, 1))
    with kernels.disabled():
        ref = _run(fn, [x, w], (0, 1))
    # the transforms reorder the sums: compare against each result's scale
    tol = 2e-6 if dtype == "float32" else 1e-14
    for what, a, b in zip(["value", "grad input", "grad weight"], fast, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, what
        np.testing.assert_allclose(a, b, rtol=0, atol=tol * np.abs(b).max(), err_msg=what)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES + [(2, 300, 3)], ids=str)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_scan_every_dim(name, shape, dtype, noncontig):
    """The scans accumulate in float64 in input order, as torch's CPU kernel does: bit-equal
    to NumPy's float64 scan rounded to ``dtype``; the backward is the reversed scan."""
    x = _input(shape, dtype, noncontig, scale=0.01 if name == "cumprod" else 3.0)
    x = x + 1 if name == "cumprod" else x
    g = _input(shape, dtype, False, seed=1)
    for dim in range(-len(shape), len(shape)):
        t = ember.tensor(x, requires_grad=True)
        out = getattr(ember, name)(t, dim)
        out.backward(ember.tensor(g))
        ref = getattr(np, name)(x.astype(np.float64), axis=dim)
        np.testing.assert_array_equal(out.detach().numpy(), ref.astype(dtype))
        if name == "cumsum":
            gref = np.flip(np.cumsum(np.flip(g.astype(np.float64), dim), dim), dim)
            np.testing.assert_array_equal(t.grad.numpy(), gref.astype(dtype))
        elif dtype == "float64":
            check(lambda t: ember.cumprod(t, dim), [x])


def test_long_float32_cumsum_splits_over_threads(threads):
    """A 1-D float32 cumsum long enough for the kernel's chunked path (each thread scans its
    chunk from the chunks before it; 8-element blocks) still rounds as one float64 loop, and
    its backward (the reversed scan) too."""
    n = (1 << 18) + 13
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    t = ember.tensor(x, requires_grad=True)
    out = ember.cumsum(t, 0)
    g = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    out.backward(ember.tensor(g))
    want = np.cumsum(x.astype(np.float64))
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-6, atol=1e-6 * n ** 0.5)
    gwant = np.cumsum(g.astype(np.float64)[::-1])[::-1]
    np.testing.assert_allclose(t.grad.numpy(), gwant, rtol=1e-6, atol=1e-6 * n ** 0.5)
    # the regrouped sums differ from the sequential float64 ones by ~1e-16 relative: a float32
    # rounding may flip only at a near-tie
    assert (out.detach().numpy() != want.astype(np.float32)).mean() < 1e-3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((5,), 0), ((300001,), 0), ((3, 40), 1), ((40, 300), 0)],
                         ids=str)
def test_cumsum_keeps_a_leading_negative_zero(threads, shape, dim, dtype):
    """A running sum starts from -0.0, the identity that keeps -0.0 (0.0 + -0.0 is 0.0): a
    leading run of -0.0 stays -0.0 as in NumPy's and torch's scans, forward and reversed (the
    backward), on every path (rows, column blocks, a long row over threads)."""
    x = np.full(shape, -0.0, dtype)
    np.moveaxis(x, dim, 0)[3:] = 1.0
    t = ember.tensor(x, requires_grad=True)
    out = ember.cumsum(t, dim)
    g = np.flip(x, dim).copy()          # (its trailing -0.0 lead the reversed scan)
    out.backward(ember.tensor(g))
    assert np.array_equal(np.signbit(out.detach().numpy()), np.signbit(np.cumsum(x, dim)))
    gwant = np.flip(np.cumsum(np.flip(g, dim), dim), dim)
    assert np.array_equal(np.signbit(t.grad.numpy()), np.signbit(gwant))


def test_long_float32_cumprod_blocks():
    """A float32 cumprod runs in blocks of 8 (each block's running products, then the carry):
    it rounds as torch's one float64 loop but for near-ties; a block that underflows the
    double, or holds a zero, an inf or a NaN, is redone one multiply at a time, so a huge
    carry times tiny factors, zeros and NaNs come out exactly as the loop's."""
    n = (1 << 16) + 5
    x = (1 + 1e-3 * np.random.default_rng(5).standard_normal(n)).astype(np.float32)
    got = ember.cumprod(ember.tensor(x), 0).numpy()
    want = np.cumprod(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert (got != want.astype(np.float32)).mean() < 1e-3
    hard = np.ones(64, np.float32)
    hard[:10] = 1e30                        # carry 1e300 (a double), then 8 factors of 1e-43:
    hard[16:24] = 1e-43                     # their own product (1e-344) underflows the double
    hard[33], hard[41], hard[50] = 0.0, np.inf, np.nan
    want = np.empty(64)
    acc = 1.0
    for i, v in enumerate(hard.astype(np.float64)):
        acc *= v
        want[i] = acc
    got = ember.cumprod(ember.tensor(hard), 0).numpy()
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert got[23] != 0 and np.isfinite(got[23])


def test_scan_double_backward_uses_ember_ops():
    x = ember.tensor(np.linspace(0.5, 1.5, 12).reshape(3, 4), requires_grad=True)
    (gx,) = ember.autograd.grad(ember.cumsum(x * x, 1).sum(), x, create_graph=True)
    (ggx,) = ember.autograd.grad(gx.sum(), x)
    np.testing.assert_allclose(ggx.numpy(), 2 * np.array([4.0, 3, 2, 1] * 3).reshape(3, 4))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 1023), (2, 5, 7), (33, 64)], ids=str)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
def test_gather_scatter_every_dim(shape, dtype, noncontig):
    """gather, scatter and scatter_add (repeated indices, a shorter index along the dim) match
    the NumPy path bit for bit, gather's backward included."""
    x, src = _input(shape, dtype, noncontig), _input(shape, dtype, False, seed=1)
    rng = np.random.default_rng(2)
    for dim in range(-len(shape), len(shape)):
        short = list(shape)
        short[dim] = max(shape[dim] - 2, 1)
        for ishape in (shape, tuple(short)):
            idx = ember.tensor(rng.integers(0, shape[dim], ishape))
            s = ember.tensor(np.ascontiguousarray(src[tuple(slice(0, n) for n in ishape)]))
            for fn in (lambda t: t.gather(dim, idx), lambda t: t.scatter_add(dim, idx, s),
                       lambda t: (t * 2).scatter(dim, idx, 0.5)):
                fast = _run(fn, [x])
                with kernels.disabled():
                    ref = _run(fn, [x])
                for a, b in zip(fast, ref):
                    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("shape", [(7, 3), (129, 1400), (3, 7, 1001)], ids=str)
def test_take_rows_and_flat_gathers_match_numpy(threads, shape, dtype):
    """index_select along every dim (gather.h's take_rows: rows over threads; repeats, an
    empty and a strided index, a transposed input), take (the 1-D gather; negative indices by
    NumPy's path), put (its copy over threads) against the NumPy path, bad indices raising."""
    rng = np.random.default_rng(4)
    a = (rng.standard_normal(shape) * 100).astype(dtype)
    for x in (ember.tensor(a), ember.tensor(np.ascontiguousarray(a.T)).T):
        for d in range(a.ndim):
            for i in (rng.integers(0, shape[d], 2 * shape[d] + 1), np.zeros(0, np.int64),
                      rng.integers(0, shape[d], 9)[::2]):
                with kernels.disabled():
                    ref = x.index_select(d, ember.tensor(i)).numpy()
                assert np.array_equal(x.index_select(d, ember.tensor(i)).numpy(), ref)
        with pytest.raises(IndexError, match="index out of range in self"):
            x.index_select(0, ember.tensor([0, shape[0]]))
        n, idx = a.size, ember.tensor(rng.integers(1 - a.size, a.size, (40, 50)))
        for call in (lambda: x.take(idx.abs()), lambda: x.take(idx),
                     lambda: x.put(idx.abs(), ember.ones(40, 50, dtype=x.dtype), True)):
            with kernels.disabled():
                ref = call().numpy()
            assert np.array_equal(call().numpy(), ref)
        with pytest.raises(IndexError, match=f"tried to access index {n}"):
            x.take(ember.tensor([n]))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("density", [0.0, 0.003, 0.5, 1.0])
@pytest.mark.parametrize("shape", [(1 << 14,), (129, 257), (3, 7, 1001)], ids=str)
def test_mask_select_matches_numpy(threads, shape, density, dtype):
    """x[mask] and masked_select by select.h's branch-free copy (4- and 8-byte words, split
    over threads): NumPy's elements, in order, bit for bit (nan payloads too), with the
    gradient of x[mask]; masked_scatter (mask_scatter, its reverse) with a full and a
    broadcast mask and a non-contiguous source, against the NumPy path."""
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(shape) * 100).astype(dtype)
    if dtype == "float32":
        a.reshape(-1)[::97] = np.frombuffer(np.uint32(0x7fc01234).tobytes(), np.float32)[0]
    m = rng.random(shape) < density
    x, mask = ember.tensor(a), ember.tensor(m)
    for got in (x[mask], x.masked_select(mask)):
        assert got.dtype == x.dtype and got._data.tobytes() == a[m].tobytes()
    src = ember.tensor((rng.standard_normal((2,) + shape) * 100).astype(dtype)).transpose(0, -1)
    for mk in (mask, mask[(0,) * (len(shape) - 1)]):
        with kernels.disabled():
            ref = x.masked_scatter(mk, src)._data.tobytes()
        assert x.masked_scatter(mk, src)._data.tobytes() == ref
    if dtype.startswith("float"):
        xg = ember.tensor(a, requires_grad=True)
        xg[mask].sum().backward()
        np.testing.assert_array_equal(xg.grad.numpy(), m.astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_nextafter_matches_numpy(threads, dtype):
    """nextafter by select.h's bit step: NumPy's (C's) results bit for bit over every pair of
    edge values (signed zeros, infinities, nan, the largest finite, denormals), and for
    non-contiguous and broadcast operands."""
    fi = np.finfo(dtype)
    edge = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, fi.max, -fi.max, fi.tiny,
                     -fi.tiny, fi.smallest_subnormal, -fi.smallest_subnormal, fi.tiny / 3, -7.5],
                    dtype)
    rng = np.random.default_rng(3)
    pairs = [(np.tile(np.repeat(edge, 15), 80), np.tile(edge, 15 * 80)),
             (rng.standard_normal((300, 200)).astype(dtype)[:, ::3],
              rng.standard_normal((200, 300)).astype(dtype).T[:, ::3]),
             (rng.standard_normal((130, 257)).astype(dtype), np.float64(0.5).astype(dtype))]
    for a, b in pairs:
        got = ember.nextafter(ember.tensor(a), ember.tensor(b)).numpy()
        with np.errstate(over="ignore"):
            ref = np.nextafter(a, b)
        assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("shape", [(1 << 14,), (129, 257), (3, 7, 1001)], ids=str)
def test_flip_last_dim_matches_numpy(threads, shape, dtype):
    """flip/fliplr over the last dim and rot90 by select.h's reversed-row copy: NumPy's
    reversed slice, contiguous or not, with rot90's strides as torch's (a transposed view)."""
    a = (np.random.default_rng(5).standard_normal(shape) * 100).astype(dtype)
    for x in (a, a.swapaxes(0, -1), a[..., ::2]):
        got = ember.flip(ember.tensor(x), -1)._data
        assert got.flags.c_contiguous and got.tobytes() == x[..., ::-1].tobytes()
    if a.ndim > 1:
        np.testing.assert_array_equal(ember.fliplr(ember.tensor(a)).numpy(), a[:, ::-1])
        # (torch's layout: the flipped copy's strides with the two dims swapped)
        strides = list(np.zeros(a.shape, np.int8).strides)
        strides[0], strides[-1] = strides[-1], strides[0]
        for k in (1, 3):
            got = ember.rot90(ember.tensor(a), k, (0, -1))
            np.testing.assert_array_equal(got.numpy(), np.rot90(a, k, (0, -1)))
            assert got.stride() == tuple(strides)


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_1d_scatter(threads, dtype):
    """A long 1-D scatter (one thread whatever the count: a split by destination was slower):
    scatter_add bit-equal to np.add.at, scatter's last write wins as on the NumPy path, in
    place and out of place, gather's gradient; a bad index leaves an in-place target
    untouched."""
    n = k = (1 << 17) + 5
    rng = np.random.default_rng(11)
    x = rng.standard_normal(n).astype(dtype)
    v = rng.standard_normal(k).astype(dtype)
    i = rng.integers(0, n // 3, k)            # many repeats: order matters
    xt, vt, it = ember.tensor(x), ember.tensor(v), ember.tensor(i)
    want = x.copy()
    np.add.at(want, i, v)
    assert xt.scatter_add(0, it, vt).numpy().tobytes() == want.tobytes()
    with kernels.disabled():
        ref = xt.scatter(0, it, vt).numpy()
    assert xt.scatter(0, it, vt).numpy().tobytes() == ref.tobytes()
    inplace = xt.clone()
    inplace.scatter_(0, it, vt)
    assert inplace.numpy().tobytes() == ref.tobytes()
    xg = ember.tensor(x, requires_grad=True)
    xg.gather(0, it).backward(vt)
    grad = np.zeros(n, dtype)
    np.add.at(grad, i, v)
    assert xg.grad.numpy().tobytes() == grad.tobytes()
    bad = it.clone()
    bad[k - 1] = n
    target = xt.clone()
    with pytest.raises(RuntimeError, match="out of bounds"):
        target.scatter_add_(0, bad, vt)
    assert target.numpy().tobytes() == x.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_1d_setitem(threads, dtype):
    """``x[idx] = v`` with a long int64 index: the last write wins; negative indices wrap and
    a bad one raises with x untouched."""
    n = (1 << 17) + 3
    rng = np.random.default_rng(12)
    x = rng.standard_normal(n).astype(dtype)
    v = rng.standard_normal(n).astype(dtype)
    i = rng.integers(0, n // 4, n)
    want = x.copy()
    want[i] = v
    t = ember.tensor(x)
    t[ember.tensor(i)] = ember.tensor(v)
    assert t.numpy().tobytes() == want.tobytes()
    neg = i - n                                     # the same places, counted from the end
    t = ember.tensor(x)
    t[ember.tensor(neg)] = ember.tensor(v)
    assert t.numpy().tobytes() == want.tobytes()
    bad = i.copy()
    bad[-1] = n
    t = ember.tensor(x)
    with pytest.raises(IndexError, match=f"index {n} is out of bounds"):
        t[ember.tensor(bad)] = ember.tensor(v)
    assert t.numpy().tobytes() == x.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_1d_add_at(threads, dtype):
    """index_add and index_put_(accumulate=True) on a long 1-D tensor (the scatter kernel in
    place, ember/_backends' add_at): bit-equal to np.add.at; negative indices wrap (add.at's
    path); a bad index raises with the target untouched, as the kernel checks every index of
    an in-place scatter before it writes."""
    from ember._backends import add_flat
    n = (1 << 16) + 7
    rng = np.random.default_rng(14)
    x = rng.standard_normal(n).astype(dtype)
    v = rng.standard_normal(2 * n).astype(dtype)
    i = rng.integers(0, n // 5, 2 * n)          # many repeats: order matters
    want = x.copy()
    np.add.at(want, i, v)
    xt, it, vt = ember.tensor(x), ember.tensor(i), ember.tensor(v)
    assert xt.index_add(0, it, vt).numpy().tobytes() == want.tobytes()
    t = xt.clone()
    t.index_put_((it,), vt, accumulate=True)
    assert t.numpy().tobytes() == want.tobytes()
    t = xt.clone()
    t.index_put_((ember.tensor(i - n),), vt, accumulate=True)
    assert t.numpy().tobytes() == want.tobytes()
    bad = i.copy()
    bad[-1] = n
    out = x.copy()
    assert not add_flat(out, bad, v) and out.tobytes() == x.tobytes()
    t = xt.clone()
    with pytest.raises((IndexError, RuntimeError), match="out of bounds"):
        t.index_put_((ember.tensor(bad),), vt, accumulate=True)
    assert t.numpy().tobytes() == x.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_1d_write_at(threads, dtype):
    """index_put_ on a long 1-D tensor (the scatter kernel in place, mode 0) against ``x[idx]
    = v`` (NumPy's assignment): of repeated indices the last write wins in both; negative
    indices wrap (NumPy's path); a bad index raises with the target untouched."""
    n = (1 << 16) + 7
    rng = np.random.default_rng(15)
    x = rng.standard_normal(n).astype(dtype)
    v = rng.standard_normal(2 * n).astype(dtype)
    i = rng.integers(0, n // 5, 2 * n)          # many repeats: the order decides
    for index in (i, i - n // 5):
        want = x.copy()
        want[index] = v
        t = ember.tensor(x)
        t[ember.tensor(index)] = ember.tensor(v)
        assert t.numpy().tobytes() == want.tobytes()
        t = ember.tensor(x)
        t.index_put_((ember.tensor(index),), ember.tensor(v))
        assert t.numpy().tobytes() == want.tobytes()
    bad = i.copy()
    bad[-1] = n
    for write in (lambda t: t.__setitem__(ember.tensor(bad), ember.tensor(v)),
                  lambda t: t.index_put_((ember.tensor(bad),), ember.tensor(v))):
        t = ember.tensor(x)
        with pytest.raises(IndexError, match="out of bounds"):
            write(t)
        assert t.numpy().tobytes() == x.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_max_min_kernel(threads, dtype, reduce):
    """scatter_reduce amax / amin through the scatter kernel (modes 2 / 3) bit-equal to torch's
    CPU loop (a NaN source wins, else std::max / std::min, which keep the old value between
    equals: NumPy's maximum.at keeps the new -0.0 there): repeated indices, NaNs on either
    side, signed zeros; include_self=False; a 2-D input (its flat positions)."""
    rng = np.random.default_rng(13)
    n = 5000
    x = rng.standard_normal(n).astype(dtype)
    v = rng.standard_normal(2 * n).astype(dtype)
    x[:4] = [np.nan, -0.0, 0.0, 1.0]
    v[:6] = [1.0, 0.0, -0.0, np.nan, 2.0, -0.0]
    i = rng.integers(0, n, 2 * n)
    i[:6] = [0, 1, 2, 3, 1, 2]
    want = x.copy()
    for j, b in zip(i, v):
        a = want[j]
        want[j] = b if b != b or (b > a if reduce == "amax" else b < a) else a
    got = ember.tensor(x).scatter_reduce(0, ember.tensor(i), ember.tensor(v), reduce).numpy()
    assert got.tobytes() == want.tobytes()
    with kernels.disabled():
        ref = ember.tensor(x).scatter_reduce(0, ember.tensor(i), ember.tensor(v), reduce,
                                             include_self=False).numpy()
    got = ember.tensor(x).scatter_reduce(0, ember.tensor(i), ember.tensor(v), reduce,
                                         include_self=False).numpy()
    assert got.tobytes() == ref.tobytes()
    x2, v2 = x.reshape(50, 100), v.reshape(100, 100)
    i2 = rng.integers(0, 100, (50, 100))
    with kernels.disabled():
        ref = ember.tensor(x2).scatter_reduce(1, ember.tensor(i2), ember.tensor(v2), reduce)
    got = ember.tensor(x2).scatter_reduce(1, ember.tensor(i2), ember.tensor(v2), reduce)
    assert got.numpy().tobytes() == ref.numpy().tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("shape,dim", [((7,), 0), ((1, 9, 1), 1), ((33, 64), 1), ((150, 1000), 0),
                                       ((150, 1000), -1), ((3, 50, 700), 1)], ids=str)
def test_index_and_scatter_reduce_kernel(threads, dtype, reduce, shape, dim):
    """scatter_reduce, index_reduce and index_add through the scatter kernel (a mode per
    reduction; index_reduce's whole slices; include_self=False from the mode's identity; the
    columns of a single slice split over threads) equal to the NumPy reference: repeated
    indices, NaNs, a non-contiguous source, every dim; a bad index raises torch's error."""
    rng = np.random.default_rng(16)
    d = dim % len(shape)
    x = rng.uniform(0.5, 1.5, shape).astype(dtype)
    k = shape[d] + 3
    src_shape = shape[:d] + (k,) + shape[d + 1:]
    base = rng.uniform(0.5, 1.5, src_shape[::-1]).astype(dtype)
    x.reshape(-1)[::7] = base.reshape(-1)[::11] = np.nan
    src = base.T                                          # non-contiguous, of src_shape
    rows = rng.integers(0, shape[d], k)                  # repeats: the order matters
    elems = rng.integers(0, shape[d], src_shape)
    calls = [lambda t, s, inc=inc: t.scatter_reduce(dim, ember.tensor(elems), s, reduce,
                                                    include_self=inc) for inc in (True, False)]
    if reduce != "sum":
        calls += [lambda t, s, inc=inc: t.index_reduce(dim, ember.tensor(rows), s, reduce,
                                                       include_self=inc) for inc in (True, False)]
    else:
        calls += [lambda t, s: t.index_add(dim, ember.tensor(rows), s, alpha=2)]
    for call in calls:
        got = call(ember.tensor(x), ember.tensor(src)).numpy()
        with kernels.disabled():
            want = call(ember.tensor(x), ember.tensor(src)).numpy()
        # (equal but for index_add's NumPy path: it sums a target's rows first, by reduceat)
        np.testing.assert_allclose(got, want, **TOL[dtype])
    bad = rows.copy()
    bad[-1] = -1
    with pytest.raises(IndexError, match="index out of range in self"):
        ember.tensor(x).index_reduce(dim, ember.tensor(bad), ember.tensor(src), "amax")


@pytest.mark.parametrize("shape", [(20000,), (150, 1001), (3, 7, 1001), (1, 1, 40000),
                                   (2, 3, 4, 5, 6, 7, 8)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "int32", "int16",
                                   "uint8", "bool"])
def test_nonzero_kernel(threads, shape, dtype):
    """nonzero / argwhere by select.h's count and write passes: np.argwhere's coordinates for
    every element size, -0.0 as zero and NaN as nonzero, chunks over threads; non-contiguous
    inputs (NumPy's path) too; count_nonzero of all elements by the count pass alone."""
    rng = np.random.default_rng(17)
    x = rng.integers(-2, 3, shape).astype(dtype)
    if x.dtype.kind == "f":
        x.reshape(-1)[::5], x.reshape(-1)[::13] = -0.0, np.nan
    for a in (x, np.swapaxes(x, 0, -1)):
        want = np.argwhere(a)
        for fn in (ember.nonzero, ember.argwhere):
            got = fn(ember.tensor(a)).numpy()
            assert got.dtype == np.int64 and np.array_equal(got, want)
        n = ember.count_nonzero(ember.tensor(a))
        assert n.dtype == ember.int64 and int(n) == len(want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_put_accumulate_negative_index(threads, dtype):
    """put(accumulate=True), take's gradient, with negative flat indices: counted from the end
    first, so the C scatter takes them, bit-equal to np.add.at (which wraps them itself)."""
    rng = np.random.default_rng(18)
    x = rng.standard_normal((70, 90)).astype(dtype)
    i, v = rng.integers(-6300, 6300, 9000), rng.standard_normal(9000).astype(dtype)
    want = x.copy().reshape(-1)
    np.add.at(want, i, v)
    got = ember.tensor(x).put(ember.tensor(i), ember.tensor(v), accumulate=True).numpy()
    assert got.reshape(-1).tobytes() == want.tobytes()


@pytest.mark.parametrize("bad", [-1, 4])
def test_gather_scatter_reject_bad_index(bad):
    x = ember.ones(3, 4)
    idx = ember.tensor([[0, bad], [1, 2], [3, 3]])
    for fn in (lambda: x.gather(1, idx), lambda: x.scatter_add(1, idx, x),
               lambda: x.scatter(1, idx, 1.0)):
        with pytest.raises(RuntimeError, match=f"index {bad} is out of bounds for dimension 1 "
                                               "with size 4"):
            fn()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((7,), 0), ((5, 130), 0), ((3, 70, 9), 1),
                                       ((1001, 65), 0), ((2, 333, 129), -2)], ids=str)
def test_index_rows_split(threads, dtype, shape, dim):
    """index_select's gradient added into fresh zeros by the scatter kernel (SC_ROWS, no zeros
    filled first), index_add and index_reduce without and with the old values, all with one
    slice's rows split over threads by destination: equal to the NumPy path for repeated
    indices crowding the blocks' edges, NaN, inf and -0.0, a non-contiguous gradient and
    source, in place too; a bad index raises torch's error and leaves the input as it was."""
    rng = np.random.default_rng(19)
    d = dim % len(shape)
    n, k = shape[d], shape[d] + 5
    idx = np.concatenate([rng.integers(0, n, k - 4), [n // 2 - 1, n // 2, 0, n - 1]])
    x = rng.uniform(0.5, 1.5, shape).astype(dtype)
    src_shape = shape[:d] + (k,) + shape[d + 1:]
    src = rng.uniform(0.5, 1.5, src_shape[::-1]).astype(dtype).T        # non-contiguous
    src.reshape(-1)[::5], src.reshape(-1)[::7], src.reshape(-1)[::11] = -0.0, np.inf, np.nan
    calls = [lambda t, s: t.index_add(dim, ember.tensor(idx), s, alpha=2),
             lambda t, s: t.clone().index_add_(dim, ember.tensor(idx), s)] + [
        lambda t, s, r=r, inc=inc: t.index_reduce(dim, ember.tensor(idx), s, r, include_self=inc)
        for r in ("prod", "mean", "amax") for inc in (True, False)]

    def grad(t, s):
        t.requires_grad_()
        return ember.autograd.grad(t.index_select(dim, ember.tensor(idx)), t, s)[0]
    for call in calls + [grad]:
        got = call(ember.tensor(x), ember.tensor(src)).detach().numpy()
        with kernels.disabled():
            want = call(ember.tensor(x), ember.tensor(src)).detach().numpy()
        np.testing.assert_allclose(got, want, **TOL[dtype])
        assert np.array_equal(np.signbit(got), np.signbit(want))
    bad, t = idx.copy(), ember.tensor(x)
    bad[-1] = n
    with pytest.raises((IndexError, RuntimeError), match=f"index (out of range|{n} is out)"):
        t.index_add_(dim, ember.tensor(bad), ember.tensor(src))
    assert t.numpy().tobytes() == x.tobytes()


# (input, weight, stride, padding, dilation, groups): convolutions Winograd does not take, which
# run im2col + GEMM per sample (ember/_ops/conv_cols.py): an image network's first layer (3
# input channels), odd sizes, strides, dilations, groups, depthwise, 1x1, 1-D
COLS = [((2, 3, 9, 7), (32, 3, 3, 3), 1, 1, 1, 1), ((3, 4, 11, 10), (20, 2, 3, 2), (2, 1),
                                                    (1, 0), (2, 1), 2),
        ((1, 3, 13, 12), (8, 3, 5, 5), 2, 2, 1, 1), ((2, 6, 5, 6), (6, 1, 3, 3), 1, 1, 1, 6),
        ((2, 20, 4, 5), (18, 20, 1, 1), 1, 0, 1, 1), ((3, 4, 17), (6, 2, 3), 2, 2, 2, 2),
        ((1, 5, 1, 1), (7, 5, 3, 3), 1, 1, 1, 1),
        # a row's columns over 512 KiB: the forward's rows in blocks, 4 channels a GEMM (4, 4, 4, 1)
        ((2, 26, 40, 70), (10, 13, 21, 25), (1, 2), (1, 3), (2, 1), 2)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
@pytest.mark.parametrize("case", COLS, ids=str)
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
def test_im2col_conv(case, dtype, noncontig, transposed):
    from ember._ops import conv_cols
    xs, ws, stride, padding, dilation, groups = case
    nd = len(xs) - 2
    conv = getattr(F, f"conv{'_transpose' if transposed else ''}{nd}d")
    x, w = _input(xs, dtype, noncontig), _input(ws, dtype, noncontig, seed=1, scale=0.3)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    if transposed:        # (in, out / groups, *k): the same weight read the other way round
        x = _input((xs[0], ws[0]) + xs[2:], dtype, noncontig)
        # an output_padding below the stride (or dilation) adds cells no window reaches
        st, dl = ((v,) * nd if isinstance(v, int) else v for v in (stride, dilation))
        kw["output_padding"] = tuple(max(a, b) - 1 for a, b in zip(st, dl))
    fn = lambda a, b: conv(a, b, **kw)  # noqa: E731
    calls = []
    with pytest.MonkeyPatch.context() as mp:
        for name in ("forward", "transpose", "weight_grad"):
            real = getattr(conv_cols, name)
            mp.setattr(conv_cols, name, lambda *a, real=real: calls.append(real(*a)) or calls[-1])
        fast = _run(fn, [x, w], (0, 1))
    assert len(calls) == 3 and all(c is not None for c in calls)     # the kernels ran
    with kernels.disabled():
        ref = _run(fn, [x, w], (0, 1))
    tol = 2e-6 if dtype == "float32" else 1e-14
    for what, a, b in zip(["value", "grad input", "grad weight"], fast, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, what
        np.testing.assert_allclose(a, b, rtol=0, atol=tol * np.abs(b).max(), err_msg=what)


def test_im2col_conv_empty_batch_and_channels():
    # nothing to sum: the kernels start no threads, and the results are empty or zeros
    for xs, ws in [((0, 3, 5, 4), (4, 3, 3, 3)), ((2, 0, 5, 4), (4, 0, 3, 3))]:
        x = ember.zeros(xs, requires_grad=True)
        w = ember.ones(ws, requires_grad=True)
        y = F.conv2d(x, w, padding=1)
        assert tuple(y.shape) == (xs[0], ws[0]) + xs[2:] and not y.detach().numpy().any()
        y.sum().backward()
        assert x.grad.shape == x.shape and w.grad.shape == w.shape
        assert not w.grad.numpy().any()


def test_half_conversions_match_numpy_bit_for_bit():
    # every float16 up, and float32 bit patterns (all rounding cases, NaN, inf, overflow,
    # subnormals) down: F16C and NumPy both round to nearest even
    f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
    every = np.arange(65536, dtype=np.uint16).view(np.float16)
    np.testing.assert_array_equal(kernels.astype(every, f32), every.astype(f32))
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    bits[:6] = np.array([0x7F800000, 0xFF800000, 0x477FF000, 0x477FEFFF, 0x33000001, 1],
                        dtype=np.uint32)       # inf, -inf, halfway to 65520, just under, tiny
    wide = bits.view(np.float32)
    with np.errstate(over="ignore"):
        want = wide.astype(f16)
    got = kernels.astype(wide, f16)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
    odd = wide[: 4099 * 3].reshape(4099, 3)[:, 1]       # strided: NumPy's astype serves it
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(kernels.astype(odd, f16).view(np.uint16),
                                      odd.astype(f16).view(np.uint16))


def test_remainder_matches_numpy_bit_for_bit():
    """pointwise.h's remainder over float32 bit patterns (quotients past 2^24, zeros of both
    signs, infinities, nan, denormals) and near-integer quotients, against NumPy's."""
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, 2**32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
            for _ in range(2))
    c = (rng.integers(-50, 50, 1 << 18) * np.float32(0.1)).astype(np.float32)
    for x, y in ((a, b), (c, np.float32(0.1) + c * 0), (c * 3, c[::-1].copy())):
        with np.errstate(all="ignore"):
            want = np.remainder(x, y)
        got = kernels.pointwise("remainder", x, other=y)
        nan = np.isnan(want)        # (which nan's payload survives is the CPU's choice)
        assert np.array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got[~nan].view(np.int32), want[~nan].view(np.int32))


def test_bfloat16_conversions_match_ml_dtypes_bit_for_bit():
    """half.h's bfloat16 loops against ml_dtypes: every bfloat16 up; float32 bit patterns down
    (ties to even, nan of either sign with payloads, infinities, overflow, denormals)."""
    bf16, f32 = ember.bfloat16.np, np.dtype(np.float32)
    every = np.arange(65536, dtype=np.uint16).view(bf16)
    np.testing.assert_array_equal(kernels.astype(every, f32).view(np.uint32),
                                  every.astype(f32).view(np.uint32))
    bits = np.random.default_rng(0).integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(
        np.uint32)
    bits[:9] = [0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x3F808000, 0x3F818000, 0x00018000,
                0x7FC00001, 0xFFA00000, 0x80000000]
    wide = bits.view(np.float32)
    with np.errstate(invalid="ignore"):
        want = wide.astype(bf16)
    np.testing.assert_array_equal(kernels.astype(wide, bf16).view(np.uint16),
                                  want.view(np.uint16))
    t = ember.tensor(wide[:5000])
    np.testing.assert_array_equal(t.bfloat16().numpy().view(np.uint16),
                                  want[:5000].view(np.uint16))


def test_ptr_matches_ctypes_data():
    """kernels.ptr (the C data_ptr when built) gives the address a.ctypes.data gives: offsets,
    strided and transposed views, zero-size arrays, ndarray subclasses, None."""
    class Sub(np.ndarray):
        pass

    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for x in (a, a[1:], a[:, 2:], a[::2, ::3], a.T, a[0, 0:0], np.array(1.0),
              a.view(Sub), np.ma.masked_array(a)):
        assert kernels.ptr(x) == x.ctypes.data
    assert kernels.ptr(None) is None


@pytest.mark.parametrize("bad", [None, -1, 20000])
def test_gather_past_the_caches_prefetches_and_still_checks(bad):
    # a row longer than 16384 takes the loop that prefetches 16 indices ahead: same values,
    # and an index out of range (last ones included, where no prefetch looks) still refused
    rng = np.random.default_rng(0)
    x = ember.tensor(rng.standard_normal(20000).astype(np.float32))
    idx = rng.integers(0, 20000, 50000)
    if bad is not None:
        idx[[7, -1]] = bad
        with pytest.raises(RuntimeError, match=f"index {bad} is out of bounds"):
            x.gather(0, ember.tensor(idx))
        with pytest.raises(IndexError, match="index out of range in self"):
            x.index_select(0, ember.tensor(idx))
        return
    want = x.numpy()[idx]
    assert np.array_equal(x.gather(0, ember.tensor(idx)).numpy(), want)
    assert np.array_equal(x.index_select(0, ember.tensor(idx)).numpy(), want)


_REDUCTIONS = {"sum": lambda t, d: t.sum(d), "nansum": lambda t, d: t.nansum(d),
               "mean": lambda t, d: t.mean(d), "norm": lambda t, d: t.norm(dim=d),
               "logsumexp": lambda t, d: t.logsumexp(d if d is not None else tuple(range(t.ndim))),
               "nanmean": lambda t, d: t.nanmean(d), "std": lambda t, d: t.std(d),
               "var_mean": lambda t, d: ember.stack(ember.var_mean(t, d, correction=0))}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(_REDUCTIONS))
@pytest.mark.parametrize("shape,dim", [((1024, 1000), -1), ((333, 129), 1), ((7, 5000, 3), None),
                                       ((200003,), None), ((3, 40, 4099), (1, 2)),
                                       ((600, 300), 0), ((40, 30, 70), (0, 1)),
                                       ((40000, 3), -1), ((5000, 31), 1), ((3000, 100), -1),
                                       ((100, 7, 64), (1, 2)), ((3, 5), -1), ((1, 7), None),
                                       ((6, 33), 1), ((5, 2, 3), (1, 2))], ids=str)
def test_reduce_kernel_against_numpy(shape, dim, name, dtype):
    """reduce_rows (trailing axes, or a whole array as rows of 2^16) and sum_rows (leading
    axes) behind sum, nansum, nanmean (nansum and nancount at any size), mean, norm,
    logsumexp, and moments_rows behind std and var_mean (any size): values and gradients
    against the NumPy path, with nan, infinities and -0 in some rows."""
    x = _input(shape, dtype, False)
    rows = x.reshape(-1, shape[-1])
    if rows.shape[0] > 4:
        rows[1, 1], rows[2, 0], rows[3, 2], rows[4, -1] = -0.0, np.nan, np.inf, -np.inf
    fast = _run(lambda t: _REDUCTIONS[name](t, dim), [x])
    with kernels.disabled():
        ref = _run(lambda t: _REDUCTIONS[name](t, dim), [x])
    axes = tuple(range(x.ndim)) if dim is None else (dim % x.ndim,) if type(dim) is int else dim
    count = math.prod(shape[a] for a in axes)
    for a, b in zip(fast, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        # (sums of terms of size ~3 round apart by ~eps sqrt(count) 3 in other orders)
        tol = dict(TOL[dtype], atol=TOL[dtype]["atol"] * 3 * count ** (
            -.5 if name in ("mean", "nanmean", "std", "var_mean") else .5))
        np.testing.assert_allclose(a, b, **tol, equal_nan=True)
    applies = axes[-1] == x.ndim - 1 or axes[0] == 0 and len(axes) < x.ndim
    assert (kernels.reduce("sum", x, axes) is not None) == (applies and x.size >= 1 << 15)
    assert (kernels.stats("var", x, axes, False) is not None) == (axes[-1] == x.ndim - 1) and \
        kernels.stats("var", x[..., ::2], axes, False) is None
    assert kernels.reduce("sum", x[..., ::2], axes) is None and \
        kernels.reduce("sum", x.reshape(-1)[:1000], (0,)) is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((3, 5), 1), ((7,), None), ((5000, 31), 1), ((4, 9001), -1),
                                       ((200003,), None), ((3, 9000), None), ((6, 4), 0)], ids=str)
def test_aminmax_kernel_against_numpy(shape, dim, dtype):
    """aminmax by stats_rows (one pass for both) as NumPy's two reductions: -0 beside 0,
    infinities, a nan that sticks wherever it is in a row."""
    x = _input(shape, dtype, False)
    rows = x.reshape(-1, shape[-1])
    rows[0, :2] = -0.0, 0.0
    rows[-1, -1], rows[0, -1] = np.nan, np.inf
    if rows.shape[0] > 2:
        rows[1, rows.shape[1] // 2] = np.nan
    got = [r.numpy() for r in ember.aminmax(ember.tensor(x), dim=dim)]
    with kernels.disabled():
        want = [r.numpy() for r in ember.aminmax(ember.tensor(x), dim=dim)]
    for a, b in zip(got, want):
        assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    assert (kernels.stats("minmax", x, (x.ndim - 1,), False) is not None) and \
        kernels.stats("minmax", x[..., ::2], (x.ndim - 1,), False) is None


def test_reduce_kernel_sums_pairwise():
    # float32 sums of 2^22 positive numbers: NumPy's pairwise error bound, not a serial sum's
    rng = np.random.default_rng(1)
    for n in (1 << 22, (1 << 22) + 12345):
        x = rng.uniform(0, 1, n).astype(np.float32)
        exact = np.add.reduce(x.astype(np.float64))
        err, np_err = abs(float(kernels.reduce("sum", x, (0,))) - exact), \
            abs(float(np.add.reduce(x)) - exact)
        assert err <= max(2 * np_err, 4 * np.finfo(np.float32).eps * exact)
        sq = float(kernels.reduce("sumsq", x, (0,)))
        assert abs(sq - np.add.reduce(x.astype(np.float64) ** 2)) <= 1e-5 * sq


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [128, 200, 70001, 1 << 17])
def test_reduce_kernel_extremes_propagate_nan(n, dtype):
    # max / min (logsumexp's shift): NumPy's values, and nan wherever a row holds one
    x = _input((4, n), dtype, False)
    x[1, n // 2], x[2, -1], x[3, 0] = np.nan, np.inf, -np.inf
    for name in ("max", "min"):
        for a, axes in ((x, (1,)), (x[1:2], (0, 1)), (x[2:], (0, 1))):
            if a.size >= 1 << 15:
                assert np.array_equal(kernels.reduce(name, a, axes), getattr(np, name)(a, axes),
                                      equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1 << 17, (1 << 18) + 12345, 5 * (1 << 16) - 1])
def test_reduce_kernel_whole_array_combines_chunks(n, dtype):
    """A whole-array reduction of 2^17 or more elements, as chunks over the threads whose
    partials reduce_rows combines itself: sums near the float64 sum, extrema exact and nan
    wherever one is, logsumexp as NumPy's; a mean divides in double, as NumPy by an integer
    count below and above 2^24, on a whole array, rows and leading axes."""
    x = _input((n,), dtype, False)
    exact = np.add.reduce(x.astype(np.float64))
    eps = np.finfo(dtype).eps
    assert abs(kernels.reduce("sum", x, (0,)) - exact) <= 8 * eps * np.abs(x).sum()
    sq = kernels.reduce("sumsq", x, (0,))
    assert abs(sq - (x.astype(np.float64) ** 2).sum()) <= 8 * eps * sq
    lse = np.log(np.exp(x.astype(np.float64) - x.max()).sum()) + x.max()
    np.testing.assert_allclose(kernels.reduce("logsumexp", x, (0,)), lse, rtol=8 * eps)
    for name in ("max", "min"):
        assert kernels.reduce(name, x, (0,)) == getattr(np, name)(x)
    y = x.copy()
    y[n // 2 + 1000] = np.nan
    assert np.isnan(kernels.reduce("max", y, (0,))) and np.isnan(kernels.reduce("min", y, (0,)))
    assert kernels.reduce("nansum", y, (0,)) == kernels.reduce("sum", np.nan_to_num(y), (0,))
    assert kernels.reduce("nancount", y, (0,)) == n - 1
    for a, axes in ((x, (0,)), (x[:n // 3 * 3].reshape(3, -1), (1,)),
                    (x[:n // 3 * 3].reshape(-1, 3), (0,))):
        for c in (float(math.prod(a.shape[i] for i in axes)), 16777259.0):
            want = np.true_divide(kernels.reduce("sum", a, axes), np.intp(c)).astype(dtype)
            assert np.array_equal(kernels.reduce("mean", a, axes, c=c), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((1024, 1000), -1), ((333, 129), 0), ((7, 501, 300), 1),
                                       ((5,), 0), ((3, 4, 5), 2)], ids=str)
@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("noncontig", [False, True])
def test_cumext_kernel_against_numpy(name, shape, dim, dtype, noncontig):
    # running extremum and index, with ties (rounded values), nan, infinities: the NumPy path
    x = np.round(_input(shape, dtype, noncontig))
    flat = x.reshape(-1) if x.flags.c_contiguous else x.T.reshape(-1)
    if flat.size > 40:
        flat[[3, 17, 30]] = np.nan, np.inf, -np.inf
    fast = _run(lambda t: getattr(t, name)(dim).values * 1, [x])
    idx = getattr(ember.tensor(x), name)(dim).indices.numpy()
    with kernels.disabled():
        ref = _run(lambda t: getattr(t, name)(dim).values * 1, [x])
        ref_idx = getattr(ember.tensor(x), name)(dim).indices.numpy()
    assert np.array_equal(idx, ref_idx)
    for a, b in zip(fast, ref):
        assert np.array_equal(a, b, equal_nan=True)


_RANKED = {"kthvalue": lambda t, d: t.kthvalue(max(1, t.shape[d] // 3), d),
           "kthvalue_last": lambda t, d: t.kthvalue(t.shape[d], d, keepdim=True),
           "median": lambda t, d: t.median(d) if d is not None else (t.median(), None),
           "nanmedian": lambda t, d: t.nanmedian(d) if d is not None else (t.nanmedian(), None),
           "topk": lambda t, d: t.topk(5, d), "topk_min": lambda t, d: t.topk(7, d, largest=False)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((300, 1001), -1), ((333, 129), 0), ((7, 51, 30), 1),
                                       ((40001,), None), ((40001,), 0), ((9,), 0)], ids=str)
@pytest.mark.parametrize("name", list(_RANKED))
@pytest.mark.parametrize("nans", [0, 1, 2])
def test_rank_kernels_are_the_stable_sorts_picks(name, shape, dim, dtype, nans):
    """kthvalue, median, nanmedian, topk by quickselect: the values and indices a stable sort
    (nan last) gives, with many ties (rounded values), -0 beside 0, nan in some rows (nans 1)
    or whole rows of nan (nans 2; topk's kernel declines them), non-contiguous along dim 0."""
    if dim is None and not name.endswith("median"):
        return
    x = np.round(_input(shape, dtype, False, scale=2.0))
    rows = np.moveaxis(x, dim or 0, -1).copy()
    flat = rows.reshape(-1, rows.shape[-1])
    flat[0, :4] = -0.0
    if nans:
        flat[-1, ::3] = np.nan
        if nans == 2:
            flat[-1] = np.nan
    x = np.moveaxis(rows, -1, dim or 0)
    x = np.asfortranarray(x) if dim == 0 and x.ndim > 1 else x
    assert kernels.rank(x, dim or 0, "kth", 0) is not None
    if nans and name.startswith("topk"):    # (the topk kernel declines rows with nan: a sort)
        assert kernels.topk(np.moveaxis(x, dim, -1), 5, True) is None
    t = ember.tensor(x)
    fast = [r.numpy() for r in _RANKED[name](t, dim) if r is not None]
    with kernels.disabled():
        ref = [r.numpy() for r in _RANKED[name](t, dim) if r is not None]
    for a, b in zip(fast, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1024, 1000), (200003,), (3, 40, 4099)], ids=str)
@pytest.mark.parametrize("name,kw", [("mse_loss", {}), ("smooth_l1_loss", {"beta": 0.5}),
                                     ("huber_loss", {"delta": 1.5})])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_fused_loss_kernels_against_numpy(name, kw, reduction, shape, dtype):
    # one pass of d = x - y, the clipped terms, and their pairwise sum: values and gradients
    x, y = _input(shape, dtype, False), _input(shape, dtype, False, seed=1)
    x.reshape(-1)[:3] = np.nan, np.inf, -0.0
    y.reshape(-1)[2] = 0.0
    fn = lambda a, b: getattr(F, name)(a, b, reduction=reduction, **kw)  # noqa: E731
    assert np.isnan(_run(fn, [x, y], (0, 1))[0])
    x.reshape(-1)[:2] = 1.0
    fast = _run(fn, [x, y], (0, 1))
    with kernels.disabled():
        ref = _run(fn, [x, y], (0, 1))
    count = x.size if reduction == "sum" else 1 / x.size
    for a, b in zip(fast, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=TOL[dtype]["rtol"],
                                   atol=TOL[dtype]["atol"] * 20 * count ** .5)
    assert kernels.reduce("mse", x, tuple(range(x.ndim)), other=y[..., ::-1]) is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,groups", [((4, 6, 33, 17), 3), ((2, 8, 1000), 8), ((5, 4), 2)],
                         ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_rows_kernel_against_numpy(shape, groups, affine, dtype):
    # native_group_norm's forward: each (sample, group) a layer_norm row, the affine per channel
    x = _input(shape, dtype, len(shape) > 2)
    w, b = (_input((shape[1],), dtype, False, seed=s) for s in (1, 2))
    args = [x] + [w, b] * affine
    check(lambda t, *wb: F.group_norm(t, groups, *wb, eps=1e-3), args,
          tuple(range(len(args))), rows=x.size // shape[1])


@pytest.mark.parametrize("dtype", DTYPES + ["int64"])
def test_unique_consecutive_by_mask_select(dtype):
    # the run starts picked by select.h's branch-free copy (from 16384 elements), with nan
    # (each its own run) and -0 beside 0 (one run): values, inverse and counts as NumPy's
    x = np.round(_input((300, 70), "float64", False, scale=0.7)).astype(dtype)
    if dtype != "int64":
        x[0, :4], x[1, :3] = np.nan, (0.0, -0.0, 0.0)
    for kw in ({}, {"return_inverse": True, "return_counts": True}):
        fast = ember.unique_consecutive(ember.tensor(x), **kw)
        with kernels.disabled():
            ref = ember.unique_consecutive(ember.tensor(x), **kw)
        for a, b in zip(*(r if isinstance(r, tuple) else (r,) for r in (fast, ref))):
            assert np.array_equal(a.numpy(), b.numpy(), equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["csr", "coo", "coo_unsorted"])
def test_sparse_mm_kernel_against_numpy_and_torch(layout, dtype):
    """``sparse @ dense`` through add_rows' scaled form (each entry's dense row, scaled, added
    to its output row): csr @ dense, torch.sparse.mm, addmm and the dense operand's gradient
    (the transposed product) against the NumPy path and torch."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a = (rng.random((37, 50)) < 0.1) * rng.standard_normal((37, 50))
    a[5] = 0                                                    # an empty row
    d, bias = rng.standard_normal((50, 19)), rng.standard_normal((37, 19))
    a, d, bias = (x.astype(dtype) for x in (a, d, bias))

    def sparse(L):
        if layout == "csr":
            return L.tensor(a).to_sparse_csr()
        r, c = np.nonzero(a)
        order = rng.permutation(r.size) if layout == "coo_unsorted" else np.arange(r.size)
        idx = np.stack([r[order], c[order]])
        return L.sparse_coo_tensor(L.tensor(idx), L.tensor(a[r, c][order]), a.shape)
    calls = (lambda L, s, m: s @ m, lambda L, s, m: L.sparse.mm(s, m),
             lambda L, s, m: L.addmm(L.tensor(bias), s, m, beta=0.5, alpha=2.0))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for call in calls:
        got = []
        for L, ctx in ((ember, contextlib.nullcontext()), (ember, kernels.disabled()),
                       (torch, contextlib.nullcontext())):
            with ctx:
                m = L.tensor(d, requires_grad=True)
                out = call(L, sparse(L), m)
                out.backward(L.ones_like(out))
                got.append((out.detach().numpy(), m.grad.numpy()))
        for mine in got[:2]:
            for x, y in zip(mine, got[2]):
                np.testing.assert_allclose(x, y, **tol)
    from ember._backends import _add_rows_kernel      # a bad column is refused, nothing written
    out, rows, cols = np.zeros((3, 4), dtype), np.array([0, 2]), np.array([1, 5])
    assert _add_rows_kernel(out, rows, d[:5], cols, np.ones(2, dtype)) is False and not out.any()


def test_fast_calls_equal_ctypes_calls():
    """kernel() calls through the dispatch extension's kcall (no ctypes conversion): the same
    results as the ctypes function itself, for a kernel with doubles and an int result
    (pointwise), one with 18 integer arguments, 6 past the registers (gemm), one with six
    doubles (adam) and one with an int64 result (cross_entropy)."""
    from ember._C import dispatch
    if getattr(dispatch.ext, "kcall", None) is None:
        pytest.skip("no kcall on this platform: kernel() returns the ctypes functions")
    f32, rng = np.dtype(np.float32), np.random.default_rng(0)
    raw = lambda name: getattr(kernels._lib, name + "_f32")     # noqa: E731
    assert kernels.kernel("pointwise", f32) is not raw("pointwise")
    x = rng.standard_normal(1000).astype(np.float32)
    outs = [np.empty_like(x) for _ in range(2)]
    code = kernels._POINTWISE["leaky_relu"]
    for fn, out in zip((raw("pointwise"), kernels.kernel("pointwise", f32)), outs):
        assert fn(code, x.ctypes.data, None, None, out.ctypes.data, x.size, 0.3, 0.0, 0.0, 1) \
            == raw("pointwise")(code, x.ctypes.data, None, None, out.ctypes.data, 0, 0.3, 0, 0, 1)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], np.where(x > 0, x, np.float32(0.3) * x))
    if kernels._lib.gemm_simd_f32():
        a, b = rng.standard_normal((2, 37, 29), np.float32), rng.standard_normal((2, 29, 41),
                                                                                  np.float32)
        cs = [np.zeros((2, 37, 41), np.float32) for _ in range(2)]
        for fn, c in zip((raw("gemm"), kernels.kernel("gemm", f32)), cs):
            assert fn(2, 37, 41, 29, a.ctypes.data, 29, 1, 37 * 29, b.ctypes.data, 41, 1, 29 * 41,
                      0, None, c.ctypes.data, 41, 37 * 41, 1) == 0
        np.testing.assert_allclose(cs[1], a @ b, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(cs[0], cs[1])
    states = [[np.abs(rng.standard_normal(257)).astype(np.float32) for _ in range(4)]]
    states.append([s.copy() for s in states[0]])
    for fn, (p, g, m, v) in zip((raw("adam"), kernels.kernel("adam", f32)), states):
        fn(p.ctypes.data, g.ctypes.data, m.ctypes.data, v.ctypes.data, None, p.size,
           0.9, 0.999, 1e-8, 0.01, 0.1, 0.0, 1)
    for s0, s1 in zip(*states):
        np.testing.assert_array_equal(s0, s1)
    logits, target = rng.standard_normal((5, 7)).astype(np.float32), np.array([1, 6, 2, 3, 4])
    outs = [np.zeros(7, np.float32) for _ in range(2)]
    assert [fn(logits.ctypes.data, target.ctypes.data, None, out.ctypes.data, 5, 7, 3, 1)
            for fn, out in zip((raw("cross_entropy"), kernels.kernel("cross_entropy", f32)),
                               outs)] == [4, 4]
    np.testing.assert_array_equal(outs[0], outs[1])


_POOLS = [((2, 3, 7, 6), (3, 2), (2, 1), (1, 0), (1, 1), False),
          ((3, 5, 5), (2, 2), (2, 2), (1, 1), (1, 1), True),
          ((2, 9), (3,), (2,), (1,), (1,), True),
          ((1, 2, 5, 6, 7), (2, 3, 2), (1, 2, 2), (1, 1, 0), (1, 1, 1), False),
          ((1, 2, 8, 7), (3, 3), (3, 2), (1, 1), (2, 1), True),      # dilated: max only
          ((4, 3, 45, 70), (3, 3), (2, 2), (1, 1), (1, 1), False),   # large, adaptive: pool.h
          ((2, 6, 100, 112), (3, 2), (2, 1), (1, 0), (1, 2), False)]  # >= 2^17: pool.h at 2 threads


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", _POOLS, ids=str)
@pytest.mark.parametrize("noncontig", [False, True])
def test_pool_kernel_against_numpy(case, dtype, noncontig):
    """pool.h's max (values and indices), average and adaptive max pooling against the NumPy
    windows, with nan, -inf, -0.0 and denormals among the values."""
    from ember._ops import pooling as P
    shape, k, s, p, d, ceil = case
    x = _input(shape, dtype, noncontig)
    flat = x.reshape(-1) if x.flags.c_contiguous else x.T.reshape(-1)
    flat[::7], flat[3::11], flat[5::13], flat[6::17] = np.nan, -np.inf, -0.0, 1e-310
    x = flat.reshape(x.shape) if x.flags.c_contiguous else flat.reshape(x.T.shape).T
    calls = [lambda: P.max_pool_nd.fwd(np, x, k, s, p, d, ceil),
             lambda: P.adaptive_max_pool_nd.fwd(np, x, (3,) * len(k))]
    if d == (1,) * len(k):
        calls += [lambda: P.avg_pool_nd.fwd(np, x, k, s, p, ceil, cip, div)
                  for cip, div in ((True, None), (False, None), (True, 3))]
        # the average's gradient: each window's over its divisor, added to its taps (in window
        # order, as torch adds them, where NumPy adds tap by tap: a cell of 3 or more windows
        # may round differently)
        osize = P._avg_geometry(shape[len(shape) - len(k):], k, s, p, ceil)[0]
        g = _input(shape[:len(shape) - len(k)] + osize, dtype, noncontig)
        calls += [lambda: P.avg_pool_nd_backward.fwd(np, g, shape, k, s, p, ceil, cip, div)
                  for cip, div in ((True, None), (False, None), (True, 3))]
    assert P._pool_c(x, (2,) * len(k), np.ones((2,) * len(k), x.dtype), k, s, p) is not None
    for i, call in enumerate(calls):
        fast = call()
        with kernels.disabled():
            ref = call()
        if isinstance(fast, tuple):
            # NOTE: the indices of windows whose max is nan or -inf differ: the kernel keeps
            # torch's (the last nan; the first tap inside the input), the NumPy windows not
            keep = np.isfinite(ref[0])
            assert np.array_equal(fast[1][keep], ref[1][keep]) and fast[1].dtype == np.int64
            fast, ref = fast[0], ref[0]
        assert fast.shape == ref.shape and fast.dtype == ref.dtype
        assert np.allclose(fast, ref, rtol=1e-6 if i < 5 else 1e-5, atol=0 if i < 5 else 1e-5,
                           equal_nan=True)


def test_pool_kernel_keeps_torchs_index_rule():
    """A tap wins if greater or nan: the first of equal maxima, the last nan; a window of
    -inf and padding gives its first tap inside the input."""
    from ember._ops import pooling as P
    inf = np.inf
    x = np.array([[[-inf, -inf, 3, 3, 1, np.nan, 0, np.nan, 2, 5, 5]]], np.float32)
    vals, idx = P.max_pool_nd.fwd(np, x, (3,), (3,), (1,), (1,), False)
    assert np.array_equal(vals, [[[-inf, 3, np.nan, 5]]], equal_nan=True)
    assert idx.tolist() == [[[0, 2, 7, 9]]]


def _same_as_reference(call):
    """``call()`` (arrays, or tuples of them) with the kernels and on the NumPy path: equal bit
    for bit, nan and -0.0 included."""
    with np.errstate(all="ignore"):     # (the references' nan from infinite ranges)
        fast = call()
        with kernels.disabled():
            ref = call()
    fast, ref = (fast, ref) if isinstance(fast, tuple) else ((fast,), (ref,))
    for a, b in zip(fast, ref, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b))


def _counted(shape, dtype, noncontig, specials):
    """Rounded values (many ties), with -0.0 beside 0 and, with ``specials``, nan and inf."""
    x = np.round(_input(shape, dtype, noncontig, scale=2.0))
    flat = x.reshape(-1) if x.flags.c_contiguous else x.T.reshape(-1)
    flat[:3] = -0.0
    if specials and flat.size > 20:
        flat[5::9], flat[7], flat[11] = np.nan, np.inf, -np.inf
    return flat.reshape(x.shape) if x.flags.c_contiguous else flat.reshape(x.T.shape).T


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((300, 1001), -1), ((333, 129), 0), ((7, 51, 30), 1),
                                       ((9,), 0), ((), 0), ((40001,), 0)], ids=str)
@pytest.mark.parametrize("specials", [False, True])
def test_mode_kernel_is_the_reference(shape, dim, dtype, specials):
    from ember._ops import statistics as St
    x = _counted(shape, dtype, dim == 0 and len(shape) > 1, specials)
    assert kernels.rank(x.reshape(x.shape or (1,)), dim % max(x.ndim, 1), "mode") is not None
    for keepdim in (False, True):
        _same_as_reference(lambda: St.mode.fwd(np, x, dim, keepdim))


@pytest.mark.parametrize("shape,dim", [((300, 1001), -1), ((333, 129), 0), ((7, 51, 300), 1),
                                       ((3, 9000), 0), ((5, 3000), 1)], ids=str)
@pytest.mark.parametrize("specials", [False, True])
def test_sort_kernel_is_the_reference(shape, dim, specials):
    """sort, argsort, msort of float32 by count.h's radix sort (rows of 2-32 by insertion):
    ties (in input order), -0.0 beside 0.0, nan last (first descending), strided inputs."""
    from ember._ops import sorting as So
    x = _counted(shape, np.float32, dim == 0, specials)
    assert So._radix(np, x, dim, False) is not None
    for desc in (False, True):
        _same_as_reference(lambda: So.sort.fwd(np, x, dim, desc))
        _same_as_reference(lambda: So.argsort.fwd(np, x, dim, desc))
    _same_as_reference(lambda: So.msort.fwd(np, x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (1,), (7,), (40, 77), (100003,)], ids=str)
@pytest.mark.parametrize("specials", [False, True])
def test_unique_kernels_are_the_reference(shape, dtype, specials):
    from ember._ops import counting as C
    x = _counted(shape, dtype, len(shape) > 1, specials)
    for op in (C.unique, C.unique_consecutive):
        for inverse in (False, True):
            for counts in (False, True):
                _same_as_reference(lambda: op.fwd(np, x, return_inverse=inverse,
                                                  return_counts=counts))
    assert C._unique_c(x, 1, True, True) is not None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 1023), (129, 1400)], ids=str)
@pytest.mark.parametrize("specials", [False, True])
def test_histogram_kernels_are_the_reference(shape, dtype, specials):
    """histc, histogram and its rows (vmap's rule): counts, weights, density, given edges (one
    row or one per row), ranges, constant rows, values on the edges, nan and infinities."""
    from ember._ops import counting as C
    x = _counted(shape, dtype, len(shape) > 1, specials) / 4
    rows = x.reshape(-1, shape[-1]) if x.size else x.reshape(1, 0)
    w = np.abs(_input(rows.shape, dtype, False, seed=1))
    edges = np.array([-2, -0.5, 0, 0.25, 1.5], dtype)
    per_row = np.sort(_input((rows.shape[0], 6), dtype, False, seed=2), 1)
    calls = [lambda: C.histc.fwd(np, x, 7), lambda: C.histc.fwd(np, x, 5, -1, 1),
             lambda: C.histc.fwd(np, x, 3, 0.25, 0.25), lambda: C.histc.fwd(np, np.ones_like(x), 4),
             lambda: C.histogram.fwd(np, x, 6), lambda: C.histogram.fwd(np, x, 4, (-1.0, 2.0)),
             lambda: C.histogram.fwd(np, x, edges),
             lambda: C.histogram.fwd(np, np.zeros_like(x), 3),
             lambda: C.histogram_rows.fwd(np, rows, 5, None, w, True),
             lambda: C.histogram_rows.fwd(np, rows, per_row, None, w),
             lambda: C.histogram_rows.fwd(np, rows, 33, (0.0, 0.5))]
    assert C._hist_c(rows, 4, 2) is not None
    for call in calls:
        _same_as_reference(call)


def test_bincount_kernel_sums_as_torch():
    """bincount's float32 weights by count.h's bincount_w: sums in float32 in element order,
    torch's bits, within float32 rounding of the NumPy path's double sums; repeated and
    sparse bins, minlength past the data, strided input and weights, nan and infinities."""
    import torch
    rng = np.random.default_rng(3)
    x = rng.integers(0, 40, 10001)
    w = rng.standard_normal(10001).astype(np.float32)
    w[7], w[8], w[9] = np.nan, np.inf, -np.inf
    x[7:10] = 39
    for xs, ws, n in ((x, w, 0), (x[:10000:2], w[1::2], 100), (x[:5000] + 1000, w[:5000], 3),
                      (x[:7], w[:7], 0), (x[:0], w[:0], 2), (x[:10], w[:10].astype(np.float64), 0)):
        got = ember.bincount(ember.tensor(xs), ember.tensor(ws), minlength=n)
        with kernels.disabled():
            ref = ember.bincount(ember.tensor(xs), ember.tensor(ws), minlength=n)
        want = torch.bincount(torch.tensor(xs), torch.tensor(ws), minlength=n).numpy()
        assert got.dtype == ref.dtype == getattr(ember, str(ws.dtype))
        np.testing.assert_array_equal(got.numpy(), want)
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-4)
    for off in (False, True):       # (the kernel's own check of the indices, and NumPy's)
        with kernels.disabled() if off else contextlib.nullcontext(), \
                pytest.raises(RuntimeError, match="non-negative"):
            ember.bincount(ember.tensor(x[:9] - 40), ember.tensor(w[:9]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_kernel_is_numpys(threads, dtype, right):
    """searchsorted / bucketize by count.h's branch-free search (from 4096 values, 8 in
    lockstep, over threads) against the NumPy path: repeated edges, -0.0 beside 0.0, nan and
    infinite values and nan edges (sorted last), strided values, a sequence per row, one edge
    and none."""
    rng = np.random.default_rng(0)
    seq = rng.standard_normal(1777).astype(dtype)
    seq[100:110], seq[-3:], seq[5:7] = seq[100], np.nan, (-0.0, 0.0)
    seq = np.sort(seq)
    v = rng.standard_normal((333, 47)).astype(dtype)
    v.flat[::7] = seq[rng.integers(0, 1777, v.size)][::7]
    v.flat[::101], v.flat[3:7] = np.nan, (np.inf, -np.inf, 0.0, -0.0)
    rows = np.sort(rng.standard_normal((333, 20)).astype(dtype), -1)
    rows[:, -1] = np.nan
    cases = [(seq, x) for x in (v, v.T, v[:, ::2])] + [(rows, v), (seq[:1], v), (seq[:0], v)]
    for s, x in cases:
        got = ember.searchsorted(ember.tensor(s), ember.tensor(x), right=right)
        with kernels.disabled():
            ref = ember.searchsorted(ember.tensor(s), ember.tensor(x), right=right)
        assert np.array_equal(got.numpy(), ref.numpy())
    got = ember.bucketize(ember.tensor(v), ember.tensor(seq), right=right, out_int32=True)
    assert got.dtype == ember.int32
    assert np.array_equal(got.numpy(), np.searchsorted(seq, v, "right" if right else "left"))


@pytest.mark.parametrize("shape", [(1, 1), (7, 5), (5, 7), (2, 3, 1, 9), (3, 129, 300)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "bool", "complex64"])
def test_tri_rows_is_the_reference(threads, shape, dtype):
    """tril and triu by select.h's tri_rows (a copy and a zero fill per row, rows over threads)
    against the NumPy path's masked copy, bit for bit: every diagonal from below the first row
    to past the last column and huge ones, nan, inf and -0.0 kept where kept, batches,
    a transposed (non-contiguous) input (the NumPy path for both), and the gradients."""
    from ember._ops import pointwise as P
    assert kernels.parloop() is not None
    x = _input(shape, "float64", False).astype(dtype)
    if x.dtype.kind in "fc":
        x.flat[:3], x.flat[5::7], x.flat[4::11] = -0.0, np.nan, -np.inf
    n, m = shape[-2:]
    for d in [*range(-n - 1, m + 2), 1 << 40, -(1 << 40)]:
        for op in (P.tril, P.triu):
            for a in (x, np.swapaxes(x, -1, -2)):
                _same_as_reference(lambda: op.fwd(np, a, d).view(  # (complex as float pairs)
                    np.float32 if dtype == "complex64" else dtype))
    if dtype == "float32":
        check(lambda t: t.tril(1) * 2 + t.triu(-1), [x])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16"])
def test_embedding_take_rows_is_the_reference(threads, dtype):
    """embedding's forward by gather.h's take_rows (rows over threads) against NumPy's take:
    bit for bit (nan, -0.0), repeated and strided indices, one column, an empty index, a
    transposed table (NumPy's path); an index out of range still raises."""
    from ember._ops import nn as N
    w = _input((300, 129), "float64", False).astype(dtype)
    if w.dtype.kind == "f":
        w[3], w[5, ::3] = -0.0, np.nan
    idx = np.random.default_rng(1).integers(0, 300, (40, 77))
    for wt, i in [(w, idx), (w, idx[:, ::3]), (w[:, :1].copy(), idx), (w, idx[:0]), (w.T.T, 5),
                  (np.asfortranarray(w), idx)]:
        _same_as_reference(lambda: N.embedding.fwd(np, wt, np.asarray(i)))
    for bad in (300, -1):
        with pytest.raises(IndexError, match=f"got {bad}"):
            N.embedding.fwd(np, w, np.array([0, bad, 2]))


@pytest.mark.parametrize("name", ["quantile", "nanquantile"])
@pytest.mark.parametrize("mode", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_quantile_one_q_is_the_plans_pick(name, mode, dtype):
    """One q takes number ranks (no nan: the slices' last sorted value says so); a 1-element
    q tensor takes the plan (stable order, ranks per slice): the same bits, torch's values;
    odd and 0-d shapes, non-contiguous, -0.0, inf, a row with nan (the plan's then)."""
    import torch
    x = np.round(np.random.RandomState(0).randn(5, 14) * 2).astype(dtype)
    x[0, :3], x[1, 2], x[2, 5] = -0.0, np.inf, -np.inf
    nan = x.copy()
    nan[3, ::4] = np.nan
    for a, dim in [(x, None), (x, 1), (x[:, ::3], 0), (x[:, 1], 0), (x[0, 0], None), (nan, 1)]:
        for q, keep in [(0.0, False), (0.3, True), (0.5, False), (2 / 3, False), (1.0, True)]:
            f = getattr(ember, name)
            out = f(ember.tensor(a), q, dim, keep, interpolation=mode).numpy()
            ref = f(ember.tensor(a), ember.tensor([q], dtype=a.dtype), dim, keep,
                    interpolation=mode).numpy()[0]
            tt = getattr(torch, name)(torch.tensor(a), q, dim, keep, interpolation=mode).numpy()
            assert out.shape == ref.shape == tt.shape and out.dtype == ref.dtype
            assert np.array_equal(out, ref, equal_nan=True) and np.array_equal(
                np.signbit(out), np.signbit(ref))
            np.testing.assert_allclose(out, tt, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_index_copy_and_small_calls_are_the_reference(threads, dtype):
    """index_copy and index_reduce by gather.h's scatter over whole slices (_C.scatter), and
    the one-thread calls of scatter, gather and tri_rows (no OpenMP region), bit for bit against
    NumPy: odd shapes, every dim, a 0-d index, repeated indices (the last write wins),
    non-contiguous input and source, nan, inf, -0.0; a bad index (negative too) raises."""
    from ember._ops import indexing as I, pointwise as P, scatter as S
    rng = np.random.default_rng(35)
    for shape in [(7,), (1, 9, 1), (5, 3, 129), (150, 33)]:
        x = rng.standard_normal(shape).astype(dtype)
        x.reshape(-1)[::5], x.reshape(-1)[1::7], x.reshape(-1)[2::9] = np.nan, -np.inf, -0.0
        for dim in range(-len(shape), len(shape)):
            d = dim % len(shape)
            rows = rng.integers(0, shape[d], shape[d] + 2)
            src = rng.standard_normal(shape[:d] + (rows.size,) + shape[d + 1:]).astype(dtype)
            src.reshape(-1)[::3] = -0.0
            for a, s in [(x, src), (np.asfortranarray(x), np.asfortranarray(src))]:
                _same_as_reference(lambda: S.index_copy.fwd(np, a, dim, rows, s))
                _same_as_reference(lambda: S.index_reduce.fwd(np, a, dim, rows, s, "amax",
                                                              include_self=False))
                at = np.take(rows, rng.integers(0, rows.size, a.shape))
                _same_as_reference(lambda: I.gather.fwd(np, a, dim, at))
            one = np.take(src, [0], d)
            _same_as_reference(lambda: S.index_copy.fwd(np, x, dim, np.array(rows[0]), one))
            for bad in (-1, shape[d]):
                with pytest.raises(IndexError, match=f"index {bad} is out of bounds"):
                    S.index_copy.fwd(np, x, dim, np.array([0, bad]), np.take(src, [0, 1], d))
        if len(shape) > 1:
            for k in (-2, 0, 1, 40):
                _same_as_reference(lambda: P.tril.fwd(np, x, k))
                _same_as_reference(lambda: P.triu.fwd(np, x, k))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 6, 33, 17), (3, 5, 9), (2, 70, 1000), (6, 3, 2)], ids=str)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
def test_batch_norm_kernel_against_numpy(shape, training, dtype, noncontig):
    """native_batch_norm by rowops.h's batch_norm (channels over threads; the statistics as
    one pass of sums shifted by each channel's first value, in double) against the NumPy path:
    the output and the gradients of input, weight and bias, a mean far from 0 (the shift), no
    affine; nan and inf in a channel give the reference's nan and inf (under 8 positions a
    channel: the NumPy path)."""
    x = _input(shape, dtype, noncontig) + 50
    c = shape[1]
    rm, rv = 50 + _input((c,), dtype, False, seed=3), 1 + np.abs(_input((c,), dtype, False, 4))
    w, b = (_input((c,), dtype, False, seed=s) for s in (1, 2))

    def bn(t, w=None, b=None):
        return F.batch_norm(t, ember.tensor(rm), ember.tensor(rv), w, b, training, 0.1, 1e-3)
    for args in ([x, w, b], [x]):
        check(bn, args, tuple(range(len(args))), rows=x.size // c)
    x = x.copy()
    x[0, 1, 0], x[-1, 2, -1] = np.nan, -np.inf
    fast = _run(bn, [x, w, b], (0, 1, 2))
    with kernels.disabled(), np.errstate(all="ignore"):
        ref = _run(bn, [x, w, b], (0, 1, 2))
    for a, r in zip(fast, ref):
        assert np.array_equal(np.isnan(a), np.isnan(r)) and np.array_equal(np.isinf(a), np.isinf(r))
        np.testing.assert_allclose(a[np.isfinite(r)], r[np.isfinite(r)], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", _POOLS, ids=str)
def test_max_pool_grad_kernel_is_the_reference(case, dtype):
    """Max and adaptive max pooling's gradients by pool.h (the input's zeros filled by the
    threads, g added at the forward's indices in output order) against max_unpool_grad's
    scatter, bit for bit: overlapping windows, nan and -0.0 in g."""
    from ember._ops import pooling as P
    shape, k, s, p, d, ceil = case
    x = _input(shape, dtype, False)
    for _, idx in (P.max_pool_nd.fwd(np, x, k, s, p, d, ceil),
                   P.adaptive_max_pool_nd.fwd(np, x, (3,) * len(k))):
        g = _input(idx.shape, dtype, False, seed=1)
        g.flat[::5], g.flat[1::7] = np.nan, -0.0
        with ember.no_grad():
            _same_as_reference(lambda: P._max_grad(ember.tensor(g), ember.tensor(idx), shape,
                                                   len(k)).numpy())
        assert P._pool_c(shape, idx.shape[idx.ndim - len(k):], None, grad=g, index=idx) is not None


@pytest.mark.parametrize("dtype", DTYPES)
def test_kron_roll_and_deg2rad_are_the_reference(threads, dtype):
    """kron of 2-D factors by rowops' kron_rows (rows over threads), and the large calls of
    roll (its slice copies) and deg2rad (NumPy's multiply) over parloop's threads, bit for bit
    against NumPy: odd shapes, non-contiguous operands, nan, inf, -0.0."""
    from ember._ops import linalg as L, pointwise_math as M, reorder as R
    rng = np.random.default_rng(36)
    for sa, sb in [((14, 21), (21, 14)), ((3, 50), (7, 5)), ((40, 30), (20, 50)),
                   ((99, 9), (17, 3))]:
        a, b = (rng.standard_normal(s).astype(dtype) for s in (sa, sb))
        a.flat[::5], b.flat[1::7], a.flat[2::9] = np.nan, -np.inf, -0.0
        for x, y in [(a, b), (np.asfortranarray(a), b[::-1])]:
            _same_as_reference(lambda: L.kron.fwd(np, x, y))
    x = rng.standard_normal((517, 263)).astype(dtype)
    x.flat[::5], x.flat[1::7], x.flat[2::9] = np.nan, -np.inf, -0.0
    for y in (x, x[:, ::-1], np.asfortranarray(x)):
        for shifts, dims in [(1, None), (-70001, None), ((3, 100), (0, 1)), (5, 1), (-2, 0)]:
            _same_as_reference(lambda: R.roll.fwd(np, y, shifts, dims))
        _same_as_reference(lambda: M.deg2rad.fwd(np, y))


def test_pointwise_on_column_slices_over_threads_is_the_reference(threads):
    """A ufunc of large column slices (rows of a wider array, C order) runs over parloop's
    threads into a C-contiguous result (NumPy's order K), bit for bit against NumPy's one call;
    transposed and reversed operands keep NumPy's path. And repeat's gradient, its copies added
    in turn, against the sum of the reference."""
    from ember._ops import pointwise as P
    rng = np.random.default_rng(37)
    g = rng.standard_normal((419, 2 * 263 + 5)).astype(np.float32)
    g.flat[::5], g.flat[1::7], g.flat[2::9] = np.nan, -np.inf, -0.0
    a, b = g[:, :263], g[:, 263 + 5:]
    for args in [(a, b), (a, 1.5), (a, b[0]), (a.T, b.T), (a[::-1], b)]:
        _same_as_reference(lambda: P.threaded(np.add)(*args))
        r = P.threaded(np.add)(*args)
        assert r.flags.c_contiguous == np.add(*args).flags.c_contiguous
    x = ember.tensor(g[:, :263], requires_grad=True)
    for sizes in [(1, 2), (3, 1), (2, 1, 1)]:
        x.grad = None
        out = np.tile(g[:, :263], sizes)
        ember.autograd.backward([x.repeat(sizes)], [ember.tensor(out)])
        ref = out.reshape([v for r, s in zip(sizes, (1,) * (len(sizes) - 2) + (419, 263))
                           for v in (r, s)]).sum(tuple(range(0, 2 * len(sizes), 2)))
        ref = ref.reshape(419, 263)
        assert np.array_equal(x.grad.numpy(), ref, equal_nan=True)
        assert np.array_equal(np.signbit(x.grad.numpy()), np.signbit(ref))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("invert", [False, True])
def test_isin_kernel_is_the_reference(threads, dtype, invert):
    """isin against a test set of up to 64 values by count.h's compare loop (from 32768
    compares over threads) against the NumPy path: nan (never in), inf, -0.0 beside 0.0,
    non-contiguous elements and tests, a 2-D test set, one test value, none, a 0-dim input."""
    rng = np.random.default_rng(0)
    t = rng.standard_normal(80).astype(dtype)
    t[:4] = np.nan, np.inf, -0.0, 3.0
    x = rng.standard_normal((64, 64)).astype(dtype)
    x.flat[::3] = t[rng.integers(0, 80, x.size)][::3]
    x.flat[1:6] = np.nan, np.inf, -np.inf, 0.0, -0.0
    cases = [(x, t[:64]), (x.T, t[:64]), (x[:, ::2], t[:64:2]), (x[:3, :5], t[:5]),
             (x[:7, 0], t[:1]), (x[:7, 0], t[:0]), (x[1, 1], t[:8]),
             (x[:5, :5], t[:12].reshape(3, 4))]
    for e, s in cases:
        got = ember.isin(ember.tensor(e), ember.tensor(s), invert=invert)
        with kernels.disabled():
            ref = ember.isin(ember.tensor(e), ember.tensor(s), invert=invert)
        assert got.dtype == ember.bool and got.shape == ref.shape
        assert np.array_equal(got.numpy(), ref.numpy())
        assert np.array_equal(got.numpy(), np.isin(e, s, invert=invert))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cdist_kernel_is_the_reference(threads, dtype):
    """cdist's Euclidean distances by factor.h's cdist2 (squares summed in double, rows over
    threads from 32k multiply-adds) against the NumPy path: a batch, non-contiguous operands,
    nan, inf (inf - inf is nan), -0.0, a row of length 1 and 0, and no rows."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 70, 33)).astype(dtype)
    y = rng.standard_normal((3, 41, 33)).astype(dtype)
    x[0, 0, :3], x[1, 2, 5], y[0, 1, 0], y[2, 3, 7] = (np.nan, -0.0, 0.0), np.inf, np.inf, -0.0
    xt = x.transpose(0, 2, 1)
    cases = [(x, y), (x[0], y[0]), (x[:, ::2], y[:, ::3]), (x[0, :5, :1], y[0, :7, :1]),
             (x[0, :, 5:5], y[0, :, 5:5]), (x[0, :0], y[0]), (xt[:, :9], xt[:, 4:8])]
    for a, b in cases:
        got = ember.cdist(ember.tensor(a), ember.tensor(b))
        with kernels.disabled():
            ref = ember.cdist(ember.tensor(a), ember.tensor(b))
        assert got.shape == ref.shape
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=2e-6 if dtype == "float32"
                                   else 1e-14, atol=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 4, 5), (33, 31), (5, 257, 3)], ids=str)
def test_small_extrema_are_the_reference(shape, dtype):
    """max(), min(), aminmax(), median(), nanmedian() of small arrays by reduce_rows /
    stats_rows / rank_rows as one row into 0-dim arrays,
    and max/min along a dim (NumPy's reduce and arg-reduce): the NumPy path's values and
    indices, with -0 beside 0, infinities, ties, a nan first, inside or last; non-contiguous
    inputs (the kernels decline)."""
    base = np.round(_input(shape, dtype, False))
    for case in range(4):
        x = base.copy()
        flat = x.reshape(-1)
        if case and flat.size > 2:
            flat[:2], flat[-2] = (-0.0, 0.0), np.inf
        if case > 1:
            flat[(0, flat.size // 2, -1)[case - 1]] = np.nan
        for a in (x, x.T, x[..., ::2]):
            t = ember.tensor(a) if a.flags.c_contiguous else ember.from_numpy(a)
            calls = [lambda: [t.max()], lambda: [t.min()], lambda: ember.aminmax(t),
                     lambda: [t.median()], lambda: [t.nanmedian()]] + [
                lambda d=d, k=k, f=f: getattr(t, f)(d, keepdim=k)
                for d in range(-a.ndim, a.ndim) for k in (False, True) for f in ("max", "min")]
            for call in calls:
                got = [r.numpy() for r in call()]
                with kernels.disabled():
                    want = [r.numpy() for r in call()]
                for g, w in zip(got, want):
                    assert g.shape == w.shape and g.dtype == w.dtype and \
                        np.array_equal(g, w, equal_nan=True)
    from ember._ops.reduction import _whole
    assert _whole("max", base) is not None and \
        (_whole("minmax", np.stack([base] * 2, -1)[..., 0]) is None or base.size == 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_common_call_is_the_kernels(name, dtype):
    """softmax / log_softmax of a contiguous array by the kernel straight from the forward
    (_softmax_fwd): the NumPy path's values along every dim, for dims of 1 whatever their
    stride (a[:, None]), odd and 0-dim shapes, non-contiguous inputs, nan, infinities, -0."""
    from ember._ops import nn as N
    for shape in [(7,), (3, 4), (2, 1, 5), (5, 3, 33), (1,), ()]:
        x = np.asarray(_input(shape, dtype, False))
        if x.size > 4:
            x.reshape(-1)[:4] = np.nan, np.inf, -np.inf, -0.0
        for a in (x, x[:, None], x.T, x[..., ::2]) if x.ndim else (x,):
            for d in range(-max(a.ndim, 1), max(a.ndim, 1)):
                got = getattr(ember, name)(ember.from_numpy(a), d).numpy()
                with kernels.disabled(), np.errstate(all="ignore"):
                    want = getattr(ember, name)(ember.from_numpy(a), d).numpy()
                assert got.shape == want.shape and got.dtype == want.dtype
                np.testing.assert_allclose(got, want, **TOL[dtype], equal_nan=True)
    assert N._softmax_fwd(np, np.ones(3, dtype)[:, None], 1, None, 0) is not None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 4), (33,), (5, 257, 3), (4000,)], ids=str)
def test_small_prod_of_everything_is_the_reference(shape, dtype):
    """prod() of a contiguous array below the row kernel's size by prod_rows into a 0-dim
    array: NumPy's value (bit for bit below 32 elements, one product at a time), with -0,
    infinities, a zero, a nan; strided inputs keep NumPy's."""
    base = np.asarray(1 + _input(shape, dtype, False, scale=0.01))
    for case in range(4):
        x = base.copy()
        flat = x.reshape(-1)
        if case:
            flat[[[0, -1], [flat.size // 2], [-1]][case - 1]] = [[-0.0, np.inf], [0.0],
                                                                [np.nan]][case - 1]
        for a in (x, x[::2]):
            got = ember.from_numpy(a).prod().numpy()
            with kernels.disabled():
                want = ember.from_numpy(a).prod().numpy()
            assert got.shape == want.shape == () and got.dtype == want.dtype
            if a.size < 32:
                assert np.array_equal(got, want, equal_nan=True)
            np.testing.assert_allclose(got, want, **TOL[dtype], equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_trace_kernel_is_the_reference(dtype):
    """trace by diag_sum: NumPy's add.reduce of the diagonal bit for bit (serial below 8,
    8 accumulators to 128, halves above) of square, wide, tall, transposed, reversed and
    strided matrices, with -0 (which sums to 0), infinities and nan."""
    from ember._ops import joining as J
    assert kernels.kernel("diag_sum", np.dtype(dtype)) is not None and \
        ember.tensor([[1.0, 2.0], [3.0, -0.0]]).trace().item() == 1.0
    for n, m in [(0, 3), (1, 1), (3, 3), (7, 9), (8, 8), (23, 17), (129, 130), (300, 301)]:
        x = _input((n, m), dtype, False) * 10.0 ** np.arange(-3, 3)[np.arange(m) % 6]
        for case in range(3):
            y = x.copy()
            if case and n:
                y[0, 0] = y[-1, -1] = -0.0
                if case == 2:
                    y[n // 2, n // 2] = (np.inf, np.nan)[n % 2]
            for a in (y, y.T, y[::-1], y[::2, ::3], y[:, ::-1]):    # (the forward: views
                got = np.asarray(J.trace.fwd(np, a))                 # with negative strides)
                with kernels.disabled():
                    want = np.asarray(J.trace.fwd(np, a))
                assert got.shape == want.shape == () and got.dtype == want.dtype and \
                    np.array_equal(got, want, equal_nan=True) and \
                    np.signbit(got) == np.signbit(want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5,), (3, 4), (33, 31), (5, 257, 3)], ids=str)
def test_small_moments_of_everything_are_the_reference(shape, dtype):
    """var, std, var_mean, std_mean over every element by stats_rows as one row (_whole):
    the NumPy path's values with several corrections, a nan, an infinity; one element's
    zero degrees of freedom still warns and gives nan."""
    x = _input(shape, dtype, False)
    for case in range(3):
        y = x.copy()
        y.reshape(-1)[-1] = (y.reshape(-1)[-1], np.nan, np.inf)[case]
        t = ember.from_numpy(y)
        for call in (lambda: [t.var()], lambda: [t.std(correction=0)],
                     lambda: ember.var_mean(t, correction=2), lambda: ember.std_mean(t, False)):
            got = [r.numpy() for r in call()]
            with kernels.disabled(), np.errstate(all="ignore"):
                want = [r.numpy() for r in call()]
            for g, w in zip(got, want):
                assert g.shape == w.shape == () and g.dtype == w.dtype
                np.testing.assert_allclose(g, w, **TOL[dtype], equal_nan=True)
    with pytest.warns(UserWarning, match="degrees of freedom"):
        assert np.isnan(ember.from_numpy(x.reshape(-1)[:1].copy()).var().item())


def test_float_power_of_float32_over_threads_is_the_reference(threads):
    """float_power of float32 operands (parloop.h's fpow_ff: libm's pow of the widened values,
    no casts) against the NumPy reference's float64 pow, bit for bit: odd shapes, strided,
    transposed and broadcast operands, a number base, nan/inf/-0.0; a single exponent (NumPy's
    square root for 0.5) keeps the reference's path."""
    from ember._ops import pointwise_numeric as N
    rng = np.random.default_rng(38)
    a, b = (rng.standard_normal((263, 517)).astype(np.float32) * 3 for _ in range(2))
    a.flat[:9] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1, -1, 2, 0.5]
    b.flat[9:18] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1, -1, 0.5, 2]
    for x, y in [(a, b), (a[:, ::2], b[:, ::2]), (a.T, b.T), (a, b[0]), (a, b[:, :1] + b[:1]),
                 (0.5, b), (3, b), (0.1, b), (a, np.float32([[0.5]])), (a, b.astype(np.float64))]:
        _same_as_reference(lambda: N.float_power.fwd(np, x, y))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int64])
def test_repeat_by_one_dim_over_threads_is_the_reference(threads, dtype):
    """repeat (and tile) by more than 1 along one dim: parloop.h's tile_loop writes each source
    row segment to its copies in one pass over threads, bit for bit numpy.tile: odd shapes, a
    transposed source, new leading dims, nan/-0.0."""
    from ember._ops import indexing as I
    rng = np.random.default_rng(39)
    x = (rng.standard_normal((263, 517)) * 50).astype(dtype)
    if x.dtype.kind in "fc":
        x.flat[::5], x.flat[1::7] = np.nan, -0.0
    for y in (x, x.T, x[:, 1:]):
        for sizes in [(1, 2), (3, 1), (2, 1, 1), (1, 1, 5), (1, 1)]:
            _same_as_reference(lambda: I.repeat.fwd(np, y, sizes))
