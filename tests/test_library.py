"""ember.library (custom ops) against torch.library: schemas, kernels, fake impls on meta,
autograd, mutation, Library/define/impl, ops namespace, errors."""
import itertools
import re

import numpy as np
import gc

import pytest

import ember

torch = pytest.importorskip("torch")
_n = itertools.count()


@pytest.fixture(autouse=True)
def _classes_go():
    """The classes a test defines die with it: their dispatch hook goes (the fast path back)."""
    yield
    gc.collect()


def _name():
    return f"t{next(_n)}"


def _both(define):
    """define(L, qualname) in each library (a fresh op name each time)"""
    q = f"emberlibtest::{_name()}"
    return define(ember, q), define(torch, q)


def _scale(L, q):
    @L.library.custom_op(q, mutates_args=())
    def scale(x: L.Tensor, k: float, bias: L.Tensor | None = None) -> L.Tensor:
        return x * k if bias is None else x * k + bias
    return scale


def test_schema_inference_matches_torch():
    def f(L):
        def fn(x: L.Tensor, ys: list[L.Tensor], n: int = 2, s: float = 1.5, b: bool = True,
               o: L.Tensor | None = None, name: str = "a") -> tuple[L.Tensor, L.Tensor]:
            ...
        return fn
    assert ember.library.infer_schema(f(ember), mutates_args=("x",)) == \
        torch.library.infer_schema(f(torch), mutates_args=("x",))
    assert ember.library.infer_schema(f(ember), mutates_args=(), op_name="foo") == \
        torch.library.infer_schema(f(torch), mutates_args=(), op_name="foo")


def test_custom_op_forward_and_ops_namespace():
    e, t = _both(_scale)
    x = np.arange(6.0).reshape(2, 3)
    ye, yt = e(ember.tensor(x), 2.0), t(torch.tensor(x), 2.0)
    np.testing.assert_array_equal(ye.numpy(), yt.numpy())
    ns, name = e._qualname.split("::")
    assert repr(e) == repr(t)
    ye2 = getattr(getattr(ember.ops, ns), name).default(ember.tensor(x), 3.0,
                                                      bias=ember.ones(3))
    yt2 = getattr(getattr(torch.ops, ns), name).default(torch.tensor(x), 3.0, bias=torch.ones(3))
    np.testing.assert_array_equal(ye2.numpy(), yt2.numpy())


def test_fake_impl_and_meta():
    e, t = _both(_scale)
    for L, op in ((ember, e), (torch, t)):
        with pytest.raises(RuntimeError, match=re.escape(f"There was no fake impl registered "
                                                         f"for {op!r}")):
            op(L.ones(2, 3, device="meta"), 2.0)
        op.register_fake(lambda x, k, bias=None: L.empty_like(x))
        y = op(L.ones(2, 3, device="meta"), 2.0)
        assert y.device.type == "meta" and tuple(y.shape) == (2, 3)


def test_autograd_registration():
    e, t = _both(_scale)
    grads = []
    for L, op in ((ember, e), (torch, t)):
        x = L.tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(RuntimeError, match="no autograd formula was registered"):
            op(x, 3.0).sum().backward()

        def setup(ctx, inputs, output):
            ctx.k = inputs[1]
            ctx.save_for_backward(inputs[0])

        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * ctx.k + 0 * x, None, None
        op.register_autograd(backward, setup_context=setup)
        y = op(x, 3.0)
        assert type(y.grad_fn).__name__ == \
            f"GeneratedBackwardFor_emberlibtest_{op._qualname.split('::')[1]}_defaultBackward"
        (y * y).sum().backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1]


def test_mutating_op_and_device_kernels():
    def define(L, q):
        @L.library.custom_op(q, mutates_args=("out",))
        def fill(out: L.Tensor, v: float) -> None:
            out.fill_(v)
        return fill
    e, t = _both(define)
    for L, op in ((ember, e), (torch, t)):
        buf = L.zeros(3)
        v0 = buf._version
        assert op(buf, 4.0) is None and buf.tolist() == [4.0] * 3 and buf._version > v0

    def kernels(L, q):
        @L.library.custom_op(q, mutates_args=(), device_types="cpu")
        def neg(x: L.Tensor) -> L.Tensor:
            return -x
        return neg
    e, t = _both(kernels)
    for L, op in ((ember, e), (torch, t)):
        op.register_kernel("cpu", lambda x: x * 10)
        assert op(L.ones(1)).tolist() == [10.0]


def test_library_define_impl_and_functions():
    ns = f"emberlib{_name()}"
    for L in (ember, torch):
        lib = L.library.Library(ns, "FRAGMENT")
        lib.define("plus(Tensor x, float a=1.0) -> Tensor")
        lib.impl("plus", lambda x, a=1.0: x + a, "CPU")
        L.library.define(f"{ns}::twice", "(Tensor x) -> Tensor", lib=lib)
        L.library.impl(f"{ns}::twice", "cpu", lambda x: 2 * x, lib=lib)
        L.library.register_fake(f"{ns}::twice", lambda x: L.empty_like(x), lib=lib)
        assert getattr(L.ops, ns).plus(L.zeros(2), 2.5).tolist() == [2.5, 2.5]
        assert getattr(L.ops, ns).twice(L.ones(2)).tolist() == [2.0, 2.0]
        assert getattr(L.ops, ns).twice(L.ones(2, device="meta")).shape == (2,)
        with pytest.raises(ValueError, match="reserved namespace"):
            L.library.Library("prim", "FRAGMENT")
        with pytest.raises(NotImplementedError, match="fallthrough_kernel"):
            L.library.fallthrough_kernel()


def test_opcheck_and_get_ctx():
    e, t = _both(_scale)
    for L, op in ((ember, e), (torch, t)):
        op.register_fake(lambda x, k, bias=None: L.empty_like(x))
        r = L.library.opcheck(op, (L.ones(2), 2.0), test_utils="test_faketensor")
        assert r == {"test_faketensor": "SUCCESS"}
    with pytest.raises(RuntimeError, match="outside of a fake impl"):
        ember.library.get_ctx()
    seen = []
    e.register_fake(lambda x, k, bias=None: seen.append(ember.library.get_ctx()) or
                    ember.empty_like(x))
    e(ember.ones(2, device="meta"), 1.0)
    with pytest.raises(NotImplementedError, match="symbolic shapes"):
        seen[0].new_dynamic_size()


def test_torch_function_reaches_custom_ops():
    e, _ = _both(_scale)

    class Obj:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return "intercepted"
    assert e(Obj(), 2.0) == "intercepted"
