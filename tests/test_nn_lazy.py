"""Lazy modules against torch: uninitialized parameters, inference on the first forward, the
class they become, state dicts both ways, reprs and errors."""
import io
import re

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")
R = np.random.default_rng(0)

CASES = [("LazyLinear", (4,), (3, 5)), ("LazyLinear", (2, False), (6,)),
         ("LazyConv1d", (4, 3), (2, 3, 9)), ("LazyConv2d", (6, 3, 2, 1, 1, 2, False), (1, 4, 8, 8)),
         ("LazyConv3d", (2, 2), (3, 4, 4, 4)),
         ("LazyConvTranspose1d", (4, 3), (2, 3, 5)),
         ("LazyConvTranspose2d", (6, 3, 2, 1, 1, 2, False), (1, 4, 5, 5)),
         ("LazyConvTranspose3d", (2, 2), (1, 3, 2, 2, 2)),
         ("LazyBatchNorm1d", (), (4, 3)), ("LazyBatchNorm2d", (1e-3, 0.2), (2, 3, 4, 4)),
         ("LazyBatchNorm3d", (1e-5, 0.1, False, False), (2, 3, 2, 2, 2)),
         ("LazyInstanceNorm1d", (), (2, 3, 7)), ("LazyInstanceNorm2d", (1e-5, 0.1, True, True),
                                                 (2, 3, 4, 4)),
         ("LazyInstanceNorm3d", (), (2, 3, 2, 2, 2))]


@pytest.mark.parametrize("name, args, shape", CASES, ids=[c[0] + str(i) for i, c in
                                                           enumerate(CASES)])
def test_lazy_module_matches_torch(name, args, shape):
    e, t = getattr(ember.nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(e) == repr(t)
    assert e.has_uninitialized_params() == t.has_uninitialized_params()
    ep, tp = dict(e.named_parameters()), dict(t.named_parameters())
    assert {k: repr(v) for k, v in ep.items()} == {k: repr(v) for k, v in tp.items()}
    assert sorted(dict(e.named_buffers())) == sorted(dict(t.named_buffers()))
    x = R.standard_normal(shape).astype(np.float32)
    ye, yt = e(ember.tensor(x)), t(torch.tensor(x))
    assert type(e).__name__ == type(t).__name__ == name[4:] and repr(e) == repr(t)
    assert not hasattr(e, "has_uninitialized_params") and not e._forward_pre_hooks
    for (k, v), (k2, w) in zip(e.state_dict().items(), t.state_dict().items()):
        assert k == k2 and tuple(v.shape) == tuple(w.shape) and str(v.dtype) == str(w.dtype)
    # same weights: same outputs and gradients
    e.load_state_dict({k: ember.tensor(v.numpy()) for k, v in t.state_dict().items()})
    e.train(t.training)
    ye, yt = e(ember.tensor(x)), t(torch.tensor(x))
    np.testing.assert_allclose(ye.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_load_state_dict_materializes_and_torch_checkpoints():
    t = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.BatchNorm1d(3))
    buf = io.BytesIO()
    torch.save(t.state_dict(), buf)
    buf.seek(0)
    e = ember.nn.Sequential(ember.nn.LazyLinear(3), ember.nn.LazyBatchNorm1d())
    e.load_state_dict(ember.load(buf))
    assert e[0].weight.shape == (3, 5) and isinstance(e[0].weight, ember.nn.Parameter)
    assert not isinstance(e[0].weight, ember.nn.UninitializedParameter)
    np.testing.assert_array_equal(e[0].weight.detach().numpy(), t[0].weight.detach().numpy())
    # still lazy until a forward (torch too): the class changes then
    assert type(e[0]).__name__ == type(torch.nn.LazyLinear(3)).__name__ == "LazyLinear"
    y = e.eval()(ember.ones(2, 5))
    np.testing.assert_allclose(y.detach().numpy(), t.eval()(torch.ones(2, 5)).detach().numpy(),
                               rtol=1e-6)
    assert type(e[0]).__name__ == "Linear"


def test_uninitialized_parameter_api():
    for L in (ember, torch):
        p = L.nn.UninitializedParameter()
        assert repr(p) == "<UninitializedParameter>" and p.requires_grad
        with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized"):
            p.shape
        p.materialize((2, 3), dtype=L.float64)
        assert type(p) is L.nn.Parameter and tuple(p.shape) == (2, 3) and p.dtype == L.float64
        b = L.nn.UninitializedBuffer()
        assert repr(b) == "<UninitializedBuffer>" and not b.requires_grad
        b.materialize(4)
        assert type(b) is L.Tensor and tuple(b.shape) == (4,)
        assert L.nn.parameter.is_lazy(L.nn.UninitializedParameter())
        m = L.nn.LazyLinear(3)
        m2 = __import__("copy").deepcopy(m)
        assert m2.has_uninitialized_params()


@pytest.mark.parametrize("call, shape, err, msg", [
    ("LazyConv2d(4, 3)", (3, 4), RuntimeError, "Expected 3D (unbatched) or 4D (batched)"),
    ("LazyConv2d(4, 3, groups=2)", (1, 3, 5, 5), ValueError, "in_channels must be divisible"),
])
def test_errors_match_torch(call, shape, err, msg):
    for L in (ember, torch):
        m = eval("L.nn." + call, {"L": L})
        with pytest.raises(err, match=re.escape(msg)):
            m(L.ones(*shape))
