"""gradcheck/gradgradcheck themselves (against torch's verdicts and messages), then run over
every differentiable OpDef's float64 and complex128 samples: the registry's vjps agree with
finite differences, to first and second order."""
import numpy as np
import pytest

import ember
from ember._ops.registry import all_ops
from ember.autograd.gradcheck import GradcheckError
from helpers import function
from oracle import same
from test_ops import _call, _samples

DIFF_OPS = [d for d in all_ops() if d.samples is not None and d.differentiable]


def _half_grad(lib):
    """x * x with a backward off by a factor of 2."""
    class Half(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x
    return Half


def _xy(lib):
    return (lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True),
            lib.tensor([3.0], dtype=lib.float64, requires_grad=True))


def test_gradcheck_passes_and_fails_like_torch():
    same(lambda lib: lib.autograd.gradcheck(lambda a, b: (a.sin(), a * b.exp()), _xy(lib)))
    same(lambda lib: lib.autograd.gradgradcheck(lambda a, b: (a.sin() * b, a * b * b), _xy(lib)))
    same(lambda lib: lib.autograd.gradcheck(lambda a, b: (a * b, _half_grad(lib).apply(a)),
                                            _xy(lib), raise_exception=False))
    same(lambda lib: lib.autograd.gradcheck(lambda a, b: (a * b, _half_grad(lib).apply(a)),
                                            _xy(lib)),
         r"Jacobian mismatch for output 1 with respect to input 0,\nnumerical:tensor\(\[\[2\.0000,"
         r" 0\.0000\],\n +\[0\.0000, 4\.0000\]\], dtype=torch\.float64\)\nanalytical:"
         r"tensor\(\[\[1\., 0\.\],\n +\[0\., 2\.\]\], dtype=torch\.float64\)")
    same(lambda lib: lib.autograd.gradgradcheck(lambda a: _half_grad(lib).apply(a).exp(),
                                                (_xy(lib)[0],)),
         "Jacobian mismatch for output 0 with respect to input 0")
    same(lambda lib: lib.autograd.gradcheck(lambda a: a * 2, (_xy(lib)[0].detach(),)),
         "gradcheck expects at least one input tensor to require gradient")
    assert issubclass(GradcheckError, RuntimeError)


def test_gradcheck_tolerances_and_float32_warning():
    def f(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        with pytest.warns(UserWarning, match="Input #0 requires gradient and is not a double"):
            return lib.autograd.gradcheck(lambda a: a * 3, (x,), eps=1e-3, atol=1e-2)
    same(f)
    same(lambda lib: lib.autograd.gradcheck(
        lambda a: _half_grad(lib).apply(a), (_xy(lib)[0],), atol=10.0))


def test_gradcheck_nondeterministic_backward():
    def f(lib, nondet_tol):
        calls = []

        class Noisy(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                calls.append(1)
                return g * (2 + len(calls) * 1e-9)
        return lib.autograd.gradcheck(Noisy.apply, (_xy(lib)[0],), nondet_tol=nondet_tol)
    same(lambda lib: f(lib, 0.0), "Backward is not reentrant")
    same(lambda lib: f(lib, 1e-6))


def test_gradcheck_backward_must_scale_with_grad_output():
    def f(lib):
        # right Jacobian, wrong for g = 0
        offset = function(lib, "Offset", lambda ctx, x: x * 2,
                          lambda ctx, g: g * 2 + (g.sum() == 0) * 1.0)
        return lib.autograd.gradcheck(offset.apply, (_xy(lib)[0],))
    same(f, "backward not multiplied by grad_output")


def _near_kink(opdef, arrays, margin=1e-3):
    return any(np.abs(a - k).min(initial=np.inf) < margin for a in arrays for k in opdef.kinks)


def _as_call(opdef, sample):
    """(func, inputs): ``func(*inputs)`` calls the op with the sample's float arrays as the
    tensors that require grad, the other arguments held fixed."""
    leaves, slots = [], []
    for pos, a in enumerate(sample.args):
        group = a if isinstance(a, list) else [a]
        idx = []
        diff = sample.grad_args is None or pos in sample.grad_args
        for x in group:
            if isinstance(x, np.ndarray) and x.dtype.kind in "fc" and diff:
                idx.append(len(leaves))
                leaves.append(ember.tensor(x, requires_grad=True))
            else:
                idx.append(ember.tensor(x) if isinstance(x, np.ndarray) else _Const(x))
        slots.append((isinstance(a, list), idx))

    def func(*ts):
        args = []
        for is_list, idx in slots:
            vals = [ts[i] if isinstance(i, int) else i.value if isinstance(i, _Const) else i
                    for i in idx]
            args.append(vals if is_list else vals[0])
        return _call(ember, opdef, args, sample.kwargs)
    return func, tuple(leaves)


class _Const:
    def __init__(self, value):
        self.value = value


@pytest.mark.parametrize("dt", [ember.float64, ember.complex128], ids=lambda d: d.name)
@pytest.mark.parametrize("opdef", DIFF_OPS, ids=str)
def test_op_gradcheck_and_gradgradcheck(opdef, dt):
    if f"grad-{dt.name}" in opdef.skips:
        pytest.skip(opdef.skips[f"grad-{dt.name}"])
    checked = 0
    for s in _samples(opdef, dt):
        arrays = [x for a in s.args for x in (a if isinstance(a, list) else [a])
                  if isinstance(x, np.ndarray) and x.dtype.kind in "fc"]
        if not arrays or not s.smooth or not s.grad or _near_kink(opdef, arrays):
            continue
        func, inputs = _as_call(opdef, s)
        try:
            func(*inputs)
        except (RuntimeError, TypeError, NotImplementedError, IndexError):
            continue         # an error sample: test_ops checks the error itself
        assert ember.autograd.gradcheck(func, inputs), f"{opdef.name}({s})"
        assert ember.autograd.gradgradcheck(func, inputs), f"{opdef.name}({s})"
        checked += 1
    if not checked:
        pytest.skip(f"{opdef.name}: no {dt.name} sample away from kinks")
