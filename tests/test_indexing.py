"""``t[index]`` reads and ``t[index] = v`` writes against torch: integer arrays, boolean masks,
None/Ellipsis mixes and the layout rules for where advanced-indexed dimensions land; values,
shapes, dtypes, gradients and the errors for bad indices."""
import pytest

pytestmark = pytest.mark.filterwarnings("ignore:indexing with dtype torch.uint8")

from oracle import torch  # noqa: F401  (skips this file where torch is not installed)
from test_autograd import same


def _x(L):
    return L.arange(120.).reshape(4, 5, 6)


def _i(L, *v):
    return L.tensor(list(v))


# Each entry: (id, lambda L: index). The tensor x is 4 x 5 x 6.
INDICES = [
    ("int", lambda L: 2), ("neg-int", lambda L: -1), ("slice", lambda L: slice(1, 3)),
    ("step", lambda L: (slice(None), slice(None, None, 2))),
    ("ellipsis", lambda L: (Ellipsis, 1)), ("none", lambda L: None),
    ("none-int", lambda L: (None, 0)), ("int-none-step", lambda L: (0, None, slice(0, 5, 2))),
    ("ellipsis-none", lambda L: (Ellipsis, None)), ("none-ell-none", lambda L: (None, ..., None)),
    ("empty-tuple", lambda L: ()), ("empty-slice", lambda L: slice(3, 1)),
    ("tensor", lambda L: _i(L, 0, 2)), ("list", lambda L: [0, 2, 2]),
    ("neg-tensor", lambda L: _i(L, -1, -4)), ("2d-tensor", lambda L: L.tensor([[0, 1], [2, 3]])),
    ("two-arrays", lambda L: (_i(L, 0, 1), _i(L, 1, 2))),
    ("three-arrays", lambda L: (_i(L, 0, 1), _i(L, 1, 2), _i(L, 5, 0))),
    ("slice-array", lambda L: (slice(None), _i(L, 0, 2))),
    ("array-slice-array", lambda L: (_i(L, 0, 1), slice(None), _i(L, 2, 3))),
    ("slice-array-array", lambda L: (slice(None), _i(L, 0, 1), _i(L, 2, 3))),
    ("ellipsis-array", lambda L: (..., _i(L, 0, 1))),
    ("array-ellipsis-array", lambda L: (_i(L, 0, 1), ..., _i(L, 2, 3))),
    ("none-array", lambda L: (None, _i(L, 0, 1))),
    ("array-none-array", lambda L: (_i(L, 0, 1), None, _i(L, 2, 3))),
    ("broadcast-arrays", lambda L: (L.tensor([[0], [1]]), _i(L, 0, 1, 2))),
    ("int-slice-array", lambda L: (0, slice(None), _i(L, 1, 2))),
    ("array-slice-int", lambda L: (_i(L, 0, 1), slice(None), 0)),
    ("int-array", lambda L: (1, _i(L, 1, 2))),
    ("0d-tensor", lambda L: L.tensor(1)), ("0d-tensor-slice", lambda L: (L.tensor(1), slice(2))),
    ("0d-tensors", lambda L: (slice(None), L.tensor(1), L.tensor(2))),
    ("int32", lambda L: L.tensor([0, 3], dtype=L.int32)),
    ("mask-all", lambda L: _x(L) > 60),
    ("mask-dim0", lambda L: L.tensor([True, False, True, False])),
    ("mask-list", lambda L: [True, False, True, True]),
    ("mask-dim1", lambda L: (slice(None), L.tensor([True, False, True, False, True]))),
    ("mask-2d", lambda L: _x(L)[..., 0] > 40),
    ("mask-2d-later", lambda L: (0, _x(L)[0] > 20)),
    ("mask-and-array", lambda L: (L.tensor([True, False, True, False]), _i(L, 0, 4))),
    ("mask-none", lambda L: (None, L.tensor([False, True, True, False]))),
    ("mask-empty", lambda L: L.zeros(4, dtype=L.bool)),
    ("true", lambda L: True), ("false", lambda L: False),
    ("true-slice", lambda L: (True, slice(1, 3))),
    ("ellipsis-mask", lambda L: (..., L.tensor([True, False, False, True, True, False]))),
    ("empty-array", lambda L: L.tensor([], dtype=L.int64)),
    ("uint8-mask", lambda L: L.tensor([1, 0, 1, 1], dtype=L.uint8)),
    ("nested-list", lambda L: [[0, 1], [1, 2]]), ("list-of-tensors", lambda L: [_i(L, 0, 1),
                                                                            _i(L, 1, 2)]),
    ("list-with-slice", lambda L: [0, slice(1, 3)]), ("list-with-none", lambda L: [None, 1]),
    ("numpy-int", lambda L: __import__("numpy").int64(2)),
]

BAD_INDICES = [
    ("out-of-range-int", lambda L: 4, IndexError, "index 4 is out of bounds for dimension 0 "
     "with size 4"),
    ("out-of-range-array", lambda L: (slice(None), _i(L, 0, 5)), IndexError,
     "index 5 is out of bounds for dimension"),
    ("too-many", lambda L: (0, 0, 0, 0), IndexError, "too many indices for tensor of dimension 3"),
    ("float-tensor", lambda L: L.tensor([0.0, 1.0]), IndexError,
     "tensors used as indices must be long, int, byte or bool tensors"),
    ("mask-shape", lambda L: L.ones(3, dtype=L.bool), IndexError,
     r"The shape of the mask \[3\] at index 0 does not match the shape of the indexed tensor "
     r"\[4, 5, 6\] at index 0"),
    ("negative-step", lambda L: slice(None, None, -1), ValueError,
     "step must be greater than zero"),
]


@pytest.mark.parametrize("name,index", INDICES, ids=[c[0] for c in INDICES])
def test_read_matches_torch(name, index):
    same(lambda L: _x(L)[index(L)])


@pytest.mark.parametrize("name,index", INDICES, ids=[c[0] for c in INDICES])
def test_read_gradient_matches_torch(name, index):
    def f(L):
        x = _x(L).double().requires_grad_()
        y = x[index(L)]
        w = L.arange(y.numel(), dtype=L.float64).reshape(y.shape)
        return L.autograd.grad((y * w).sum(), x)[0]
    same(f)


@pytest.mark.parametrize("name,index", INDICES, ids=[c[0] for c in INDICES])
def test_write_matches_torch(name, index):
    def scalar(L):
        x = _x(L)
        x[index(L)] = -1.0
        return x

    def tensor(L):
        x = _x(L)
        shape = x[index(L)].shape
        x[index(L)] = -L.arange(shape[-1] if len(shape) else 1, dtype=x.dtype) - 1
        return x
    same(scalar)
    same(tensor)


# NOTE: ``x[False] = v`` leaves ``v`` out of torch's graph (an unused-input error), while
# ember's gradient for ``v`` is zeros; only that case differs.
WRITE_GRAD = [c for c in INDICES if c[0] != "false"]


@pytest.mark.parametrize("name,index", WRITE_GRAD, ids=[c[0] for c in WRITE_GRAD])
def test_write_gradient_matches_torch(name, index):
    def f(L):
        x = _x(L).double().requires_grad_()
        shape = x[index(L)].shape
        v = L.ones(shape[-1:], dtype=L.float64, requires_grad=True)
        y = x * 2
        y[index(L)] = v * 3
        w = L.arange(y.numel(), dtype=L.float64).reshape(y.shape)
        return L.autograd.grad((y * w).sum(), (x, v))
    same(f)


@pytest.mark.parametrize("name,index,exc,match", BAD_INDICES, ids=[c[0] for c in BAD_INDICES])
def test_bad_index_raises_like_torch(name, index, exc, match):
    same(lambda L: _x(L)[index(L)], match)

    def write(L):
        x = _x(L)
        x[index(L)] = 1.0
    same(write)


def test_basic_index_is_a_view_and_advanced_a_copy():
    def f(L):
        x = _x(L)
        v, c = x[1, ::2], x[[1]]
        x.add_(1)
        return v, c
    same(f)


def test_write_value_shape_mismatch():
    def f(L):
        x = _x(L)
        x[_i(L, 0, 1)] = L.ones(3)
    same(f, "shape mismatch: value tensor of shape \\[3\\] cannot be broadcast to indexing "
         "result of shape \\[2, 5, 6\\]")


def test_empty_index_into_an_empty_tensor():
    # bounds of an empty index are no bounds: torch returns the empty result
    import ember
    e, idx = ember.empty(0), ember.empty(0, dtype=ember.long)
    assert ember.take(e, idx).shape == (0,) and e.clone().put_(idx, e).shape == (0,)
    assert ember.gather(ember.empty(0, 3), 0, ember.empty(0, 3, dtype=ember.long)).shape == (0, 3)
