"""The joining functions that are compositions of views rather than OpDefs (broadcast_tensors,
broadcast_shapes, atleast_*d, meshgrid) and the index builders tril/triu_indices, against
torch: values, shapes, dtypes, gradients and errors."""
import pytest

from oracle import torch  # noqa: F401  (skips this file where torch is not installed)
from test_autograd import same


def _v(L, n, start=0.0):
    return L.arange(start, start + n, dtype=L.float64)


CASES = [
    ("broadcast_tensors", lambda L: L.broadcast_tensors(_v(L, 2).reshape(2, 1), _v(L, 3),
                                                        L.tensor(5.0, dtype=L.float64))),
    ("broadcast_tensors-one", lambda L: L.broadcast_tensors(_v(L, 3))),
    ("broadcast_shapes", lambda L: L.broadcast_shapes((2, 1), (3,), 1, ())),
    ("broadcast_shapes-zero", lambda L: L.broadcast_shapes((0, 1), (1, 4))),
    ("atleast_1d", lambda L: L.atleast_1d(L.tensor(2.0, dtype=L.float64))),
    ("atleast_1d-many", lambda L: L.atleast_1d(L.tensor(2.0, dtype=L.float64), _v(L, 3))),
    ("atleast_2d", lambda L: L.atleast_2d([L.tensor(2.0, dtype=L.float64), _v(L, 3),
                                           _v(L, 4).reshape(2, 2)])),
    ("atleast_3d", lambda L: L.atleast_3d(L.tensor(2.0, dtype=L.float64), _v(L, 3),
                                          _v(L, 4).reshape(2, 2), _v(L, 16).reshape(2, 2, 2, 2))),
    ("meshgrid-ij", lambda L: L.meshgrid(_v(L, 2), _v(L, 3), _v(L, 4), indexing="ij")),
    ("meshgrid-xy", lambda L: L.meshgrid(_v(L, 2), _v(L, 3), _v(L, 4), indexing="xy")),
    ("meshgrid-list-0d", lambda L: L.meshgrid([L.tensor(1.0, dtype=L.float64), _v(L, 3)],
                                              indexing="xy")),
    ("meshgrid-one", lambda L: L.meshgrid(_v(L, 3), indexing="xy")),
]


@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(name, fn):
    same(fn)


@pytest.mark.parametrize("name,fn", [c for c in CASES if "shapes" not in c[0]],
                         ids=[c[0] for c in CASES if "shapes" not in c[0]])
def test_gradients_match_torch(name, fn):
    def f(L):
        real = L.arange

        def arange(*a, **k):        # every input tensor becomes a leaf that requires grad
            t = real(*a, **k)
            leaves.append(t.requires_grad_())
            return t
        leaves = []
        L.arange = arange
        try:
            outs = fn(L)
        finally:
            L.arange = real
        total = 0
        for o in outs if isinstance(outs, tuple) else (outs,):
            total = total + (o * real(o.numel(), dtype=L.float64).reshape(o.shape)).sum()
        return L.autograd.grad(total, leaves)
    same(f)


@pytest.mark.parametrize("fn,match", [
    (lambda L: L.broadcast_tensors(L.ones(3, 4), L.ones(5)),
     r"The size of tensor a \(4\) must match the size of tensor b \(5\) at non-singleton "
     "dimension 1"),
    (lambda L: L.broadcast_shapes((2, 3), (4,)), "Attempting to broadcast a dimension of "
     r"length 4 at -1! Mismatching argument at index 1 had \(4,\); but expected shape should "
     r"be broadcastable to \[2, 3\]"),
    (lambda L: L.meshgrid(L.ones(2), L.ones(3, 2), indexing="ij"),
     "Expected 0D or 1D tensor in the tensor list"),
    (lambda L: L.meshgrid(L.ones(2), L.ones(3), indexing="foo"),
     'indexing must be one of "xy" or "ij", but received: foo'),
    (lambda L: L.meshgrid(L.ones(2), L.ones(3, dtype=L.int64), indexing="ij"),
     "meshgrid expects all tensors to have the same dtype"),
    (lambda L: L.tril_indices(3, 3, dtype=L.float32), "\"tril_indices\" not implemented for "
     "'Float'"),
    (lambda L: L.triu_indices(-1, 3), "row must be non-negative, got-1"),
    (lambda L: L.tril_indices(3, -2), "col must be non-negative, got-2"),
], ids=["broadcast_tensors", "broadcast_shapes", "meshgrid-2d", "meshgrid-indexing",
        "meshgrid-dtype", "tril-dtype", "triu-row", "tril-col"])
def test_errors_match_torch(fn, match):
    same(fn, match)


def test_meshgrid_without_indexing_warns_like_torch():
    for L in (torch, __import__("ember")):
        with pytest.warns(UserWarning, match="it will be required to pass the indexing"):
            L.meshgrid(L.ones(2), L.ones(3))


@pytest.mark.parametrize("args", [(3, 3), (4, 3, 1), (3, 5, -1), (3, 5, 10), (3, 5, -10),
                                  (0, 3), (1, 1), (5, 2, 0)])
@pytest.mark.parametrize("name", ["tril_indices", "triu_indices"])
def test_tri_indices_match_torch(name, args):
    same(lambda L: getattr(L, name)(*args))
    same(lambda L: getattr(L, name)(*args, dtype=L.int32))
