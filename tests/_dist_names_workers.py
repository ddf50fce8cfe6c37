"""Bodies of the 2-rank tests in test_distributed_names.py (a spawned rank imports ember and
NumPy only). Each rank checks its results and raises on a mismatch."""
import datetime
import warnings

import numpy as np

import ember
import ember.distributed as dist


def _eq(got, want, what):
    if not np.array_equal(np.asarray(got.tolist() if hasattr(got, "tolist") else got),
                          np.asarray(want)):
        raise AssertionError(f"rank {dist.get_rank()}: {what}: got {got}, want {want}")


def _file_handler(url, **kw):
    from urllib.parse import urlparse
    u = urlparse(url)
    q = dict(p.split("=") for p in u.query.split("&"))
    yield dist.FileStore(u.path, int(q["world_size"])), int(q["rank"]), int(q["world_size"])


def _pg_methods(me):
    pg, other = dist.group.WORLD, 1 - me
    t = ember.tensor([1.0 + me, 5.0 - me])
    o = dist.AllreduceOptions()
    o.reduceOp = dist.ReduceOp.MAX
    pg.allreduce([t], o).wait()
    _eq(t, [2.0, 5.0], "allreduce MAX")
    t = ember.tensor([float(me)])
    pg.allreduce(t, dist.ReduceOp.SUM, datetime.timedelta(seconds=30)).wait()
    _eq(t, [1.0], "allreduce(tensor, op, timeout)")
    o = dist.BroadcastOptions()
    o.rootRank = 1
    t = ember.tensor([me * 7])
    pg.broadcast([t], o).wait()
    _eq(t, [7], "broadcast rootRank=1")
    t = ember.tensor([me + 1])
    pg.broadcast(t, 0).wait()
    _eq(t, [1], "broadcast(tensor, root)")
    o = dist.ReduceOptions()
    o.rootRank, o.reduceOp = 1, dist.ReduceOp.PRODUCT
    t = ember.tensor([me + 2])
    pg.reduce([t], o).wait()
    _eq(t, [6] if me == 1 else [2], "reduce PRODUCT to rank 1")
    out = [[ember.zeros(2), ember.zeros(2)]]
    pg.allgather(out, [ember.full((2,), float(me))]).wait()
    _eq(ember.stack(out[0]), [[0, 0], [1, 1]], "allgather")
    o = dist.GatherOptions()
    o.rootRank = 1
    out = [[ember.zeros(1), ember.zeros(1)]] if me == 1 else []
    pg.gather(out, [ember.tensor([me + 3.0])], o).wait()
    if me == 1:
        _eq(ember.cat(out[0]), [3.0, 4.0], "gather to rank 1")
    o = dist.ScatterOptions()
    t = ember.zeros(1)
    pg.scatter([t], [[ember.tensor([10.0]), ember.tensor([11.0])]] if me == 0 else [], o).wait()
    _eq(t, [10.0 + me], "scatter from 0")
    o = dist.ReduceScatterOptions()
    o.reduceOp = dist.ReduceOp.SUM
    t = ember.zeros(1)
    pg.reduce_scatter([t], [[ember.tensor([1.0]), ember.tensor([2.0])]], o).wait()
    _eq(t, [2.0 * (me + 1)], "reduce_scatter")
    out = ember.zeros(3)
    pg.alltoall_base(out, ember.arange(3.0) + 10 * me, [1, 2] if me == 0 else [2, 1],
                     [1, 2] if me == 0 else [2, 1], dist.AllToAllOptions()).wait()
    _eq(out, [0, 10, 11] if me == 0 else [1, 2, 12], "alltoall_base uneven")
    o = dist.BarrierOptions()
    o.timeout = datetime.timedelta(seconds=60)
    w = pg.barrier(o)
    assert w._timeout == o.timeout and w.wait()
    t = ember.tensor([float(me)])
    if me == 0:
        pg.send([t + 40], 1, 3).wait()
    else:
        pg.recv([t], 0, 3).wait()
        _eq(t, [40.0], "send/recv")
    ts = [ember.ones(2) * (me + 1), ember.ones(1, 1) * (me + 1)]
    pg.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait()
    _eq(ts[0], [3, 3], "allreduce_coalesced")
    _eq(ts[1], [[3]], "allreduce_coalesced")
    # several tensors per process, values from torch 2.13's gloo on 2 ranks: a reduction
    # over all of them (AVG divides only the first), the root's tensor[rootTensor], the
    # gathered lists ordered by rank, then by tensor
    for op, want in ((dist.ReduceOp.SUM, [[33, 44], [33, 44]]),
                     (dist.ReduceOp.AVG, [[16.5, 22], [33, 44]])):
        ts = [ember.tensor([1.0 + me, 2.0]), ember.tensor([10.0 * (me + 1), 20.0])]
        pg.allreduce(ts, op).wait()
        _eq(ember.stack(ts), want, f"allreduce of 2 tensors, {op}")
    o = dist.BroadcastOptions()
    o.rootRank, o.rootTensor = 1, 1
    ts = [ember.tensor([1.0 + me]), ember.tensor([10.0 * (me + 1)])]
    pg.broadcast(ts, o).wait()
    _eq(ember.cat(ts), [20, 20], "broadcast of 2 tensors, rootTensor=1")
    out = [[ember.zeros(1) for _ in range(4)] for _ in range(2)]
    pg.allgather(out, [ember.tensor([1.0 + me]), ember.tensor([10.0 * (me + 1)])]).wait()
    _eq([ember.cat(x).tolist() for x in out], [[1, 10, 2, 20]] * 2, "allgather of 2 tensors")
    pg.monitored_barrier(datetime.timedelta(seconds=60))


def _functions(me):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ts = [ember.tensor([1.0, me]), ember.tensor([[me + 1.0]])]
        fut = dist.all_reduce_coalesced(ts, async_op=True)
        assert all(a is b for a, b in zip(fut.wait(), ts)), "the Future holds the tensors"
        _eq(ts[1], [[3.0]], "all_reduce_coalesced")
        out = [[ember.zeros(2), ember.zeros(1)] for _ in range(2)]
        dist.all_gather_coalesced(out, [ember.full((2,), float(me)), ember.tensor([me + 5.0])])
        _eq(ember.cat([ember.cat(x) for x in out]), [0, 0, 5, 1, 1, 6], "all_gather_coalesced")
    assert sum(issubclass(w.category, FutureWarning) for w in caught) == 2
    out = ember.zeros(4)
    dist.all_gather_single(out, ember.tensor([me, me + 0.5]))
    _eq(out, [0, 0.5, 1, 1.5], "all_gather_single")
    out = ember.zeros(1)
    dist.reduce_scatter_single(out, ember.tensor([1.0, 2.0]) * (me + 1))
    _eq(out, [3.0 * (me + 1)], "reduce_scatter_single")
    if me == 0:
        dist.send_object_list(["foo", {1: 2}, me], dst=1)
    else:
        objs = [None] * 3
        assert dist.recv_object_list(objs) == 0
        assert objs == ["foo", {1: 2}, 0], objs
    assert dist.get_node_local_rank(fallback_rank=me) == me


def _groups(me):
    n0 = dist.get_pg_count()
    cur, subs = dist.new_subgroups(1)
    assert len(subs) == 2 and dist.get_process_group_ranks(cur) == [me]
    cur, subs = dist.new_subgroups_by_enumeration([[1], [0]])
    assert dist.get_process_group_ranks(cur) == [me] and subs[1 - me] is cur
    g = dist.split_group(split_ranks=[[1, 0]])
    assert dist.get_process_group_ranks(g) == [0, 1] and g.rank() == me
    t = ember.tensor([me + 1])
    dist.all_reduce(t, group=g)
    _eq(t, [3], "all_reduce on a split group")
    assert (dist.split_group(split_ranks=[[0]]) is None) == (me == 1)
    assert dist.get_pg_count() == n0 + 6
    names = [None, None]
    dist.all_gather_object(names, g.group_name)
    assert names == [str(n0 + 4)] * 2, names     # numbered alike on every rank


def _mesh(me):
    from ember.distributed.device_mesh import DeviceMesh
    m1 = dist.init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
    assert m1.get_group() is dist.group.WORLD and m1.get_local_rank() == me
    for shape, names in (((1, 2), ("dp", "tp")), ((2, 1), ("dp", "tp"))):
        m = dist.init_device_mesh("cpu", shape, mesh_dim_names=names)
        assert m.shape == shape and m.ndim == 2 and m.size() == 2
        assert m.get_coordinate() == ((0, me) if shape == (1, 2) else (me, 0))
        for d, name in enumerate(names):
            g = m.get_group(name)
            assert g is m.get_group(d) and dist.get_world_size(g) == shape[d]
            assert m.get_local_rank(name) == m.get_coordinate()[d] == dist.get_rank(g)
            t = ember.tensor([me + 1])
            dist.all_reduce(t, group=g)
            _eq(t, [3] if shape[d] == 2 else [me + 1], f"all_reduce along {name} of {shape}")
            sub = m[name]
            assert sub.ndim == 1 and sub.get_group() is g and sub.mesh_dim_names == (name,)
            _eq(sub.mesh, [0, 1] if shape[d] == 2 else [me], f"mesh[{name!r}]")
    rev = DeviceMesh("cpu", [1, 0])       # group rank = coordinate, not global rank order
    assert rev.get_local_rank() == 1 - me and dist.get_process_group_ranks(rev.get_group()) \
        == [1, 0]
    # fully_shard over a slice of a 2-D mesh
    from ember.distributed.fsdp import fully_shard
    ember.manual_seed(0)
    model = ember.nn.Sequential(ember.nn.Linear(4, 6), ember.nn.Linear(6, 2)).double()
    x = ember.randn(3, 4, dtype=ember.float64)
    want = model(x)
    tp = dist.init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))["tp"]
    fully_shard(model, mesh=tp)
    w = model[0].weight
    assert w.device_mesh is tp and w.to_local().shape == (3, 4), w.to_local().shape
    got = model(x)
    assert float((got - want).abs().max()) < 1e-12
    got.sum().backward()
    hsdp = fully_shard(ember.nn.Linear(2, 2), mesh=dist.init_device_mesh(
        "cpu", (1, 2), mesh_dim_names=("replicate", "shard")))           # HSDP, one replica
    assert repr(hsdp.weight.placements) == "(Replicate(), Shard(dim=0))"
    assert hsdp.weight.to_local().shape == (1, 2) and hsdp.weight.full_tensor().shape == (2, 2)
    hsdp(ember.ones(3, 2)).sum().backward()         # reduce-scattered, all-reduced over 1 rank
    assert hsdp.weight.grad.placements == hsdp.weight.placements
    _eq(hsdp.weight.grad.full_tensor(), [[3.0, 3.0]] * 2, "HSDP gradient")


def _ddp(me):
    from ember.distributed.algorithms.ddp_comm_hooks import default_hooks
    from ember.nn.parallel import DistributedDataParallel as DDP
    seen = []

    def hook(state, bucket):
        seen.append(bucket)
        return default_hooks.allreduce_hook(state, bucket)
    ember.manual_seed(0)
    m = DDP(ember.nn.Linear(3, 2).double())
    m.register_comm_hook(None, hook)
    assert isinstance(m.reducer, dist.Reducer) and isinstance(m.logger, dist.Logger)
    x = ember.ones(4, 3, dtype=ember.float64) * (me + 1)
    m(x).sum().backward()
    m(x).sum().backward()
    assert isinstance(seen[0], dist.GradBucket) and seen[0].is_last()
    _eq(m.module.weight.grad, [[12.0] * 3] * 2, "DDP weight grad (two steps, mean of 4, 8)")
    stats = m.reducer.get_backward_stats()
    assert len(stats) == 2 and all(s > 0 for s in stats), stats
    d = m._get_ddp_logging_data()
    assert d["world_size"] == 2 and d["rank"] == me and d["iteration"] == 1 and \
        d["backward_comm_time"] > 0 and d["comm_hook"].endswith("hook"), d
    m2 = DDP(ember.nn.Linear(3, 2).double())
    m2.register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    m2(x).sum().backward()
    _eq(m2.module.weight.grad, [[6.0] * 3] * 2, "FP16_COMPRESS hook")

    class Unused(ember.nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = ember.nn.Linear(2, 1), ember.nn.Linear(2, 1)

        def forward(self, x):
            return self.used(x)
    m3 = DDP(Unused())
    m3(ember.ones(1, 2)).sum().backward()
    try:
        m3(ember.ones(1, 2))
        raise AssertionError("an unfinished reduction must be reported")
    except RuntimeError as e:
        assert "Expected to have finished reduction" in str(e) and "unused.weight" in str(e)


def _debug_detail(me):
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        dist.all_reduce(ember.ones(2 + me))
        raise AssertionError("mismatched collectives must be reported")
    except RuntimeError as e:
        assert "Detected mismatch between collectives" in str(e), e
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)


def _breakpoint(me):
    import pdb
    called, orig = [], pdb.Pdb.set_trace
    pdb.Pdb.set_trace = lambda self, frame=None: called.append(type(self).__name__)
    try:
        dist.breakpoint(rank=1, timeout_s=77)
    finally:
        pdb.Pdb.set_trace = orig
    assert called == (["_DistributedPdb"] if me == 1 else []), called
    assert dist.group.WORLD.timeout == datetime.timedelta(seconds=77)


def names(rank, n, path):
    dist.register_rendezvous_handler("ember-test", _file_handler)
    dist.init_process_group("gloo", init_method=f"ember-test://{path}", rank=rank,
                            world_size=n, timeout=datetime.timedelta(seconds=120))
    me = dist.get_rank()
    _pg_methods(me)
    _functions(me)
    _groups(me)
    _mesh(me)
    _ddp(me)
    _debug_detail(me)
    pgg = dist.ProcessGroupGloo(dist.PrefixStore("pgg", dist.distributed_c10d._world.store),
                                me, n)
    t = ember.tensor([me + 1.0])
    pgg.allreduce([t]).wait()
    _eq(t, [3.0], "ProcessGroupGloo")
    _breakpoint(me)
    if me == 0:           # rank 1 leaves; rank 0 goes on alone in the shrunk default group
        g = dist.shrink_group([1])
        assert g is dist.group.WORLD and dist.get_world_size() == 1 and dist.get_rank() == 0
        t = ember.tensor([5.0])
        dist.all_reduce(t)
        _eq(t, [5.0], "all_reduce after shrink_group")
    dist.destroy_process_group()


def add_one_each(q, done):
    ts = q.get()
    for t in ts:
        t += 1
    done.put([t.is_shared() for t in ts])
