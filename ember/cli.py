"""The ``ember`` command line: ``ember demo | run | bench | info``."""
import argparse
import sys
import time


def _demo(args):
    """Train a 2-layer MLP on a generated two-spirals problem with plain ember tensors."""
    import math

    import ember
    ember.manual_seed(args.seed)
    n = 1024
    t = ember.rand(n) * 3 * math.pi
    label = ember.randint(0, 2, (n,))
    sign = label * 2 - 1
    x = ember.stack([t.cos() * t * sign, t.sin() * t * sign], 1) / 10
    x = x + ember.randn(n, 2) * 0.05
    y = label.float()

    def param(*shape, scale):
        return (ember.randn(*shape) * scale).requires_grad_()

    w1, b1 = param(2, 64, scale=1.0), ember.zeros(64, requires_grad=True)
    w2, b2 = param(64, 64, scale=64 ** -0.5), ember.zeros(64, requires_grad=True)
    w3, b3 = param(64, 1, scale=64 ** -0.5), ember.zeros(1, requires_grad=True)
    params = [w1, b1, w2, b2, w3, b3]
    lr, start = 0.3, time.perf_counter()
    for epoch in range(args.epochs):
        perm = ember.randperm(n)
        for i in range(0, n, 64):
            idx = perm[i:i + 64]
            h = (x[idx] @ w1 + b1).tanh()
            h = (h @ w2 + b2).tanh()
            p = (h @ w3 + b3).squeeze(1).sigmoid()
            yb = y[idx]
            loss = -(yb * (p + 1e-7).log() + (1 - yb) * (1 - p + 1e-7).log()).mean()
            for q in params:
                q.grad = None
            loss.backward()
            with ember.no_grad():
                for q in params:
                    q -= lr * q.grad
        with ember.no_grad():
            h = ((x @ w1 + b1).tanh() @ w2 + b2).tanh()
            acc = (((h @ w3 + b3).squeeze(1) > 0).float() == y).float().mean().item()
        print(f"epoch {epoch + 1:3d}/{args.epochs}  loss {loss.item():.4f}  "
              f"train accuracy {acc:.3f}  {time.perf_counter() - start:.1f}s", flush=True)
    return 0


def _run(args):
    from .runner import run
    return run(args.script, args.args)


def _info(args):
    import platform

    import numpy as np

    import ember
    print(f"ember {ember.__version__}, numpy {np.__version__}, python {platform.python_version()}")
    try:
        import cupy  # noqa: F401
        cuda = f"available (CuPy {cupy.__version__})"
    except ImportError:
        cuda = "unavailable: CuPy is not installed (pip install 'ember[cuda]')"
    print(f"cuda: {cuda}")
    return 0


def _bench(args):
    """Run the benchmark suite's quick mode; it lives in the source tree, not the package."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "run.py").is_file():
        print(f"ember bench: no benchmarks/ next to the ember package (looked in {root}); "
              "it needs a source checkout", file=sys.stderr)
        return 1
    sys.path.insert(0, str(root))
    from benchmarks import run
    return run.main(["--quick"] + args.rest)


def main(argv=None):
    p = argparse.ArgumentParser(prog="ember", description="ember: PyTorch's API, lighter.")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="train a small model end to end")
    d.add_argument("--epochs", type=int, default=100)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(fn=_demo)
    r = sub.add_parser("run", help="run an unmodified PyTorch script on ember")
    r.add_argument("script", help="the Python script (it may say `import torch`)")
    r.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    r.set_defaults(fn=_run)
    b = sub.add_parser("bench", help="quick benchmarks against PyTorch and NumPy")
    b.set_defaults(fn=_bench)
    i = sub.add_parser("info", help="versions and available backends")
    i.set_defaults(fn=_info)
    # `ember bench` hands options it does not know to benchmarks.run (--threads, --json...)
    args, args.rest = p.parse_known_args(argv)
    if args.rest and args.cmd != "bench":
        p.error(f"unrecognized arguments: {' '.join(args.rest)}")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
