"""ember.func's transforms against torch.func (the oracle): grad, grad_and_value, vjp, jvp,
jacrev, jacfwd, hessian, linearize, vmap's options, functional_call and module helpers."""
import pytest

import ember
from oracle import same, torch


def _x(lib, *shape, seed=0):
    g = ember.Generator().manual_seed(seed)
    return lib.tensor(ember.randn(*shape, dtype=ember.float64, generator=g).tolist(),
                      dtype=lib.float64)


def f3(lib, x, y):
    return (x.sin() * y).sum() + (x ** 2).sum()


def test_grad_and_value_argnums_has_aux():
    same(lambda t: t.func.grad(lambda x, y: f3(t, x, y))(_x(t, 3), _x(t, 3, seed=1)))
    same(lambda t: t.func.grad(lambda x, y: f3(t, x, y), argnums=(0, 1))(
        _x(t, 3), _x(t, 3, seed=1)))
    same(lambda t: t.func.grad_and_value(lambda x, y: f3(t, x, y), argnums=1)(
        _x(t, 3), _x(t, 3, seed=1)))
    same(lambda t: t.func.grad(lambda x: ((x * 2).sum(), x.cos()), has_aux=True)(_x(t, 4)))
    same(lambda t: t.func.grad(lambda d: (d["a"] * d["b"]).sum())(
        {"a": _x(t, 2), "b": _x(t, 2, seed=3)})["b"])


def test_grad_errors():
    same(lambda t: t.func.grad(lambda x: x * 2)(_x(t, 3)), "scalar Tensor")
    same(lambda t: t.func.grad(lambda x: x.sum(), argnums=2)(_x(t, 3)), "argnum")
    same(lambda t: t.func.grad(lambda x: x.sum(), has_aux=True)(_x(t, 3)), "tuple")


def test_vjp_jvp_linearize():
    same(lambda t: t.func.vjp(lambda x: x.exp() * 3, _x(t, 4))[1](_x(t, 4, seed=2)))
    same(lambda t: t.func.vjp(lambda x, y: (x @ y, x.sum()), _x(t, 2, 3), _x(t, 3, 2))[1](
        (_x(t, 2, 2, seed=5), _x(t, seed=6))))
    same(lambda t: t.func.jvp(lambda x: x.tanh() * x, (_x(t, 5),), (_x(t, 5, seed=1),)))
    same(lambda t: t.func.jvp(lambda x, y: x @ y, (_x(t, 2, 3), _x(t, 3)),
                              (_x(t, 2, 3, seed=1), _x(t, 3, seed=2))))
    same(lambda t: t.func.linearize(lambda x: x.sin().cumsum(0), _x(t, 4))[1](_x(t, 4, seed=9)))
    same(lambda t: t.func.jvp(lambda x: x, [_x(t, 2)], [_x(t, 2)]), "tuple")


def test_jacobians_and_hessian():
    w1, w2 = _x(ember, 3, 4, seed=1).tolist(), _x(ember, 4, 2, seed=2).tolist()

    def mlp(t, x):
        return (x @ t.tensor(w1, dtype=t.float64)).tanh() @ t.tensor(w2, dtype=t.float64)
    same(lambda t: t.func.jacrev(lambda x: mlp(t, x))(_x(t, 3)))
    same(lambda t: t.func.jacfwd(lambda x: mlp(t, x))(_x(t, 3)))
    same(lambda t: t.func.jacrev(lambda x, y: x * y.sum(), argnums=(0, 1))(_x(t, 2), _x(t, 3)))
    same(lambda t: t.func.jacfwd(lambda x, y: (x * y).sin(), argnums=1)(_x(t, 2, 2),
                                                                       _x(t, 2, 2, seed=4)))
    same(lambda t: t.func.hessian(lambda x: (x.sin() * x.exp()).sum())(_x(t, 3)))
    same(lambda t: t.func.hessian(lambda x: mlp(t, x).pow(2).sum())(_x(t, 3)))
    same(lambda t: t.func.jacrev(t.func.jacrev(lambda x: (x ** 3).prod()))(_x(t, 3)))


def test_vmap_of_vjp_fn():
    """A vjp made outside vmap (or at fewer levels) and its vjp_fn vmapped over cotangents:
    one backward through the batching rules (as jacrev runs)."""
    def f(t, x):
        return (x[1:, :2].softmax(-1) * x.diagonal()[:2]).log_softmax(0)

    def outer(t):
        _, fn = t.func.vjp(lambda x: f(t, x), _x(t, 3, 3))
        return t.func.vmap(fn)(_x(t, 5, 2, 2, seed=1))
    same(outer)

    def nested(t):
        def one(x, cts):
            _, fn = t.func.vjp(lambda x: f(t, x), x)
            return t.func.vmap(fn, in_dims=1)(cts)
        return t.func.vmap(one)(_x(t, 2, 3, 3), _x(t, 2, 2, 4, 2, seed=2))
    same(nested)
    conv = [_x(ember, 2, 1, 3, 3, seed=3).tolist(), _x(ember, 1, 5, 5, seed=4)]
    same(lambda t: t.func.jacrev(lambda x: t.nn.functional.conv2d(
        x, t.tensor(conv[0], dtype=t.float64)).tanh())(t.tensor(conv[1].tolist(),
                                                                  dtype=t.float64)))


def test_vmap_in_out_dims_chunks_nesting():
    same(lambda t: t.func.vmap(lambda a, b: a @ b, in_dims=(1, None))(_x(t, 3, 5),
                                                                      _x(t, 3, 2)))
    same(lambda t: t.func.vmap(lambda d: d["x"] * d["y"], in_dims=({"x": 0, "y": None},))(
        {"x": _x(t, 4, 2), "y": _x(t, 2)}))
    same(lambda t: t.func.vmap(lambda a: (a.sum(0), a * 2), out_dims=(0, 1))(_x(t, 3, 4, 2)))
    same(lambda t: t.func.vmap(lambda a: a.softmax(-1), chunk_size=2)(_x(t, 5, 3)))
    same(lambda t: t.func.vmap(t.func.vmap(lambda a, b: a.dot(b)))(_x(t, 2, 3, 4),
                                                                  _x(t, 2, 3, 4, seed=1)))
    same(lambda t: t.func.vmap(t.func.vmap(lambda a, b: a * b, in_dims=(0, None)),
                               in_dims=(None, 0))(_x(t, 3, 2), _x(t, 4, 2)))
    same(lambda t: t.func.vmap(lambda a: a.sum())(_x(t, 3, 4)).shape)
    same(lambda t: t.func.vmap(lambda a: a[1:, 0] * 3, in_dims=-1)(_x(t, 3, 4, 2)))


def test_vmap_errors():
    same(lambda t: t.func.vmap(lambda a, b: a + b)(_x(t, 3), _x(t, 4)), "same size")
    same(lambda t: t.func.vmap(lambda a: a)(_x(t, 3).sum()), "in_dim")
    same(lambda t: t.func.vmap(lambda a: a + t.rand(1))(_x(t, 3)), "randomness")
    same(lambda t: t.func.vmap(lambda a: a.item())(_x(t, 3)), ".item()")
    with pytest.raises(RuntimeError, match="randomness"):
        ember.func.vmap(lambda a: a, randomness="sometimes")


def test_vmap_of_grad_and_grad_of_vmap():
    f = lambda t: lambda x: (x.sin() ** 2).sum()   # noqa: E731
    same(lambda t: t.func.vmap(t.func.grad(f(t)))(_x(t, 4, 3)))
    same(lambda t: t.func.grad(lambda x: t.func.vmap(f(t))(x).sum())(_x(t, 4, 3)))
    same(lambda t: t.func.vmap(t.func.grad(lambda w, x: (x @ w).tanh().sum()),
                               in_dims=(None, 0))(_x(t, 3, 2), _x(t, 5, 3)))
    same(lambda t: t.func.vmap(t.func.jacrev(lambda x: x.sin() * x.sum()))(_x(t, 2, 3)))
    same(lambda t: t.func.vmap(t.func.hessian(lambda x: (x ** 3).sum()))(_x(t, 2, 3)))
    same(lambda t: t.func.vmap(t.func.vmap(t.func.grad(lambda x: x.exp().sum())))(
        _x(t, 2, 3, 4)))


def test_functional_call_tied_and_stack_module_state():
    def run(t):
        t.manual_seed(0)
        m = t.nn.Sequential(t.nn.Linear(3, 3, bias=False), t.nn.Linear(3, 3, bias=False))
        m[1].weight = m[0].weight
        w = t.ones(3, 3, dtype=t.float32)
        return t.func.functional_call(m, {"0.weight": w}, (t.ones(1, 3),))
    same(run)

    def ensemble(t):
        ms = [t.nn.Linear(3, 2) for _ in range(4)]
        for i, m in enumerate(ms):
            with t.no_grad():
                m.weight.fill_(i)
                m.bias.fill_(-i)
        p, b = t.func.stack_module_state(ms)
        call = lambda p, b, x: t.func.functional_call(ms[0], (p, b), (x,))  # noqa: E731
        return p["weight"].shape, t.func.vmap(call, in_dims=(0, 0, None))(p, b, t.ones(5, 3))
    same(ensemble)


def test_batch_norm_under_vmap_and_functionalize():
    def run(t):
        t.manual_seed(0)
        bn = t.func.replace_all_batch_norm_modules_(t.nn.BatchNorm1d(3))
        x = t.arange(24, dtype=t.float32).reshape(2, 4, 3).sin()
        return t.func.vmap(bn)(x), bn.running_mean is None
    same(run)

    def mutate(t):
        def f(x):
            y = x.clone()
            y.mul_(2).add_(1)
            return y
        return t.func.functionalize(f)(t.arange(3.0))
    same(mutate)


def test_torch_vmap_reexported():
    assert ember.vmap is ember.func.vmap
    assert torch.vmap is torch.func.vmap


def test_vmap_inplace_ops():
    same(lambda t: t.func.vmap(lambda x: t.nn.functional.relu(x.clone(), inplace=True))(
        _x(t, 3, 2)))
    same(lambda t: t.func.vmap(lambda x: x.clone().mul_(2).add_(1)[0])(_x(t, 3, 2)))
    same(lambda t: t.func.vmap(t.func.grad(lambda x: x.clone().mul_(x).sum()))(_x(t, 3, 2)))
    same(lambda t: t.func.vmap(lambda a, b: a.add_(b), in_dims=(None, 0))(_x(t, 2), _x(t, 3, 2)),
         "doesn't match the broadcast shape")


def test_rearrange_and_debug_unwrap():
    x = lambda t: t.arange(48.0).reshape(2, 6, 4)  # noqa: E731
    for pattern, lengths in (("b (h w) c -> b c h w", {"h": 2}), ("b n c -> (b n) c", {}),
                             ("... c -> c ...", {}), ("b (h w) c -> (b h) (w c)", {"w": 3})):
        same(lambda t: t.func.rearrange(x(t), pattern, **lengths))
    same(lambda t: t.func.vmap(lambda a: t.func.debug_unwrap(a).sum(), out_dims=None)(x(t)))
