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
import json
import os
import signal
import socket
import subprocess
import sys
import shutil
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
                   EMBER_ERROR_FILE=os.path.join(errdir, f"error_{restart}_{rank}.json"))
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
        procs.append((rank, subprocess.Popen(cmd, env=env, start_new_session=True)))
    return procs


def _signal_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass                    # the worker and everything it started are gone


def _stop(procs, grace=5.0):
    """SIGTERM each worker's process group (the worker and whatever it started, as
    torchrun), then SIGKILL what is left after ``grace`` seconds."""
    for _, p in procs:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for _, p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for _, p in procs:
        _signal_group(p, signal.SIGKILL)
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
        errfile = lambda r, restart=restart: os.path.join(errdir, f"error_{restart}_{r}.json")
        failed = None
        try:
            while failed is None and any(p.poll() is None for _, p in procs):
                failed = _first_failed(procs, errfile)
                time.sleep(a.monitor_interval)
            if failed is None:
                failed = _first_failed(procs, errfile)
        except KeyboardInterrupt:
            _stop(procs)
            return 130
        _stop(procs)
        if failed is None:
            shutil.rmtree(errdir, ignore_errors=True)
            return 0
        _report(a, dict(procs), failed[0], errfile)
        if restart < a.max_restarts:
            print(f"[emberrun] restarting the job ({restart + 1}/{a.max_restarts})",
                  file=sys.stderr, flush=True)
    shutil.rmtree(errdir, ignore_errors=True)
    return 1


def _first_failed(procs, errfile):
    """Of the workers that exited non-zero, the likeliest first: one with its own error
    (not aborted because of another rank), then one killed by a signal, then the others (a
    rank whose peer died often exits a moment later, within the same poll)."""
    def order(rp):
        info = _read_error(errfile(rp[0]))
        return (0 if info and info.get("failed_rank") is None else
                1 if rp[1].returncode < 0 else 2, rp[0])
    bad = [(r, p) for r, p in procs if p.poll() not in (None, 0)]
    return min(bad, key=order) if bad else None


def _read_error(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _report(a, procs, rank, path):
    """Print the failure that started it all: the first worker seen failing may only have
    been aborted by another rank's failure (its error file names that rank), so follow
    the chain."""
    seen = set()
    while rank not in seen:
        seen.add(rank)
        cause = _read_error(path(rank)).get("failed_rank")
        if cause is None or cause not in procs or procs[cause].returncode == 0:
            break
        rank = cause
    p, info = procs[rank], _read_error(path(rank))
    tb = info.get("message", {}).get("extraInfo", {}).get("py_callstack", "")
    how = (f"signal {signal.Signals(-p.returncode).name}" if p.returncode < 0 else
           f"exit code {p.returncode}")
    print(f"[emberrun] rank {rank} (local_rank {rank - a.node_rank * a.nproc_per_node}, "
          f"pid {p.pid}) failed first with {how}"
          + (f":\n{tb}" if tb else ""), file=sys.stderr, flush=True)


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
        path = os.environ.get("EMBER_ERROR_FILE")
        if path:            # torchrun's error file, written before the others are told
            from .elastic.multiprocessing.errors import write_error_file
            write_error_file(path, e, tb, failed_rank=getattr(e, "failed_rank", None))
        c10d = sys.modules.get("ember.distributed.distributed_c10d")
        if c10d is not None:
            c10d.report_failure(e)
        sys.stderr.write(tb)
        sys.exit(1)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--_worker":
        return _worker(argv[1:])
    return launch(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
