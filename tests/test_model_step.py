"""Pieces of the training step made faster for the model benchmarks: gradients the graph does
not need are not computed, and what is computed matches the plain path."""
import numpy as np
import pytest

import ember
from ember._ops import linalg


@pytest.fixture
def count_matmuls(monkeypatch):
    calls = []
    fwd = linalg.matmul.fwd

    def counting(xp, a, b):
        calls.append((a.shape, b.shape))
        return fwd(xp, a, b)
    monkeypatch.setattr(linalg.matmul, "fwd", counting)
    return calls


def test_linear_backward_skips_the_input_gradient_nobody_needs(count_matmuls):
    x = ember.randn(8, 3, 5)
    w = ember.randn(4, 5, requires_grad=True)
    b = ember.randn(4, requires_grad=True)
    y = ember.nn.functional.linear(x, w, b)
    assert len(count_matmuls) == 1 and count_matmuls[0] == ((24, 5), (5, 4))   # one 2-D GEMM
    y.square().sum().backward()
    assert len(count_matmuls) == 2          # the weight's product only, no g @ w for x
    g = 2 * y.detach().numpy().reshape(-1, 4)
    np.testing.assert_allclose(w.grad.numpy(), g.T @ x.numpy().reshape(-1, 5), rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), g.sum(0), rtol=1e-5)


def test_linear_gradients_under_saved_tensor_hooks_that_detach():
    # the hooks hand back tensors without requires_grad: the graph, not the saved tensor,
    # says which gradients are needed
    x = ember.randn(2, 3, 5, requires_grad=True)
    w = ember.randn(4, 5, requires_grad=True)
    with ember.autograd.graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
        y = ember.nn.functional.linear(x, w)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(w.detach().numpy().sum(0),
                                                               (2, 3, 5)), rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), np.broadcast_to(
        x.detach().numpy().reshape(-1, 5).sum(0), (4, 5)), rtol=1e-5)


def test_needs_input_grad_outside_a_backward_is_true():
    assert ember.autograd.graph.needs_input_grad(0)
