"""ember.distributed against NumPy and torch: stores, errors and the sampler in this process;
collectives and DDP on 2 and 4 processes (oversubscribed on CI's 2 cores) in each launch
style: ember.multiprocessing.spawn, emberrun, mpiexec. The multi-process bodies are in
_dist_workers.py."""
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import ember
import ember.distributed as dist
import ember.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(__file__))
import _dist_workers as W  # noqa: E402

try:
    import mpi4py  # noqa: F401
    HAVE_MPI = True
except ImportError:
    HAVE_MPI = False
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed: pip install "
                               "'ember[distributed]' (mpi4py, mpich) to run distributed tests")
ALL_DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "int8",
              "bool", "complex64"]


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(fn, n, *args):
    mp.spawn(fn, args=(n, f"tcp://127.0.0.1:{_port()}") + args, nprocs=n)


@pytest.fixture
def world1():
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


# ------------------------------------------------------------------- in this process
def test_import_is_light():
    out = subprocess.run([sys.executable, "-c", "import sys, ember, ember.distributed, "
                          "ember.nn.parallel, ember.distributed.fsdp; "
                          "print('mpi4py' in sys.modules, 'torch' in sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def store_pair(kind, tmp_path):
    """Two handles on one store of ``kind`` (as two processes would hold)."""
    if kind == "tcp":
        a = dist.TCPStore("127.0.0.1", 0, is_master=True)
        return a, dist.TCPStore("127.0.0.1", a.port)
    if kind == "file":
        return dist.FileStore(str(tmp_path / "s"), 2), dist.FileStore(str(tmp_path / "s"), 2)
    a = dist.HashStore()
    return (dist.PrefixStore("p", a), dist.PrefixStore("p", a)) if kind == "prefix" else (a, a)


@pytest.mark.parametrize("kind", ["hash", "tcp", "file", "prefix"])
def test_stores(kind, tmp_path):
    a, b = store_pair(kind, tmp_path)
    a.set("k", "v")
    assert b.get("k") == b"v"
    assert a.add("n", 2) == 2 and b.add("n", 5) == 7 and a.get("n") == b"7"
    assert b.compare_set("k", "x", "y") == b"v"            # mismatch: the current value
    assert b.compare_set("k", "v", "w") == b"w" and a.get("k") == b"w"
    assert a.compare_set("new", "", "z") == b"z"           # missing and expected empty: set
    assert b.check(["k", "n"]) and not b.check(["missing"])
    n = a.num_keys()
    assert b.delete_key("k") and not b.delete_key("k") and a.num_keys() == n - 1
    t0 = time.monotonic()
    with pytest.raises(dist.DistStoreError, match="wait timeout after 200ms"):
        b.wait(["never"], 0.2)
    b.set_timeout(0.2)
    with pytest.raises(dist.DistStoreError):
        b.get("never")
    assert time.monotonic() - t0 < 5
    if kind == "tcp":
        a.close()


def test_errors_before_init():
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist.all_reduce(ember.ones(2))
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist.get_rank()
    with pytest.raises(ValueError, match="environment variable MASTER_ADDR expected"):
        os.environ.pop("MASTER_ADDR", None)
        dist.init_process_group("gloo", rank=0, world_size=2)
    with pytest.raises(ValueError, match="Invalid backend"):
        dist.init_process_group("tpu", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)


@needs_mpi
def test_errors_after_init(world1):
    with pytest.raises(ValueError, match="twice"):
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    with pytest.raises(ValueError, match="world_size .1. times input tensor size .3."):
        dist.all_gather_into_tensor(ember.zeros(4), ember.zeros(3))
    with pytest.raises(ValueError, match="tensor_list has 2 tensors"):
        dist.all_gather([ember.zeros(2), ember.zeros(2)], ember.zeros(2))
    with pytest.raises(ValueError, match="same device"):
        dist.all_gather_into_tensor(ember.zeros(2, device="meta"), ember.zeros(2))
    with pytest.raises(RuntimeError, match="BAND is not defined for"):
        dist.all_reduce(ember.ones(2), op=dist.ReduceOp.BAND)
    with pytest.raises(ValueError, match="split_sizes"):
        dist.all_to_all_single(ember.zeros(3), ember.zeros(3), [2], [3])
    assert dist.get_backend() == "gloo" and dist.get_world_size() == 1


@needs_mpi
def test_collectives_one_rank(world1):
    W.collectives(0, 1, None, ALL_DTYPES)


def test_multiprocessing_spawn_errors_and_shared_tensors():
    with pytest.raises(mp.ProcessRaisedException, match="(?s)Process 1 terminated.*boom on one"
                       ) as e:
        mp.spawn(W.raise_on_1, nprocs=2)
    assert e.value.error_index == 1
    with pytest.raises(mp.ProcessExitedException, match="process 0 terminated with exit code 3"):
        mp.spawn(W.exit_3, nprocs=2)
    ctx = mp.get_context("spawn")
    q, done = ctx.Queue(), ctx.Queue()
    t = ember.zeros(3).share_memory_()
    assert t.is_shared() and not ember.zeros(1).is_shared()
    p = ctx.Process(target=W.add_one, args=(q, done))
    p.start()
    q.put(t)
    assert done.get(timeout=60) is True
    p.join()
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_data_parallel_runs_the_module():
    lin = ember.nn.Linear(3, 2)
    dp = ember.nn.DataParallel(lin)
    x = ember.randn(4, 3)
    assert ember.equal(dp(x), lin(x)) and dp.module is lin
    assert list(dp.state_dict()) == ["module.weight", "module.bias"]


# ------------------------------------------------------------------- several processes
@needs_mpi
def test_collectives_spawn_2_ranks():
    _spawn(W.collectives, 2, ALL_DTYPES)


@needs_mpi
def test_collectives_spawn_4_ranks_oversubscribed():
    _spawn(W.collectives, 4, ["float32", "bfloat16", "int64", "bool"])


@needs_mpi
def test_ddp_matches_single_process():
    _spawn(W.ddp, 2)


@needs_mpi
@pytest.mark.slow
def test_ddp_4_ranks():
    _spawn(W.ddp, 4)


def _launch(*args, env=None):
    return subprocess.run([sys.executable, "-m", "ember.distributed.run", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


@needs_mpi
def test_emberrun_collectives():
    r = _launch("--nproc-per-node", "2", "--standalone", "tests/_dist_workers.py",
                "float32,int32,bfloat16")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:2]) == ["ok 0 None", "ok 1 None"]


@needs_mpi
def test_emberrun_two_nodes():
    """Two launchers, as on two machines (here both on localhost): --nnodes 2 with each its
    --node-rank and the same --master-addr/--master-port make one world of 2 ranks. Node 1's
    rank exits a second later: node 0's launcher has by then stopped its own workers, and
    must leave alone the PMI server that node 1's MPI_Finalize still talks to."""
    port = str(_port())
    procs = [subprocess.Popen([sys.executable, "-m", "ember.distributed.run", "--nproc-per-node",
                               "1", "--nnodes", "2", "--node-rank", str(n), "--master-addr",
                               "127.0.0.1", "--master-port", port, "tests/_dist_workers.py",
                               "float32,int64"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, EMBER_TEST_EXIT_DELAY=str(n)))
             for n in (0, 1)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    assert [o[0].split("\n")[0] for o in outs] == ["ok 0 None", "ok 1 None"]


@needs_mpi
def test_mpiexec_collectives():
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or \
        shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec next to the Python interpreter or on PATH")
    r = subprocess.run([mpiexec, "-n", "2", sys.executable, "tests/_dist_workers.py",
                        "float64,int64"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:2]) == ["ok 0 0", "ok 1 1"]


_FAILING = """
import os, sys, ember, ember.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1 and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    raise KeyError("rank 1 breaks in the first attempt")
dist.barrier()
sys.stdout.write(f"finished {dist.get_rank()}\\n")
"""


@needs_mpi
@pytest.mark.slow
def test_emberrun_names_failed_rank_and_restarts(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(_FAILING)
    r = _launch("--nproc-per-node", "2", "--standalone", str(script))
    assert r.returncode == 1
    assert "[emberrun] rank 1 (local_rank 1" in r.stderr and "KeyError" in r.stderr
    r = _launch("--nproc-per-node", "2", "--standalone", "--max-restarts", "1", str(script))
    assert r.returncode == 0, r.stderr
    assert "restarting the job (1/1)" in r.stderr and "finished 0" in r.stdout


@needs_mpi
def test_failed_rank_stops_the_others():
    """Rank 1 raises at step 3; rank 0, waiting in all_reduce, fails naming rank 1 and its
    error well before the group's 5 s timeout, and every process exits."""
    ctx = mp.start_processes(W.fail_at_step, args=(2, f"tcp://127.0.0.1:{_port()}"), nprocs=2,
                             join=False)
    t0 = time.monotonic()
    for p in ctx.processes:
        p.join(120)
    assert [p.exitcode for p in ctx.processes] == [1, 1]
    tb = ctx.error_queues[0].get()
    assert "all_reduce aborted: rank 1 failed: RuntimeError: rank 1 fails at step 3" in tb, tb
    assert "timed out" not in tb and time.monotonic() - t0 < 60


# ------------------------------------------------------------------- NCCL, through a double
class _FakeNccl:
    """``cupy.cuda.nccl`` for N threads of one process: communicators read and write the
    buffers by address, as NCCL does, so the engine's pointers, counts, types and groups are
    what is checked. (No GPU here: the real path runs where CuPy finds one.)"""
    import ml_dtypes
    NCCL_FLOAT16, NCCL_FLOAT32, NCCL_FLOAT64, NCCL_BFLOAT16 = (
        np.float16, np.float32, np.float64, ml_dtypes.bfloat16)
    NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_INT64 = np.int8, np.uint8, np.int32, np.int64
    NCCL_SUM, NCCL_AVG, NCCL_PROD, NCCL_MIN, NCCL_MAX = "sum", "avg", "prod", "min", "max"

    def __init__(self, n):
        import threading
        self.n, self.barrier, self.slots, self.p2p = n, threading.Barrier(n), [None] * n, {}
        self.lock = threading.Lock()

    def groupStart(self):
        pass

    def groupEnd(self):
        pass

    @staticmethod
    def mem(ptr, n, dt):
        import ctypes
        dt = np.dtype(dt)
        return np.frombuffer((ctypes.c_uint8 * (n * dt.itemsize)).from_address(ptr), dt)


class _FakeComm:
    def __init__(self, world, rank):
        self.w, self.rank = world, rank

    def _exchange(self, value):
        self.w.slots[self.rank] = value
        self.w.barrier.wait()
        out = list(self.w.slots)
        self.w.barrier.wait()
        return out

    def allReduce(self, s, r, n, dt, op, stream):
        vals = np.stack(self._exchange(_FakeNccl.mem(s, n, dt).astype(np.float64)))
        red = {"sum": vals.sum(0), "avg": vals.mean(0), "prod": vals.prod(0),
               "min": vals.min(0), "max": vals.max(0)}[op]
        _FakeNccl.mem(r, n, dt)[:] = red.astype(dt)

    def reduce(self, s, r, n, dt, op, root, stream):
        before = _FakeNccl.mem(r, n, dt).copy()
        self.allReduce(s, r, n, dt, op, stream)
        if self.rank != root:
            _FakeNccl.mem(r, n, dt)[:] = before

    def broadcast(self, s, r, n, dt, root, stream):
        vals = self._exchange(_FakeNccl.mem(s, n, dt).copy())
        _FakeNccl.mem(r, n, dt)[:] = vals[root]

    def allGather(self, s, r, n, dt, stream):
        vals = self._exchange(_FakeNccl.mem(s, n, dt).copy())
        _FakeNccl.mem(r, n * self.w.n, dt)[:] = np.concatenate(vals)

    def reduceScatter(self, s, r, n, dt, op, stream):
        vals = np.stack(self._exchange(_FakeNccl.mem(s, n * self.w.n, dt).astype(np.float64)))
        red = {"sum": vals.sum(0), "max": vals.max(0), "avg": vals.mean(0)}[op]
        _FakeNccl.mem(r, n, dt)[:] = red[self.rank * n:(self.rank + 1) * n].astype(dt)

    def send(self, p, n, dt, peer, stream):
        with self.w.lock:
            self.w.p2p.setdefault((self.rank, peer), []).append(_FakeNccl.mem(p, n, dt).copy())

    def recv(self, p, n, dt, peer, stream):
        while True:
            with self.w.lock:
                q = self.w.p2p.get((peer, self.rank))
                if q:
                    _FakeNccl.mem(p, n, dt)[:] = q.pop(0)
                    return
            time.sleep(1e-3)


class _Done:
    def done(self):
        return True


@needs_mpi
def test_nccl_engine_through_a_double(world1):
    import threading
    from ember.distributed import _nccl
    from ember.distributed.distributed_c10d import ProcessGroup
    n, world, errors = 2, _FakeNccl(2), []

    def rank_body(r):
        try:
            eng = _nccl.NcclEngine(None, r, n, nccl=world, xp=np, event=_Done,
                                   comm=_FakeComm(world, r))
            pg = ProcessGroup(eng, list(range(n)), "nccl", dist.default_pg_timeout)
            for dt in (ember.float32, ember.bfloat16, ember.int64):
                t = ember.arange(6).reshape(2, 3).to(dt) + r
                dist.all_reduce(t, group=pg)
                assert t.tolist() == (ember.arange(6).reshape(2, 3) * 2 + 1).to(dt).tolist()
                t = ember.full((3,), r).to(dt)
                dist.all_reduce(t, op=dist.ReduceOp.MAX, group=pg, async_op=True).wait()
                assert t.tolist() == [1, 1, 1]
            b = ember.full((4,), float(r))
            dist.broadcast(b, src=1, group=pg)
            out = [ember.zeros(2) for _ in range(n)]
            dist.all_gather(out, ember.full((2,), float(r)), group=pg)
            rs = ember.zeros(2)
            dist.reduce_scatter_tensor(rs, ember.arange(4.) + r, group=pg)
            g = [ember.zeros(1) for _ in range(n)] if r == 0 else None
            dist.gather(ember.full((1,), r + 5.), g, dst=0, group=pg)
            sc = ember.zeros(2)
            dist.scatter(sc, [ember.full((2,), 7. + k) for k in range(n)] if r == 0 else None,
                         src=0, group=pg)
            outs = [ember.zeros(k + 1) for k in range(n)]
            dist.all_to_all(outs, [ember.full((r + 1,), 10. * r + k) for k in range(n)],
                            group=pg)
            assert b.tolist() == [1.0] * 4
            assert [o.tolist() for o in out] == [[0.0, 0.0], [1.0, 1.0]]
            assert rs.tolist() == [(2 * r) * 2 + 1.0, (2 * r + 1) * 2 + 1.0]
            assert r != 0 or [x.item() for x in g] == [5.0, 6.0]
            assert sc.tolist() == [7. + r] * 2
            assert [o.tolist() for o in outs] == [[10. * k + r] * (k + 1) for k in range(n)]
            with pytest.raises(RuntimeError, match="NCCL has no ReduceOp.BAND"):
                dist.all_reduce(ember.ones(2, dtype=ember.int32), op=dist.ReduceOp.BAND,
                                group=pg)
        except BaseException as e:          # noqa: BLE001 -- reported by the main thread
            errors.append(e)
            world.barrier.abort()
    threads = [threading.Thread(target=rank_body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]


_TORCH_SPAWN = """
import os, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
def worker(rank, world, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)                     # DDP makes the replicas equal anyway
    model = DDP(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad(); model(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
    w = [None] * world
    dist.all_gather_object(w, model.module.weight.tolist())
    assert torch.__name__ == "ember" and w[0] == w[1], (torch.__name__, w)
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(worker, args=(2, os.environ["PORT"]), nprocs=2)
    print("trained")
"""


@needs_mpi
def test_torch_script_with_spawn_under_ember_run(tmp_path):
    """A tutorial-style script (mp.spawn + MASTER_ADDR/PORT + DDP) runs unchanged through
    `ember run`: the spawned children also get `import torch` served by ember."""
    script = tmp_path / "train.py"
    script.write_text(_TORCH_SPAWN)
    r = subprocess.run([sys.executable, "-m", "ember", "run", str(script)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PORT=str(_port())))
    assert r.returncode == 0 and "trained" in r.stdout, r.stderr
