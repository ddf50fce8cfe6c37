from test_autograd import same, x3
import pytest

@pytest.mark.parametrize("expr", ["(x.abs() ** 2).sum()", "(x * x.conj()).real.sum()", "(x * w).abs().sum()", "(x.exp() * w).imag.sum()", "(x / w).abs().sum()"])
def test_complex(expr):
    def f(lib):
        x = lib.tensor([1 + 2j, -0.5 + 1j], dtype=lib.complex128, requires_grad=True)
        w = lib.tensor([0.3, 2.0], dtype=lib.float64, requires_grad=True)
        y = eval(expr)
        y.backward()
        return x.grad, w.grad
    same(f)

def test_function_tuple1():
    def f(lib):
        class T(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return (x * 2,)
            @staticmethod
            def backward(ctx, g):
                return g * 2
        x = x3(lib, requires_grad=True)
        (y,) = T.apply(x)
        y.sum().backward()
        return x.grad
    same(f)
