"""ember.nn.utils and ember.func against torch: gradient clipping, parameter vectors, conv-bn
fusion, packed sequences (and recurrent layers on them), parametrizations and functional_call.
With torch's weights loaded, values, gradients and state_dict keys must agree."""
import math

import numpy as np
import pytest

import ember
from oracle import assert_close, torch


rng = np.random.default_rng(0)


def _load_from(e, t):
    """Copy torch module ``t``'s state into ember module ``e`` (keys must match)."""
    sd = t.state_dict()
    assert list(e.state_dict()) == list(sd)
    e.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in sd.items()})


def _pair(build):
    t, e = build(torch.nn).double(), build(ember.nn).double()
    _load_from(e, t)
    return e, t


def _params_with_grads(shapes, scale=1.0):
    arrays = [rng.standard_normal(s) * scale for s in shapes]
    ep = [ember.nn.Parameter(ember.tensor(a)) for a in arrays]
    tp = [torch.nn.Parameter(torch.tensor(a)) for a in arrays]
    for p, q, a in zip(ep, tp, arrays):
        g = rng.standard_normal(a.shape)
        p.grad, q.grad = ember.tensor(g), torch.tensor(g)
    return ep, tp


# ---- clipping, vectors, fusion ------------------------------------------------------------

@pytest.mark.parametrize("norm_type", [2.0, 1, math.inf, 0.5, 3])
@pytest.mark.parametrize("foreach", [None, False, True])
def test_clip_grad_norm_matches_torch(norm_type, foreach):
    ep, tp = _params_with_grads([(3, 4), (5,), ()])
    te = ember.nn.utils.clip_grad_norm_(ep, 0.7, norm_type, foreach=foreach)
    tt = torch.nn.utils.clip_grad_norm_(tp, 0.7, norm_type, foreach=False)
    assert_close(te, tt)
    assert_close([p.grad for p in ep], [p.grad for p in tp])


def test_clip_grad_norm_generator_single_tensor_and_no_grads():
    ep, tp = _params_with_grads([(4,), (2, 2)], scale=0.01)
    assert_close(ember.nn.utils.clip_grad_norm_(iter(ep), 100.0),
                 torch.nn.utils.clip_grad_norm_(iter(tp), 100.0))
    assert_close([p.grad for p in ep], [p.grad for p in tp])   # coefficient clamps to 1
    assert_close(ember.nn.utils.clip_grad_norm_(ep[0], 0.1),
                 torch.nn.utils.clip_grad_norm_(tp[0], 0.1))
    assert_close(ep[0].grad, tp[0].grad)
    p = ember.nn.Parameter(ember.ones(2))
    assert float(ember.nn.utils.clip_grad_norm_([p], 1.0)) == 0.0


def test_clip_grad_norm_nonfinite():
    ep, tp = _params_with_grads([(3,)])
    ep[0].grad[1] = float("nan")
    tp[0].grad[1] = float("nan")
    with pytest.raises(RuntimeError) as te:
        ember.nn.utils.clip_grad_norm_(ep, 1.0, error_if_nonfinite=True)
    with pytest.raises(RuntimeError) as tt:
        torch.nn.utils.clip_grad_norm_(tp, 1.0, error_if_nonfinite=True)
    assert str(te.value) == str(tt.value)
    assert_close(ember.nn.utils.clip_grad_norm_(ep, 1.0), torch.nn.utils.clip_grad_norm_(tp, 1.0))
    assert_close(ep[0].grad, tp[0].grad)


def test_get_total_norm_clip_grads_with_norm_and_clip_value():
    ep, tp = _params_with_grads([(3, 2), (4,)])
    ne = ember.nn.utils.get_total_norm([p.grad for p in ep], 3.0)
    nt = torch.nn.utils.get_total_norm([p.grad for p in tp], 3.0)
    assert_close(ne, nt)
    ember.nn.utils.clip_grads_with_norm_(ep, 0.5, ne)
    torch.nn.utils.clip_grads_with_norm_(tp, 0.5, nt)
    assert_close([p.grad for p in ep], [p.grad for p in tp])
    ep, tp = _params_with_grads([(3, 2), (4,)])
    assert ember.nn.utils.clip_grad_value_(ep, 0.3) is None
    torch.nn.utils.clip_grad_value_(tp, 0.3)
    assert_close([p.grad for p in ep], [p.grad for p in tp])


def test_parameters_to_vector_and_back():
    e, t = _pair(lambda nn: nn.Sequential(nn.Linear(3, 4), nn.Conv1d(2, 3, 2)))
    ve = ember.nn.utils.parameters_to_vector(e.parameters())
    vt = torch.nn.utils.parameters_to_vector(t.parameters())
    assert_close(ve, vt)
    new = rng.standard_normal(vt.shape)
    ember.nn.utils.vector_to_parameters(ember.tensor(new), e.parameters())
    torch.nn.utils.vector_to_parameters(torch.tensor(new), t.parameters())
    assert_close(list(e.parameters()), list(t.parameters()))
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        ember.nn.utils.vector_to_parameters([1.0], e.parameters())


@pytest.mark.parametrize("kind", ["conv", "conv_nobias", "convT", "linear"])
def test_fuse_with_batchnorm_matches_torch(kind):
    def build(nn):
        if kind == "linear":
            layer, bn = nn.Linear(3, 4), nn.BatchNorm1d(4)
        elif kind == "convT":
            layer, bn = nn.ConvTranspose2d(3, 4, 2), nn.BatchNorm2d(4)
        else:
            layer, bn = nn.Conv2d(3, 4, 2, bias=kind == "conv"), nn.BatchNorm2d(4)
        return nn.Sequential(layer, bn)
    e, t = _pair(build)
    sd = {k: v for k, v in t.state_dict().items() if "running" in k or k.startswith("1.")}
    for k, v in sd.items():
        if v.is_floating_point():
            v.copy_(torch.tensor(rng.uniform(0.5, 1.5, tuple(v.shape))))
    _load_from(e, t)
    e.eval(), t.eval()
    if kind == "linear":
        fe = ember.nn.utils.fuse_linear_bn_eval(e[0], e[1])
        ft = torch.nn.utils.fuse_linear_bn_eval(t[0], t[1])
        x = rng.standard_normal((2, 3))
    else:
        tr = kind == "convT"
        fe = ember.nn.utils.fuse_conv_bn_eval(e[0], e[1], transpose=tr)
        ft = torch.nn.utils.fuse_conv_bn_eval(t[0], t[1], transpose=tr)
        x = rng.standard_normal((2, 3, 5, 5))
    assert_close(fe.weight, ft.weight)
    assert_close(fe.bias, ft.bias)
    assert fe.bias.requires_grad == ft.bias.requires_grad
    assert_close(fe(ember.tensor(x)), e(ember.tensor(x)), rtol=1e-9, atol=1e-9)
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        ember.nn.utils.fuse_conv_bn_eval(e[0].train(), e[1])
