"""Sparse COO tensors against torch: construction, coalescing, conversion, arithmetic, products
and sums with their gradients (to the values, to the sparse tensor, to the dense operand),
hybrid tensors, the meta device, printing, saving, and torch's errors."""
import numpy as np
import pytest

import ember
from oracle import assert_close, same, torch

IDX = [[0, 1, 1, 0, 2], [2, 0, 2, 2, 1]]          # (0, 2) appears twice: uncoalesced
VAL = [3.0, 4.0, 5.0, 1.0, -2.0]
SIZE = (3, 4)
IDX2 = [[1, 0, 2, 2], [1, 2, 3, 1]]
VAL2 = [7.0, 8.0, 2.0, -1.0]
rng = np.random.default_rng(0)
D = rng.standard_normal((4, 2))
pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")


def _sp(lib, idx=IDX, val=VAL, size=SIZE, dtype="float64", **kw):
    return lib.sparse_coo_tensor(lib.tensor(idx), lib.tensor(val, dtype=getattr(lib, dtype)),
                                 size, **kw)


def assert_sparse(e, t, what="", coalesced=True):
    """Same layout, shape, dtype, dense value; same indices and values once coalesced."""
    assert e.is_sparse == t.is_sparse, f"{what}: layout {e.layout} vs {t.layout}"
    if not t.is_sparse:
        return assert_close(e, t, what=what)
    if coalesced:
        assert e.is_coalesced() == t.is_coalesced(), f"{what}: is_coalesced"
    assert (e.sparse_dim(), e.dense_dim()) == (t.sparse_dim(), t.dense_dim()), what
    ec, tc = e.detach().coalesce(), t.detach().coalesce()
    assert_close(ec._indices(), tc._indices(), what=f"{what} indices")
    assert_close(ec._values(), tc._values(), what=f"{what} values")
    assert_close(e.detach().to_dense(), t.detach().to_dense(), what=f"{what} dense")


def both(fn):
    return fn(ember), fn(torch)


# ---- construction and metadata ----------------------------------------------------------------

def test_construction_and_metadata():
    e, t = both(_sp)
    assert_sparse(e, t)
    assert e.layout is ember.sparse_coo and repr(e.layout) == repr(t.layout)
    assert ember.ones(2).layout is ember.strided and not ember.ones(2).is_sparse
    for name in ("sparse_dim", "dense_dim", "_nnz", "dim", "numel", "is_coalesced"):
        assert getattr(e, name)() == getattr(t, name)(), name
    assert tuple(e.shape) == tuple(t.shape) and e.dtype is ember.float64
    assert_close(e._indices(), t._indices())
    assert_close(e._values(), t._values())


def test_size_is_inferred_and_lists_are_accepted():
    e, t = both(lambda lib: lib.sparse_coo_tensor([[0, 3], [1, 0]], [1, 2]))
    assert tuple(e.shape) == tuple(t.shape) == (4, 2)
    assert e.dtype is ember.int64
    assert_sparse(e, t)
    e, t = both(lambda lib: lib.sparse_coo_tensor([[0, 2]], lib.ones(2, 3)))
    assert tuple(e.shape) == tuple(t.shape) and e.dense_dim() == 1


@pytest.mark.parametrize("kw", [dict(dtype="float32"), dict(is_coalesced=True)], ids=str)
def test_construction_options(kw):
    idx = [[0, 1, 2], [1, 0, 3]]
    e, t = both(lambda lib: lib.sparse_coo_tensor(
        lib.tensor(idx), lib.tensor([1.0, 2.0, 3.0]), SIZE,
        **{k: getattr(lib, v) if k == "dtype" else v for k, v in kw.items()}))
    assert_sparse(e, t)


def test_single_entry_is_coalesced():
    e, t = both(lambda lib: _sp(lib, [[1], [2]], [5.0]))
    assert e.is_coalesced() and t.is_coalesced()


@pytest.mark.parametrize("idx,val,size,match", [
    ([[0, 1]], [1.0], (2,), "indices and values must have same nnz"),
    ([[0, 1], [1, 0]], [1.0, 2.0], (2, 2, 1), r"'len\(size\) == sparse_dim \+ dense_dim'"),
    ([[0, 1], [1, 0]], [1.0, 2.0], (1, 2), "size is inconsistent with indices: for dim 0"),
    ([[0, -1], [1, 0]], [1.0, 2.0], (2, 2), "found negative index -1 for dim 0"),
    ([0, 1], [1.0, 2.0], (2,), "indices must be sparse_dim x nnz"),
])
def test_construction_errors(idx, val, size, match):
    same(lambda lib: lib.sparse_coo_tensor(lib.tensor(idx), lib.tensor(val), size,
                                           check_invariants=True), match)


def test_hybrid_values_shape_error():
    same(lambda lib: lib.sparse_coo_tensor(lib.tensor(IDX), lib.ones(5, 2), (3, 4, 3)),
         "values has incorrect size, expected")


# ---- coalesce, indices, values ----------------------------------------------------------------

def test_coalesce_sums_repeats_and_sorts():
    e, t = both(lambda lib: _sp(lib).coalesce())
    assert e.is_coalesced() and e._nnz() == t._nnz() == 4
    assert_close(e.indices(), t.indices())
    assert_close(e.values(), t.values())
    c = e.coalesce()
    assert c.coalesce() is c


def test_uncoalesced_indices_and_values_raise():
    same(lambda lib: _sp(lib).indices(), "Cannot get indices on an uncoalesced tensor, please "
         r"call \.coalesce\(\) first")
    same(lambda lib: _sp(lib).values(), "Cannot get values on an uncoalesced tensor")


@pytest.mark.parametrize("name", ["coalesce", "indices", "is_coalesced", "values"])
def test_dense_tensor_sparse_methods_raise(name):
    same(lambda lib: getattr(lib.ones(2, 3), name)(), "layout but got Strided")


@pytest.mark.parametrize("name", ["_indices", "_values", "_nnz"])
def test_dense_tensor_private_parts_raise(name):
    same(lambda lib: getattr(lib.ones(2, 3), name)(), f"aten::{name}")


def test_dense_tensor_dims():
    assert ember.ones(2, 3).sparse_dim() == 0 and ember.ones(2, 3).dense_dim() == 2
    x = ember.ones(2, 3)
    assert x.to_dense() is x


def test_hybrid_coalesce_and_to_dense():
    vals = rng.standard_normal((5, 2))
    e, t = both(lambda lib: lib.sparse_coo_tensor(lib.tensor(IDX), lib.tensor(vals), (3, 4, 2)))
    assert_sparse(e, t)
    assert_sparse(e.coalesce(), t.coalesce())


# ---- conversion -------------------------------------------------------------------------------

def test_to_dense_and_to_sparse():
    e, t = both(lambda lib: _sp(lib).to_dense())
    assert_close(e, t)
    x = np.array([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    e, t = both(lambda lib: lib.tensor(x).to_sparse())
    assert_sparse(e, t)
    e, t = both(lambda lib: lib.tensor(x).to_sparse(1))
    assert_sparse(e, t)
    s = ember.tensor(x).to_sparse()
    assert s.to_sparse() is s


def test_to_sparse_of_a_sparse_keeps_it():
    e, t = both(lambda lib: _sp(lib).to_sparse())
    assert_sparse(e, t)


def test_to_dense_gradient_is_sparse_and_masked():
    res = []
    for lib in (ember, torch):
        s = _sp(lib).requires_grad_()
        (s.to_dense() * lib.tensor(np.arange(12.0).reshape(3, 4))).sum().backward()
        res.append(s.grad)
    assert_sparse(*res, coalesced=False)


def test_to_sparse_gradient_reaches_the_dense_tensor():
    res = []
    x = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, 0.0]])
    for lib in (ember, torch):
        d = lib.tensor(x, requires_grad=True)
        (d.to_sparse().to_dense() * lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).sum() \
            .backward()
        res.append(d.grad)
    assert_close(*res)


def test_values_gradient_through_construction():
    res = []
    for lib in (ember, torch):
        v = lib.tensor(VAL, dtype=lib.float64, requires_grad=True)
        s = lib.sparse_coo_tensor(lib.tensor(IDX), v, SIZE)
        assert s.requires_grad and not s.is_leaf
        (lib.sparse.mm(s, lib.tensor(D)) ** 2).sum().backward()
        res.append(v.grad)
    assert_close(*res)
    assert ember.sparse_coo_tensor(ember.tensor(IDX), ember.tensor(VAL, requires_grad=True),
                                   SIZE).grad_fn.name() == \
        "SparseCooTensorWithDimsAndTensorsBackward0"


def test_type_conversion_and_clone():
    for f in (lambda s: s.float(), lambda s: s.clone(), lambda s: s.detach(),
              lambda s: s.coalesce().clone()):
        assert_sparse(f(_sp(ember)), f(_sp(torch)))


# ---- arithmetic -------------------------------------------------------------------------------

BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b,
    "add_alpha": lambda a, b: a.add(b, alpha=2.5), "sub_alpha": lambda a, b: a.sub(b, alpha=0.5),
}


@pytest.mark.parametrize("coalesced", [False, True])
@pytest.mark.parametrize("name", list(BINARY))
def test_sparse_plus_sparse(name, coalesced):
    def run(lib):
        a, b = _sp(lib), _sp(lib, IDX2, VAL2)
        if coalesced:
            a, b = a.coalesce(), b.coalesce()
        return BINARY[name](a, b)
    assert_sparse(*both(run))


def test_sparse_plus_itself_scales_the_values():
    e, t = both(lambda lib: (lambda s: s + s)(_sp(lib)))
    assert_sparse(e, t)
    assert e._nnz() == t._nnz()


def test_dense_plus_sparse_is_dense():
    e, t = both(lambda lib: lib.tensor(np.ones(SIZE)) + _sp(lib))
    assert not e.is_sparse
    assert_close(e, t)
    e, t = both(lambda lib: lib.add(lib.tensor(np.ones(SIZE)), _sp(lib), alpha=3))
    assert_close(e, t)


@pytest.mark.parametrize("fn", [lambda s: s * 2.5, lambda s: 3 * s, lambda s: -s,
                                lambda s: s / 4, lambda s: s.coalesce() * 2,
                                lambda s: s.neg().coalesce()],
                         ids=["mul", "rmul", "neg", "div", "mul_coalesced", "neg_coalesce"])
def test_scalar_ops_keep_the_pattern(fn):
    assert_sparse(*both(lambda lib: fn(_sp(lib))))


def test_sparse_times_sparse_and_dense():
    e, t = both(lambda lib: _sp(lib) * _sp(lib, IDX2, VAL2))
    assert e.is_sparse and t.is_sparse
    assert_close(e.to_dense(), t.to_dense())
    e, t = both(lambda lib: _sp(lib) * lib.tensor(np.arange(12.0).reshape(SIZE)))
    assert e.is_sparse and t.is_sparse
    assert_close(e.to_dense(), t.to_dense())


def test_shape_mismatch_in_add_raises():
    same(lambda lib: _sp(lib) + _sp(lib, size=(3, 5)), "expected sizes of 'self' and 'other' "
         r"to match, but \[3, 4\] != \[3, 5\]")


@pytest.mark.parametrize("name", ["cumsum", "exp_", "sort"])
def test_op_without_sparse_kernel_raises_torchs_error(name):
    def run(lib):
        s = _sp(lib)
        return getattr(s, name)(0) if name != "exp_" else s.exp_()
    with pytest.raises(NotImplementedError, match=f"Could not run 'aten::"):
        run(ember)


def test_unsupported_dense_op_names_op_and_backend():
    with pytest.raises(NotImplementedError,
                       match="Could not run 'aten::cumsum' with arguments from the 'SparseCPU'"):
        ember.cumsum(_sp(ember), 0)
    with pytest.raises(NotImplementedError, match="'SparseMeta'"):
        ember.cumsum(_sp(ember).to("meta"), 0)


@pytest.mark.parametrize("name", ["abs", "sqrt", "sin", "tanh", "expm1", "floor", "sign",
                                  "relu", "square", "erf"])
def test_zero_preserving_functions_stay_sparse(name):
    def run(lib):
        s = _sp(lib).abs() if name == "sqrt" else _sp(lib)
        return getattr(s, name)()
    assert_sparse(*both(run), coalesced=False)


def test_pow_norm_and_in_place_ops():
    assert_sparse(*both(lambda lib: _sp(lib) ** 2), coalesced=False)
    for p in (2, 1, float("inf")):
        assert_close(*both(lambda lib: _sp(lib).norm(p)))

    def in_place(lib):
        s = _sp(lib)
        s.mul_(lib.tensor(0.5, dtype=lib.float64))
        s.add_(_sp(lib, IDX2, VAL2))
        return s
    assert_sparse(*both(in_place))

    def zeroed(lib):
        s = _sp(lib)
        s.zero_()
        return s
    e, t = both(zeroed)
    assert_sparse(e, t)
    assert e._nnz() == t._nnz() == 0


def test_pow_with_non_positive_exponent_raises():
    with pytest.raises(NotImplementedError, match="positive number"):
        _sp(ember) ** 0


# ---- transpose ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [lambda s: s.t(), lambda s: s.transpose(0, 1),
                                lambda s: s.coalesce().t(), lambda s: s.mT],
                         ids=["t", "transpose", "t_coalesced", "mT"])
def test_transpose(fn):
    assert_sparse(*both(lambda lib: fn(_sp(lib))))


def test_transpose_of_dense_dims_raises():
    def h(lib):
        return lib.sparse_coo_tensor(lib.tensor(IDX), lib.ones(5, 2), (3, 4, 2))
    same(lambda lib: h(lib).transpose(1, 2), "transposed dimensions must be sparse")
    same(lambda lib: h(lib).t())


# ---- products ---------------------------------------------------------------------------------

def _ones(lib):
    return lib.ones(3, 2, dtype=lib.float64)


def _grads(fn, coalesce=False):
    """fn(lib, s, d) -> output; returns (out, s.grad, d.grad) for both libraries."""
    res = []
    for lib in (ember, torch):
        s = _sp(lib)
        s = (s.coalesce() if coalesce else s).detach().requires_grad_()
        d = lib.tensor(D, requires_grad=True)
        out = fn(lib, s, d)
        w = lib.tensor(np.linspace(-1, 1, out.numel()).reshape(tuple(out.shape)))
        (out * w).sum().backward()
        res.append((out, s.grad, d.grad))
    return res


@pytest.mark.parametrize("coalesce", [False, True])
@pytest.mark.parametrize("name,fn", [
    ("sparse.mm", lambda lib, s, d: lib.sparse.mm(s, d)),
    ("mm", lambda lib, s, d: lib.mm(s, d)),
    ("matmul", lambda lib, s, d: s @ d),
    ("sparse.addmm", lambda lib, s, d: lib.sparse.addmm(_ones(lib), s, d, beta=0.5, alpha=2.0)),
    ("addmm", lambda lib, s, d: lib.addmm(_ones(lib), s, d, beta=0.5, alpha=2.0)),
    ("dense@sparse.t", lambda lib, s, d: d.t() @ s.t()),
])
def test_products_and_gradients(name, fn, coalesce):
    (eo, es, ed), (to, ts, td) = _grads(fn, coalesce)
    assert_close(eo, to, what=name)
    assert_sparse(es, ts, f"{name} sparse grad", coalesced=False)
    assert_close(ed, td, what=f"{name} dense grad")


def test_mm_shape_error():
    same(lambda lib: lib.mm(_sp(lib), lib.ones(3, 2, dtype=lib.float64)))


# ---- sums and softmax -------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1), -1])
def test_sparse_sum_and_gradient(dim):
    res = []
    for lib in (ember, torch):
        s = _sp(lib).detach().requires_grad_()
        out = lib.sparse.sum(s) if dim is None else lib.sparse.sum(s, dim)
        (out.to_dense() if out.is_sparse else out).pow(2).sum().backward()
        res.append((out, s.grad))
    assert_sparse(res[0][0], res[1][0], "sum")
    assert_sparse(res[0][1], res[1][1], "sum grad", coalesced=False)


def test_hybrid_sum_over_dense_dim():
    vals = rng.standard_normal((5, 2))
    e, t = both(lambda lib: lib.sparse.sum(
        lib.sparse_coo_tensor(lib.tensor(IDX), lib.tensor(vals), (3, 4, 2)), (0, 2)))
    assert_sparse(e, t)


def test_tensor_sum_of_sparse():
    e, t = both(lambda lib: _sp(lib).sum())
    assert_close(e, t)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_sparse_softmax(dim, log):
    res = []
    for lib in (ember, torch):
        s = _sp(lib).detach().requires_grad_()
        f = lib.sparse.log_softmax if log else lib.sparse.softmax
        out = f(s, dim)
        (out.to_dense() * lib.tensor(np.arange(12.0).reshape(SIZE))).sum().backward()
        res.append((out, s.grad))
    assert_close(res[0][0].to_dense(), res[1][0].to_dense(), what="softmax")
    assert_sparse(res[0][1], res[1][1], "softmax grad", coalesced=False)


# ---- autograd details -------------------------------------------------------------------------

def test_leaf_gradient_accumulates():
    res = []
    for lib in (ember, torch):
        s = _sp(lib).detach().requires_grad_()
        d = lib.tensor(D)
        lib.sparse.mm(s, d).sum().backward()
        lib.sparse.mm(s, d * 2).sum().backward()
        res.append(s.grad)
    assert_sparse(*res, coalesced=False)


def test_gradcheck_through_values():
    idx = ember.tensor(IDX)
    d = ember.tensor(D, requires_grad=True)
    v = ember.tensor(VAL, dtype=ember.float64, requires_grad=True)

    def f(v, d):
        s = ember.sparse_coo_tensor(idx, v, SIZE)
        other = ember.sparse_coo_tensor(ember.tensor(IDX2), v[:4] * 3, SIZE)
        return (ember.sparse.mm(s, d) + ember.sparse.sum(s * 2.0, 1).to_dense().unsqueeze(1),
                (s.t() @ ember.ones(3, 2, dtype=ember.float64)).sin(),
                ember.mm(s.coalesce().sin(), d), (s + other - s.neg()).to_dense(),
                (s * other).to_dense(), ember.sparse.softmax(s, 1).to_dense())
    assert ember.autograd.gradcheck(f, (v, d))


# ---- meta device, printing, saving -------------------------------------------------------------

def test_meta_device():
    s = _sp(ember).to("meta")
    assert s.is_sparse and s.device.type == "meta" and tuple(s.shape) == SIZE
    assert s.to_dense().device.type == "meta" and tuple(s.to_dense().shape) == SIZE
    out = ember.sparse.mm(s, ember.ones(4, 2, dtype=ember.float64, device="meta"))
    assert tuple(out.shape) == (3, 2) and out.device.type == "meta"
    assert tuple(s.t().shape) == (4, 3)


@pytest.mark.parametrize("make", [
    lambda lib: _sp(lib), lambda lib: _sp(lib).coalesce(), lambda lib: _sp(lib, dtype="float32"),
    lambda lib: lib.sparse_coo_tensor([[0, 2]], lib.ones(2, 2)),
    lambda lib: lib.sparse_coo_tensor(lib.zeros(2, 0, dtype=lib.int64), lib.zeros(0), (2, 2)),
    lambda lib: _sp(lib).requires_grad_(), lambda lib: -_sp(lib).requires_grad_(),
    lambda lib: lib.sparse_coo_tensor(lib.zeros(2, 0, dtype=lib.int64), lib.zeros(0),
                                      (2, 2)).to("meta"),
], ids=["uncoalesced", "coalesced", "float32", "hybrid", "empty", "leaf", "grad_fn", "meta"])
def test_repr_matches_torch(make):
    e, t = both(make)
    assert repr(e) == repr(t)


def test_save_load_round_trip(tmp_path):
    s = _sp(ember)
    ember.save({"s": s, "c": s.coalesce()}, tmp_path / "s.pt")
    back = ember.load(tmp_path / "s.pt")
    assert_sparse(back["s"], _sp(torch))
    assert_sparse(back["c"], _sp(torch).coalesce())
    loaded = torch.load(tmp_path / "s.pt")
    assert_sparse(back["s"], loaded["s"])
    torch.save({"s": _sp(torch)}, tmp_path / "t.pt")
    assert_sparse(ember.load(tmp_path / "t.pt")["s"], _sp(torch))


def test_pickle_and_deepcopy():
    import copy
    import pickle
    s = _sp(ember).requires_grad_()
    for back in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert back.requires_grad and not back.is_coalesced()
        assert_sparse(back, _sp(torch))
        assert back._values() is not s._values()
