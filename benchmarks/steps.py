"""The MLP and GPT training steps (``benchmarks/models.py``), ember against torch, as medians of
time per step: each framework in a fresh process of its own per round, the rounds
alternating, at each thread count. One thread is timed in CPU time (``time.process_time``:
steadier on a shared machine), more in wall time (CPU time would add up the threads).

    python -m benchmarks.steps [--threads 1,2] [--rounds 3] [--steps 30] [--same-malloc]
                               [--only MLP|GPT] [--clock cpu|wall]

NOTE: why one process per framework. ``import ember`` raises glibc's mmap and trim thresholds
(``ember/_backends/malloc.py``) so that a step's arrays stay mapped for the next step. A torch
running in the same process inherits them and stops faulting its activations back in, which
would flatter torch's figures. ``--same-malloc`` gives
torch's process ember's two settings (as ``MALLOC_*_`` variables), for the ratio of the two
frameworks' own work with the allocator taken out.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = {"MLP step": "mlp_step", "GPT step": "gpt_step"}


def _worker(fw, name, threads, steps, clock):
    import time
    now = time.process_time if clock == "cpu" else time.perf_counter
    mod = __import__(fw)
    mod.set_num_threads(threads)
    from benchmarks import models
    step = getattr(models, name)(mod)
    for _ in range(5):
        step()
    times = []
    for _ in range(steps):
        t = now()
        step()
        times.append(now() - t)
    print(json.dumps(statistics.median(times)))


def _spawn(fw, name, threads, steps, same_malloc, clock):
    from ember._backends import malloc
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update({v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                          "MKL_NUM_THREADS")})
    if same_malloc and fw == "torch":
        env.update(MALLOC_MMAP_THRESHOLD_=str(malloc.MMAP_THRESHOLD),
                   MALLOC_TRIM_THRESHOLD_=str(malloc.TRIM_THRESHOLD))
    cmd = [sys.executable, "-m", "benchmarks.steps", "--worker", fw, name, str(threads),
           str(steps), clock]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"steps worker {fw} {name} (threads={threads}) failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per framework")
    p.add_argument("--steps", type=int, default=30, help="timed steps per process")
    p.add_argument("--same-malloc", action="store_true",
                   help="give torch's process ember's malloc thresholds")
    p.add_argument("--only", choices=("MLP", "GPT"), help="one workload")
    p.add_argument("--clock", choices=("cpu", "wall"),
                   help="what to time (default: CPU time at 1 thread, wall time at more)")
    p.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        fw, name, threads, steps, clock = args.worker
        _worker(fw, name, int(threads), int(steps), clock)
        return 0
    print("| workload | threads | clock | ember ms | torch ms | ember/torch |\n"
          "|---|---:|---|---:|---:|---:|")
    for n in (int(t) for t in args.threads.split(",")):
        clock = args.clock or ("cpu" if n == 1 else "wall")
        for label, name in WORKLOADS.items():
            if args.only and not label.startswith(args.only):
                continue
            runs = {"ember": [], "torch": []}
            for _ in range(args.rounds):
                for fw in runs:
                    runs[fw].append(_spawn(fw, name, n, args.steps, args.same_malloc, clock))
            e, t = (statistics.median(runs[fw]) for fw in ("ember", "torch"))
            print(f"| {label} | {n} | {clock} | {e * 1e3:.2f} | {t * 1e3:.2f} | {e / t:.2f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
