"""``emberrun`` / ``python -m ember.distributed.run``: start a training script on several
processes, as ``torchrun``.

Each worker gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
GROUP_RANK, ROLE_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), so the script's
``init_process_group()`` (env://) meets the others in a TCPStore on the master and joins the
MPI communicator there (see ``_mpi.py``). The script runs with ``import torch`` served by
ember. When a worker fails, the others are stopped; with ``--max-restarts N`` the whole job
starts again (up to N times), otherwise the launcher exits non-zero naming the rank that
failed first, with its traceback. Several machines: run the launcher on each with the same
``--nnodes``, ``--master-addr``/``--master-port`` (or ``--rdzv-endpoint``) and its own
``--node-rank``.

Example:
    >>> from ember.distributed.run import parse_args
    >>> a = parse_args(["--nproc-per-node", "2", "--standalone", "train.py", "--lr", "1"])
    >>> a.nproc_per_node, a.training_script, a.training_script_args
    (2, 'train.py', ['--lr', '1'])
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid


def parse_args(argv):
    p = argparse.ArgumentParser(prog="emberrun", description="Start a script on several "
                                "processes, as torchrun.")

    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1)
    p.add_argument("--nnodes", type=str, default="1")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0)
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1")
    p.add_argument("--master-port", "--master_port", type=int, default=29500)
    p.add_argument("--rdzv-endpoint", "--rdzv_endpoint", default="")
    p.add_argument("--rdzv-backend", "--rdzv_backend", default="static")
    p.add_argument("--rdzv-id", "--rdzv_id", default="none")
    p.add_argument("--max-restarts", "--max_restarts", type=int, default=0)
    p.add_argument("--monitor-interval", "--monitor_interval", type=float, default=0.1)
    p.add_argument("--standalone", action="store_true")
    p.add_argument("--no-python", "--no_python", action="store_true")
    p.add_argument("-m", "--module", dest="module", action="store_true")
    p.add_argument("training_script")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _start(a, nnodes, addr, port, restart, errdir):
    n = a.nproc_per_node
    procs = []
    for local in range(n):
        rank = a.node_rank * n + local
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE=str(nnodes * n),
                   LOCAL_WORLD_SIZE=str(n), GROUP_RANK=str(a.node_rank), ROLE_RANK=str(rank),
                   ROLE_WORLD_SIZE=str(nnodes * n), ROLE_NAME="default", MASTER_ADDR=addr,
                   MASTER_PORT=str(port), TORCHELASTIC_RUN_ID=a.rdzv_id,
                   TORCHELASTIC_RESTART_COUNT=str(restart),
                   TORCHELASTIC_MAX_RESTARTS=str(a.max_restarts),
                   EMBER_ERROR_FILE=os.path.join(errdir, f"error_{restart}_{rank}.txt"))
        # the workers import the same ember as this launcher
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        if n > 1:
            env.setdefault("OMP_NUM_THREADS", "1")      # as torchrun: no oversubscribed BLAS
        if a.no_python:
            cmd = [a.training_script, *a.training_script_args]
        else:
            cmd = [sys.executable, "-u", "-m", "ember.distributed.run", "--_worker",
                   "-m" if a.module else "-s", a.training_script, *a.training_script_args]
        procs.append((rank, subprocess.Popen(cmd, env=env)))
    return procs


def _stop(procs, grace=5.0):
    for _, p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for _, p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(a):
    """Run the job; returns the launcher's exit code."""
    nnodes = int(a.nnodes.split(":")[-1])
    addr, port = a.master_addr, a.master_port
    if a.rdzv_endpoint:
        addr, _, p = a.rdzv_endpoint.rpartition(":")
        port = int(p) if p else 29400
    if a.standalone:
        addr, port, nnodes = "127.0.0.1", _free_port(), 1
    errdir = tempfile.mkdtemp(prefix="emberrun_")
    for restart in range(a.max_restarts + 1):
        procs = _start(a, nnodes, addr, port, restart, errdir)
        failed = None
        try:
            while failed is None and any(p.poll() is None for _, p in procs):
                for rank, p in procs:
                    if p.poll() not in (None, 0):
                        failed = (rank, p)
                        break
                time.sleep(a.monitor_interval)
            if failed is None:
                failed = next(((r, p) for r, p in procs if p.returncode != 0), None)
        except KeyboardInterrupt:
            _stop(procs)
            return 130
        _stop(procs)
        if failed is None:
            return 0
        rank, p = failed
        err = os.path.join(errdir, f"error_{restart}_{rank}.txt")
        tb = open(err).read() if os.path.exists(err) else ""
        how = (f"signal {signal.Signals(-p.returncode).name}" if p.returncode < 0 else
               f"exit code {p.returncode}")
        print(f"[emberrun] rank {rank} (local_rank {rank - a.node_rank * a.nproc_per_node}, "
              f"pid {p.pid}) failed first with {how}"
              + (f":\n{tb}" if tb else ""), file=sys.stderr, flush=True)
        if restart < a.max_restarts:
            print(f"[emberrun] restarting the job ({restart + 1}/{a.max_restarts})",
                  file=sys.stderr, flush=True)
    return 1


def _worker(argv):
    """Run the script as __main__ with ``import torch`` served by ember; a traceback goes to
    EMBER_ERROR_FILE for the launcher to report."""
    import runpy
    import traceback
    from .. import runner
    runner.install()
    kind, target, args = argv[0], argv[1], argv[2:]
    sys.argv = [target, *args]
    try:
        if kind == "-m":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as e:
        tb = traceback.format_exc()
        c10d = sys.modules.get("ember.distributed.distributed_c10d")
        if c10d is not None:
            c10d.report_failure(e)
        path = os.environ.get("EMBER_ERROR_FILE")
        if path:
            with open(path, "w") as f:
                f.write(tb)
        sys.stderr.write(tb)
        sys.exit(1)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--_worker":
        return _worker(argv[1:])
    return launch(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
