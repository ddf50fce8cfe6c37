"""Complex tensors beyond the registry's samples: assigning ``.real`` / ``.imag``,
``conj_physical_``, ``Tensor.vdot`` and second derivatives through ``imag``, each run in torch and
ember side by side."""
import numpy as np
import pytest

from oracle import same, torch

Z = np.array([1 + 2j, 3 - 1j, -0.5 + 0.25j])
W = np.array([0.3 - 0.7j, 1.1 + 0.2j, -2.0 + 1.0j])


@pytest.mark.parametrize("value", [
    lambda L: L.tensor([5.0, 6.0, 7.0]),              # same shape
    lambda L: L.tensor(7.0),                          # broadcast
    lambda L: 3.0,                                    # a Python number
    lambda L: L.tensor([1, 2, 3]),                    # integers, cast
])
@pytest.mark.parametrize("part", ["real", "imag"])
def test_assigning_real_and_imag_writes_into_the_view(part, value):
    def f(L):
        x = L.tensor(Z)
        before = x
        setattr(x, part, value(L))
        return x, before is x
    same(f)


def test_assigning_real_of_a_real_tensor_and_imag_errors():
    def real_of_real(L):
        t = L.ones(3)
        t.real = L.zeros(3)
        return t
    same(real_of_real)

    def imag_of_real(L):
        t = L.ones(3)
        t.imag = L.zeros(3)
    same(imag_of_real, "non-complex dtypes")

    def bad_shape(L):
        x = L.tensor(Z)
        x.real = L.zeros(2)
    same(bad_shape, "must match the size")

    def leaf(L):
        x = L.tensor(Z, requires_grad=True)
        x.imag = L.zeros(3)
    same(leaf, "a view of a leaf Variable")


def test_assigning_imag_is_differentiable():
    def f(L):
        a = L.tensor(Z, requires_grad=True)
        b = L.tensor([4.0, 5.0, -1.0], requires_grad=True)
        x = a * 1
        x.imag = b * 2
        (x * L.tensor(W)).abs().sum().backward()
        return x, a.grad, b.grad
    same(f)


def test_conj_physical_in_place():
    def values(L):
        x = L.tensor(Z)
        r = x.conj_physical_()
        return x, r is x, x.is_conj()
    same(values)

    def real(L):
        t = L.tensor([1.0, -2.0])
        return t.conj_physical_() is t, t
    same(real)

    def grad(L):
        a = L.tensor(Z, requires_grad=True)
        c = a * 2
        c.conj_physical_()
        (c * L.tensor(W)).real.sum().backward()
        return a.grad
    same(grad)

    def leaf(L):
        L.tensor(Z, requires_grad=True).conj_physical_()
    same(leaf, "leaf Variable")


def test_vdot_method_and_gradients():
    def f(L):
        a = L.tensor(Z, requires_grad=True)
        b = L.tensor(W, requires_grad=True)
        r = a.vdot(b)
        (r * (0.5 - 1j)).real.backward()
        return r, a.grad, b.grad
    same(f)
    same(lambda L: L.tensor([1.0, 2.0]).vdot(L.tensor([3.0, 4.0])))
    same(lambda L: L.tensor([1.0, 2.0]).vdot(L.tensor([3.0, 4.0, 5.0])), "inconsistent")


@pytest.mark.parametrize("expr", [lambda x: (x * x).imag, lambda x: (x.exp() * x).imag,
                                  lambda x: x.imag * x.real * x])
def test_imag_second_derivative(expr):
    """(Regression: the gradient of imag multiplies by the Python scalar 1j, whose own
    gradient must be conjugated, or gradgradcheck of (x * x).imag fails.)"""
    def f(L):
        x = L.tensor(Z, requires_grad=True)
        g, = L.autograd.grad(expr(x).sum(), x, create_graph=True)
        gg, = L.autograd.grad((g * L.tensor(W)).real.sum(), x)
        return g, gg, L.autograd.gradgradcheck(expr, (x,))
    same(f)
