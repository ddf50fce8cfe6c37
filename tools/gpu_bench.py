"""ember against torch on one CUDA GPU: matmul TFLOP/s (fp32/tf32, fp16, bf16), conv2d, the fused
kernels (softmax, layer_norm, gelu, cross_entropy, embedding backward),
scaled_dot_product_attention (causal, masked, long), and training steps of a
GPT (AMP float16 with a GradScaler) with their peak memory. ember has no bfloat16 on the GPU
(CuPy has no such dtype): its bf16 matmul reports that error. Every figure is a median of
CUDA-event timings
after warm-up; both libraries run the same code (``L`` is ``ember`` or ``torch``).

Usage: python tools/gpu_bench.py OUT_DIR [--budget SECONDS]
Writes OUT_DIR/gpu_bench.json and OUT_DIR/gpu_bench.md; a case past the time budget is
skipped and says so. torch is optional (ember's figures alone without it).
"""
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ember  # noqa: E402  (this checkout's)


def _libs():
    libs = {"ember": ember}
    try:
        import torch
        if torch.cuda.is_available():
            libs["torch"] = torch
    except ImportError:
        pass
    return libs


def timed(L, fn, warmup=2, reps=7):
    """Median milliseconds of ``fn()`` on the GPU (CUDA events around each call)."""
    for _ in range(warmup):
        fn()
    L.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = L.cuda.Event(enable_timing=True), L.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return sorted(times)[len(times) // 2]


def matmul(L, dt, n=8192):
    a, b = L.randn(n, n, device="cuda", dtype=dt), L.randn(n, n, device="cuda", dtype=dt)
    ms = timed(L, lambda: a @ b)
    return {"ms": ms, "TFLOP/s": 2 * n ** 3 / ms / 1e9}


def conv(L, train):
    x = L.randn(32, 64, 56, 56, device="cuda", requires_grad=train)
    w = L.randn(64, 64, 3, 3, device="cuda", requires_grad=train)

    def step():
        y = L.nn.functional.conv2d(x, w, padding=1)
        if train:
            y.sum().backward()
    return {"ms": timed(L, step)}


def fused(L, name):
    F = L.nn.functional
    x = L.randn(8192, 4096, device="cuda")
    w, b = L.ones(4096, device="cuda"), L.zeros(4096, device="cuda")
    fn = {"softmax": lambda: F.softmax(x, -1), "layer_norm": lambda: F.layer_norm(
        x, (4096,), w, b), "gelu": lambda: F.gelu(x)}[name]
    ms = timed(L, fn)
    return {"ms": ms, "GB/s": 2 * x.numel() * 4 / ms / 1e6}


def sdpa(L, dt, train, shape=(8, 12, 1024, 64), mask=False):
    q, k, v = (L.randn(*shape, device="cuda", dtype=dt, requires_grad=train) for _ in range(3))
    # a padding mask: batch row b sees its first lengths[b] keys (from half to all of them)
    lengths = L.linspace(shape[2] // 2, shape[2], shape[0], device="cuda").long()
    m = (L.arange(shape[2], device="cuda") < lengths[:, None])[:, None, None, :] if mask else None

    def step():
        y = L.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                         is_causal=not mask)
        if train:
            y.sum().backward()
    ms = timed(L, step)
    flops = 4 * shape[0] * shape[1] * shape[2] ** 2 * shape[3] * (0.5 if not mask else 1)
    return {"ms": ms, "TFLOP/s": flops * (3.5 if train else 1) / ms / 1e9}


def cross_entropy(L, n=8192, classes=50304):
    """A GPT's loss: (batch x sequence) rows of vocabulary logits, forward and backward."""
    x = L.randn(n, classes, device="cuda", requires_grad=True)
    t = L.randint(0, classes, (n,), device="cuda")

    def step():
        L.nn.functional.cross_entropy(x, t, label_smoothing=0.1).backward()
    ms = timed(L, step)
    return {"ms": ms, "GB/s": 3 * x.numel() * 4 / ms / 1e6}     # read x twice, write grad


def embedding_backward(L, rows=50304, d=768, n=8192):
    w = L.randn(rows, d, device="cuda", requires_grad=True)
    idx = L.randint(0, rows, (n,), device="cuda")
    g = L.randn(n, d, device="cuda")
    return {"ms": timed(L, lambda: L.nn.functional.embedding(idx, w).backward(g))}


class GPT:
    """GPT-2's shape (pre-norm blocks, GELU MLP, tied nothing), built from either library."""

    def __init__(self, L, vocab=50304, block=1024, d=768, heads=12, layers=12):
        nn = L.nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

            def forward(self, x):
                B, T, _ = x.shape
                q, k, v = self.qkv(self.ln1(x)).split(d, -1)
                q, k, v = (t.view(B, T, heads, d // heads).transpose(1, 2) for t in (q, k, v))
                a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + self.proj(a.transpose(1, 2).reshape(B, T, d))
                return x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
                self.blocks = nn.ModuleList(Block() for _ in range(layers))
                self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

            def forward(self, idx):
                x = self.tok(idx) + self.pos(L.arange(idx.shape[1], device=idx.device))
                for blk in self.blocks:
                    x = blk(x)
                return self.head(self.ln(x))
        self.model = Model().cuda()


def train_step(L, batch=8, seq=1024, layers=12, steps=(2, 5), vocab=50304, d=768):
    L.manual_seed(0)
    m = GPT(L, vocab=vocab, d=d, layers=layers).model
    opt = L.optim.AdamW(m.parameters(), lr=3e-4)
    scaler = L.amp.GradScaler("cuda")
    idx = L.randint(0, vocab, (batch, seq + 1), device="cuda")
    x, y = idx[:, :-1], idx[:, 1:]
    losses = []

    def step():     # (float16 with a GradScaler: CuPy has no bfloat16)
        opt.zero_grad()
        with L.autocast("cuda", dtype=L.float16):
            loss = L.nn.functional.cross_entropy(m(x).flatten(0, 1), y.flatten())
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.detach())
    L.cuda.synchronize()
    L.cuda.reset_peak_memory_stats()
    ms = timed(L, step, warmup=steps[0], reps=steps[1])
    return {"ms": ms, "tokens/s": batch * seq / ms * 1e3,
            "peak_MiB": L.cuda.max_memory_allocated() / 2 ** 20,
            "first_loss": float(losses[0]), "last_loss": float(losses[-1])}


def cases():
    out = [("matmul fp32", lambda L: matmul(L, L.float32)),
           ("matmul fp16", lambda L: matmul(L, L.float16)),
           ("matmul bf16", lambda L: matmul(L, L.bfloat16))]
    out += [(f"fused {n}", lambda L, n=n: fused(L, n)) for n in ("softmax", "layer_norm", "gelu")]
    out += [("conv2d 32x64x56x56 3x3 fwd", lambda L: conv(L, False)),
            ("conv2d 32x64x56x56 3x3 fwd+bwd", lambda L: conv(L, True)),
            ("sdpa 8x12x1024x64 causal fp16 fwd", lambda L: sdpa(L, L.float16, False)),
            ("sdpa 8x12x1024x64 causal fp16 fwd+bwd", lambda L: sdpa(L, L.float16, True)),
            ("sdpa 8x12x1024x64 causal fp32 fwd+bwd", lambda L: sdpa(L, L.float32, True)),
            ("sdpa 8x12x1024x64 bool mask fp16 fwd+bwd",
             lambda L: sdpa(L, L.float16, True, mask=True)),
            ("sdpa 1x16x8192x64 causal fp16 fwd", lambda L: sdpa(L, L.float16, False,
                                                                 (1, 16, 8192, 64))),
            ("cross_entropy 8192x50304 fp32 fwd+bwd", cross_entropy),
            ("embedding bwd 50304x768 8192 rows", embedding_backward),
            ("GPT 2 layers d768 b8x1024 AMP fp16 step", lambda L: train_step(L, layers=2)),
            ("GPT-2 small 124M b8x1024 AMP fp16 step", lambda L: train_step(L))]
    return out


def main(out_dir, budget):
    if not ember.cuda.is_available():
        sys.exit(f"ember sees no GPU: {ember.cuda._cupy()[2]}")
    start, results = time.time(), {}
    libs = _libs()
    env = {"device": ember.cuda.get_device_name(0), "libs": {k: getattr(v, "__version__", "")
                                                             for k, v in libs.items()}}
    try:
        import cupy
        env["cupy"] = cupy.__version__
    except ImportError:
        pass
    for name, fn in cases():
        for lib, L in libs.items():
            key = f"{name} | {lib}"
            if time.time() - start > budget:
                results[key] = {"skipped": "past the time budget"}
                continue
            t0 = time.time()
            try:
                results[key] = fn(L)
            except Exception as e:          # a failure is a result too: report, go on
                results[key] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            results[key]["wall_s"] = round(time.time() - t0, 1)
            print(key, results[key], flush=True)
            if lib == "torch":
                L.cuda.empty_cache()
            else:
                ember.cuda.empty_cache()
    with open(os.path.join(out_dir, "gpu_bench.json"), "w") as f:
        json.dump({"env": env, "results": results}, f, indent=1)
    rows = ["| case | ember | torch | ember/torch |", "| --- | --- | --- | --- |"]
    for name, _ in cases():
        e, t = results.get(f"{name} | ember", {}), results.get(f"{name} | torch", {})

        def show(r):
            if "ms" not in r:
                return r.get("error", r.get("skipped", ""))[:60]
            extra = [f"{k} {v:.1f}" for k, v in r.items() if k not in ("ms", "wall_s") and
                     isinstance(v, float) and math.isfinite(v)]
            return f"{r['ms']:.3f} ms" + "".join(f", {x}" for x in extra)
        ratio = f"{e['ms'] / t['ms']:.2f}x" if "ms" in e and "ms" in t else ""
        rows.append(f"| {name} | {show(e)} | {show(t)} | {ratio} |")
    with open(os.path.join(out_dir, "gpu_bench.md"), "w") as f:
        f.write(f"{env}\n\n" + "\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    args = sys.argv[1:]
    budget = float(args[args.index("--budget") + 1]) if "--budget" in args else 180.0
    main(args[0] if args else ".", budget)
