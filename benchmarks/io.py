"""Data loading and checkpoint I/O, ember against torch in the same run (medians of repeats):

- DataLoader: 50,000 samples of 3x32x32 float32 with a per-sample random horizontal flip and
  per-channel normalize (written in the library's own ops), batch 128, shuffle,
  num_workers=2 (persistent workers; the epoch after a warm-up one is timed): samples/s.
- save and load of a ~100 MB state dict (25 float32 1024x1024 weights and their biases) to a
  file on disk, and ``load(mmap=True)`` of it.

    python benchmarks/io.py [--repeats 3] [--samples 50000] [--only loader|ckpt]

Prints a Markdown table; the ratio column is ember's time over torch's (below 1: ember is
faster), or for throughput torch's samples/s over ember's. The loader also gets a row of CPU
time per sample (main process and workers, read from /proc on Linux), which a busy machine
does not skew the way it skews samples/s.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

# Run from a checkout: import this tree's ember, not an installed one.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Images:
    """A map-style dataset of CHW float32 images with a light per-sample transform, written
    once and used with either library as ``lib``."""

    def __init__(self, lib, n):
        g = lib.Generator().manual_seed(0)
        self.lib, self.n = lib, n
        self.x = lib.rand(n, 3, 32, 32, generator=g)
        self.y = lib.randint(0, 10, (n,), generator=g)
        self.mean = lib.tensor([0.49, 0.48, 0.45]).reshape(3, 1, 1)
        self.std = lib.tensor([0.25, 0.24, 0.26]).reshape(3, 1, 1)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.x[i]
        if self.lib.rand(1).item() < 0.5:
            x = x.flip(2)
        return (x - self.mean) / self.std, self.y[i]


def _cpu_seconds(pid):
    """User + system CPU seconds of process ``pid`` so far (None without Linux's /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loader_cpu(loader):
    """CPU seconds used so far by this process and the loader's (persistent) workers."""
    t = os.times()
    parts = [t.user + t.system] + [_cpu_seconds(w.pid) for w in loader._iterator._workers]
    return None if None in parts else sum(parts)


def loader_epoch(lib, n, workers=2, batch_size=128):
    """Samples per second of one epoch after a warm-up epoch, and the CPU microseconds per
    sample it cost the main process and the workers together (None where unknown): on a
    loaded machine the wall clock measures the neighbours, the CPU time measures the loader."""
    ds = Images(lib, n)
    loader = lib.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True,
                                       num_workers=workers, persistent_workers=workers > 0)
    for _ in loader:
        pass
    cpu0 = _loader_cpu(loader)
    start = time.perf_counter()
    seen = sum(len(y) for _, y in loader)
    rate = seen / (time.perf_counter() - start)
    cpu1 = _loader_cpu(loader)
    return rate, None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / seen * 1e6


def state_dict(lib, layers=25, width=1024):
    g = lib.Generator().manual_seed(0)
    sd = {}
    for i in range(layers):
        sd[f"layers.{i}.weight"] = lib.randn(width, width, generator=g)
        sd[f"layers.{i}.bias"] = lib.randn(width, generator=g)
    return sd


def ckpt_times(lib, path):
    """Seconds for save to an open file, save to ``path``, load and load(mmap=True)."""
    sd = state_dict(lib)
    with open(path, "wb") as fh:         # no fsync: what the bytes cost to produce and write
        s = time.perf_counter()
        lib.save(sd, fh)
        s = time.perf_counter() - s
    t0 = time.perf_counter()
    lib.save(sd, path)                   # ember: atomic (temporary file, fsync, rename)
    t1 = time.perf_counter()
    out = lib.load(path, weights_only=True)
    t2 = time.perf_counter()
    mapped = lib.load(path, weights_only=True, mmap=True)
    t3 = time.perf_counter()
    assert len(out) == len(mapped) == len(sd)
    del out, mapped
    return s, t1 - t0, t2 - t1, t3 - t2


def median(xs):
    return statistics.median(xs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--samples", type=int, default=50_000)
    p.add_argument("--only", choices=("loader", "ckpt"))
    args = p.parse_args()
    import ember
    import torch
    torch.set_num_threads(1)
    libs = {"ember": ember, "torch": torch}
    rows = []
    if args.only != "ckpt":
        runs = {k: [] for k in libs}
        for _ in range(args.repeats):             # interleaved, so noise hits both alike
            for name, lib in libs.items():
                runs[name].append(loader_epoch(lib, args.samples))
        what = f"DataLoader {args.samples} x 3x32x32, flip+normalize, bs 128, 2 workers"
        e, t = (median(r for r, _ in runs[k]) for k in ("ember", "torch"))
        rows.append((what, f"{e:,.0f} samples/s", f"{t:,.0f} samples/s", t / e))
        if all(c is not None for k in libs for _, c in runs[k]):
            e, t = (median(c for _, c in runs[k]) for k in ("ember", "torch"))
            rows.append((f"{what}: CPU time per sample (main + workers)", f"{e:.1f} us",
                         f"{t:.1f} us", e / t))
    if args.only != "loader":
        times = {k: [] for k in libs}
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
            for _ in range(args.repeats):
                for name, lib in libs.items():
                    times[name].append(ckpt_times(lib, os.path.join(d, f"{name}.pt")))
        for i, what in enumerate(("save 100 MB state dict to an open file",
                                  "save 100 MB state dict to a path (ember: atomic, fsync)",
                                  "load 100 MB state dict",
                                  "load(mmap=True) 100 MB state dict")):
            e = median(x[i] for x in times["ember"])
            t = median(x[i] for x in times["torch"])
            rows.append((what, f"{e * 1e3:.1f} ms", f"{t * 1e3:.1f} ms", e / t))
    print("| workload | ember | torch | ember/torch time |")
    print("|---|---|---|---|")
    for what, e, t, r in rows:
        print(f"| {what} | {e} | {t} | {r:.2f}x |")


if __name__ == "__main__":
    main()
