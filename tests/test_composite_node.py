"""``autograd.composite.one_node``: a composite recorded as one node of torch's name gives the
gradients its ops give, to any order, and behaves as a node (freed after backward, no node
without grad)."""
import pytest

import ember
from ember.autograd.composite import one_node


def _f(a, b):
    return (a * b.sin()).sum(0), a.exp()


def _grads(a, b, order):
    outs = _f(a, b)
    g = ember.autograd.grad(outs[0].sum() + outs[1].sum(), (a, b), create_graph=order > 1)
    return g if order == 1 else ember.autograd.grad(g[0].sum() + g[1].sum(), (a, b))


@pytest.mark.parametrize("order", [1, 2])
def test_gradients_are_the_composites(order):
    ember.manual_seed(0)
    a, b = (ember.randn(3, 2, dtype=ember.float64, requires_grad=True) for _ in range(2))
    want = _grads(a, b, order)
    global _f
    plain, _f = _f, lambda a, b: one_node("FooBackward0", plain, a, b)
    try:
        got = _grads(a, b, order)
        outs = _f(a, b)
    finally:
        _f = plain
    for w, g in zip(want, got):
        assert ember.equal(w, g)
    assert [o.grad_fn.name() for o in outs] == ["FooBackward0"] * 2
    assert outs[0].grad_fn is outs[1].grad_fn and outs[1]._output_nr == 1
    assert [n.variable for n, _ in outs[0].grad_fn.next_functions] == [a, b]


def test_an_input_given_twice_has_two_edges():
    x = ember.tensor([1.0, 2.0], requires_grad=True)
    y = one_node("BarBackward0", lambda p, q: (p * q).sum(), x, x)
    assert len(y.grad_fn.next_functions) == 2
    y.backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_no_node_without_grad_and_freed_after_backward():
    x = ember.ones(2, requires_grad=True)
    with ember.no_grad():
        assert one_node("BazBackward0", lambda t: t * 2, x).grad_fn is None
    y = one_node("BazBackward0", lambda t: (t * 2).sum(), x)
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
