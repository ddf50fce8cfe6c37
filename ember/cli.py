"""The ``ember`` command line: ``ember demo | run | bench | info``."""
import argparse
import os
import sys


def _demo(args):
    """Train the chosen demo model end to end (see ember/demo/); exit 1 if it did not learn
    what it should."""
    kw = dict(device=args.device, out=args.out, seed=args.seed)
    if args.epochs:
        kw["epochs"] = args.epochs
    try:
        if args.model == "digits":
            from .demo import digits
            return 0 if digits.run(**kw) >= 0.95 else 1
        from .demo import chargpt
        res = chargpt.run(**kw)
        # a uniform guess costs log(vocab) ~ 4.3 nats; the full demo reaches ~1.96
        return 0 if res["val_loss"][-1] < res["uniform"] - 1.5 else 1
    except KeyboardInterrupt:
        # checkpoints are written atomically and only at the end: nothing partial is left
        print("\ninterrupted: no checkpoint written", file=sys.stderr)
        return 130


def _run(args):
    from .runner import run
    return run(args.script, args.args)


def _optional(module, what):
    """One ``ember info`` line for an optional package: its version, or why it is missing."""
    import importlib
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        return f"{what}: unavailable ({e.name or module} is not installed)"
    return f"{what}: available ({module} {getattr(mod, '__version__', '?')})"


def _info(args):
    """Versions, the BLAS and threads in use, and which optional backends load (and why not)."""
    import platform

    import numpy as np

    import ember
    from ember._backends import blas
    print(f"ember {ember.__version__}, numpy {np.__version__}, python "
          f"{platform.python_version()} ({platform.system()} {platform.machine()})")
    lib = blas.library if blas.available() else None
    print(f"BLAS: {lib or 'not reachable directly (NumPy matmul only)'}")
    from ember._C import kernels
    print(f"C kernels: {kernels.describe()}")
    print(f"threads: {ember.get_num_threads()} (interop {ember.get_num_interop_threads()}), "
          f"{os.cpu_count()} CPUs")
    from ember import cuda
    n, why = cuda.device_count(), cuda._cupy()[2]
    print(f"cuda: {n} GPU{'s' * (n != 1)} through CuPy" if n else f"cuda: unavailable ({why})")
    from ember.distributed import _mpi
    print("distributed: MPI through mpi4py" if _mpi.available() else
          "distributed: unavailable (pip install 'ember[distributed]': mpi4py, mpich)")
    # (no extra to suggest: this part of ember is not written yet)
    print("ONNX export: not implemented in ember yet")
    print(_optional("safetensors", "safetensors"))
    return 0


def _bench(args):
    """Run the benchmark suite (quick mode unless --full); it lives in the source tree, not
    the package."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "run.py").is_file():
        print(f"ember bench: no benchmarks/ next to the ember package (looked in {root}); "
              "it needs a source checkout", file=sys.stderr)
        return 1
    sys.path.insert(0, str(root))
    from benchmarks import run
    # quick by default (about 2 minutes); --full is the run the README's table comes from
    rest = [a for a in args.rest if a != "--full"]
    return run.main(rest if "--full" in args.rest else ["--quick"] + rest)


def main(argv=None):
    p = argparse.ArgumentParser(prog="ember", description="ember: PyTorch's API, lighter.")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="train a small model end to end on bundled data")
    d.add_argument("model", nargs="?", default="digits", choices=["digits", "chargpt"],
                   help="digits: a CNN on the 1,797 handwritten digits ember ships; "
                   "chargpt: a character-level transformer on Alice in Wonderland")
    d.add_argument("--epochs", type=int, default=None, help="passes over the training data")
    d.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    d.add_argument("--out", default="ember-demo-out", help="folder for checkpoint and plot")
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
