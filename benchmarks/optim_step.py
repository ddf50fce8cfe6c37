"""AdamW step time, ember vs torch (CPU, float32), on an MLP 784-512-512-10 and on 200 small
tensors. Gradients are fixed, so only ``optimizer.step()`` is timed; the configurations run
interleaved and the best of 15 rounds of 10 steps is kept, to be fair on a busy machine.

    python benchmarks/optim_step.py [--threads N]
"""
import argparse
import time

import numpy as np
import torch

import ember

SHAPES = {"mlp 784-512-512-10": [(512, 784), (512,), (512, 512), (512,), (10, 512), (10,)],
          "200 x (256,)": [(256,)] * 200}


def _optimizer(lib, shapes, **kw):
    rng = np.random.default_rng(0)
    ps = [lib.nn.Parameter(lib.tensor(rng.standard_normal(s).astype(np.float32)))
          for s in shapes]
    for p in ps:
        p.grad = lib.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32) * 0.01)
    opt = lib.optim.AdamW(ps, lr=1e-3, **kw)
    for _ in range(3):
        opt.step()
    return opt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ember.set_num_threads(args.threads)
    for name, shapes in SHAPES.items():
        cfgs = {"torch (default)": _optimizer(torch, shapes),
                "torch foreach=True": _optimizer(torch, shapes, foreach=True),
                "torch fused=True": _optimizer(torch, shapes, fused=True),
                "ember (default: flat)": _optimizer(ember, shapes),
                "ember foreach=False": _optimizer(ember, shapes, foreach=False)}
        best = dict.fromkeys(cfgs, float("inf"))
        for _ in range(15):
            for k, opt in cfgs.items():
                t = time.perf_counter()
                for _ in range(10):
                    opt.step()
                best[k] = min(best[k], (time.perf_counter() - t) / 10)
        n = sum(int(np.prod(s)) for s in shapes)
        print(f"AdamW step, {name} ({n} params), threads {torch.get_num_threads()}")
        for k, v in best.items():
            print(f"  {k:24s} {v * 1e3:7.3f} ms")


if __name__ == "__main__":
    main()
