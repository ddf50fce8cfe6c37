"""Conv2d passes, ember vs torch (CPU): CPU-time medians side by side, and ratios.

Run from the repository root: PYTHONPATH=. python benchmarks/conv.py [threads] [repeats]
(torch is the reference only; ember never imports it). With a thread count, both NumPy's BLAS
and torch use that many threads: on a shared machine one thread each gives the steadiest
ratios. Each repeat runs ember's and torch's pass back to back and times it with
``time.process_time`` (CPU time, so other processes' load inflates it less than wall time).
Rows: the forward (no grad), forward + input gradient, forward + weight gradient, and forward
+ both (the training step's share).
"""
import os
import sys
import time


def main():
    if len(sys.argv) > 1:      # before NumPy loads its BLAS
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = sys.argv[1]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    import torch
    if len(sys.argv) > 1:
        torch.set_num_threads(int(sys.argv[1]))

    import numpy as np

    import ember
    total = {}
    for cin, cout in [(3, 32), (32, 64)]:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((32, cin, 32, 32)).astype(np.float32)
        w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * 0.1
        passes = {}
        for lib in (ember, torch):
            F = lib.nn.functional
            xt, xg = lib.tensor(x), lib.tensor(x, requires_grad=True)
            wt, wg = lib.tensor(w), lib.tensor(w, requires_grad=True)
            g = lib.ones((32, cout, 32, 32))

            def fwd(lib=lib, F=F, xt=xt, wt=wt):
                with lib.no_grad():
                    F.conv2d(xt, wt, padding=1)

            def grad(a, b, wrt, lib=lib, F=F, g=g):
                return lambda: lib.autograd.grad(F.conv2d(a, b, padding=1), wrt, g)
            passes[lib.__name__] = {"forward": fwd, "fwd+dx": grad(xg, wt, xg),
                                    "fwd+dw": grad(xt, wg, wg), "fwd+bwd": grad(xg, wg, (xg, wg))}
        times = {(lib, p): [] for lib in passes for p in passes[lib]}
        for r in range(repeats + 1):
            for p in passes["ember"]:
                for lib in passes:
                    t = time.process_time()
                    passes[lib][p]()
                    if r:          # (the first round warms up)
                        times[lib, p].append(time.process_time() - t)
        print(f"conv {cin:>2}->{cout} (ms, CPU-time medians of {repeats})")
        for p in passes["ember"]:
            e, t = (float(np.median(times[lib, p])) * 1e3 for lib in ("ember", "torch"))
            total[p] = [a + b for a, b in zip(total.get(p, (0, 0)), (e, t))]
            print(f"  {p:8s} ember {e:7.2f}  torch {t:7.2f}  ratio {e / t:4.2f}")
    e, t = total["fwd+bwd"]
    print(f"both layers fwd+bwd: ember {e:.2f} ms, torch {t:.2f} ms, ratio {e / t:.2f}")


if __name__ == "__main__":
    main()
