"""The rest of torch.distributed's and torch.multiprocessing's public names, against torch
2.13: option structs, backend queries, debug levels, store queues, rendezvous, DeviceMesh's
errors and repr, DDP's Reducer/Logger data in this process; every collective-making name on
2 ranks in one spawn (bodies in _dist_names_workers.py)."""
import datetime
import json
import glob
import os
import sys
import time

import pytest

import ember
import ember.distributed as dist
import ember.multiprocessing as mp

torch = pytest.importorskip("torch")
import torch.distributed as tdist  # noqa: E402
import torch.multiprocessing as tmp  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import _dist_names_workers as W  # noqa: E402
from test_distributed import HAVE_MPI, _port, needs_mpi, store_pair  # noqa: E402
OPTIONS = ["AllreduceOptions", "AllreduceCoalescedOptions", "ReduceOptions", "BroadcastOptions",
           "GatherOptions", "ScatterOptions", "ReduceScatterOptions", "AllToAllOptions",
           "BarrierOptions"]


@pytest.fixture(scope="module")
def torch_world():
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_port()}", rank=0,
                             world_size=1)
    yield
    tdist.destroy_process_group()


@pytest.fixture
def world1():
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("name", OPTIONS)
def test_options_fields_and_defaults(name):
    e, t = getattr(dist, name)(), getattr(tdist, name)()
    fields = [a for a in dir(t) if not a.startswith("_")]
    assert fields == [a for a in dir(e) if not a.startswith("_")]
    for f in fields:
        ev, tv = getattr(e, f), getattr(t, f)
        if f == "reduceOp":
            assert int(ev) == int(tv.op) if hasattr(tv, "op") else ev == tv
        else:
            assert ev == tv, (f, ev, tv)
    e.timeout = datetime.timedelta(seconds=3)
    assert getattr(dist, name)().timeout != e.timeout       # instances do not share fields


def test_backend_queries_match_torch():
    for b in ["gloo", "nccl", "mpi", "ucc", "cpu:gloo,cuda:nccl", "cuda:nccl"]:
        assert repr(dist.BackendConfig(b)) == repr(tdist.BackendConfig(b)), b
    for bad in ["cpu:gloo,cpu:gloo", "cpu-gloo,cuda:nccl"]:
        with pytest.raises(ValueError):
            tdist.BackendConfig(bad)
        with pytest.raises(ValueError):
            dist.BackendConfig(bad)
    for d in ["cpu", "cuda", "cuda:1", ember.device("cpu")]:
        assert dist.get_default_backend_for_device(d) == tdist.get_default_backend_for_device(
            str(d))
    with pytest.raises(ValueError, match="Default backend not registered"):
        dist.get_default_backend_for_device("meta")
    for op in ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"]:
        assert dist.supports_complex(getattr(dist.ReduceOp, op)) == \
            tdist.supports_complex(getattr(tdist.ReduceOp, op))
    assert not dist.is_ucc_available() and not dist.is_xccl_available()
    assert dist.is_backend_available("gloo") == HAVE_MPI and not dist.is_backend_available("ucc")
    assert dist.get_pg_count() == 0 and dist.GroupName("3") == "3"
    assert {k: int(v) for k, v in dist.BuiltinCommHookType.__members__.items()} == \
        {k: int(v) for k, v in tdist.BuiltinCommHookType.__members__.items()}
    assert {k: int(v) for k, v in dist.DebugLevel.__members__.items()} == \
        {k: int(v) for k, v in tdist.DebugLevel.__members__.items()}
    assert issubclass(dist.QueueEmptyError, dist.DistStoreError)


def test_debug_level_and_node_local_rank(monkeypatch):
    for v, want in [("detail", "DETAIL"), ("INFO", "INFO"), ("OFF", "OFF")]:
        monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", v)
        dist.set_debug_level_from_env()
        tdist.set_debug_level_from_env()
        assert dist.get_debug_level().name == tdist.get_debug_level().name == want
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "loud")
    for m in (dist, tdist):
        with pytest.raises(ValueError, match="must be OFF, INFO, or DETAIL"):
            m.set_debug_level_from_env()
    dist.set_debug_level(dist.DebugLevel.OFF)
    tdist.set_debug_level(tdist.DebugLevel.OFF)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert dist.get_node_local_rank(fallback_rank=3) == tdist.get_node_local_rank(3) == 3
    for m in (dist, tdist):
        with pytest.raises(RuntimeError, match="LOCAL_RANK is not in the environment"):
            m.get_node_local_rank()
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert dist.get_node_local_rank(0) == 2


@pytest.mark.parametrize("kind", ["hash", "tcp", "file", "prefix"])
def test_store_queues_as_torch(kind, tmp_path):
    a, b = store_pair(kind, tmp_path)
    t = tdist.HashStore()
    for s in (a, t):
        s.queue_push("q", b"x")
        s.queue_push("q", "y")
    assert b.queue_len("q") == t.queue_len("q") == 2 and b.check(["q"])
    assert [b.queue_pop("q"), b.queue_pop("q", block=False)] == [t.queue_pop("q"),
                                                                 t.queue_pop("q", False)]
    assert b.queue_len("q") == t.queue_len("q") == 0 and not b.check(["q"])
    with pytest.raises(dist.QueueEmptyError, match="queue is empty"):
        b.queue_pop("q", block=False)
    b.set_timeout(datetime.timedelta(seconds=0.2))
    t0 = time.monotonic()
    with pytest.raises(dist.DistStoreError, match="Wait timeout"):
        b.queue_pop("q")
    assert time.monotonic() - t0 < 5
    if kind == "tcp":
        a.close()


def test_rendezvous_as_torch(tmp_path):
    url = f"file://{tmp_path}/rdzv"
    store, rank, world = next(dist.rendezvous(url, rank=1, world_size=3))
    assert isinstance(store, dist.FileStore) and (rank, world) == (1, 3)
    for m in (dist, tdist):
        with pytest.raises(RuntimeError, match="No rendezvous handler for nope://"):
            m.rendezvous("nope://x", 0, 1)
        with pytest.raises(RuntimeError, match="already registered"):
            m.register_rendezvous_handler("tcp", lambda url, **kw: iter(()))
        with pytest.raises(ValueError, match="tcp:// rendezvous: port number missing"):
            next(m.rendezvous("tcp://127.0.0.1", 0, 1))
        with pytest.raises(AssertionError, match="node-specific arguments"):
            m.rendezvous(url + "?rank=0", 0, 1)
        with pytest.raises(RuntimeError, match="`rank` must be an integer"):
            m.rendezvous(url, "0", 1)

    def mine(url, **kw):
        yield dist.HashStore(), 0, 1
    dist.register_rendezvous_handler("ember-unit", mine)
    dist.init_process_group("gloo", init_method="ember-unit://", rank=0, world_size=1)
    try:
        assert dist.get_world_size() == 1 and isinstance(
            dist.distributed_c10d._world.store.underlying_store, dist.HashStore)
    finally:
        dist.destroy_process_group()


@needs_mpi
def test_device_mesh_errors_and_repr(world1, torch_world):
    from torch.distributed.device_mesh import init_device_mesh as t_init
    for shape, names in [((1,), None), ((1,), ("dp",)), ((1, 1), ("dp", "tp")),
                         ((1, 1, 1), ("a", "b", "c"))]:
        e, t = dist.init_device_mesh("cpu", shape, mesh_dim_names=names), \
            t_init("cpu", shape, mesh_dim_names=names)
        assert repr(e) == repr(t)
        if names:
            for sl in [names[-1], names[0], names[:2]]:
                assert repr(e[sl]) == repr(t[sl]), sl
                assert e[sl].get_coordinate() == t[sl].get_coordinate()
    e, t = dist.init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp")), \
        t_init("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
    for m, err in [(e, None), (t, None)]:
        with pytest.raises(RuntimeError, match="needs to be specified"):
            m.get_group()
        with pytest.raises(RuntimeError, match="needs to be specified"):
            m.get_local_rank()
        with pytest.raises(KeyError, match="Invalid mesh_dim_names"):
            m["pp"]
        assert m["tp", "dp"].mesh_dim_names == ("tp", "dp")    # size-1 dims: any order
        with pytest.raises(KeyError, match="does not exist"):
            m.get_group("pp")
    for f in (dist.init_device_mesh, t_init):
        with pytest.raises(RuntimeError, match="Cannot slice a DeviceMesh without"):
            f("cpu", (1,))["dp"]
        with pytest.raises(RuntimeError, match="must be unique"):
            f("cpu", (1, 1), mesh_dim_names=("a", "a"))
        with pytest.raises(RuntimeError, match="should have same length"):
            f("cpu", (1, 1), mesh_dim_names=("a",))
        with pytest.raises(RuntimeError, match="Device type with index is not supported"):
            f("cpu:0", (1,))
        with pytest.raises(RuntimeError, match="Mesh should not be bigger than default world"):
            f("cpu", (2,))
    assert e.get_local_rank("tp") == 0 and e.get_all_groups() == [dist.group.WORLD] * 2
    g = dist.DeviceMesh.from_group(dist.group.WORLD, "cpu", mesh_dim_names=("dp",))
    assert g.get_group() is dist.group.WORLD and g.mesh.tolist() == [0]


@needs_mpi
def test_pg_methods_record_comm_and_ddp_logging(world1, torch_world):
    pg = dist.group.WORLD
    assert pg.group_name == tdist.group.WORLD.group_name == "0"
    assert dist.get_backend_config() == tdist.get_backend_config()
    with pytest.raises(TypeError, match="expected BroadcastOptions"):
        pg.broadcast([ember.ones(1)], dist.AllreduceOptions())
    outs, ins = [ember.zeros(2), ember.zeros(1, 3)], [ember.ones(2), ember.full((1, 3), 2.0)]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    assert outs[1].tolist() == [[2.0] * 3]
    pg.reduce_scatter_tensor_coalesced(outs, [i * 3 for i in ins]).wait()
    assert outs[0].tolist() == [3.0, 3.0] and outs[1].tolist() == [[6.0] * 3]
    from ember.profiler import profile
    with profile() as prof:
        with dist.record_comm("my_allreduce"):
            dist.all_reduce(ember.ones(2))
        dist.all_reduce(ember.ones(2))
    names = [e.name for e in prof.events()]
    assert "my_allreduce" in names and "gloo:all_reduce" in names
    # DDP's logging data: the keys ember fills are torch's, with torch's values
    from ember.nn.parallel import DistributedDataParallel as EDDP
    em, tm = EDDP(ember.nn.Linear(3, 2)), torch.nn.parallel.DistributedDataParallel(
        torch.nn.Linear(3, 2))
    for _ in range(2):          # torch logs an iteration's timings at the next forward
        em(ember.ones(4, 3)).sum().backward()
        tm(torch.ones(4, 3)).sum().backward()
    ed, td = em._get_ddp_logging_data(), tm._get_ddp_logging_data()
    assert set(ed) - {"dtypes"} <= set(td), set(ed) - set(td)
    for k in ["module_name", "world_size", "rank", "backend_name", "bucket_cap_bytes",
              "bucket_sizes", "num_parameter_tensors", "total_parameter_size_bytes",
              "find_unused_parameters", "gradient_as_bucket_view", "broadcast_buffers",
              "iteration", "num_buckets_reduced", "unused_parameter_size", "output_device",
              "has_sync_bn"]:
        assert ed[k] == td[k], (k, ed[k], td[k])
    assert len(em.reducer.get_backward_stats()) == len(tm.reducer.get_backward_stats())


def _several_tensors(lib, dist_, pg):
    """ProcessGroup calls with several tensors per process: results, or the error's type
    and message."""
    out = []

    def call(f):
        try:
            out.append([[x.tolist() for x in r] if isinstance(r, list) else r.tolist()
                        for r in f()])
        except Exception as e:          # noqa: BLE001 (the type and text are compared)
            out.append((type(e).__name__, str(e).split(" (expected")[0][:60]))

    ts = lambda: [lib.tensor([1.0, 2.0]), lib.tensor([10.0, 30.0])]       # noqa: E731
    for op in ("SUM", "AVG", "MAX", "PRODUCT"):
        call(lambda: (lambda t: (pg.allreduce(t, getattr(dist_.ReduceOp, op)).wait(), t)[1])(
            ts()))
    o = dist_.BroadcastOptions()
    o.rootTensor = 1
    call(lambda: (lambda t: (pg.broadcast(t, o).wait(), t)[1])(ts()))
    outs = [[lib.zeros(2) for _ in range(2)] for _ in range(2)]
    call(lambda: (pg.allgather(outs, ts()).wait(), outs)[1])
    o.rootTensor = 2
    call(lambda: pg.broadcast(ts(), o))
    call(lambda: pg.allreduce([lib.ones(1), lib.ones(2)]))
    call(lambda: pg.allgather([[lib.zeros(2)]], ts()))
    call(lambda: pg.allgather([[lib.zeros(2)], [lib.zeros(2)]], ts()))
    for name, args in (("reduce", (dist_.ReduceOptions(),)), ("send", (0, 0)),
                       ("recv", (0, 0)), ("recv_anysource", (0,))):
        call(lambda: getattr(pg, name)(ts(), *args))
    call(lambda: pg.gather([[lib.zeros(2)]], ts(), dist_.GatherOptions()))
    call(lambda: pg.scatter(ts(), [], dist_.ScatterOptions()))
    call(lambda: pg.reduce_scatter(ts(), [[lib.zeros(2)]] * 2, dist_.ReduceScatterOptions()))
    return out


@needs_mpi
def test_pg_several_tensors_per_process_as_torch(world1, torch_world):
    """On one rank against torch; tests/_dist_names_workers.py checks 2 ranks."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = _several_tensors(torch, tdist, tdist.group.WORLD)
    assert _several_tensors(ember, dist, dist.group.WORLD) == want


def test_sharing_strategies_as_torch():
    assert mp.get_all_sharing_strategies() == tmp.get_all_sharing_strategies()
    assert mp.get_sharing_strategy() == tmp.get_sharing_strategy() == "file_descriptor"
    for m in (mp, tmp):
        with pytest.raises(AssertionError, match="invalid sharing strategy 'x'"):
            m.set_sharing_strategy("x")
    prefix = f"/dev/shm/ember_mp_{os.getpid()}_"
    before = set(glob.glob(prefix + "*"))
    a = ember.zeros(3).share_memory_()                  # file_descriptor: no name left
    assert set(glob.glob(prefix + "*")) == before
    mp.set_sharing_strategy("file_system")
    try:
        b = ember.zeros(2).share_memory_()              # file_system: a named block
        assert len(set(glob.glob(prefix + "*")) - before) == 1
    finally:
        mp.set_sharing_strategy("file_descriptor")
    ctx = mp.get_context("spawn")
    q, done = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=W.add_one_each, args=(q, done))
    p.start()
    q.put((a, b))
    assert done.get(timeout=60) == [True, True]
    p.join()
    assert a.tolist() == [1.0] * 3 and b.tolist() == [1.0] * 2
    mp.init_reductions()


@needs_mpi
def test_names_on_2_ranks(tmp_path):
    mp.spawn(W.names, args=(2, str(tmp_path / "store")), nprocs=2)


def test_elastic_record_writes_torchs_error_file(tmp_path, monkeypatch):
    """``@record`` (torch.distributed.elastic.multiprocessing.errors) writes the exception that
    ends a worker to TORCHELASTIC_ERROR_FILE in torch's layout and re-raises it; SystemExit(0)
    returns None; without the variable nothing is written."""
    from torch.distributed.elastic.multiprocessing import errors as terrors

    from ember.distributed.elastic.multiprocessing import errors

    def main(code):
        if code is None:
            raise ValueError("bad batch (3, 4)")
        raise SystemExit(code)
    files = {}
    for name, rec in (("ember", errors.record), ("torch", terrors.record)):
        files[name] = tmp_path / f"{name}.json"
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(files[name]))
        with pytest.raises(ValueError, match=r"bad batch \(3, 4\)"):
            rec(main)(None)
        assert rec(main)(0) is None
        with pytest.raises(SystemExit):
            rec(main)(2)
    got, want = (json.loads(files[k].read_text())["message"] for k in ("ember", "torch"))
    assert got["message"] == want["message"] == "ValueError: bad batch (3, 4)"
    assert set(got["extraInfo"]) == set(want["extraInfo"]) == {"py_callstack", "timestamp"}
    assert "bad batch" in got["extraInfo"]["py_callstack"]
    assert abs(int(got["extraInfo"]["timestamp"]) - int(want["extraInfo"]["timestamp"])) < 60
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE")
    files["ember"].unlink()
    with pytest.raises(ValueError):
        errors.record(main)(None)
    assert not files["ember"].exists() and not list(tmp_path.glob("*.tmp"))
    err = errors.ChildFailedError("train.py", {1: "failure"})
    assert err.name == "train.py" and err.failures == {1: "failure"}


def test_types_aliases_as_torch():
    """ember.types (torch.types): the aliases resolve to ember's own classes."""
    import torch.types as ttypes

    import ember.types as etypes
    for name in ("Number", "Device", "_size", "_int", "_float", "_bool", "_dtype", "_device",
                 "Storage", "_TensorOrTensors", "FileLike"):
        assert hasattr(ttypes, name) and hasattr(etypes, name), name
    assert etypes._dtype is ember.dtype and etypes._device is ember.device
    assert etypes.Storage is ember.UntypedStorage and ember.types is etypes
    assert set(etypes.Number.__args__) == set(ttypes.Number.__args__) == {int, float, bool}
