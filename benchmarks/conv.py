"""Conv2d forward and forward+backward, ember vs torch (CPU): best-of-N wall time and ratio.

Run from the repository root: PYTHONPATH=. python benchmarks/conv.py [threads] (torch is the
reference only; ember never imports it). With a thread count, both NumPy's BLAS and torch use
that many threads: on a shared machine one thread each gives the steadiest ratios.
"""
import os
import sys
import time


def best(fn, n=15):
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts) * 1e3


def main():
    if len(sys.argv) > 1:      # before NumPy loads its BLAS
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = sys.argv[1]
    import torch
    if len(sys.argv) > 1:
        torch.set_num_threads(int(sys.argv[1]))

    import numpy as np

    import ember
    for cin, cout in [(3, 32), (32, 64)]:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((32, cin, 32, 32)).astype(np.float32)
        w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * 0.1
        res = {}
        for lib in (ember, torch):
            F = lib.nn.functional
            xt, wt = lib.tensor(x), lib.tensor(w, requires_grad=True)
            xg = lib.tensor(x, requires_grad=True)

            def fwd():
                with lib.no_grad():
                    F.conv2d(xt, wt, padding=1)

            def fwd_bwd():
                F.conv2d(xg, wt, padding=1).sum().backward()
            res[lib.__name__] = (best(fwd), best(fwd_bwd))
        (ef, eb), (tf, tb) = res["ember"], res["torch"]
        print(f"conv {cin:>2}->{cout}: forward ember {ef:6.2f} ms torch {tf:6.2f} ms "
              f"ratio {ef / tf:4.2f} | fwd+bwd ember {eb:6.2f} ms torch {tb:6.2f} ms "
              f"ratio {eb / tb:4.2f}")


if __name__ == "__main__":
    main()
