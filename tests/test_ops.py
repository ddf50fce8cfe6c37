"""Registry-driven op tests: every OpDef's samples, for each dtype, checked against PyTorch
(forward, backward and double backward in float64) and against the meta device."""
import numpy as np
import pytest

import ember
from ember._ops.registry import all_ops
from ember._ops.samples import public_call
from oracle import assert_close, to_torch, torch

DTYPES = [ember.float32, ember.float64, ember.int64, ember.bool, ember.bfloat16,
          ember.complex128]
OPS = [d for d in all_ops() if d.samples is not None]


def _call(lib, opdef, args, kwargs):
    """Call the op through its public torch name (``torch_fn``, else function, else method;
    a private op's ``torch_ref`` composes it from torch ops);
    ember dtypes among the keyword arguments become torch dtypes for torch. An op that reads
    one triangle of a Hermitian input gets ``(A + A^H) / 2``, and outputs defined up to sign
    or phase are made canonical by ``opdef.gauge`` (torch OpInfo's gradcheck wrappers)."""
    if opdef.hermitian_input and hasattr(args[0], "mH") and args[0].dim() >= 2 and \
            args[0].shape[-1] == args[0].shape[-2]:
        args = ((args[0] + args[0].mH) / 2,) + tuple(args[1:])
    out = public_call(lib, opdef, args, kwargs)
    return opdef.gauge(out) if opdef.gauge is not None else out


def _convert(args, fn):
    return tuple([fn(x) for x in a] if isinstance(a, list) else fn(a) for a in args)


def _ember(x, requires_grad=False):
    if isinstance(x, np.ndarray):
        t = ember.tensor(x)
        return t.requires_grad_(requires_grad and t.dtype.category >= 2)
    return x


def _samples(opdef, dt):
    key = dt.name
    if key in opdef.skips:
        pytest.skip(opdef.skips[key])
    s = opdef.samples("cpu", dt)
    if not s:
        pytest.skip(f"{opdef.name} has no samples for {dt.name}")
    return s


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("opdef", OPS, ids=str)
def test_forward_matches_torch(opdef, dt):
    for s in _samples(opdef, dt):
        e_args = _convert(s.args, _ember)
        t_args = _convert(s.args, to_torch)
        try:
            expected = _call(torch, opdef, t_args, s.kwargs)
        except (RuntimeError, TypeError, NotImplementedError) as err:
            with pytest.raises((RuntimeError, TypeError, NotImplementedError)):
                _call(ember, opdef, e_args, s.kwargs)
            continue
        got = _call(ember, opdef, e_args, s.kwargs)
        r, a = opdef.tol.get(dt.name, (None, None))
        assert_close(got, expected, None, r, a, what=f"{opdef.name}({s})")


@pytest.mark.parametrize("dt", [ember.float32, ember.int64], ids=lambda d: d.name)
@pytest.mark.parametrize("opdef", OPS, ids=str)
def test_meta_matches_real(opdef, dt):
    for s in _samples(opdef, dt):
        real = _call(ember, opdef, _convert(s.args, _ember), s.kwargs)
        try:
            meta = _call(ember, opdef, _convert(s.args, lambda x: _ember(x).to("meta")
                                                if isinstance(x, np.ndarray) else x), s.kwargs)
        except NotImplementedError as e:
            assert "depends on the values" in str(e)   # data-dependent shape: meta says so
            continue
        for r, m in zip(real if isinstance(real, tuple) else (real,),
                        meta if isinstance(meta, tuple) else (meta,)):
            assert m.device.type == "meta"
            assert (tuple(m.shape), m.dtype) == (tuple(r.shape), r.dtype), f"{opdef.name}({s})"


def _weights(outs, lib):
    rng = np.random.default_rng(1)
    ws = []
    for o in outs:
        w = rng.standard_normal(tuple(o.shape))
        if o.dtype.is_complex:
            w = w + 1j * rng.standard_normal(tuple(o.shape))
        ws.append(lib.tensor(w, dtype=o.dtype) if o.dtype.is_floating_point or o.dtype.is_complex
                  else None)
    return ws


def _grads(lib, opdef, args, kwargs, create_graph):
    outs = _call(lib, opdef, args, kwargs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    outs = [o for o in outs if o.requires_grad]
    inputs = [a for a in _flat(args) if isinstance(a, (ember.Tensor, torch.Tensor)) and
              a.requires_grad]
    if not outs or not inputs:
        return None, None
    ws = _weights(outs, lib)
    loss = sum((o * w).sum().real for o, w in zip(outs, ws))     # real, for complex outputs
    g = lib.autograd.grad(loss, inputs, create_graph=create_graph, allow_unused=True)
    return inputs, g


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a


@pytest.mark.parametrize("opdef", [d for d in OPS if d.differentiable], ids=str)
def test_grad_and_gradgrad_match_torch(opdef):
    dt = ember.float64
    for s in _samples(opdef, dt):
        e_args = _convert(s.args, lambda x: _ember(x, True))
        t_args = _convert(s.args, lambda x: to_torch(x, x.dtype.kind in "fc")
                          if isinstance(x, np.ndarray) else x)
        try:
            t_in, t_g = _grads(torch, opdef, t_args, s.kwargs, True)
        except (RuntimeError, TypeError):
            continue      # not a valid call in torch; the forward test checks ember raises
        e_in, e_g = _grads(ember, opdef, e_args, s.kwargs, True)
        if t_in is None:
            continue
        r, a = opdef.tol.get("grad", (None, None))
        assert_close(list(e_g), list(t_g), "float64", r, a, what=f"grad {opdef.name}({s})")
        # double backward: d/dinputs of sum(grad * v)
        t_sel = [g for g in t_g if g is not None and g.requires_grad]
        if not t_sel:
            continue
        e_sel = [g for g, tg in zip(e_g, t_g) if tg is not None and tg.requires_grad]
        rng = np.random.default_rng(2)
        vs = [rng.standard_normal(tuple(g.shape)) for g in t_sel]
        t_l = sum((g * torch.tensor(v)).sum() for g, v in zip(t_sel, vs))
        e_l = sum((g * ember.tensor(v, dtype=ember.float64)).sum() for g, v in zip(e_sel, vs))
        try:
            t_gg = torch.autograd.grad(t_l, t_in, allow_unused=True)
        except (NotImplementedError, RuntimeError) as e:
            if "not implemented" not in str(e):
                raise
            continue      # torch has no double backward (cdist, hardsigmoid): see test_gradcheck
        # a gradient that does not depend on the inputs has no graph here (torch may still
        # record one that yields zeros)
        e_gg = ember.autograd.grad(e_l, e_in, allow_unused=True) if isinstance(
            e_l, ember.Tensor) and e_l.requires_grad else [None] * len(e_in)
        assert_close(list(e_gg), list(t_gg), "float64", r, a,
                     what=f"gradgrad {opdef.name}({s})")


@pytest.mark.parametrize("dt", [ember.float32, ember.float64, ember.complex64],
                         ids=lambda d: d.name)
@pytest.mark.parametrize("opdef", [d for d in OPS if d.ufunc is not None], ids=str)
def test_ufunc_is_the_forward(opdef, dt):
    """An op's ``ufunc`` (which the C fast path calls in place of its forward on floating and
    complex operands without options) gives the forward's values and dtype, array or scalar
    operands; and a tensor call takes it, as the fast path does."""
    for s in _samples(opdef, dt):
        if s.kwargs:
            continue
        want, got = opdef.fwd(np, *s.args), opdef.ufunc(*s.args)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=f"{opdef.name}({s})")
        args = _convert(s.args, _ember)
        if all(isinstance(a, ember.Tensor) and a.dtype == dt for a in args):
            np.testing.assert_array_equal(opdef(*args).numpy(), want)


@pytest.mark.parametrize("dt", [ember.float32, ember.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("opdef", [d for d in all_ops() if d.into is not None], ids=str)
def test_into_is_the_forward(opdef, dt):
    """An op's ``into`` (the C in-place path's write into the tensor's own array) leaves there
    what the forward returns, for its samples (or, without samples, numbers and arrays as the
    second operand); or refuses with ValueError/TypeError having written nothing (the C path
    then runs the forward)."""
    if opdef.samples is not None:
        calls = [s.args for s in opdef.samples("cpu", dt) if not s.kwargs]
    else:
        rng = np.random.default_rng(0)
        dst = rng.standard_normal((3, 4)).astype(dt.np)
        calls = [(dst, y) for y in (2.5, 3, np.array(1.25, dt.np), rng.standard_normal(
            (3, 4)).astype(dt.np), rng.standard_normal(4).astype(dt.np))]
    for args in calls:
        want = opdef.fwd(np, *args)
        out = np.array(args[0], copy=True)
        try:
            opdef.into(out, out, *args[1:])
        except (ValueError, TypeError):
            np.testing.assert_array_equal(out, args[0])
            continue
        assert out.dtype == want.dtype
        np.testing.assert_array_equal(out, want, err_msg=f"{opdef.name}{args!r}")


@pytest.mark.parametrize("opdef", [d for d in all_ops() if d.errors], ids=str)
def test_errors(opdef):
    """Each error sample raises its type and message in ember, and the same type in torch."""
    for e in opdef.errors:
        with pytest.raises(e.exc_type, match=e.match):
            _call(ember, opdef, _convert(e.sample.args, _ember), e.sample.kwargs)
        with pytest.raises(e.exc_type):
            _call(torch, opdef, _convert(e.sample.args, to_torch), e.sample.kwargs)


def test_public_names_exist_in_torch():
    """Every name the registry publishes (function, method, in-place method) is torch's."""
    extra = []
    for d in all_ops():
        for n in (d.name,) + tuple(d.aliases):
            extra += [f"torch.{n}"] * (d.function and not hasattr(torch, n))
            extra += [f"Tensor.{n}"] * (d.method and not hasattr(torch.Tensor, n))
            extra += [f"Tensor.{n}_"] * (d.inplace and not hasattr(torch.Tensor, n + "_"))
    assert not extra, f"not in torch: {extra}"


@pytest.mark.parametrize("opdef", [d for d in OPS if d.inplace], ids=str)
def test_inplace_matches_out_of_place(opdef):
    """``t.<op>_(...)`` writes ``<op>(t, ...)`` into ``t`` and returns ``t``, where the result
    has ``t``'s shape and dtype."""
    checked = 0
    for dt in (ember.float64, ember.int64):
        for s in opdef.samples("cpu", dt):
            args = _convert(s.args, _ember)
            expected = _call(ember, opdef, args, s.kwargs)
            t = args[0]
            if isinstance(expected, tuple) or expected.shape != t.shape or \
                    expected.dtype != t.dtype:
                continue
            got = getattr(t, opdef.name + "_")(*args[1:], **s.kwargs)
            assert got is t, f"{opdef.name}_ did not return self"
            assert_close(t, expected, what=f"{opdef.name}_({s})")
            checked += 1
    if not checked:
        pytest.skip(f"no sample of {opdef.name} keeps the input's shape and dtype")


SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.7, np.inf, -np.inf, np.nan, 1e-30, 1e30,
                     7.0, -7.0])


@pytest.mark.parametrize("opdef", [d for d in OPS if "pointwise" in d.tags], ids=str)
def test_special_values_match_torch(opdef):
    """Pointwise ops on every combination of signed zeros, infinities, nan, tiny and huge
    values, in float64: the first sample with its arrays replaced by those values."""
    s = _samples(opdef, ember.float64)[0]
    pos = [i for i, a in enumerate(s.args) if isinstance(a, np.ndarray)]
    args = list(s.args)
    for i, grid in zip(pos, np.meshgrid(*[SPECIALS] * len(pos))):
        args[i] = grid.ravel()
    try:
        expected = _call(torch, opdef, _convert(args, to_torch), s.kwargs)
    except (RuntimeError, TypeError, NotImplementedError):
        with pytest.raises((RuntimeError, TypeError, NotImplementedError)):
            _call(ember, opdef, _convert(args, _ember), s.kwargs)
        return
    with np.errstate(all="ignore"):
        got = _call(ember, opdef, _convert(args, _ember), s.kwargs)
    assert_close(got, expected, what=f"{opdef.name} on special values")
