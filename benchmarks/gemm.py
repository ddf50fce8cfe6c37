"""Matrix products, ember vs torch in one run: square matmul from 32 to 4096, the attention-
shaped einsums of ``benchmarks.workloads``, the GPT step's products (forward and the two
transposed products of their backward), bmm, and linear layers at the MLP and GPT step's
shapes, forward and forward+backward.

Each thread count runs in a fresh process (OMP_NUM_THREADS and set_num_threads both set); in
it the two libraries take turns case by case, and the median of the rounds is kept, so a busy
spell on a shared machine hits both alike. ``--clock cpu`` (the default) reads
``time.process_time``: CPU time of all threads, steadier than the wall clock on a loaded
machine. ``EMBER_NO_C=1`` measures ember's NumPy reference path instead of its BLAS calls.

    python -m benchmarks.gemm [--threads 1 2] [--rounds 9] [--only matmul]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks.workloads import _ATT, _EINSUMS


def _cases(T):
    """name -> zero-argument callable for torch-shaped module ``T``."""
    import numpy as np
    rng = np.random.default_rng(0)

    def t(*shape, grad=False):
        return T.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=grad)
    cases = {}
    for n in (32, 64, 128, 256, 512, 1024, 2048, 4096):
        a, b = t(n, n), t(n, n)
        cases[f"matmul {n}"] = lambda a=a, b=b: a @ b
    # the GPT step's products, each with the two its backward makes: g @ B^T and A^T @ g
    for sa, sb in (((1024, 128), (128, 384)), ((1024, 512), (512, 128)),
                   ((64, 64, 32), (64, 32, 64)), ((64, 64, 64), (64, 64, 32))):
        a, b, g = t(*sa), t(*sb), t(*sa[:-1], sb[-1])
        name = "x".join(map(str, sa)) + "@" + "x".join(map(str, sb[-2:]))
        cases[f"matmul {name}"] = lambda a=a, b=b: a @ b
        cases[f"matmul {name} g@B^T"] = lambda b=b, g=g: g @ b.mT
        cases[f"matmul {name} A^T@g"] = lambda a=a, g=g: a.mT @ g
    for eq, names in _EINSUMS.items():
        a, b = (t(*_ATT[n]) for n in names)
        cases[f"einsum {eq}"] = lambda eq=eq, a=a, b=b: T.einsum(eq, a, b)
    q, k = t(64, 256, 64), t(64, 256, 64)
    cases["bmm (64,256,64)x(64,64,256)"] = lambda: T.bmm(q, k.transpose(1, 2))
    lin = T.nn.functional.linear
    # (rows, in, out): the MLP's first and second layers, the GPT's qkv and mlp layers
    for rows, d_in, d_out in ((128, 784, 512), (128, 512, 512), (1024, 128, 384),
                              (1024, 512, 128)):
        x, w, bias = t(rows, d_in), t(d_out, d_in), t(d_out)
        xg, wg, bg = t(rows, d_in, grad=True), t(d_out, d_in, grad=True), t(d_out, grad=True)
        g = t(rows, d_out)
        cases[f"linear {rows}x{d_in}->{d_out} fwd"] = lambda x=x, w=w, b=bias: lin(x, w, b)

        def step(x=xg, w=wg, b=bg, g=g):
            x.grad = w.grad = b.grad = None
            lin(x, w, b).backward(g)
        cases[f"linear {rows}x{d_in}->{d_out} fwd+bwd"] = step
    return cases


def _worker(threads, rounds, clock, only):
    import torch

    import ember
    torch.set_num_threads(threads)
    ember.set_num_threads(threads)
    libs = {"ember": _cases(ember), "torch": _cases(torch)}
    names = [n for n in libs["ember"] if only is None or only in n]
    times = {lib: {n: [] for n in names} for lib in libs}
    now = time.process_time if clock == "cpu" else time.perf_counter
    for _ in range(rounds):
        for name in names:
            for lib, cases in libs.items():
                fn = cases[name]
                fn()                                        # warm-up
                number, t = 1, 0.0
                while True:       # a repeat of >= 20 ms: process_time ticks are coarse
                    t0 = now()
                    for _ in range(number):
                        fn()
                    t = now() - t0
                    if t >= 0.02:
                        break
                    number *= 4
                times[lib][name].append(t / number)
    json.dump({lib: {n: statistics.median(v) for n, v in d.items()} for lib, d in
               times.items()}, sys.stdout)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="cpu")
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args.worker, args.rounds, args.clock, args.only)
    print(f"matrix products, float32, median of {args.rounds} rounds, {args.clock} us"
          + (" (EMBER_NO_C=1: NumPy path)" if os.environ.get("EMBER_NO_C") else ""))
    print("| case | threads | ember | torch | ember/torch |\n|---|---|---|---|---|")
    for n in args.threads:
        env = dict(os.environ, OMP_NUM_THREADS=str(n), OPENBLAS_NUM_THREADS=str(n),
                   MKL_NUM_THREADS=str(n))
        cmd = [sys.executable, "-m", "benchmarks.gemm", "--worker", str(n), "--rounds",
               str(args.rounds), "--clock", args.clock] + (
                   ["--only", args.only] if args.only else [])
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        res = json.loads(out)
        for name, e in res["ember"].items():
            t = res["torch"][name]
            print(f"| {name} | {n} | {e * 1e6:.1f} | {t * 1e6:.1f} | {e / t:.2f} |", flush=True)


if __name__ == "__main__":
    main()
