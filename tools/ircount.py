"""Instructions per call of benchmark workloads, counted by valgrind's callgrind.

    python tools/ircount.py [--fw ember|torch] [-n CALLS] ["workload name" ...]

Wall-clock medians swing by 2x on a shared machine; instruction counts do not (they repeat to
~0.1%), so they show whether a change to the dispatch or autograd path made it cheaper. Only
the timed calls are counted: each workload runs inside one ``functools.reduce`` call and
callgrind collects inside that function alone (``--toggle-collect``), dumping a profile after
each (``--dump-after``). Needs ``valgrind`` on PATH. Default: the per-op overhead workloads.
"""
import argparse
import functools
import glob
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OVERHEAD = ("add 1 elem", "add 100 elem", "add 1 elem, requires_grad",
            "add 100 elem, requires_grad", "chain10 fwd (no grad)", "chain10 fwd+bwd")


def _child(fw, n, names):
    """Runs under valgrind: warm each workload up, then time ``n`` calls inside one reduce."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.workloads import WORKLOADS
    mod = __import__(fw)
    by_name = {w.name: w for w in WORKLOADS}
    for name in names:
        fn = by_name[name].build(mod)
        for _ in range(50):
            fn()
        functools.reduce(lambda acc, _: fn(), range(n), None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=OVERHEAD, help="workload names (default: overhead)")
    p.add_argument("--fw", default="ember", help="ember or torch")
    p.add_argument("-n", type=int, default=300, help="timed calls per workload")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(args.fw, args.n, args.names)
    from benchmarks.workloads import WORKLOADS
    per = {w.name: w.per for w in WORKLOADS}
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", "--toggle-collect=functools_reduce",
               "--dump-after=functools_reduce", f"--callgrind-out-file={out}", sys.executable,
               __file__, "--child", "--fw", args.fw, "-n", str(args.n), *args.names]
        env = dict(os.environ, PYTHONHASHSEED="0")
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        dumps = sorted(glob.glob(out + ".*"), key=lambda f: int(f.rsplit(".", 1)[1]))
        for name, f in zip(args.names, dumps):
            total = next(int(line.split()[1]) for line in open(f)
                         if line.startswith(("summary:", "totals:")))
            print(f"{args.fw:6s} {name:30s} {total / args.n / per.get(name, 1):10.0f} Ir/op")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
