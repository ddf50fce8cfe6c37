"""ember.distributed against torch.distributed (gloo) on this machine, in one run: all-reduce
bus bandwidth, a DDP training step and its scaling from 1 to 2 ranks, and start-up.

    python -m benchmarks.distributed [--quick] [--rounds N] [--only GROUP] [--json PATH]

Every measurement runs in fresh worker processes (``--worker``), one per rank, started by this
driver with MASTER_ADDR/MASTER_PORT, RANK and WORLD_SIZE set and one thread each (OMP and BLAS
thread variables, ``set_num_threads(1)``); both frameworks run the same code. The frameworks
take turns ``--rounds`` times and the median over rounds is reported.

- all-reduce 1 MiB / 64 MiB float32, 2 ranks: bus bandwidth, ``2 (n-1)/n * bytes / time``
  (NCCL's definition), from the median time of repeated ``all_reduce`` (a barrier before each).
- DDP MLP 784-512-512-10 (ReLU, cross-entropy, SGD), global batch 256: one step (forward,
  backward with the gradient all-reduce, optimizer step) on 2 ranks x 1 thread (128 samples
  each), and one step of the plain module on 1 rank x 1 thread on all 256 samples. Scaling
  efficiency = time(1 rank) / (2 * time(2 ranks)).
- init_process_group, 4 ranks: the ranks start the call at one instant the driver sets once
  all have imported; the time until the last rank has returned.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

FRAMEWORKS = ("ember", "torch")
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
BATCH = 256


# ---- the worker: one rank of one framework --------------------------------------------------

def _median_time(fn, repeats, sync=None):
    fn()
    samples = []
    for _ in range(repeats):
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _mlp(lib):
    nn = lib.nn
    lib.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def _step_fn(lib, model, batch):
    x, y = lib.randn(batch, 784), lib.randint(0, 10, (batch,))
    opt = lib.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = lib.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return step


def _worker(fw, what, quick):
    lib = __import__(fw)
    lib.set_num_threads(1)
    dist = __import__(f"{fw}.distributed", fromlist=["_"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = {}
    if what == "init":
        print("ready", flush=True)               # imports done: the driver says when to start
        start_at = float(sys.stdin.readline())
        time.sleep(max(0.0, start_at - time.time()))
        dist.init_process_group("gloo")
        out["init"] = time.time() - start_at
    elif what == "step1":
        out["step1"] = _median_time(_step_fn(lib, _mlp(lib), BATCH), 5 if quick else 20)
    else:
        dist.init_process_group("gloo")
        if what == "allreduce":
            for mib in (1, 64):
                t = lib.ones(mib << 18)
                sec = _median_time(lambda: dist.all_reduce(t), (3 if quick else 7) if mib > 1
                                   else (10 if quick else 50), dist.barrier)
                out[f"allreduce {mib}MiB"] = 2 * (world - 1) / world * (mib << 20) / sec / 1e9
        elif what == "step2":
            ddp = lib.nn.parallel.DistributedDataParallel(_mlp(lib))
            out["step2"] = _median_time(_step_fn(lib, ddp, BATCH // world), 5 if quick else 20,
                                        dist.barrier)
        dist.barrier()
        dist.destroy_process_group()
    print(json.dumps({"rank": rank, **out}), flush=True)


# ---- the driver -----------------------------------------------------------------------------

def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(fw, what, n, quick):
    """Start ``n`` ranks of ``fw`` measuring ``what``; each rank's JSON line."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE=str(n),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update({v: "1" for v in _THREAD_VARS})
    cmd = [sys.executable, "-m", "benchmarks.distributed", "--worker", fw, "--what", what]
    procs = [subprocess.Popen(cmd + (["--quick"] if quick else []), cwd=ROOT, text=True,
                              env=dict(env, RANK=str(r)), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(n)]
    if what == "init":               # every rank has imported: all start 0.2 s from now
        for p in procs:
            p.stdout.readline()
        start_at = repr(time.time() + 0.2) + "\n"
        for p in procs:
            p.stdin.write(start_at)
            p.stdin.flush()
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"benchmark worker {fw} {what} failed:\n{stderr}")
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


def _measure_once(fw, quick, only):
    r = {}
    if only in (None, "allreduce"):
        r.update(_run(fw, "allreduce", 2, quick)[0])
        r.pop("rank")
    if only in (None, "ddp"):
        r["DDP step 1 rank"] = _run(fw, "step1", 1, quick)[0]["step1"]
        r["DDP step 2 ranks"] = max(o["step2"] for o in _run(fw, "step2", 2, quick))
        r["scaling efficiency"] = r["DDP step 1 rank"] / (2 * r["DDP step 2 ranks"])
    if only in (None, "init"):
        r["init 4 ranks"] = max(o["init"] for o in _run(fw, "init", 4, quick))
    return r


ROWS = [("allreduce 1MiB", "GB/s", "all-reduce 1 MiB float32, 2 ranks (bus bandwidth)"),
        ("allreduce 64MiB", "GB/s", "all-reduce 64 MiB float32, 2 ranks (bus bandwidth)"),
        ("DDP step 1 rank", "ms", "MLP step, 1 rank x 1 thread, batch 256 (no DDP)"),
        ("DDP step 2 ranks", "ms", "DDP MLP step, 2 ranks x 1 thread, 128 each"),
        ("scaling efficiency", "%", "DDP scaling efficiency 1 -> 2 ranks"),
        ("init 4 ranks", "s", "init_process_group, 4 local ranks")]


def measure(quick=False, rounds=1, only=None):
    """``{name: {framework: value}}``, the median over ``rounds`` interleaved runs; ``only``
    ("allreduce", "ddp", "init"): that group alone."""
    runs = {fw: [] for fw in FRAMEWORKS}
    for _ in range(rounds):
        for fw in FRAMEWORKS:
            runs[fw].append(_measure_once(fw, quick, only))
    return {name: {fw: statistics.median(r[name] for r in runs[fw]) for fw in FRAMEWORKS}
            for name, _, _ in ROWS if name in runs[FRAMEWORKS[0]][0]}


def table(results):
    """Markdown; ratios are ember/torch in the direction "above 1 = ember better" for
    bandwidth and efficiency, and as a time ratio (below 1 = ember faster) for times."""
    scale = {"ms": 1e3, "%": 100.0}
    lines = ["| workload | unit | ember | torch (gloo) | ember/torch |", "|---|---|---:|---:|---:|"]
    for name, unit, label in (row for row in ROWS if row[0] in results):
        e, t = results[name]["ember"], results[name]["torch"]
        k = scale.get(unit, 1.0)
        lines.append(f"| {label} | {unit} | {e * k:.3g} | {t * k:.3g} | {e / t:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--rounds", type=int, default=None, help="default 1 quick, 3 full")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "distributed_results.json"))
    p.add_argument("--only", choices=("allreduce", "ddp", "init"), help="one group alone")
    p.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    p.add_argument("--what", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        _worker(args.worker, args.what, args.quick)
        return 0
    start = time.perf_counter()
    rounds = args.rounds or (1 if args.quick else 3)
    results = measure(args.quick, rounds, args.only)
    print(table(results))
    data = {"results": results, "meta": {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": args.quick,
        "rounds": rounds, "cpus": os.cpu_count(), "seconds": round(time.perf_counter() - start, 1)}}
    Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.json} ({data['meta']['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
