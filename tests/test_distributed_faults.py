"""Faults in ember.distributed: a rank that raises or is killed by a signal makes every
other rank fail naming it, within the group's timeout, and leaves no process behind; the
launcher names the rank that failed first. (Kill-and-resume through emberrun's
--max-restarts is in test_distributed_checkpoint.py.) Bodies in _dcp_workers.py."""
import os
import shutil
import subprocess
import sys
import time
import uuid
from multiprocessing import resource_tracker

import pytest

import ember.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
import _dcp_workers as W  # noqa: E402

from test_distributed import _port, needs_mpi  # noqa: E402  (the harness)

pytestmark = needs_mpi


def _run(n, victim, how):
    """Start n ranks (not joined by spawn, which would stop the others itself), wait for all;
    returns exit codes, the survivors' tracebacks, the seconds taken and leftovers."""
    resource_tracker.ensure_running()       # this process's helper: started before the tag
    tag = os.environ["EMBER_FAULT_TEST"] = uuid.uuid4().hex
    try:
        ctx = mp.start_processes(W.die_at_step, args=(n, f"tcp://127.0.0.1:{_port()}", victim,
                                                      how), nprocs=n, join=False)
    finally:
        del os.environ["EMBER_FAULT_TEST"]
    t0 = time.monotonic()
    for p in ctx.processes:
        p.join(60)
    took = time.monotonic() - t0
    tbs = {i: ctx.error_queues[i].get() for i in range(n) if not ctx.error_queues[i].empty()}
    time.sleep(0.2)
    return [p.exitcode for p in ctx.processes], tbs, took, W.tagged_processes(tag)


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_rank_1_dies_at_step_3(how):
    codes, tbs, took, left = _run(3, 1, how)
    assert codes == [1, -9 if how == "kill" else 1, 1], (codes, tbs)
    why = ("RuntimeError: rank 1 fails at step 3" if how == "raise" else
           "ended without reporting an error: killed by a signal")
    for r in (0, 2):
        assert f"[Rank {r}] all_reduce aborted: rank 1 failed: " in tbs[r], tbs[r]
        assert why in tbs[r] and "timed out" not in tbs[r], tbs[r]
    assert took < 20 and left == [], (took, left)          # timeout 30 s; no orphans


def test_rank_0_killed():
    """Rank 0 hosts the store: when it dies the others see the store go quiet and name it."""
    codes, tbs, took, left = _run(2, 0, "kill")
    assert codes == [-9, 1], (codes, tbs)
    assert "[Rank 1] all_reduce aborted: rank 0 failed: the store it hosts stopped " \
        "answering" in tbs[1], tbs[1]
    assert took < 20 and left == [], (took, left)


def test_mpiexec_rank_raises():
    """Under mpiexec there is no store: the failing rank aborts the MPI job (as
    ``python -m mpi4py``), instead of leaving the others waiting and itself stuck in
    MPI_Finalize."""
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or \
        shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec next to the Python interpreter or on PATH")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    t0 = time.monotonic()
    r = subprocess.run([mpiexec, "-n", "2", sys.executable, "tests/_dcp_workers.py", "die", "1",
                        "raise"], cwd=root, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=root))
    assert r.returncode != 0 and time.monotonic() - t0 < 30
    assert "RuntimeError: rank 1 fails at step 3" in r.stderr + r.stdout, r.stderr
