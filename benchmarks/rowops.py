"""Row ops on a (4096, 1024) float32 input, ember vs torch in one run: exact and tanh GELU,
softmax, log_softmax, layer_norm, cross-entropy, forward and forward+backward.

Each thread count runs in a fresh process (OMP_NUM_THREADS and set_num_threads both set); in
it the two libraries run interleaved and the best of several rounds is kept, to be fair on a
busy machine. ``EMBER_NO_C=1`` measures ember's NumPy reference path instead of its kernels.

    python -m benchmarks.rowops [--threads 1 2] [--rounds 7]
"""
import argparse
import json
import os
import subprocess
import sys
import time

SHAPE = (4096, 1024)


def _cases(T):
    """name -> (fn, is_backward) for torch-shaped module ``T``."""
    import numpy as np
    F = T.nn.functional
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(SHAPE).astype(np.float32)
    target = T.tensor(rng.integers(0, SHAPE[1], SHAPE[0]))
    w = T.ones(SHAPE[1], requires_grad=True)
    b = T.zeros(SHAPE[1], requires_grad=True)
    fns = {
        "gelu": lambda x: F.gelu(x),
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "softmax": lambda x: F.softmax(x, -1),
        "log_softmax": lambda x: F.log_softmax(x, -1),
        "layer_norm": lambda x: F.layer_norm(x, SHAPE[1:], w, b),
        "cross_entropy": lambda x: F.cross_entropy(x, target),
    }
    cases = {}
    for name, f in fns.items():
        x = T.tensor(x0)
        xg = T.tensor(x0, requires_grad=True)
        g = T.ones(()) if name == "cross_entropy" else T.tensor(x0 * 0.5)

        def fwd(f=f, x=x):
            with T.no_grad():
                f(x)

        def bwd(f=f, xg=xg, g=g):
            xg.grad = None
            f(xg).backward(g)
        cases[f"{name} fwd"] = fwd
        cases[f"{name} fwd+bwd"] = bwd
    return cases


def _worker(threads, rounds, clock):
    import torch

    import ember
    torch.set_num_threads(threads)
    if hasattr(ember, "set_num_threads"):
        ember.set_num_threads(threads)
    libs = {"ember": _cases(ember), "torch": _cases(torch)}
    best = {lib: dict.fromkeys(c, float("inf")) for lib, c in libs.items()}
    now = time.process_time if clock == "cpu" else time.perf_counter
    for _ in range(rounds):
        for name in libs["ember"]:
            for lib, cases in libs.items():
                fn = cases[name]
                fn()                                        # warm-up
                t = now()
                for _ in range(3):
                    fn()
                best[lib][name] = min(best[lib][name], (now() - t) / 3)
    json.dump(best, sys.stdout)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: process CPU time, steadier on a busy machine (1 thread only)")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args.worker, args.rounds, args.clock)
    print(f"row ops on {SHAPE} float32, best of {args.rounds} rounds, {args.clock} ms"
          + (" (EMBER_NO_C=1: NumPy path)" if os.environ.get("EMBER_NO_C") else ""))
    print("| op | threads | ember | torch | ember/torch |\n|---|---|---|---|---|")
    for n in args.threads:
        env = dict(os.environ, OMP_NUM_THREADS=str(n), OPENBLAS_NUM_THREADS=str(n),
                   MKL_NUM_THREADS=str(n))
        cmd = [sys.executable, "-m", "benchmarks.rowops", "--worker", str(n), "--rounds",
               str(args.rounds), "--clock", args.clock]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        res = json.loads(out)
        for name, e in res["ember"].items():
            t = res["torch"][name]
            print(f"| {name} | {n} | {e * 1e3:.2f} | {t * 1e3:.2f} | {e / t:.2f} |")


if __name__ == "__main__":
    main()
