"""Run the workloads on ember, PyTorch and NumPy and print a Markdown table of the medians.

    python -m benchmarks.run [--quick] [--threads 1,2] [--rounds N] [--json PATH] [--only NAME]

Each framework runs in a fresh subprocess per thread count, with OMP/OpenBLAS/MKL thread
counts set in its environment before anything is imported (and ``torch.set_num_threads``).
Every workload is warmed up, calibrated to a repeat of a few milliseconds, and reported as the
median of its repeats. With ``--rounds N`` the frameworks take turns N times and the median
over rounds is reported, so a noisy spell on a shared machine hits all of them alike.
Then ``benchmarks.footprint`` adds memory (GPT step peak RSS, attention at sequence 4096) and
installed sizes, and the import time of each framework in a fresh interpreter. ``--only NAME``
runs just the workloads whose name contains NAME (``--only "1M "``: the 1M-element rows), and
nothing of the rest.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):          # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(ROOT))

from benchmarks import footprint  # noqa: E402

FRAMEWORKS = ("ember", "torch", "numpy")
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


# ---- the worker: one framework, one thread count, in its own process ------------------------

def _time(fn, quick):
    """Median seconds per call of ``fn``."""
    target, repeats = (0.002, 7) if quick else (0.01, 21)
    fn()                                 # first use: lazy imports, caches
    if _once(fn) > 0.05:                 # a slow workload: it was warmed up; a few repeats
        return statistics.median(_once(fn) for _ in range(3 if quick else 7))
    fn()
    number, t = 1, 0.0
    while True:                          # calibrate: grow the loop until one repeat is long
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        t = time.perf_counter() - t0
        if t >= target or number >= 1 << 20:
            break
        number *= max(2, min(10, int(target / max(t, 1e-9))))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples)


def _workloads(only=None):
    """Every workload, or those whose name contains ``only``."""
    from benchmarks import func, models, ops_large, workloads
    every = workloads.WORKLOADS + models.WORKLOADS + ops_large.WORKLOADS + func.WORKLOADS
    return [w for w in every if only is None or only in w.name]


def _once(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _worker(fw, threads, quick, only=None):
    if fw == "numpy":
        import numpy as mod
    else:
        mod = __import__(fw)
        mod.set_num_threads(threads)
    out = {}
    for w in _workloads(only):
        build = w.numpy if fw == "numpy" else w.build
        if build is None:
            continue
        out[w.name] = w.value(_time(build(mod), quick))
    print(json.dumps(out))


def _env(threads):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update({v: str(threads) for v in _THREAD_VARS})
    return env


def _spawn(fw, threads, quick, only=None):
    cmd = [sys.executable, "-m", "benchmarks.run", "--worker", fw, "--threads", str(threads)]
    cmd += ["--only", only] if only else []
    r = subprocess.run(cmd + (["--quick"] if quick else []), cwd=ROOT, env=_env(threads),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"benchmark worker {fw} (threads={threads}) failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _import_time(mod, repeats):
    """Median seconds of ``import mod`` in a fresh interpreter (interpreter start excluded)."""
    code = (f"import time; t = time.perf_counter(); import {mod}; "
            "print(time.perf_counter() - t)")
    # NOTE: one untimed import that may write bytecode first, as pip's install compiles it:
    # under PYTHONDONTWRITEBYTECODE a source checkout would otherwise time the compiler
    warm = {k: v for k, v in _env(1).items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", f"import {mod}"], cwd=ROOT, env=warm, check=True)
    samples = []
    for _ in range(repeats):
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(1),
                           capture_output=True, text=True, check=True)
        samples.append(float(r.stdout))
    return statistics.median(samples)


# ---- the driver ------------------------------------------------------------------------------

def _available():
    return [fw for fw in FRAMEWORKS if find_spec(fw) is not None]


def measure(threads=(1, 2), quick=False, rounds=1, only=None):
    """``{"results": {threads: {workload: {framework: value}}}, "import_s": {...}}``; with
    ``only``, just the workloads whose name contains it (no import, memory or size)."""
    fws = _available()
    results = {}
    for n in threads:
        per_round = {fw: [] for fw in fws}
        for _ in range(rounds):
            for fw in fws:
                per_round[fw].append(_spawn(fw, n, quick, only))
        table = results.setdefault(str(n), {})
        for fw, runs in per_round.items():
            for name in runs[0]:
                table.setdefault(name, {})[fw] = statistics.median(r[name] for r in runs)
    if only:
        return {"results": results, "import_s": {}}
    repeats = 3 if quick else 7
    imports = {fw: _import_time(fw, repeats) for fw in fws}
    models = [fw for fw in fws if fw != "numpy"]
    cases = footprint.QUICK_CASES if quick else tuple(footprint.CASES)
    return {"results": results, "import_s": imports,
            "memory": footprint.memory(models, _env(1), cases), "size": footprint.sizes(models)}


def _fmt(v):
    if v is None:
        return "-"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def _ratio(unit, e, t):
    """ember/torch as a time ratio, so below 1 means ember is faster (GFLOP/s inverts)."""
    if e is None or t is None:
        return "-"
    return f"{(t / e if unit == 'GFLOP/s' else e / t):.2f}"


def table(data):
    """The results as Markdown: one section per thread count, then import time."""
    units = {w.name: w.unit for w in _workloads()}
    lines = []
    for n, rows in data["results"].items():
        lines += [f"\n### {n} thread{'s' if n != '1' else ''}\n",
                  "| workload | unit | ember | torch | numpy | ember/torch (time) |",
                  "|---|---|---:|---:|---:|---:|"]
        for name, v in rows.items():
            e, t, np_ = v.get("ember"), v.get("torch"), v.get("numpy")
            lines.append(f"| {name} | {units[name]} | {_fmt(e)} | {_fmt(t)} | {_fmt(np_)} | "
                         f"{_ratio(units[name], e, t)} |")
    imp = data["import_s"]
    if not imp:                 # a run of chosen workloads (--only)
        return "\n".join(lines) + "\n"
    e, t, np_ = (imp.get(fw) for fw in FRAMEWORKS)
    lines += ["\n### import (fresh interpreter)\n",
              "| what | unit | ember | torch | numpy | ember/torch (time) |",
              "|---|---|---:|---:|---:|---:|",
              f"| import | ms | {_fmt(e and e * 1e3)} | {_fmt(t and t * 1e3)} | "
              f"{_fmt(np_ and np_ * 1e3)} | {_ratio('s', e, t)} |"]
    return "\n".join(lines) + "\n" + footprint.table(data.get("memory", {}), data.get("size", {}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer, shorter repeats (about 2 minutes)")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--rounds", type=int, default=None,
                   help="times each framework runs, interleaved (default 1 quick, 3 full)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results.json"),
                   help="where to write the results")
    p.add_argument("--only", help="run only the workloads whose name contains this")
    p.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        _worker(args.worker, int(args.threads), args.quick, args.only)
        return 0
    threads = [int(n) for n in args.threads.split(",")]
    rounds = args.rounds or (1 if args.quick else 3)
    start = time.perf_counter()
    data = measure(threads, args.quick, rounds, args.only)
    data["meta"] = {"python": platform.python_version(), "machine": platform.machine(),
                    "cpus": os.cpu_count(), "quick": args.quick, "rounds": rounds,
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "seconds": round(time.perf_counter() - start, 1)}
    print(table(data))
    Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    print(f"\nwrote {args.json} ({data['meta']['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
