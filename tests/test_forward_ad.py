"""Forward-mode AD: every registry op's jvp (dual tensors, float64) against its vjp by the
dot-product identity <u, J t> = <J^T u, t> and against finite differences, generated from
the registry as test_ops is (and which ops still take the double-vjp fallback);
Hessian-vector products two ways; forward_ad's API and custom Functions' jvp."""
import numpy as np
import pytest

import ember
import ember.autograd.forward_ad as fwAD
from ember._ops import tangents
from ember._ops.registry import all_ops

OPS = [d for d in all_ops() if d.samples is not None and d.differentiable and
       d.vjp_fn is not None]


def _tensor(a):
    return ember.tensor(a) if isinstance(a, np.ndarray) else a


def _map(args, f):
    return [[f(x) for x in a] if isinstance(a, list) else f(a) for a in args]


def _is_real_float(x):
    return isinstance(x, ember.Tensor) and x.dtype in (ember.float64, ember.complex128)


def _flat(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if _is_real_float(o)]


# ops whose samples still take the double-vjp fallback (tangents.double_vjp), with why
FALLBACK = {
    "linalg_eig": "not written yet: the eigenvectors' tangent with torch's normalisation",
    "linalg_qr": "wide A (m < n) not written yet; tall and square A have their rule",
    "linalg_lu_factor_ex": "rectangular A (square A has its rule)",
    "quantile": "a dual q (the samples' q is float64): each element's slope in q",
    "nanquantile": "a dual q (the samples' q is float64): each element's slope in q",
}


def test_every_differentiable_op_has_a_jvp_rule():
    """Only linalg_eig's rule is the fallback outright; the others listed fall back for
    some calls only (their rule says which)."""
    bare = {d.name for d in all_ops() if d.differentiable and d.vjp_fn is not None and
            d.jvp is tangents.fallback}
    assert bare == {"linalg_eig"}


def _fd(opdef, args, kwargs, tans, h=1e-6):
    """Central finite differences of the real float64 outputs along the tangents."""
    def at(sign):
        out = opdef(*_map(args, lambda x: x + sign * h * tans[id(x)] if id(x) in tans else x),
                    **kwargs)
        return [o.numpy() for o in _flat(out)]
    return [(p - m) / (2 * h) for p, m in zip(at(1), at(-1))]


@pytest.mark.parametrize("opdef", OPS, ids=str)
def test_jvp_matches_vjp_and_finite_differences(opdef, monkeypatch):
    """Each sample's jvp (dual tensors) against the vjp by <u, J t> = <J^T u, t>, and
    against central finite differences; the ops that took the fallback are FALLBACK's."""
    rng = np.random.default_rng(0)
    fell_back, checked, real = [], 0, False
    fallback = tangents.double_vjp
    monkeypatch.setattr(tangents, "double_vjp",
                        lambda *a: fell_back.append(1) or fallback(*a))
    for s in opdef.samples("cpu", ember.float64)[:6]:
        if not s.smooth or not s.grad:
            continue
        args = _map(s.args, _tensor)
        flat = [x for a in args for x in (a if isinstance(a, list) else [a])]
        diff = [x for i, x in enumerate(flat) if _is_real_float(x) and (
            s.grad_args is None or i in s.grad_args)]
        cplx = any(isinstance(x, ember.Tensor) and x.dtype.is_complex for x in flat)
        if not diff or cplx and opdef.jvp is tangents.pointwise:   # (from the vjp: real only)
            continue
        tans, count = {}, len(fell_back)
        for x in diff:
            t = ember.tensor(rng.standard_normal(tuple(x.shape)) + (
                1j * rng.standard_normal(tuple(x.shape)) if x.dtype.is_complex else 0))
            tans[id(x)] = (t + t.mT) / 2 if opdef.hermitian_input and x.dim() >= 2 else t
        try:
            with fwAD.dual_level():
                dual = _map(args, lambda x: fwAD.make_dual(x, tans[id(x)])
                            if id(x) in tans else x)
                out = opdef(*dual, **s.kwargs)
                pairs = [fwAD.unpack_dual(o) for o in _flat(out)]
        except (RuntimeError, TypeError, ValueError, IndexError):
            with pytest.raises((RuntimeError, TypeError, ValueError, IndexError)):
                opdef(*args, **s.kwargs)
            continue
        leaves = [x.detach().requires_grad_() for x in diff]
        swap = {id(x): p for x, p in zip(diff, leaves)}
        outs = _flat(opdef(*_map(args, lambda x: swap.get(id(x), x)), **s.kwargs))
        keep = [o.requires_grad for o in outs]
        pairs = [p for p, k in zip(pairs, keep) if k]
        outs = [o for o in outs if o.requires_grad]
        if not outs:
            continue
        jvps = [np.zeros(tuple(p.shape)) if t is None else t.numpy() for p, t in pairs]
        if cplx or any(o.dtype.is_complex for o in outs):
            del fell_back[count:]        # (complex: finite differences only, no fallback count)
        else:
            real = True
            us = [ember.tensor(rng.standard_normal(tuple(o.shape))) for o in outs]
            gs = ember.autograd.grad(outs, leaves, us, allow_unused=True,
                                     materialize_grads=True)
            rev = sum(float((g * tans[id(x)]).sum()) for g, x in zip(gs, diff))
            fwd = sum(float((u.numpy() * j).sum()) for u, j in zip(us, jvps))
            np.testing.assert_allclose(fwd, rev, rtol=1e-8, atol=1e-8,
                                       err_msg=f"{opdef.name}({s})")
        near_kink = any(np.abs(x.numpy() - k).min(initial=1) < 1e-3
                        for x in diff for k in opdef.kinks)
        if opdef.gauge is None and "random" not in opdef.tags and not near_kink:
            fd = [f for f, k in zip(_fd(opdef, args, s.kwargs, tans), keep) if k]
            for j, f in zip(jvps, fd):
                np.testing.assert_allclose(j, f, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{opdef.name}({s}) vs finite differences")
        checked += 1
    if not checked:
        pytest.skip(f"no real float64 differentiable sample of {opdef.name}")
    assert not real or bool(fell_back) == (opdef.name in FALLBACK), \
        f"{opdef.name}: fell back={bool(fell_back)}, listed={opdef.name in FALLBACK}"


def test_hvp_forward_over_reverse_equals_reverse_over_reverse():
    g = ember.Generator().manual_seed(0)
    w = ember.randn(5, 5, dtype=ember.float64, generator=g)
    x = ember.randn(5, dtype=ember.float64, generator=g)
    v = ember.randn(5, dtype=ember.float64, generator=g)

    def f(x):
        return ((w @ x).tanh() * x.exp()).sum() + (x ** 4).sum()
    fwd = ember.func.jvp(ember.func.grad(f), (x,), (v,))[1]
    rev = ember.autograd.functional.hvp(f, x, v)[1]
    np.testing.assert_allclose(fwd.numpy(), rev.numpy(), rtol=1e-10, atol=1e-12)
    with fwAD.dual_level():
        d = fwAD.make_dual(x.clone().requires_grad_(), v)
        (gx,) = ember.autograd.grad(f(d), d, create_graph=True)
        hv = fwAD.unpack_dual(gx).tangent
    np.testing.assert_allclose(hv.detach().numpy(), rev.numpy(), rtol=1e-10, atol=1e-12)


def test_dual_level_api():
    x = ember.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="dual_level"):
        fwAD.make_dual(x, x)
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="size"):
            fwAD.make_dual(x, ember.ones(3))
        with pytest.raises(RuntimeError, match="Nested"):
            fwAD.enter_dual_level()
        d = fwAD.make_dual(x, ember.ones(2))
        y = d * d
        assert isinstance(fwAD.unpack_dual(y), fwAD.UnpackedDualTensor)
        assert fwAD.unpack_dual(y).tangent.tolist() == [2.0, 4.0]
    assert fwAD.unpack_dual(y).tangent is None


def test_function_jvp_with_setup_context():
    class Cube(ember.autograd.Function):
        @staticmethod
        def forward(x):
            return x ** 3

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.x = inputs[0]

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g

        @staticmethod
        def jvp(ctx, t):
            return 3 * ctx.x ** 2 * t
    x = ember.tensor([1.0, 2.0])
    with fwAD.dual_level():
        out = Cube.apply(fwAD.make_dual(x, ember.tensor([1.0, 0.5])))
        assert fwAD.unpack_dual(out).tangent.tolist() == [3.0, 6.0]


def test_jacobian_forward_mode_strategy():
    f = lambda x: x.sin() * x.sum()  # noqa: E731
    x = ember.tensor([0.5, 1.0, 2.0], dtype=ember.float64)
    fwd = ember.autograd.functional.jacobian(f, x, vectorize=True, strategy="forward-mode")
    rev = ember.autograd.functional.jacobian(f, x)
    np.testing.assert_allclose(fwd.numpy(), rev.numpy(), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="vectorize"):
        ember.autograd.functional.jacobian(f, x, strategy="forward-mode")


def test_inplace_op_on_a_dual_tensor():
    with fwAD.dual_level():
        d = fwAD.make_dual(ember.tensor([1.0, 2.0]), ember.tensor([1.0, 0.5])).clone()
        d.mul_(d).add_(3)
        p, t = fwAD.unpack_dual(d)
    assert p.tolist() == [4.0, 7.0] and t.tolist() == [2.0, 2.0]


@pytest.mark.parametrize("kw", [{}, {"dim": 1}, {"dim": 0, "keepdim": True}],
                         ids=["all", "dim", "keepdim"])
def test_quantile_of_several_q_against_finite_differences(kw):
    """A constant tensor q (the registry samples' q is dual): each q's row by its own vjp."""
    g = ember.Generator().manual_seed(0)
    x, t = (ember.randn(3, 5, dtype=ember.float64, generator=g) for _ in range(2))
    q = ember.tensor([0.1, 0.5, 0.8], dtype=ember.float64)
    for f in (ember.quantile, ember.nanquantile):
        with fwAD.dual_level():
            jv = fwAD.unpack_dual(f(fwAD.make_dual(x, t), q, **kw)).tangent
        fd = (f(x + 1e-6 * t, q, **kw) - f(x - 1e-6 * t, q, **kw)) / 2e-6
        np.testing.assert_allclose(jv.numpy(), fd.numpy(), rtol=1e-6, atol=1e-8)
