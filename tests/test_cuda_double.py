"""Every registry op, forward and backward, on the ``cuda`` TEST DOUBLE (tests/cuda_double.py:
NumPy arrays that refuse NumPy, presented as a GPU; no GPU runs here) equals the cpu result
and stays on cuda; and the device plumbing around ops: moves, mixed-device errors, modules,
optimizers, checkpoints, the DataLoader."""
import io

import numpy as np
import pytest

import ember
from cuda_double import DeviceArray, cuda_double
from ember._ops.registry import all_ops
from ember._ops.samples import public_call

CUDA = ember.device("cuda:0")
OPS = [d for d in all_ops() if d.samples is not None]
FAST_DTYPES = [ember.float32, ember.float64]
SLOW_DTYPES = [ember.int64, ember.bool, ember.complex128, ember.bfloat16]
# Ops that cannot run on CuPy for a reason of CuPy's own: each is expected to fail there, and
# the test says so if one starts to pass.
NOT_ON_CUPY = {
}


@pytest.fixture
def cuda():
    with cuda_double():
        yield


def _dtypes():
    return [pytest.param(d, id=d.name) for d in FAST_DTYPES] + \
        [pytest.param(d, id=d.name, marks=pytest.mark.slow) for d in SLOW_DTYPES]


def _ops(ops):
    return [pytest.param(d, id=d.name, marks=pytest.mark.xfail(
        reason=NOT_ON_CUPY[d.name], strict=True, raises=NotImplementedError))
        if d.name in NOT_ON_CUPY else d for d in ops]


def _tensors(args, device, requires_grad=False):
    def one(x):
        if not isinstance(x, np.ndarray):
            return x
        t = ember.tensor(x).to(device)
        return t.requires_grad_(requires_grad and t.dtype.category >= 2)
    return tuple([one(x) for x in a] if isinstance(a, list) else one(a) for a in args)


def _call(opdef, args, kwargs):
    if opdef.hermitian_input and isinstance(args[0], ember.Tensor) and args[0].dim() >= 2 and \
            args[0].shape[-1] == args[0].shape[-2]:
        args = ((args[0] + args[0].mH) / 2,) + tuple(args[1:])
    ember.manual_seed(0)
    return public_call(ember, opdef, args, kwargs)


def _flat(x):
    if isinstance(x, (tuple, list)):
        for v in x:
            yield from _flat(v)
    else:
        yield x


def _same(got, want, dt, what):
    """``got`` (from cuda) is ``want`` (from cpu) moved to cuda: tensors on cuda0 with the
    cpu's dtype, shape and values; anything else equal."""
    got, want = list(_flat(got)), list(_flat(want))
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        if not isinstance(w, ember.Tensor):
            assert not isinstance(g, ember.Tensor) and (g == w or g != g and w != w), what
            continue
        assert isinstance(g, ember.Tensor) and g.device == CUDA, f"{what}: {g!r} left cuda"
        assert type(g._data) is DeviceArray or g.is_sparse, f"{what}: {type(g._data)}"
        assert (g.dtype, tuple(g.shape)) == (w.dtype, tuple(w.shape)), what
        g, w = g.detach().cpu(), w.detach()
        if g.is_sparse:
            g, w = g.to_dense(), w.to_dense()
        rtol, atol = (1e-4, 1e-5) if dt in (ember.float32, ember.bfloat16) else (1e-9, 1e-12)
        np.testing.assert_allclose(g.numpy().astype(np.complex128 if g.is_complex() else
                                                    np.float64), w.numpy().astype(
            np.complex128 if w.is_complex() else np.float64), rtol, atol, err_msg=what)


def _samples(opdef, dt):
    if dt.name in opdef.skips:
        pytest.skip(opdef.skips[dt.name])
    return opdef.samples("cpu", dt) or pytest.skip(f"{opdef.name} has no samples for {dt.name}")


@pytest.mark.parametrize("dt", _dtypes())
@pytest.mark.parametrize("opdef", _ops(OPS), ids=str)
def test_forward_on_cuda_equals_cpu(cuda, opdef, dt):
    for s in _samples(opdef, dt):
        what = f"{opdef.name}({s}) on cuda"
        try:
            want = _call(opdef, _tensors(s.args, "cpu"), s.kwargs)
        except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError) as e:
            with pytest.raises(type(e)):
                _call(opdef, _tensors(s.args, "cuda"), s.kwargs)
            continue
        _same(_call(opdef, _tensors(s.args, "cuda"), s.kwargs), want, dt, what)


def _grads(opdef, args, kwargs):
    outs = [o for o in _flat(_call(opdef, args, kwargs)) if isinstance(o, ember.Tensor) and
            o.requires_grad]
    inputs = [a for a in _flat(args) if isinstance(a, ember.Tensor) and a.requires_grad]
    if not outs or not inputs:
        return None
    rng = np.random.default_rng(1)
    loss = sum((o * ember.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype,
                                 device=o.device)).sum().real for o in outs)
    return ember.autograd.grad(loss, inputs, allow_unused=True)


@pytest.mark.parametrize("opdef", _ops([d for d in OPS if d.differentiable]), ids=str)
def test_backward_on_cuda_equals_cpu(cuda, opdef):
    for s in _samples(opdef, ember.float64):
        try:
            want = _grads(opdef, _tensors(s.args, "cpu", True), s.kwargs)
        except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError):
            continue        # not a valid call: the forward test checks cuda raises alike
        if want is not None:
            got = _grads(opdef, _tensors(s.args, "cuda", True), s.kwargs)
            _same(got, want, ember.float64, f"grad {opdef.name}({s}) on cuda")
