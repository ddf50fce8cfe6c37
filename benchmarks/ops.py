"""Every op in the registry, timed on ember and torch side by side: generated, not hand-picked.

    python -m benchmarks.ops [--threads 1,2] [--quick] [--only NAME] [--cpu-time] [--json PATH]

Each OpDef's float32 samples (``opdef.samples``, the inputs the tests run) are the calls:
- small: the first sample as it is (at most a few hundred elements: dispatch-bound);
- large: the first sample that still runs when its arrays are grown until the largest float
  input holds >= 1M elements. Every dimension above 1 grows by one factor, so broadcasting and
  index validity are kept (integer arrays' values grow with it: an index into a dimension of
  3 becomes one into 3f; if that fails, their values are kept). A creation op whose sample is
  a shape gets the shape grown. Where that call is invalid (``layer_norm``'s
  ``normalized_shape`` no longer matching), the Python ints equal to a grown dimension grow
  too, and then only the leading dimension grows (``view_as_complex``'s trailing 2 kept). The
  meta device checks the result's size before anything is allocated and one real call checks
  the rest; a sample that cannot grow (a ``view(3, 4)``) is left at the small size.
Each is timed forward, and forward + backward where the op is differentiable (the outputs'
gradient is ones; the inputs' ``.grad`` is reset each call in both frameworks).

One process per thread count runs both frameworks, their repeats taking turns, after setting
the thread variables before either is imported (``--cpu-time``: timed by CPU time, steadier
than the wall clock on a loaded machine at one thread). The table lists every case worst first; the
summary gives the number of ops, the median ratio per size and thread count, and the worst
five. ``--quick`` (``make bench``) times the reductions and every fifth other op, large size,
forward only. Ratios are ember time / torch time: below 1 ember is faster.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

N_LARGE = 1 << 20
MAX_OUT = 1 << 24          # a grown call whose result would be larger is not run
MAX_MEMORY = 12 << 30      # the worker's address space


def _walk(x, fn):
    """``x`` with ``fn`` applied to every leaf of its lists, tuples and dicts."""
    if isinstance(x, (list, tuple)):
        return type(x)(_walk(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _walk(v, fn) for k, v in x.items()}
    return fn(x)


def _leaves(x):
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    return [x]


def _grown(sample, opdef, scale_ints, shrink=1, mode="all"):
    """``(args, kwargs)`` of ``sample`` with its arrays grown to about ``N_LARGE / shrink``
    elements, or None where it has nothing to grow. ``mode``: "all" grows every dimension
    above 1, "ints" also the Python ints equal to one of them, "lead" only the largest float
    array's first dimension above 1 (the same dimension, counted from the end, elsewhere)."""
    import numpy as np
    args, kwargs = sample.args, sample.kwargs
    floats = [a for a in _leaves((args, kwargs)) if isinstance(a, np.ndarray) and
              a.dtype.kind == "f" and a.ndim > 0 and a.size > 0]
    if floats:
        big = max(floats, key=lambda a: a.size)
        grows = [d > 1 for d in big.shape]
        if mode == "lead" and any(grows):
            lead = grows.index(True) - big.ndim
            grows = [i - big.ndim == lead for i in range(big.ndim)]
        f = math.ceil((N_LARGE / shrink / big.size) ** (1 / max(1, sum(grows))))
        dims = {d for d, g in zip(big.shape, grows) if g} if mode == "ints" else set()
    elif args and all(type(a) is int and a > 0 for a in args) and "device" in opdef.params:
        f = math.ceil((N_LARGE / shrink / math.prod(args)) ** (1 / sum(a > 1 for a in args)))
        return tuple(a * f if a > 1 else a for a in args), kwargs
    else:
        return None

    def grow(a):
        if type(a) is int and a in dims:
            return a * f
        if not isinstance(a, np.ndarray) or a.ndim == 0:
            return a
        if mode == "lead":
            shape = tuple(d * f if d > 1 and i - a.ndim == lead else d
                          for i, d in enumerate(a.shape))
        else:
            shape = tuple(d * f if d > 1 else d for d in a.shape)
        if a.size == 0 or a.dtype.kind not in "fiub":
            return _Array(shape, a.dtype, 0, 0)
        if (a.dtype.kind == "f" and not np.isfinite(a).all() or
                a.dtype.kind in "iu" and int(a.max()) - int(a.min()) >= 1 << 62):
            return _Array(shape, a.dtype, 0, 0, a)   # (nan, infinities, int64 extremes: tiled)
        lo, hi = (a.min().item(), a.max().item() + (a.dtype.kind in "iu"))
        if a.dtype.kind in "iu" and scale_ints:
            lo, hi = lo * f if lo < 0 else lo, hi * f
        return _Array(shape, a.dtype, lo, hi)
    return _walk(args, grow), _walk(kwargs, grow)


class _Array:
    """A grown input, made only when its case is built (hundreds of 1M-element inputs held at
    once would not fit in memory)."""

    def __init__(self, shape, dtype, lo, hi, values=None):
        self.shape, self.dtype, self.lo, self.hi, self.values = shape, dtype, lo, hi, values

    def make(self):
        import numpy as np
        if self.values is not None:
            return np.resize(self.values, self.shape)
        rng = np.random.default_rng(0)
        if self.lo == self.hi:
            return np.full(self.shape, self.lo, self.dtype)
        if self.dtype.kind == "f":
            return rng.uniform(self.lo, self.hi, self.shape).astype(self.dtype)
        if self.dtype.kind == "b":
            return rng.random(self.shape) > 0.5
        return rng.integers(self.lo, self.hi, self.shape).astype(self.dtype)


def _to(lib, x, grad):
    """A NumPy array as a ``lib`` tensor (float ones requiring grad when ``grad``)."""
    import numpy as np
    x = x.make() if isinstance(x, _Array) else x
    if not isinstance(x, np.ndarray):
        return x
    t = lib.from_numpy(np.ascontiguousarray(x)) if x.flags.c_contiguous else lib.tensor(x)
    return t.requires_grad_(grad and x.dtype.kind == "f")


def _meta_numel(opdef, args, kwargs):
    """Elements of the call's result, from the meta device (nothing is allocated)."""
    import ember
    from ember._ops.samples import public_call
    import numpy as np
    from ember._dtype import from_numpy_dtype
    meta, kwargs = _walk((args, kwargs), lambda a: ember.empty(
        a.shape, dtype=from_numpy_dtype(np.dtype(a.dtype)), device="meta")
        if isinstance(a, _Array) else a)
    if not any(isinstance(a, ember.Tensor) for a in _leaves((meta, kwargs))):
        kwargs = dict(kwargs, device="meta")
    out = public_call(ember, opdef, meta, kwargs)
    return sum(t.numel() for t in _leaves(out) if isinstance(t, ember.Tensor))


class Case:
    """One timed call of an op, buildable for ember and for torch."""

    def __init__(self, opdef, size, backward, args, kwargs):
        self.opdef, self.size, self.backward = opdef, size, backward
        self.args, self.kwargs = args, kwargs
        self.name = f"{opdef.name} {size}{' fwd+bwd' if backward else ''}"

    def build(self, lib):
        from ember._ops.samples import public_call
        args, kwargs = _walk((self.args, self.kwargs), lambda a: _to(lib, a, self.backward))
        leaves = [t for t in _leaves((args, kwargs)) if isinstance(t, lib.Tensor) and t.requires_grad]

        def forward():
            return public_call(lib, self.opdef, args, kwargs)
        if not self.backward:
            return forward
        outs = [o for o in _leaves(forward()) if isinstance(o, lib.Tensor) and o.requires_grad]
        if not outs or not leaves:
            return None
        grads = [lib.ones_like(o) for o in outs]

        def step():
            for t in leaves:
                t.grad = None
            outs = [o for o in _leaves(forward()) if isinstance(o, lib.Tensor) and
                    o.requires_grad]
            lib.autograd.backward(outs, grads)
        return step


def cases(quick=False, only=None):
    """The cases of every OpDef with float32 samples (see the module's docstring)."""
    import ember
    from ember._ops.registry import all_ops
    ops = [d for d in all_ops() if d.samples is not None and (only is None or only in d.name)]
    if quick and only is None:
        ops = [d for i, d in enumerate(ops) if "reduction" in d.tags or i % 5 == 0]
    out = []
    for opdef in ops:
        try:
            samples = list(opdef.samples("cpu", ember.float32))
        except Exception:           # noqa: BLE001  a sample builder that needs another device
            continue
        if not samples:
            continue
        grad = opdef.differentiable and samples[0].grad
        if not quick:
            out.append(Case(opdef, "small", False, samples[0].args, samples[0].kwargs))
            if grad:
                out.append(Case(opdef, "small", True, samples[0].args, samples[0].kwargs))
        large = _large(opdef, samples)
        if large is not None:
            out.append(Case(opdef, "large", False, *large[:2]))
            if grad and not quick and large[2]:
                out.append(Case(opdef, "large", True, *large[:2]))
    return out


def _large(opdef, samples):
    """``(args, kwargs, differentiable)`` of the first sample that grows and runs, or None.
    A result that would outgrow ``MAX_OUT`` (an outer product) shrinks the inputs instead; a
    result whose size depends on the values (``nonzero``) is measured by one real call, and
    every other by one real call once its size is known to fit."""
    for s in samples:
        if _grown(s, opdef, True) is None:
            continue
        for mode, scale_ints in (("all", True), ("all", False), ("ints", True), ("lead", True),
                                 ("lead", False)):
            for shrink in (1, 16, 256, 4096):
                try:
                    grown = _grown(s, opdef, scale_ints, shrink, mode)
                    try:
                        n = _meta_numel(opdef, *grown)
                    except NotImplementedError:
                        if mode != "all":   # (a grown int's result is unbounded: ``r=``)
                            break
                        n = None
                    if n is None or 0 < n <= MAX_OUT:
                        n = _real_numel(opdef, *grown)
                except Exception:   # noqa: BLE001  does not grow this way: try the next
                    break
                if 0 < n <= MAX_OUT:
                    return grown[0], grown[1], s.grad
                if n == 0:
                    break
    return None


def _real_numel(opdef, args, kwargs):
    import ember
    from ember._ops.samples import public_call
    args, kwargs = _walk((args, kwargs), lambda a: _to(ember, a, False))
    return sum(t.numel() for t in _leaves(public_call(ember, opdef, args, kwargs))
               if isinstance(t, ember.Tensor))


def _time(fns, quick, clock=time.perf_counter):
    """Median seconds per call of each of ``fns``, each calibrated to a few milliseconds a
    repeat; the repeats take turns (ember, torch, ember, ...) so a swing in the machine's
    load falls on both sides of a ratio."""
    target, repeats = (0.002, 3) if quick else (0.005, 7)
    numbers = []
    for fn in fns:
        t0 = clock()
        fn()
        once = clock() - t0
        numbers.append((max(1, min(1 << 16, int(target / max(once, 1e-7)))), once))
    samples = [[] for _ in fns]
    for _ in range(repeats if max(o for _, o in numbers) < 0.1 else 3):
        for fn, (number, _), out in zip(fns, numbers, samples):
            t0 = clock()
            for _ in range(number):
                fn()
            out.append((clock() - t0) / number)
    return [statistics.median(s) for s in samples]


def _worker(threads, quick, only, clock):
    import resource
    # a case whose memory outgrows the machine fails alone (MemoryError, reported in the
    # table), instead of the kernel ending the whole run
    resource.setrlimit(resource.RLIMIT_AS, (MAX_MEMORY, MAX_MEMORY))
    import ember
    import torch
    torch.set_num_threads(threads)
    ember.set_num_threads(threads)
    out = {}
    for case in cases(quick, only):
        times, fns = {}, {}
        for name, lib in (("ember", ember), ("torch", torch)):
            try:
                fn = case.build(lib)
                if fn is None:
                    break
                fn()                      # a case that raises is reported before timing
                fns[name] = fn
            except Exception as e:  # noqa: BLE001  reported, not fatal: one op of hundreds
                times[name + "_error"] = f"{type(e).__name__}: {e}"[:200]
        else:
            try:
                times.update(zip(fns, _time(list(fns.values()), quick, clock)))
            except Exception as e:  # noqa: BLE001
                times["timing_error"] = f"{type(e).__name__}: {e}"[:200]
        if times:
            out[case.name] = times
    print(json.dumps(out))


def _spawn(threads, quick, only, cpu):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update({v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                          "MKL_NUM_THREADS")})
    cmd = [sys.executable, "-m", "benchmarks.ops", "--worker", "--threads", str(threads)]
    cmd += (["--quick"] if quick else []) + (["--only", only] if only else [])
    cmd += ["--cpu-time"] if cpu else []
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"benchmarks.ops worker (threads={threads}) failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def summary(results):
    """``{threads: {"ops": n, "median": {size: ratio}, "over_1.5": [...], "worst": [...]}}``."""
    out = {}
    for n, rows in results.items():
        ratios = {k: v["ember"] / v["torch"] for k, v in rows.items()
                  if "ember" in v and "torch" in v}
        worst = sorted(ratios.items(), key=lambda kv: -kv[1])
        med = {size: statistics.median(r for k, r in ratios.items() if f" {size}" in k)
               for size in ("small", "large") if any(f" {size}" in k for k in ratios)}
        out[n] = {"ops": len({k.split()[0] for k in ratios}), "cases": len(ratios),
                  "median": med, "over_1.5": [k for k, r in worst if r > 1.5],
                  "worst": worst[:5],
                  "errors": {k: v for k, v in rows.items() if any("_error" in f for f in v)}}
    return out


def table(results):
    """Markdown: the summary per thread count, then every case, worst first."""
    lines = []
    for n, s in summary(results).items():
        lines += [f"\n### {n} thread{'s' if n != '1' else ''}: {s['ops']} ops, {s['cases']} cases",
                  "", "median ember/torch: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                        s["median"].items()),
                  f"over 1.5: {len(s['over_1.5'])}; worst: " +
                  ", ".join(f"`{k}` {r:.2f}" for k, r in s["worst"]),
                  "", "| case | ember us | torch us | ember/torch |", "|---|---:|---:|---:|"]
        rows = results[n]
        for k in sorted(rows, key=lambda k: -rows[k]["ember"] / rows[k]["torch"]
                        if "ember" in rows[k] and "torch" in rows[k] else 0):
            e, t = rows[k].get("ember"), rows[k].get("torch")
            if e is None or t is None:
                err = "; ".join(v for f, v in rows[k].items() if "_error" in f)
                lines.append(f"| {k} | - | - | {err or 'no timing'} |")
            else:
                lines.append(f"| {k} | {e * 1e6:.1f} | {t * 1e6:.1f} | {e / t:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--quick", action="store_true",
                   help="reductions and every fifth op, large size, forward only")
    p.add_argument("--only", help="only the ops whose name contains this")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "ops_results.json"))
    p.add_argument("--cpu-time", action="store_true",
                   help="time by the process's CPU time, not the wall clock (steadier on a "
                        "loaded machine; with 1 thread only: at 2 it adds the threads' times)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        _worker(int(args.threads), args.quick, args.only,
                time.process_time if args.cpu_time else time.perf_counter)
        return 0
    start = time.perf_counter()
    results = {n: _spawn(int(n), args.quick, args.only, args.cpu_time)
               for n in args.threads.split(",")}
    print(table(results))
    data = {"results": results, "summary": summary(results),
            "meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "quick": args.quick, "cpu_time": args.cpu_time, "seconds": round(time.perf_counter() - start, 1)}}
    Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.json} ({data['meta']['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
