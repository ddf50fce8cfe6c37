"""ember.masked against torch.masked: every reduction and normalization over dims, keepdim,
broadcast masks and fully masked rows; MaskedTensor's ops, reprs and errors."""

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")
R = np.random.default_rng(0)
X = R.standard_normal((3, 4, 5)).astype(np.float32)
MASK = R.random((3, 4, 5)) > 0.4
MASK[1, 2] = False                                  # a fully masked row along dim 2
pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of MaskedTensors")


def _cmp(e, t):
    np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
    assert str(e.dtype) == str(t.dtype)


REDS = ["sum", "mean", "amax", "amin", "prod", "logsumexp", "var", "std"]


@pytest.mark.parametrize("op", REDS + ["argmax", "argmin", "median", "norm"])
@pytest.mark.parametrize("dim", [None, 0, 2, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_match_torch(op, dim, keepdim):
    if op in ("argmax", "argmin", "median") and not isinstance(dim, int):
        return
    args = (2.0, dim) if op == "norm" else (dim,)
    for mask in (MASK, MASK[0, :, :1]):                     # full and broadcast masks
        e = getattr(ember.masked, op)(ember.tensor(X), *args, keepdim=keepdim,
                                      mask=ember.tensor(mask))
        t = getattr(torch.masked, op)(torch.tensor(X), *args, keepdim=keepdim,
                                      mask=torch.tensor(mask))
        _cmp(e, t)


@pytest.mark.parametrize("op", ["cumsum", "cumprod", "softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("dim", [0, 2])
def test_normalizations_match_torch(op, dim):
    e = getattr(ember.masked, op)(ember.tensor(X), dim, mask=ember.tensor(MASK))
    t = getattr(torch.masked, op)(torch.tensor(X), dim, mask=torch.tensor(MASK))
    _cmp(e, t)


def test_normalize_logaddexp_dtype_and_no_mask():
    ex, tx, em, tm = ember.tensor(X), torch.tensor(X), ember.tensor(MASK), torch.tensor(MASK)
    _cmp(ember.masked.normalize(ex, 2.0, 1, mask=em), torch.masked.normalize(tx, 2.0, 1, mask=tm))
    _cmp(ember.masked.logaddexp(ex, ex * 2, input_mask=em, other_mask=~em),
         torch.masked.logaddexp(tx, tx * 2, input_mask=tm, other_mask=~tm))
    _cmp(ember.masked.sum(ex, 1, dtype=ember.float64, mask=em),
         torch.masked.sum(tx, 1, dtype=torch.float64, mask=tm))
    _cmp(ember.masked.var(ex, 1, correction=0, mask=em), torch.masked.var(tx, 1, correction=0,
                                                                           mask=tm))
    for op in REDS:
        _cmp(getattr(ember.masked, op)(ex, 1), getattr(torch.masked, op)(tx, 1))
    i = np.arange(12).reshape(3, 4)
    _cmp(ember.masked.sum(ember.tensor(i), 1, mask=ember.tensor(i % 3 > 0)),
         torch.masked.sum(torch.tensor(i), 1, mask=torch.tensor(i % 3 > 0)))
    _cmp(ember.masked.amax(ember.tensor(i), 1, mask=ember.tensor(i % 3 > 0)),
         torch.masked.amax(torch.tensor(i), 1, mask=torch.tensor(i % 3 > 0)))


def test_gradients_flow_through_kept_elements():
    grads = []
    for L in (ember, torch):
        x = L.tensor(X, requires_grad=True)
        (L.masked.mean(x, 2, mask=L.tensor(MASK)).nan_to_num() ** 2).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(*grads, rtol=1e-5, atol=1e-7)


def test_masked_tensor_ops_and_repr():
    x = np.array([[1., 2., 3.], [4., 5., 6.]], np.float32)
    m = np.array([[True, False, True], [False, False, True]])
    outs = []
    for L in (ember, torch):
        mt = L.masked.masked_tensor(L.tensor(x), L.tensor(m))
        outs.append([repr(mt), repr(mt + 1), repr(mt.exp()), repr(mt * mt), repr(mt.sum(1)),
                     repr(mt.sum()), repr(mt.amax(1)), repr(mt.mean()),
                     repr(L.masked.masked_tensor(L.tensor(3.0), L.tensor(True))),
                     repr(L.masked.masked_tensor(L.tensor([1, 2]), L.tensor([True, False]))),
                     mt.to_tensor(0).tolist(), L.masked.is_masked_tensor(mt),
                     L.masked.is_masked_tensor(L.tensor(x))])
        with pytest.raises(ValueError, match="Input masks must match"):
            mt + L.masked.masked_tensor(L.tensor(x), ~L.tensor(m))
        with pytest.raises(TypeError, match="mask must have dtype bool"):
            L.masked.masked_tensor(L.tensor(x), L.tensor(m).float())
    assert outs[0] == outs[1]
