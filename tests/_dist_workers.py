"""Bodies of the multi-process tests in test_distributed.py. They live apart from the test
module so a spawned rank imports ember and NumPy only (not pytest or torch). Each rank checks
its results against NumPy and raises on a mismatch; spawn reports the rank and traceback."""
import os
import sys

import numpy as np

import ember
import ember.distributed as dist

R = dist.ReduceOp
_NP_RED = {R.SUM: np.add.reduce, R.PRODUCT: np.multiply.reduce, R.MIN: np.minimum.reduce,
           R.MAX: np.maximum.reduce, R.BAND: np.bitwise_and.reduce,
           R.BOR: np.bitwise_or.reduce, R.BXOR: np.bitwise_xor.reduce}


def _data(r, shape, dt):
    """Rank r's input: small integers, so sums and products are exact in every dtype."""
    a = (np.arange(int(np.prod(shape))).reshape(shape) + r) % 3 + 1
    if dt is ember.bool:
        return ember.tensor(a % 2 == 1)
    return ember.tensor(a).to(dt)


def _ref(ts, op):
    """The reduction over ranks, computed in NumPy (float64 for low-precision floats)."""
    arrs = np.stack([np.asarray(t.to(ember.float64).numpy() if t.dtype in
                                (ember.float16, ember.bfloat16) else t.numpy()) for t in ts])
    if op == R.AVG:
        return arrs.sum(0) / len(ts)
    if arrs.dtype == np.bool_ and op in (R.SUM, R.PRODUCT):
        return (np.logical_or if op == R.SUM else np.logical_and).reduce(arrs)
    return _NP_RED[op](arrs)


def _eq(got, want, what):
    got = got.to(ember.float64).numpy() if got.dtype in (ember.float16, ember.bfloat16) else \
        got.numpy()
    if not np.allclose(got.astype(np.complex128), np.asarray(want).astype(np.complex128),
                       rtol=1e-3, atol=1e-3):
        # the first elements only: a large tensor's message would fill spawn's pipe
        raise AssertionError(f"rank {dist.get_rank()}: {what}: got {got.ravel()[:12].tolist()}"
                             f", want {np.asarray(want).ravel()[:12].tolist()}")


def _run(fn, async_op, *args, **kw):
    w = fn(*args, async_op=async_op, **kw)
    if async_op:
        assert not w.is_completed() or w.is_success()
        w.wait()
        assert w.is_completed()
    else:
        assert w is None


def _ops(dt):
    if dt is ember.bool:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]
    if dt.is_complex:
        return [R.SUM, R.AVG, R.PRODUCT]
    if dt.is_floating_point:
        return [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX]
    return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]


def collectives(rank, n, init_method, dtypes, quick=False):
    """Every collective, sync and async, for ``dtypes`` and two shapes (one non-contiguous),
    against NumPy."""
    if init_method is not None:
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    me = dist.get_rank()
    dtypes = [getattr(ember, d) for d in dtypes]
    # all-reduces of 64 KiB and more go through the shared-memory window; a small window
    # makes the larger ones below take several rounds
    from ember.distributed import _mpi
    _mpi.NodeShm.CAP = 1 << 17
    for i, dt in enumerate(dtypes):
        async_op = bool(i % 2)
        for shape, transpose in (((5,), False), ((4, 3), True), ((9000, 9), False),
                                 ((70, 1000), True)):
            ins = [_data(r, shape, dt) for r in range(n)]
            for op in _ops(dt):
                t = _data(me, shape, dt)
                t = t.t().contiguous().t() if transpose else t     # a non-contiguous tensor
                _run(dist.all_reduce, async_op, t, op=op)
                _eq(t, _ref(ins, op), f"all_reduce {dt} {op.name} {shape}")
            if quick or t.numel() > 12:
                continue
            t = _data(me, shape, dt)
            _run(dist.broadcast, async_op, t, src=n - 1)
            _eq(t, ins[n - 1].numpy(), f"broadcast {dt}")
            t = _data(me, shape, dt)
            _run(dist.reduce, async_op, t, dst=n - 1, op=R.SUM)
            if me == n - 1:
                _eq(t, _ref(ins, R.SUM), f"reduce {dt}")
            out = [ember.zeros(shape, dtype=dt) for _ in range(n)]
            _run(dist.all_gather, async_op, out, ins[me])
            for r in range(n):
                _eq(out[r], ins[r].numpy(), f"all_gather {dt}")
            big = ember.zeros((n,) + shape, dtype=dt)
            _run(dist.all_gather_into_tensor, async_op, big, ins[me])
            _eq(big, np.stack([x.numpy() for x in ins]), f"all_gather_into_tensor {dt}")
            if dt is not ember.bool:
                lists = [[_data(r + k, shape, dt) for k in range(n)] for r in range(n)]
                o = ember.zeros(shape, dtype=dt)
                _run(dist.reduce_scatter, async_op, o, lists[me])
                _eq(o, _ref([lists[r][me] for r in range(n)], R.SUM), f"reduce_scatter {dt}")
                o = ember.zeros(shape, dtype=dt)
                _run(dist.reduce_scatter_tensor, async_op, o, ember.stack(lists[me]))
                _eq(o, _ref([lists[r][me] for r in range(n)], R.SUM), f"reduce_scatter_tensor")
            g = [ember.zeros(shape, dtype=dt) for _ in range(n)] if me == 0 else None
            _run(dist.gather, async_op, ins[me], g, dst=0)
            if me == 0:
                for r in range(n):
                    _eq(g[r], ins[r].numpy(), f"gather {dt}")
            o = ember.zeros(shape, dtype=dt)
            _run(dist.scatter, async_op, o, [_data(10 + r, shape, dt) for r in range(n)]
                 if me == 0 else None, src=0)
            _eq(o, _data(10 + me, shape, dt).numpy(), f"scatter {dt}")
    if not quick:
        _uneven_and_p2p(me, n)
        _objects_and_groups(me, n)
    dist.barrier()
    if init_method is not None:
        dist.destroy_process_group()


def _uneven_and_p2p(me, n):
    # all_to_all: rank r sends r + k + 1 elements to rank k
    ins = [ember.full((me + k + 1,), float(10 * me + k)) for k in range(n)]
    outs = [ember.zeros(r + me + 1) for r in range(n)]
    dist.all_to_all(outs, ins)
    for r in range(n):
        _eq(outs[r], np.full(r + me + 1, 10 * r + me), "all_to_all")
    # all_to_all_single with uneven splits along dim 0 of a (rows, 2) tensor
    split_in = [me + k + 1 for k in range(n)]
    split_out = [r + me + 1 for r in range(n)]
    src = ember.cat([ember.full((s, 2), float(10 * me + k)) for k, s in enumerate(split_in)])
    dst = ember.zeros(sum(split_out), 2)
    w = dist.all_to_all_single(dst, src, split_out, split_in, async_op=True)
    w.get_future().wait()
    want = np.concatenate([np.full((s, 2), 10 * r + me) for r, s in enumerate(split_out)])
    _eq(dst, want, "all_to_all_single")
    if n == 1:
        return                      # point to point needs a peer
    # a ring of send/recv, isend/irecv and batch_isend_irecv
    nxt, prv = (me + 1) % n, (me - 1) % n
    t, got = ember.full((3,), float(me)), ember.zeros(3)
    if me % 2 == 0:
        dist.send(t, nxt)
        src_rank = dist.recv(got, prv)
    else:
        src_rank = dist.recv(got)
        dist.send(t, nxt)
    assert src_rank == prv, (src_rank, prv)
    _eq(got, np.full(3, prv), "send/recv")
    got = ember.zeros(3, dtype=ember.int64)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, ember.full((3,), me), nxt),
                                    dist.P2POp(dist.irecv, got, prv)])
    for w in works:
        w.wait()
    _eq(got, np.full(3, prv), "batch_isend_irecv")


def _objects_and_groups(me, n):
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": me, "pad": "x" * me})
    assert objs == [{"rank": r, "pad": "x" * r} for r in range(n)], objs
    lst = [None, None] if me else [{"a": 1}, [2, 3]]
    dist.broadcast_object_list(lst, src=0)
    assert lst == [{"a": 1}, [2, 3]], lst
    g = [None] * n if me == 0 else None
    dist.gather_object(("r", me), g, dst=0)
    assert me != 0 or g == [("r", r) for r in range(n)], g
    out = [None]
    dist.scatter_object_list(out, [f"to {r}" for r in range(n)] if me == 0 else None, src=0)
    assert out == [f"to {me}"], out
    sub = dist.new_group(sorted({0, n - 1}))
    t = ember.ones(2)
    dist.all_reduce(t, group=sub)
    if me in (0, n - 1):
        assert dist.get_rank(sub) == (0 if me == 0 else 1)
        assert t.tolist() == [float(dist.get_world_size(sub))] * 2
        dist.broadcast(t, src=n - 1, group=sub)
    else:
        assert sub is dist.GroupMember.NON_GROUP_MEMBER and dist.get_rank(sub) == -1
        assert t.tolist() == [1.0, 1.0]
    dist.monitored_barrier()


class _WithUnused(ember.nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body, self.unused = body, ember.nn.Linear(3, 3)

    def forward(self, x):
        return self.body(x)


def ddp(rank, n, init_method):
    """DDP on ``n`` ranks against one process training on the concatenated batch (float64):
    SGD and AdamW, several DDP options, no_sync accumulation, unused parameters, comm hooks."""
    from ember.nn.parallel import DistributedDataParallel as DDP
    from ember.distributed.algorithms.ddp_comm_hooks import default_hooks
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)

    def make(extra=False, hidden=8):
        ember.manual_seed(0)
        m = ember.nn.Sequential(ember.nn.Linear(5, hidden), ember.nn.Tanh(),
                                ember.nn.Linear(hidden, 3))
        return (_WithUnused(m) if extra else m).double()
    g = ember.Generator().manual_seed(1)
    X = ember.randn(20, 4 * n, 5, generator=g, dtype=ember.float64)
    Y = ember.randn(20, 4 * n, 3, generator=g, dtype=ember.float64)
    mine = slice(4 * rank, 4 * (rank + 1))
    # hidden=2048: the second bucket (the first layer, 96 KiB) takes the shared-memory
    # all-reduce, which writes the averages straight into .grad (or, with
    # gradient_as_bucket_view, reads and writes the bucket the gradients are views of)
    cases = [("SGD", {}, False, 8), ("AdamW", {}, False, 8), ("SGD", {}, False, 2048),
             ("SGD", {"gradient_as_bucket_view": True, "bucket_cap_mb": 1e-4}, False, 8),
             ("AdamW", {"gradient_as_bucket_view": True}, False, 2048),
             ("AdamW", {"find_unused_parameters": True, "bucket_cap_mb": 1e-4}, True, 8)]
    for opt_name, flags, extra, hidden in cases:
        if rank != 0:
            ember.manual_seed(rank)             # DDP must broadcast rank 0's parameters
        ref, model = make(extra, hidden), DDP(make(extra, hidden), **flags)
        O = getattr(ember.optim, opt_name)
        lr = 0.05 * 8 / hidden                  # the wide model diverges at 0.05
        o1, o2 = O(ref.parameters(), lr=lr), O(model.parameters(), lr=lr)
        for s in range(20):
            for m, o, x, y in ((ref, o1, X[s], Y[s]), (model, o2, X[s, mine], Y[s, mine])):
                o.zero_grad()
                ((m(x) - y) ** 2).mean().backward()
                o.step()
        err = max((a - b).abs().max().item() for a, b in zip(ref.parameters(),
                                                              model.module.parameters()))
        assert err < 1e-10, (opt_name, flags, err)
        if extra:
            assert model.module.unused.weight.grad is None
    # no_sync: two micro-batches accumulated locally, the second synced = the big batch
    ref, model = make(), DDP(make())
    ((ref(X[0]) - Y[0]) ** 2).sum().backward()
    with model.no_sync():
        ((model(X[0, mine][:2]) - Y[0, mine][:2]) ** 2).sum().backward()
    ((model(X[0, mine][2:]) - Y[0, mine][2:]) ** 2).sum().backward()
    for a, b in zip(ref.parameters(), model.module.parameters()):
        assert (a.grad / n - b.grad).abs().max().item() < 1e-10
    # the fp16 compression hook: the average, rounded through float16
    model = DDP(make())
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    ((model(X[0, mine]) - Y[0, mine]) ** 2).sum().backward()
    ref = make()
    ((ref(X[0]) - Y[0]) ** 2).sum().backward()
    for a, b in zip(ref.parameters(), model.module.parameters()):
        assert ((a.grad / n) - b.grad).abs().max().item() < 2e-2 * (a.grad.abs().max().item() + 1)
    assert list(model.state_dict())[0].startswith("module.")
    # join(): rank r has 3 + r batches; the missing ranks count as zero gradients (averaged
    # over the initial world size) and every rank ends with the last one's parameters
    ref, model = make(), DDP(make())
    o1, o2 = ember.optim.SGD(ref.parameters(), lr=0.1), ember.optim.SGD(model.parameters(), lr=0.1)
    with model.join():
        for s in range(3 + rank):
            o2.zero_grad()
            ((model(X[s, mine]) - Y[s, mine]) ** 2).mean().backward()
            o2.step()
    for s in range(3 + n - 1):
        o1.zero_grad()
        active = [r for r in range(n) if s < 3 + r]
        loss = sum(((ref(X[s, 4 * r:4 * r + 4]) - Y[s, 4 * r:4 * r + 4]) ** 2).mean()
                   for r in active) / n
        loss.backward()
        o1.step()
    for a, b in zip(ref.parameters(), model.module.parameters()):
        assert (a - b).abs().max().item() < 1e-10, "join"
    dist.destroy_process_group()


def fail_at_step(rank, n, init_method):
    """Rank 1 raises at step 3; the others must stop with an error instead of hanging."""
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n,
                            timeout=__import__("datetime").timedelta(seconds=5))
    t = ember.ones(2)
    for step in range(6):
        if rank == 1 and step == 3:
            raise RuntimeError("rank 1 fails at step 3")
        dist.all_reduce(t)


def raise_on_1(i):
    if i == 1:
        raise ValueError("boom on one")


def exit_3(i):
    sys.exit(3 if i == 0 else 0)


def add_one(q, done):
    t = q.get()
    t += 1
    done.put(t.is_shared())


if __name__ == "__main__":          # under mpiexec: ranks and world size come from MPI
    dist.init_process_group("gloo")
    collectives(dist.get_rank(), dist.get_world_size(), None, sys.argv[1].split(","))
    sys.stdout.write(f"ok {dist.get_rank()} {os.environ.get('PMI_RANK')}\n")  # one write: ranks share stdout
    dist.destroy_process_group()
    __import__("time").sleep(float(os.environ.get("EMBER_TEST_EXIT_DELAY", 0)))  # exit after peers
