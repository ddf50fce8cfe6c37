"""Sparse compressed tensors (CSR, CSC, BSR, BSC) against torch: construction and its checks,
the index accessors, conversions between every layout, products with their gradients, the
torch.sparse functions, the legacy COO products and resizes, printing, and save/load both ways
(SciPy checks the index arithmetic on a larger random matrix)."""
import copy
import io
import pickle
import re

import numpy as np
import pytest

import ember
from oracle import assert_close, same, torch

pytestmark = pytest.mark.filterwarnings("ignore:Sparse (invariant checks|CSR tensor support)")
LAYOUTS = ("csr", "csc", "bsr", "bsc")
ACCESSORS = {"csr": ("crow_indices", "col_indices"), "bsr": ("crow_indices", "col_indices"),
             "csc": ("ccol_indices", "row_indices"), "bsc": ("ccol_indices", "row_indices")}
D = [[1., 0, 2, 0], [0, 0, 3, 0], [4, 5, 0, 0], [0, 0, 0, 7]]
rng = np.random.default_rng(0)
M = rng.standard_normal((4, 3))


def to(lib, x, lay, block=(2, 2), **kw):
    """``x`` (a nested list or tensor) in layout ``lay`` of ``lib``."""
    x = lib.tensor(x, dtype=lib.float64) if not isinstance(x, (ember.Tensor, torch.Tensor)) else x
    return getattr(x, f"to_sparse_{lay}")(*([block] if lay[0] == "b" else []), **kw)


def assert_compressed(e, t, what=""):
    """Same layout, shape, dtype, index tensors (values and dtype), values and dense value."""
    assert repr(e.layout) == repr(t.layout), f"{what}: {e.layout} vs {t.layout}"
    assert tuple(e.shape) == tuple(t.shape), f"{what}: {e.shape} vs {t.shape}"
    assert e._nnz() == t._nnz() and e.dense_dim() == t.dense_dim(), what
    for name in ACCESSORS[t.layout.__repr__()[13:]]:
        ei, ti = getattr(e, name)(), getattr(t, name)()
        assert ei.dtype.name == str(ti.dtype)[6:], f"{what} {name} dtype"
        assert_close(ei, ti, what=f"{what} {name}")
    assert_close(e.values().detach(), t.values().detach(), what=f"{what} values")
    assert_close(e.detach().to_dense(), t.detach().to_dense(), what=f"{what} dense")


def both(fn):
    return fn(ember), fn(torch)


# ---- construction ------------------------------------------------------------------------------

CASES = [  # (layout, compressed, plain, values, size)
    ("csr", [0, 2, 3, 5], [0, 2, 2, 0, 1], [1., 2, 3, 4, 5], (3, 3)),
    ("csr", [0, 2, 3, 5], [0, 2, 2, 0, 1], [1., 2, 3, 4, 5], None),
    ("csc", [0, 1, 1, 3], [2, 0, 1], [1., 2, 3], (4, 3)),
    ("bsr", [0, 1, 2], [1, 0], np.arange(8.).reshape(2, 2, 2).tolist(), (4, 4)),
    ("bsc", [0, 1, 2], [1, 0], np.arange(12.).reshape(2, 2, 3).tolist(), None),
    ("csr", [[0, 1, 1], [0, 0, 1]], [[1], [0]], [[5.], [6.]], (2, 2, 2)),
    ("csr", [0, 1, 2], [1, 0], [[1., 2], [3, 4]], (2, 2, 2)),          # a dense dim
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[4]}")
def test_constructors_match_torch(case):
    lay, ci, pi, v, size = case

    def make(lib, fn):
        return fn(lib.tensor(ci), lib.tensor(pi), lib.tensor(v, dtype=lib.float64),
                  *([size] if size else []))
    for name in (f"sparse_{lay}_tensor", "sparse_compressed_tensor"):
        kw = {"layout": getattr(ember, f"sparse_{lay}")} if "compressed" in name else {}
        e = make(ember, lambda *a: getattr(ember, name)(*a, **kw))
        kw = {"layout": getattr(torch, f"sparse_{lay}")} if "compressed" in name else {}
        t = make(torch, lambda *a: getattr(torch, name)(*a, **kw))
        assert_compressed(e, t, name)
        assert repr(e) == repr(t)
        assert e.layout is getattr(ember, f"sparse_{lay}") and not e.is_sparse
        assert e.is_sparse_csr == t.is_sparse_csr and e.sparse_dim() == t.sparse_dim()


def test_constructor_options():
    e, t = both(lambda lib: lib.sparse_csr_tensor(
        lib.tensor([0, 1, 2], dtype=lib.int32), lib.tensor([1, 0], dtype=lib.int32), [1, 2],
        dtype=lib.float32, requires_grad=True))
    assert_compressed(e, t)
    assert e.requires_grad and e.is_leaf and e.dtype is ember.float32
    assert e.crow_indices().dtype is ember.int32
    e, t = both(lambda lib: lib.sparse_csr_tensor([0, 1], [0], [1]))
    assert_compressed(e, t)


CI, PI, VAL = [0, 2, 3, 5], [0, 2, 2, 0, 1], [1., 2, 3, 4, 5]
ERRORS = [  # (what to build, torch's message), each with the checks on
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI), lib.tensor(PI), lib.tensor(VAL), (2, 3)),
     r"crow_indices.shape\[-1\] must be equal to the number of rows \+ 1 \(=3\), but got 4"),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI), lib.tensor(PI), lib.tensor(VAL), (3, 2)),
     r"`0 <= col_indices < ncols` is not satisfied."),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI), lib.tensor(PI), lib.tensor(VAL[:4]),
                                       (3, 3)),
     r"col_indices.shape\[-1\] must be equal to nnz \(=4\) as defined by values.shape\[0\], "
     r"but got 5"),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI, dtype=lib.int32), lib.tensor(PI),
                                       lib.tensor(VAL), (3, 3)),
     "crow_indices and col_indices must have the same dtype, bot got Int and Long"),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI, dtype=lib.float32),
                                       lib.tensor(PI, dtype=lib.float32), lib.tensor(VAL),
                                       (3, 3)),
     "crow_indices and col_indices dtype must be Int or Long, but got Float"),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI), lib.tensor(PI), lib.tensor(VAL),
                                       (3, 3, 1)),
     r"tensor dimensionality must be sum of batch, base, and dense dimensionalities "
     r"\(=0 \+ 2 \+ 0\) but got 3"),
    (lambda lib: lib.sparse_bsr_tensor(lib.tensor(CI), lib.tensor(PI), lib.tensor(VAL)),
     r"values must have dimensionality > sum of batch and block dimensionalities \(=0 \+ 2\)"),
    (lambda lib: lib.sparse_bsr_tensor(lib.tensor(CI), lib.tensor(PI),
                                       lib.tensor(VAL).reshape(5, 1, 1), (6, 3)),
     r"number of row blocks \+ 1 \(=7\), but got 4"),
    (lambda lib: lib.sparse_bsr_tensor(lib.tensor(CI), lib.tensor(PI), lib.ones(5, 2, 2),
                                       (6, 5)),
     r"tensor shape\[1\] \(=5\) must be divisible with blocksize\[1\] \(=2\)"),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI).reshape(1, 4), lib.tensor(PI),
                                       lib.tensor(VAL), (3, 3)),
     "crow_indices and col_indices dimensionalities must be equal but got 2 and 1"),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI).reshape(1, 4), lib.tensor(PI).reshape(1, 5),
                                       lib.tensor(VAL).reshape(1, 5), (2, 3, 3)),
     r"all batch dimensions of crow_indices \(=\[1\]\), col_indices \(=\[1\]\), and values "
     r"\(=\[1\]\) must be equal to tensor batch dimensions \(=\[2\]\)"),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor([1, 2, 3, 5]), lib.tensor(PI), lib.tensor(VAL),
                                       (3, 3)),
     r"`crow_indices\[..., 0\] == 0` is not satisfied."),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor([0, 2, 3, 4]), lib.tensor(PI), lib.tensor(VAL),
                                       (3, 3)),
     r"`crow_indices\[..., -1\] == nnz` is not satisfied."),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI), lib.tensor([2, 0, 2, 0, 1]),
                                       lib.tensor(VAL), (3, 3)),
     "are sorted and distinct along the last dimension values` is not satisfied"),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI), lib.tensor([0, 0, 2, 0, 1]),
                                       lib.tensor(VAL), (3, 3)),
     "are sorted and distinct along the last dimension values` is not satisfied"),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI), lib.tensor([0, -1, 2, 0, 1]),
                                       lib.tensor(VAL), (3, 3)),
     r"`0 <= col_indices < ncols` is not satisfied."),
    (lambda lib: lib.sparse_compressed_tensor(lib.tensor(CI), lib.tensor(PI), lib.tensor(VAL),
                                              (3, 3)),
     "sparse_compressed_tensor expected sparse compressed tensor layout but got none"),
    (lambda lib: lib.sparse_compressed_tensor(lib.tensor(CI), lib.tensor(PI), lib.tensor(VAL),
                                              (3, 3), layout=lib.sparse_coo),
     "sparse_compressed_tensor expected sparse compressed tensor layout but got Sparse"),
    (lambda lib: lib.sparse_csr_tensor(lib.tensor(CI), lib.tensor(PI), lib.tensor(VAL), (3, 3),
                                       layout=lib.sparse_csc),
     "sparse_csr_tensor: layout must be SparseCsr but got SparseCsc"),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_constructor_errors_match_torch(i):
    fn, match = ERRORS[i]
    with torch.sparse.check_sparse_tensor_invariants(), \
            ember.sparse.check_sparse_tensor_invariants():
        same(fn, match)


def test_check_sparse_tensor_invariants_switch():
    bad = lambda lib, **kw: lib.sparse_csr_tensor(  # noqa: E731
        lib.tensor([1, 2, 3, 5]), lib.tensor(PI), lib.tensor(VAL), (3, 3), **kw)
    chk = ember.sparse.check_sparse_tensor_invariants
    assert not chk.is_enabled()
    bad(ember)                                            # off by default, as torch's
    same(lambda lib: bad(lib, check_invariants=True), "crow_indices")
    chk.enable()
    try:
        assert chk.is_enabled()
        with pytest.raises(RuntimeError, match="crow_indices"):
            bad(ember)
        bad(ember, check_invariants=False)                # the argument wins
    finally:
        chk.disable()
    ctx = chk()
    with ctx:
        assert chk.is_enabled()
        with pytest.raises(RuntimeError, match="already activated"):
            ctx.__enter__()
    assert not chk.is_enabled()
    assert chk()(chk.is_enabled)() and not chk.is_enabled()          # as a decorator
    assert not chk(False)(chk.is_enabled)()


# ---- accessors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("lay", LAYOUTS)
def test_accessors_and_errors_match_torch(lay):
    for name in ("crow_indices", "col_indices", "ccol_indices", "row_indices"):
        same(lambda lib: getattr(to(lib, D, lay), name)(), name)
        same(lambda lib: getattr(lib, f"{name}_copy")(to(lib, D, lay)), name)
    same(lambda lib: lib.tensor(D).crow_indices(),
         "crow_indices expected sparse row compressed tensor layout but got Strided")
    for name in ("indices", "coalesce", "is_coalesced"):
        same(lambda lib: getattr(to(lib, D, lay), name)(),
             "expected sparse coordinate tensor layout but got SparseBsc" if lay == "bsc"
             else "expected sparse coordinate tensor layout")
    same(lambda lib: to(lib, D, lay)._values(), "Could not run 'aten::_values' with arguments "
                                               "from the 'SparseCsrCPU' backend")
    same(lambda lib: to(lib, D, lay).to_dense(lib.float32), "dtype argument is not supported")
    e, t = both(lambda lib: to(lib, D, lay))
    assert e.numel() == t.numel() and e.dim() == t.dim()
    assert not hasattr(e, "nnz") and not hasattr(t, "nnz")         # (torch has only _nnz)
    c = ember.crow_indices_copy(ember.tensor(D).to_sparse_csr())
    c[0] = 9
    assert ember.tensor(D).to_sparse_csr().crow_indices()[0] == 0


# ---- conversions -------------------------------------------------------------------------------

def _sources(lib):
    return {"strided": lib.tensor(D, dtype=lib.float64), "coo": lib.tensor(D).to_sparse(),
            **{lay: to(lib, D, lay) for lay in LAYOUTS}}


@pytest.mark.parametrize("dst", LAYOUTS + ("coo", "dense"))
@pytest.mark.parametrize("src", ("strided", "coo") + LAYOUTS)
def test_conversions_between_every_layout_match_torch(src, dst):
    def convert(lib):
        x = _sources(lib)[src]
        if dst == "dense":
            return x.to_dense()
        if dst == "coo":
            return x.to_sparse_coo()
        return to(lib, x, dst)
    (e, ee), (t, te) = [(None, None)] * 2
    try:
        t = convert(torch)
    except Exception as exc:      # noqa: BLE001
        te = exc
    if te is not None:
        same(convert, re.escape(str(te).splitlines()[0][:60]))
        return
    e = convert(ember)
    if dst == "coo":
        assert e.is_sparse and e.is_coalesced() == t.is_coalesced()
        assert_close(e._indices(), t._indices())
        assert_close(e._values(), t._values())
    elif dst == "dense":
        assert_close(e, t)
    else:
        assert_compressed(e, t, f"{src} -> {dst}")



@pytest.mark.parametrize("fn, match", [
    (lambda lib: to(lib, D, "bsr").to_sparse_bsr((1, 1)),
     r"to_sparse_bsr: conversion from SparseBsr to SparseBsr with blocksize changed from "
     r"\[2, 2\] to \[1, 1\] is not supported"),
    (lambda lib: to(lib, D, "bsr").to_sparse_bsc((1, 1)),
     "sparse_compressed_to_sparse_bsc: conversion from SparseBsr to SparseBsc with blocksize"),
    (lambda lib: to(lib, D, "bsr").to_sparse_csr(),
     "sparse_compressed_to_sparse_csr: expected SparseCsr or SparseCsc layout but got SparseBsr"),
    (lambda lib: lib.ones(4, 4).to_sparse_bsr((3, 3)),
     r"dense_to_sparse_bsr: tensor sparse size \(4,4\) must be divisible by given blocksize "
     r"\(3,3\)"),
    (lambda lib: lib.ones(2, 2).to_sparse_csr(1),
     r"dense_to_sparse_csr: dense_dim argument must be in \[0,0\] range, but 1 is given"),
    (lambda lib: to(lib, D, "csr").to_sparse_csc(dense_dim=0),
     "sparse_compressed_to_sparse_csc: conversion from SparseCsr to SparseCsc with dense_dim"),
    (lambda lib: to(lib, D, "csr").to_sparse(1),
     "conversion from SparseCsr to Sparse with sparse_dim argument !=2 is not supported"),
    (lambda lib: lib.zeros(2, 3, 4).to_sparse(3).to_sparse_csr(),
     r"coo_to_sparse_csr: conversion from Sparse to SparseCsr for input tensors with "
     r"sparse_dim\(\)!=2 is not supported"),
    (lambda lib: lib.tensor([[[1., 0], [0, 2]], [[0, 3], [0, 0]]]).to_sparse_csr(),
     "Expect the same number of specified elements per batch."),
    (lambda lib: lib.ones(2, 2).to_sparse(layout=lib.sparse_bsr),
     "dense_to_sparse: conversion from Strided to SparseBsr without blocksize argument"),
    (lambda lib: lib.ones(2, 2).to_sparse_bsr((1, 1, 1)),
     "dense_to_sparse_bsr: blocksize needs to be a tuple of size 2, but got 3"),
])
def test_conversion_errors_match_torch(fn, match):
    same(fn, match)


@pytest.mark.parametrize("lay", LAYOUTS)
def test_batched_hybrid_and_to_sparse_layout_conversions(lay):
    x = rng.standard_normal((2, 4, 4, 3))
    x[..., :2, :, :] = 0               # the same number of blocks in each batch
    x[1, 2:, :2] = 0
    x[0, 2:, 2:] = 0
    for dd in (0, 1):
        y = x if dd else x[..., 0]
        e, t = both(lambda lib: to(lib, lib.tensor(y), lay, dense_dim=dd))
        assert_compressed(e, t, f"dense_dim={dd}")
        e, t = both(lambda lib: to(lib, lib.tensor(y), lay, dense_dim=dd).to_sparse_coo())
        assert_close(e.to_dense(), t.to_dense())
    kw = {"blocksize": (2, 2)} if lay[0] == "b" else {}
    e, t = both(lambda lib: lib.tensor(D).to_sparse(layout=getattr(lib, f"sparse_{lay}"), **kw))
    assert_compressed(e, t)
    e, t = both(lambda lib: to(lib, D, lay).to_sparse())
    assert_close(e._indices(), t._indices())
    assert e.is_coalesced() == t.is_coalesced()


def test_block_conversion_keeps_blocks_with_any_element():
    e, t = both(lambda lib: lib.tensor(D).to_sparse_csr().to_sparse_bsr((2, 2)))
    assert_compressed(e, t)
    e, t = both(lambda lib: lib.tensor(D).to_sparse().to_sparse_bsc((1, 1)))
    assert_compressed(e, t)


def test_random_conversions_against_scipy():
    sp = pytest.importorskip("scipy.sparse")
    a = rng.standard_normal((40, 30)) * (rng.random((40, 30)) < 0.1)
    csr, csc = ember.tensor(a).to_sparse_csr(), ember.tensor(a).to_sparse_csc()
    s = sp.csr_matrix(a)
    np.testing.assert_array_equal(csr.crow_indices().numpy(), s.indptr)
    np.testing.assert_array_equal(csr.col_indices().numpy(), s.indices)
    np.testing.assert_array_equal(csr.values().numpy(), s.data)
    s = sp.csc_matrix(a)
    np.testing.assert_array_equal(csc.ccol_indices().numpy(), s.indptr)
    np.testing.assert_array_equal(csc.row_indices().numpy(), s.indices)
    np.testing.assert_array_equal(csc.to_sparse_csr().to_dense().numpy(), a)
    b = sp.bsr_matrix(a, blocksize=(4, 5))
    b.sort_indices()
    bsr = ember.tensor(a).to_sparse_bsr((4, 5))
    np.testing.assert_array_equal(bsr.crow_indices().numpy(), b.indptr)
    np.testing.assert_array_equal(bsr.values().numpy(), b.data)
    m = rng.standard_normal((30, 7))
    np.testing.assert_allclose((csc @ ember.tensor(m)).numpy(), s @ m, rtol=1e-12)


# ---- products and their gradients ------------------------------------------------------------

def _leaf(lib, lay="csr"):
    return to(lib, D, lay).requires_grad_()


@pytest.mark.parametrize("lay", LAYOUTS)
def test_matmul_values_match_torch(lay):
    # (torch's CPU kernels lack some BSR/BSC products: those are checked against the dense one)
    for fn in (lambda lib, s, m: s @ m, lambda lib, s, m: lib.mm(s, m),
               lambda lib, s, m: s @ m[:, 0], lambda lib, s, m: m.t() @ s,
               lambda lib, s, m: lib.addmm(lib.ones(4, 3, dtype=lib.float64), s, m, alpha=2)):
        e = fn(ember, to(ember, D, lay), ember.tensor(M))
        assert_close(e, fn(torch, torch.tensor(D, dtype=torch.float64), torch.tensor(M)))


def test_matmul_gradients_to_values_and_dense_match_torch():
    def run(lib):
        v = lib.tensor(VAL, dtype=lib.float64, requires_grad=True)
        s = lib.sparse_csr_tensor(lib.tensor(CI), lib.tensor(PI), v, (3, 3))
        m = lib.tensor(M[:3], requires_grad=True)
        out = s @ m
        (out * lib.tensor(M[:3] ** 2)).sum().backward()
        return out, v.grad, m.grad, type(s.grad_fn).__name__, type(out.grad_fn).__name__
    e, t = both(run)
    for a, b in zip(e[:3], t[:3]):
        assert_close(a, b)
    assert e[3:] == t[3:] == ("SparseCompressedTensorBackward0", "MmBackward0")


def test_leaf_gradients_follow_torch_layouts():
    m = M[:, :2]

    def grads(lib, fn):
        s = _leaf(lib)
        fn(lib, s, lib.tensor(m)).sum().backward()
        return s.grad
    cases = [  # torch.mm and addmm: a dense gradient; sparse.mm & compositions: CSR, masked
        lambda lib, s, m: s @ m,
        lambda lib, s, m: lib.addmm(lib.zeros(4, 2, dtype=s.dtype), s, m, beta=0.5),
        lambda lib, s, m: lib.sparse.mm(s, m), lambda lib, s, m: lib.sparse.addmm(
            lib.ones(4, 2, dtype=s.dtype), s, m, alpha=2.0), lambda lib, s, m: s.to_dense() * 3,
        lambda lib, s, m: (s * 2).to_dense(), lambda lib, s, m: s.neg().to_dense(),
        lambda lib, s, m: (s + s).to_dense(), lambda lib, s, m: s.t().to_dense().t() @ m]
    for i, fn in enumerate(cases):
        e, t = grads(ember, fn), grads(torch, fn)
        assert repr(e.layout) == repr(t.layout), f"case {i}: {e.layout} vs {t.layout}"
        if t.layout == torch.strided:
            assert_close(e, t, what=f"case {i}")
        else:
            assert_compressed(e, t, f"case {i}")


@pytest.mark.parametrize("lay", ["coo", "csr", "csc"])
def test_sparse_times_sparse_matches_torch(lay):
    b = [[0., 1], [2, 0], [0, -1.5], [1, 1]]
    # (torch.sparse.mm of two CSC tensors gives a broken CSC tensor: nnz 0, ccol_indices
    # ending in 4; ember gives the CSR product as @ does)
    for fn in (lambda lib, x, y: x @ y, lambda lib, x, y: lib.mm(x, y)) + (
            (lambda lib, x, y: lib.sparse.mm(x, y),) if lay != "csc" else ()):
        e, t = both(lambda lib: fn(lib, to(lib, D, lay), to(lib, b, lay)))
        assert repr(e.layout) == repr(t.layout)
        assert_close(e.to_dense(), t.to_dense())
        if lay == "coo":     # (torch's CSR product leaves a row's columns unsorted)
            assert e.is_coalesced() and t.is_coalesced()
            assert_close(e._indices(), t._indices())
    # a sum that cancels stays stored, as torch's
    e, t = both(lambda lib: to(lib, [[1., 1], [0, 0]], lay) @ to(lib, [[1., 0], [-1, 0]], lay))
    assert e._nnz() == t._nnz() == 1
    same(lambda lib: to(lib, D, "csr") @ to(lib, b, "coo") if lay == "coo" else
         to(lib, D, "coo") @ to(lib, b, lay), "computation on CPU is not implemented for")


def test_gradient_of_dense_operand_through_transposed_product():
    def run(lib):
        m = lib.tensor(M[:, :2].T.copy(), requires_grad=True)
        (m @ to(lib, D, "csr")).pow(2).sum().backward()
        return m.grad
    assert_close(*both(run))


def test_gradcheck_of_csr_products():
    v = ember.tensor(VAL, dtype=ember.float64, requires_grad=True)
    m = ember.tensor(M[:3], requires_grad=True)
    ci, pi = ember.tensor(CI), ember.tensor(PI)
    assert ember.autograd.gradcheck(
        lambda v, m: ember.sparse_csr_tensor(ci, pi, v, (3, 3)) @ m, (v, m))
    assert ember.autograd.gradcheck(
        lambda v, m: ember.sparse.mm(ember.sparse_csr_tensor(ci, pi, v, (3, 3)), m), (v, m))
    assert ember.autograd.gradcheck(                # (torch has no gradient for this one)
        lambda v: (ember.sparse_csr_tensor(ci, pi, v, (3, 3)) @ ember.sparse_csr_tensor(
            ci, pi, v * 2, (3, 3))).to_dense(), (v,))
    w = ember.tensor(rng.standard_normal((2, 2, 2)), requires_grad=True)
    assert ember.autograd.gradcheck(lambda w: ember.sparse_bsr_tensor(
        ember.tensor([0, 1, 2]), ember.tensor([1, 0]), w, (4, 4)).to_sparse_bsc((2, 2)).to_dense(),
        (w,))


@pytest.mark.parametrize("lay", LAYOUTS)
def test_pattern_ops_match_torch(lay):
    ops = [lambda s: -s, lambda s: s.abs(), lambda s: s * 2, lambda s: s.sin(),
           lambda s: s.clone(), lambda s: s.to(torch.float32 if isinstance(s, torch.Tensor)
                                                else ember.float32), lambda s: s + s,
           lambda s: s.t(), lambda s: s.transpose(0, 1), lambda s: s.detach()]
    for i, fn in enumerate(ops):
        e, t = both(lambda lib: fn(to(lib, D, lay)))
        assert_compressed(e, t, f"op {i}")
    e, t = both(lambda lib: to(lib, D, lay).sum())
    assert_close(e, t)
    e = to(ember, D, lay) + ember.tensor(D, dtype=ember.float64)   # (torch: BSR + dense asserts)
    assert_close(e, torch.tensor(D, dtype=torch.float64) * 2)
    # (torch has no CPU kernel dividing a compressed tensor, nor multiplying two but CSR ones:
    # the values are checked instead)
    dense = torch.tensor(D, dtype=torch.float64)
    assert_close((to(ember, D, lay) / 4).to_dense(), dense / 4)
    assert_close((to(ember, D, lay) * to(ember, D, lay)).to_dense(), dense * dense)
    with pytest.raises(NotImplementedError, match="Could not run 'aten::exp' with arguments "
                                                  "from the 'SparseCsrCPU' backend"):
        to(ember, D, lay).exp()


# ---- torch.sparse functions --------------------------------------------------------------------

def test_sampled_addmm_matches_torch():
    def run(lib):
        a = lib.tensor(M, requires_grad=True)
        b = lib.tensor(M.T.copy(), requires_grad=True)
        s = _leaf(lib)
        out = lib.sparse.sampled_addmm(s, a, b, beta=0.5, alpha=2.0)
        out.to_dense().pow(2).sum().backward()
        return out, a.grad, b.grad, s.grad
    e, t = both(run)
    assert_compressed(e[0], t[0])
    assert_close(e[1], t[1])
    assert_close(e[2], t[2])
    assert_compressed(e[3], t[3])
    same(lambda lib: lib.sparse.sampled_addmm(lib.tensor(D).to_sparse(), lib.tensor(M),
                                              lib.tensor(M.T.copy())),
         "Could not run 'aten::sparse_sampled_addmm'")


@pytest.mark.parametrize("layout", [None, "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr"])
def test_spdiags_matches_torch(layout):
    def run(lib, offsets=(0, -1, 2), shape=(3, 4)):
        kw = {"layout": getattr(lib, layout)} if layout else {}
        return lib.sparse.spdiags(lib.arange(1., 13).reshape(3, 4), lib.tensor(offsets), shape,
                                  **kw)
    if layout == "sparse_bsr":
        return same(run, "Only output layouts")
    e, t = both(run)
    if t.layout == torch.sparse_coo:
        assert_close(e._indices(), t._indices())
        assert_close(e._values(), t._values())
    else:
        assert_compressed(e, t)
    e, t = both(lambda lib: run(lib, (1, -2, 0), (4, 6)).to_dense())
    assert_close(e, t)
    same(lambda lib: run(lib, (0, 0, 1)), "Offset tensor contains duplicate values")
    same(lambda lib: run(lib, (0, 1)), r"Number of diagonals \(3\) does not match")


def test_spsolve_solves_the_dense_system():
    a = rng.standard_normal((4, 4)) + 4 * np.eye(4)
    a[0, 3] = a[3, 1] = 0
    b = rng.standard_normal(4)
    x = ember.sparse.spsolve(ember.tensor(a).to_sparse_csr(), ember.tensor(b))
    assert_close(x, torch.linalg.solve(torch.tensor(a), torch.tensor(b)))
    with pytest.raises(RuntimeError, match="left=True"):
        ember.sparse.spsolve(ember.tensor(a).to_sparse_csr(), ember.tensor(b), left=False)


def test_as_sparse_gradcheck_matches_torch():
    for lib in (ember, torch):
        gradcheck = lib.sparse.as_sparse_gradcheck(lib.autograd.gradcheck)
        x = lib.tensor([[0, 1], [2, 3]], dtype=lib.float64).to_sparse_coo().requires_grad_(True)
        assert gradcheck(lambda x: x.to_sparse_csr(), x)
        c = lib.tensor([[0, 1], [2, 3]], dtype=lib.float64).to_sparse_csr().requires_grad_(True)
        assert gradcheck(lambda c: lib.sparse.mm(c, lib.ones(2, 3, dtype=lib.float64)), c)


# ---- the legacy COO products and resizes --------------------------------------------------------

def _coo(lib, rows=3):
    return lib.tensor([[1., 0, 2], [0, 0, 3], [0, 0, 0]][:rows]).to_sparse()


@pytest.mark.parametrize("name", ["hspmm", "hsmm", "smm", "spmm", "dsmm"])
def test_legacy_products_match_torch(name):
    e, t = both(lambda lib: getattr(lib, name)(_coo(lib), lib.arange(6.).reshape(3, 2)))
    if t.layout == torch.strided:
        return assert_close(e, t)
    assert e.is_coalesced() == t.is_coalesced() and e.sparse_dim() == t.sparse_dim()
    assert_close(e._indices(), t._indices())
    assert_close(e._values(), t._values())


def test_sspaddmm_matches_torch():
    for fn in (lambda lib, i, s, m: lib.sspaddmm(i, s, m, beta=2, alpha=3),
               lambda lib, i, s, m: lib.saddmm(i, s, m), lambda lib, i, s, m: i.sspaddmm(s, m),
               lambda lib, i, s, m: s.smm(m)):
        e, t = both(lambda lib: fn(lib, lib.tensor([[0., 1], [0, 0], [7, 0]]).to_sparse(),
                                   _coo(lib), lib.arange(6.).reshape(3, 2)))
        assert e.is_coalesced() == t.is_coalesced()
        assert_close(e._indices(), t._indices())
        assert_close(e._values(), t._values())
    same(lambda lib: lib.sspaddmm(lib.zeros(2, 2).to_sparse(), lib.ones(2, 2), lib.ones(2, 2)),
         "sspaddmm: expected 'mat1' to have sparse layout, got 'mat1' with layout Strided")
    same(lambda lib: lib.sspaddmm(lib.zeros(3, 2).to_sparse(), lib.ones(2, 2).to_sparse(),
                                  lib.ones(2, 2)), "sspaddmm: Argument #1: Expected dim 0 size 2")
    same(lambda lib: lib.smm(lib.ones(2, 2), lib.ones(2, 2)), "can only be called on sparse")
    same(lambda lib: lib.hspmm(lib.tensor(D).to_sparse_csr(), lib.ones(4, 2)),
         "Could not run 'aten::hspmm' with arguments from the 'SparseCsrCPU' backend")


@pytest.mark.parametrize("args", [((3, 4), 1, 1), ((3, 2), 1, 1), ((3, 3, 1), 2, 1),
                                  ((3,), 1, 1), ((4, 5), 1, 1)])
def test_sparse_resize_matches_torch(args):
    def run(lib):
        t = lib.sparse_coo_tensor([[0, 1]], lib.ones(2, 3), (2, 3)).clone()
        r = t.sparse_resize_(*args)
        assert r is t
        return list(r.shape), r._indices()
    same(run, re.escape(str(_torch_error(run) or "")[:40]) or None)
    # NOTE: torch reinterprets the old values' memory when a dense dim grows; ember keeps each
    # value in place and pads with zeros
    if args[2] and _torch_error(run) is None:
        r = ember.sparse_coo_tensor([[0, 1]], ember.ones(2, 3), (2, 3)).sparse_resize_(*args)
        assert r._values()[:, :3].eq(1).all() and r._values()[:, 3:].eq(0).all()


def _torch_error(fn):
    try:
        fn(torch)
    except RuntimeError as e:
        return e


def test_resize_and_clear_and_resize_as_sparse_match_torch():
    for fn in (lambda lib: lib.sparse_coo_tensor([[0, 1]], lib.ones(2, 3), (2, 3))
               .sparse_resize_and_clear_((5, 5), 2, 0),
               lambda lib: lib.sparse_coo_tensor(lib.zeros(2, 0, dtype=lib.int64), lib.zeros(0),
                                                 (2, 3)).sparse_resize_((1, 1, 4), 1, 2),
               lambda lib: lib.resize_as_sparse_(lib.eye(2).to_sparse(),
                                                 lib.zeros(3, 3).to_sparse()),
               lambda lib: lib.eye(2).to_sparse().resize_as_sparse_(lib.zeros(3, 3).to_sparse())):
        e, t = both(fn)
        assert tuple(e.shape) == tuple(t.shape) and e._nnz() == t._nnz()
        assert (e.sparse_dim(), e.dense_dim()) == (t.sparse_dim(), t.dense_dim())
        assert_close(e.to_dense(), t.to_dense())
    same(lambda lib: lib.eye(2).to_sparse().resize_as_sparse_(lib.zeros(1, 1).to_sparse()),
         "shrinking the size of sparse dimensions")
    same(lambda lib: lib.eye(2).sparse_resize_((3, 3), 2, 0),
         "Could not run 'aten::sparse_resize_' with arguments from the 'CPU' backend")


# ---- printing, pickling, save/load ----------------------------------------------------------

@pytest.mark.parametrize("lay", LAYOUTS)
def test_repr_matches_torch(lay):
    e, t = both(lambda lib: to(lib, lib.tensor(D), lay))
    assert repr(e) == repr(t)
    e, t = both(lambda lib: to(lib, lib.tensor(D, dtype=lib.float64), lay).requires_grad_())
    assert repr(e) == repr(t)
    e, t = both(lambda lib: to(lib, lib.tensor(D), lay) * 2)
    assert repr(e).split("grad_fn")[0] == repr(t).split("grad_fn")[0]
    for dt in ("int64", "bool", "complex64", "complex128", "float16"):   # which dtypes are shown
        e, t = both(lambda lib: to(lib, lib.tensor(D).to(getattr(lib, dt)), lay))
        assert repr(e) == repr(t)
    e, t = both(lambda lib: lib.tensor([[1, 0], [0, 2]]).to_sparse())
    assert repr(e) == repr(t)


@pytest.mark.parametrize("lay", LAYOUTS)
def test_save_load_round_trip_both_ways(lay, tmp_path):
    e, t = both(lambda lib: to(lib, D, lay))
    ember.save({"x": e, "l": e.layout}, tmp_path / "e.pt")
    back = torch.load(tmp_path / "e.pt")
    assert back["l"] is t.layout
    assert_compressed(e, back["x"])
    torch.save({"x": t, "l": t.layout}, tmp_path / "t.pt")
    back = ember.load(tmp_path / "t.pt")
    assert back["l"] is e.layout
    assert_compressed(back["x"], t)
    for x in (copy.deepcopy(e), pickle.loads(pickle.dumps(e))):
        assert_compressed(x, t)


def test_load_checks_the_indices():
    bad = torch.sparse_csr_tensor(torch.tensor([0, 2, 3, 5]), torch.tensor([0, 2, 2, 0, 7]),
                                  torch.ones(5), (3, 3))
    buf = io.BytesIO()
    torch.save(bad, buf)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="0 <= col_indices < ncols"):
        ember.load(buf)


def test_gradient_accumulates_into_a_compressed_leaf():
    def run(lib):
        s = _leaf(lib)
        for k in (1., 2.):
            (s * k).to_dense().sum().backward()
        return s.grad
    e, t = both(run)
    assert_compressed(e, t)
