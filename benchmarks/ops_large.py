"""Indexing, gather/scatter, sort/topk and scans on 1M-element float32 tensors (int64 indices).

The workloads are registered with ``benchmarks.run`` (``WORKLOADS``); run alone, this module
times ember and torch side by side in one process, interleaved, and prints medians of
process CPU time with the ember/torch ratio (issue #4 asks for <= 1.5 on every row):

    OMP_NUM_THREADS=1 python -m benchmarks.ops_large [--threads 1] [--repeats 7] [--only sort]

Index tensors are random with repeats (``randint``), so accumulating writes really accumulate
and plain writes race, as in a histogram or an embedding gradient.
"""
import argparse
import statistics
import sys
import time

from benchmarks.workloads import Workload

N = 1 << 20                 # elements of every input
K_SMALL, K_LARGE = 100, N // 10


def _data(T):
    """Inputs shared by every case, made once per framework from the same NumPy arrays."""
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.standard_normal(N).astype(np.float32)
    d = {"x": T.tensor(x), "xg": T.tensor(x, requires_grad=True),
         "v": T.tensor(rng.standard_normal(N).astype(np.float32)),
         "idx": T.tensor(rng.integers(0, N, N)),
         "mask": T.tensor(x > 0),
         "x2": T.tensor(x.reshape(1024, 1024)),
         "x2g": T.tensor(x.reshape(1024, 1024), requires_grad=True),
         "idx2": T.tensor(rng.integers(0, 1024, (1024, 1024))),
         "v2": T.tensor(rng.standard_normal((1024, 1024)).astype(np.float32)),
         "near1": T.tensor((1 + 1e-6 * x).astype(np.float32))}
    return d


def _bwd(leaf, fn):
    """Forward and backward of ``fn(leaf).sum()``."""
    def build(T, d):
        def step():
            d[leaf].grad = None
            fn(T, d, d[leaf]).sum().backward()
        return step
    return build


def _fwd(fn):
    """Forward only, building no graph (as inference code would not)."""
    def build(T, d):
        def run():
            with T.no_grad():
                fn(T, d)
        return run
    return build


def _inplace(fn):
    """An in-place write into a private copy of ``x`` (repeated writes land on the same one)."""
    def build(T, d):
        target = d["x"].clone()
        return _fwd(lambda T, d: fn(target, d))(T, d)
    return build


# name -> build(T, data) -> zero-argument callable
CASES = {
    "x[idx]": _fwd(lambda T, d: d["x"][d["idx"]]),
    "x[idx] fwd+bwd": _bwd("xg", lambda T, d, x: x[d["idx"]]),
    "x[mask]": _fwd(lambda T, d: d["x"][d["mask"]]),
    "x[idx] = v": _inplace(lambda x, d: x.__setitem__(d["idx"], d["v"])),
    "index_put_ accumulate": _inplace(
        lambda x, d: x.index_put_((d["idx"],), d["v"], accumulate=True)),
    "gather 1-D": _fwd(lambda T, d: d["x"].gather(0, d["idx"])),
    "gather 1-D fwd+bwd": _bwd("xg", lambda T, d, x: x.gather(0, d["idx"])),
    "gather (1024,1024) dim 1": _fwd(lambda T, d: d["x2"].gather(1, d["idx2"])),
    "gather (1024,1024) dim 1 fwd+bwd": _bwd("x2g", lambda T, d, x: x.gather(1, d["idx2"])),
    "scatter 1-D": _fwd(lambda T, d: d["x"].scatter(0, d["idx"], d["v"])),
    "scatter (1024,1024) dim 1": _fwd(lambda T, d: d["x2"].scatter(1, d["idx2"], d["v2"])),
    "scatter_add 1-D": _fwd(lambda T, d: d["x"].scatter_add(0, d["idx"], d["v"])),
    "scatter_add (1024,1024) dim 1": _fwd(
        lambda T, d: d["x2"].scatter_add(1, d["idx2"], d["v2"])),
    "scatter_reduce amax 1-D": _fwd(
        lambda T, d: d["x"].scatter_reduce(0, d["idx"], d["v"], "amax")),
    "index_select": _fwd(lambda T, d: d["x"].index_select(0, d["idx"])),
    "index_select fwd+bwd": _bwd("xg", lambda T, d, x: x.index_select(0, d["idx"])),
    "index_add": _fwd(lambda T, d: d["x"].index_add(0, d["idx"], d["v"])),
    "sort": _fwd(lambda T, d: T.sort(d["x"])),
    "sort fwd+bwd": _bwd("xg", lambda T, d, x: T.sort(x)[0]),
    "argsort": _fwd(lambda T, d: T.argsort(d["x"])),
    "topk k=100": _fwd(lambda T, d: T.topk(d["x"], K_SMALL)),
    "topk k=10%": _fwd(lambda T, d: T.topk(d["x"], K_LARGE)),
    "topk k=10% fwd+bwd": _bwd("xg", lambda T, d, x: T.topk(x, K_LARGE)[0]),
    "cumsum": _fwd(lambda T, d: T.cumsum(d["x"], 0)),
    "cumsum fwd+bwd": _bwd("xg", lambda T, d, x: T.cumsum(x, 0)),
    "cumprod": _fwd(lambda T, d: T.cumprod(d["near1"], 0)),
}


def _cases(T, names):
    d = _data(T)
    return {name: CASES[name](T, d) for name in names}


def _workload(name):
    return lambda T: _cases(T, [name])[name]


WORKLOADS = [Workload(f"1M {name}", _workload(name), unit="ms") for name in CASES]


def measure(names, repeats, threads):
    """``{name: (ember_s, torch_s)}``: medians of process CPU time, the two run interleaved."""
    import torch

    import ember
    torch.set_num_threads(threads)
    ember.set_num_threads(threads)
    libs = {"ember": _cases(ember, names), "torch": _cases(torch, names)}
    out = {}
    for name in names:
        fns = [libs[lib][name] for lib in ("ember", "torch")]
        times = ([], [])
        for fn in fns:
            fn()                                    # warm-up
        for _ in range(repeats):
            for fn, ts in zip(fns, times):
                t = time.process_time()
                fn()
                ts.append(time.process_time() - t)
        out[name] = tuple(statistics.median(ts) for ts in times)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args(argv)
    names = [n for n in CASES if args.only in n]
    res = measure(names, args.repeats, args.threads)
    print(f"1M-element ops, {args.threads} thread(s), median of {args.repeats}, CPU ms")
    print("| op | ember | torch | ember/torch |\n|---|---:|---:|---:|")
    for name, (e, t) in res.items():
        print(f"| {name} | {e * 1e3:.2f} | {t * 1e3:.2f} | {e / t:.2f} |")
    worst = max(res.items(), key=lambda kv: kv[1][0] / kv[1][1])
    print(f"\nworst: {worst[0]} at {worst[1][0] / worst[1][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
