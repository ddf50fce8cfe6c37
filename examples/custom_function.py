"""Custom autograd Functions, as in PyTorch's "Extending torch.autograd" tutorial: a Swish
activation with a hand-written backward (checked by gradcheck and gradgradcheck), and a
straight-through rounding used to fit weights restricted to a grid.

    python examples/custom_function.py --steps 200
"""
import argparse

import ember as torch
from ember.autograd import Function, gradcheck, gradgradcheck


class Swish(Function):
    """x * sigmoid(x) with its derivative written by hand."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        # NOTE: sigmoid(x) is recomputed here rather than saved by forward: forward runs
        # without grad, so a saved intermediate would carry no history and the second
        # derivative (gradgradcheck) would be wrong, in PyTorch as in ember.
        s = torch.sigmoid(x)
        return grad * (s + x * s * (1 - s))     # d/dx x*s(x), in tensor ops


class RoundSTE(Function):
    """Round to a grid of step ``step`` going forward; pass the gradient straight through."""

    @staticmethod
    def forward(ctx, x, step):
        return torch.round(x / step) * step

    @staticmethod
    def backward(ctx, grad):
        return grad, None              # no gradient for the (float) step argument


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--grid", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)

    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert gradcheck(Swish.apply, (x,)) and gradgradcheck(Swish.apply, (x,))
    print("Swish: gradcheck and gradgradcheck pass")
    y = torch.linspace(-3, 3, 7)
    print("swish", [round(v, 3) for v in Swish.apply(y).tolist()])

    # fit y = X @ w_true where every weight must lie on the grid; the rounding's gradient is
    # zero almost everywhere, so without the straight-through trick nothing would learn
    w_true = torch.tensor([0.75, -1.5, 0.25, 2.0])
    X = torch.randn(256, 4)
    target = X @ w_true
    w = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.05, momentum=0.9)
    for _ in range(args.steps):
        loss = ((X @ RoundSTE.apply(w, args.grid) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    learned = RoundSTE.apply(w, args.grid).detach()
    print(f"grid weights {learned.tolist()} (true {w_true.tolist()}), loss {loss.item():.4f}")
    return {"loss": loss.item(), "weights": learned.tolist(), "true": w_true.tolist()}


if __name__ == "__main__":
    main()
