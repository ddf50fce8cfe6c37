"""Bodies of the multi-process tests in test_fsdp.py (a spawned rank imports ember and NumPy
only). Each rank trains the same float64 MLP for 20 AdamW steps on its quarter/half of every
batch under DDP, FSDP2, FSDP1 and ZeRO, checks losses and parameters against one process
training on the whole batch, and measures the bytes of parameters + gradients + optimizer
state it holds."""
import numpy as np

import ember
import ember.distributed as dist
from ember.distributed.fsdp import (FullyShardedDataParallel as FSDP, MixedPrecision,
                                    MixedPrecisionPolicy,
                                    ShardingStrategy, StateDictType, fully_shard)
from ember.distributed.fsdp.wrap import ModuleWrapPolicy
from ember.distributed.optim import ZeroRedundancyOptimizer
from ember.nn.parallel import DistributedDataParallel as DDP

STEPS, LR, CLIP = 20, 0.02, 0.2     # the gradient norm is 0.25-0.42: every step clips


def make(seed=0):
    ember.manual_seed(seed)
    layers = []
    for _ in range(3):
        layers += [ember.nn.Linear(32, 32), ember.nn.Tanh()]
    return ember.nn.Sequential(*layers, ember.nn.Linear(32, 32)).double()


def held_bytes(params, opt):
    """Bytes of the parameters, gradients and optimizer state this rank holds (shards for
    sharded models: a DTensor's or FlatParameter's storage is its local piece)."""
    seen, total = set(), 0
    tensors = [t for p in params for t in (p, p.grad) if t is not None]
    opt = getattr(opt, "optim", opt)            # ZeRO: the local optimizer's state
    tensors += [v for st in opt.state.values() for v in st.values() if isinstance(v, ember.Tensor)]
    for t in tensors:
        if id(t._data) not in seen:
            seen.add(id(t._data))
            total += t._data.nbytes
    return total


def _data(n):
    g = ember.Generator().manual_seed(1)
    return (ember.randn(STEPS, 4 * n, 32, generator=g, dtype=ember.float64),
            ember.randn(STEPS, 4 * n, 32, generator=g, dtype=ember.float64))


def _train(model, opt, X, Y, clip=None, mine=slice(None)):
    """Losses of the whole batch (the mean of the ranks' equal-sized local means)."""
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = ((model(X[s, mine]) - Y[s, mine]) ** 2).mean()
        loss.backward()
        if clip is not None:
            clip(model)
        opt.step()
        if dist.is_initialized() and mine != slice(None):
            loss = loss.detach().clone()
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        losses.append(loss.item())
    return np.array(losses)


def _full_params(model):
    return {k: (v.full_tensor() if isinstance(v, ember.distributed.tensor.DTensor) else v)
            for k, v in model.state_dict().items()}


def _close(a, b, tol, what):
    err = max((a[k] - b[k]).abs().max().item() for k in a)
    assert sorted(a) == sorted(b) and err <= tol, (what, err)


def train_all(rank, n, init_method, out):
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    X, Y = _data(n)
    mine = slice(4 * rank, 4 * (rank + 1))
    ref = make()
    ref_losses = _train(ref, ember.optim.AdamW(ref.parameters(), lr=LR), X, Y)
    ref_sd = ref.state_dict()
    figures, ddp_losses = {}, {}

    def check(name, model, opt, clip=None, full=_full_params):
        losses = _train(model, opt, X, Y, clip, mine)
        figures[name] = (held_bytes(list(model.parameters()), opt),
                         float(np.abs(losses - ref_losses).max()))
        ddp_losses.setdefault("ddp", losses)
        assert figures[name][1] < 1e-6, (name, figures[name])
        assert np.abs(losses - ddp_losses["ddp"]).max() < 1e-6, name
        _close(full(model), ref_sd, 1e-9, name)

    ddp = DDP(make(rank))                      # DDP broadcasts rank 0's parameters
    check("ddp", ddp, ember.optim.AdamW(ddp.parameters(), lr=LR),
          full=lambda m: dict(m.module.state_dict()))
    # FSDP2: each Linear a unit, then the root
    m2 = _shard_layers(make())
    assert all(isinstance(p, ember.distributed.tensor.DTensor) for p in m2.parameters())
    check("fsdp2", m2, ember.optim.AdamW(m2.parameters(), lr=LR))
    # FSDP1, FULL_SHARD with a class wrap policy, and clip_grad_norm_ against the reference's
    ref_c = make()
    clip_ref = _train(ref_c, ember.optim.AdamW(ref_c.parameters(), lr=LR), X, Y,
                      lambda m: ember.nn.utils.clip_grad_norm_(m.parameters(), CLIP))
    m1 = FSDP(make(), auto_wrap_policy=ModuleWrapPolicy({ember.nn.Linear}))
    losses = _train(m1, ember.optim.AdamW(m1.parameters(), lr=LR), X, Y,
                    lambda m: m.clip_grad_norm_(CLIP), mine)
    assert np.abs(losses - clip_ref).max() < 1e-6, ("fsdp1 clip", losses - clip_ref)
    _close(m1.state_dict(), ref_c.state_dict(), 1e-9, "fsdp1 clip")
    m2 = _shard_layers(make())              # FSDP2: nn.utils.clip_grad_norm_ on DTensor grads
    losses = _train(m2, ember.optim.AdamW(m2.parameters(), lr=LR), X, Y,
                    lambda m: ember.nn.utils.clip_grad_norm_(m.parameters(), CLIP), mine)
    assert np.abs(losses - clip_ref).max() < 1e-6, ("fsdp2 clip", losses - clip_ref)
    _close(_full_params(m2), ref_c.state_dict(), 1e-9, "fsdp2 clip")
    import functools
    from ember.distributed.fsdp.wrap import size_based_auto_wrap_policy
    for name, kw in [("fsdp1", {"auto_wrap_policy": ModuleWrapPolicy({ember.nn.Linear})}),
                     ("fsdp1_size", {"auto_wrap_policy": functools.partial(
                         size_based_auto_wrap_policy, min_num_params=1000)}),
                     ("fsdp1_orig", {"use_orig_params": True, "auto_wrap_policy":
                                     ModuleWrapPolicy({ember.nn.Linear})}),
                     ("fsdp1_grad_op", {"sharding_strategy": ShardingStrategy.SHARD_GRAD_OP}),
                     ("fsdp1_no_shard", {"sharding_strategy": ShardingStrategy.NO_SHARD})]:
        m1 = FSDP(make(), **kw)
        check(name, m1, ember.optim.AdamW(m1.parameters(), lr=LR), full=lambda m: m.state_dict())
    # ZeRO over DDP: plain AdamW's parameters, 1/n of its state
    plain = DDP(make())
    zero = ZeroRedundancyOptimizer(plain.parameters(), ember.optim.AdamW, lr=LR)
    check("zero", plain, zero, full=lambda m: dict(m.module.state_dict()))
    figures["zero_state"] = held_bytes([], zero)
    dist.all_gather_object(out, figures) if out is not None else None
    state_dicts(rank, n, X, Y, mine, ref_losses)
    dist.destroy_process_group()
    return figures


def optimizer_state_dicts(X, Y, mine):
    """FSDP.optim_state_dict: AdamW's state under the original names, equal to one process's
    on the whole batch; optim_state_dict_to_load gives a fresh optimizer the same shards."""
    ref = make()
    ref_opt = ember.optim.AdamW(ref.parameters(), lr=LR)
    _train(ref, ref_opt, X, Y)
    names, want = [k for k, _ in ref.named_parameters()], ref_opt.state_dict()
    for orig in (False, True):
        m = FSDP(make(), auto_wrap_policy=ModuleWrapPolicy({ember.nn.Linear}),
                 use_orig_params=orig)
        opt = ember.optim.AdamW(m.parameters(), lr=LR)
        _train(m, opt, X, Y, None, mine)
        for kind in (StateDictType.FULL_STATE_DICT, StateDictType.SHARDED_STATE_DICT):
            with FSDP.state_dict_type(m, kind):
                osd = FSDP.optim_state_dict(m, opt)
            assert sorted(osd["state"]) == sorted(names) and \
                osd["param_groups"][0]["params"] == names, (orig, kind)
            for i, name in enumerate(names):
                st = osd["state"][name]
                assert st["step"].item() == STEPS
                for k in ("exp_avg", "exp_avg_sq"):
                    got = st[k].full_tensor() if kind is StateDictType.SHARDED_STATE_DICT \
                        else st[k]
                    assert (got - want["state"][i][k]).abs().max().item() < 1e-12, (name, k)
            fresh = FSDP(make(seed=5), auto_wrap_policy=ModuleWrapPolicy({ember.nn.Linear}),
                         use_orig_params=orig)
            fopt = ember.optim.AdamW(fresh.parameters(), lr=LR)
            FSDP.optim_state_dict_to_load(fresh, fopt, osd, load_directly=True)
            for a, b in zip(opt.param_groups[0]["params"], fopt.param_groups[0]["params"]):
                for k, v in opt.state[a].items():
                    assert ember.equal(v, fopt.state[b][k]), (orig, kind, k)


def state_dicts(rank, n, X, Y, mine, ref_losses):
    """Full and sharded state dicts round-trip into models made from another seed (both
    APIs); ZeRO's consolidated state dict equals plain AdamW's and loads back."""
    m = FSDP(make(), auto_wrap_policy=ModuleWrapPolicy({ember.nn.Linear}))
    _train(m, ember.optim.AdamW(m.parameters(), lr=LR), X, Y, None, mine)
    optimizer_state_dicts(X, Y, mine)
    for kind in (StateDictType.FULL_STATE_DICT, StateDictType.SHARDED_STATE_DICT):
        fresh = FSDP(make(seed=5), auto_wrap_policy=ModuleWrapPolicy({ember.nn.Linear}))
        with FSDP.state_dict_type(m, kind), FSDP.state_dict_type(fresh, kind):
            sd = m.state_dict()
            if kind is StateDictType.SHARDED_STATE_DICT:
                v = sd["0.weight"]
                assert v.placements[0].is_shard(0) and v.to_local().shape[0] == 32 // n
            fresh.load_state_dict(sd)
        _close(fresh.state_dict(), m.state_dict(), 0, kind)
    m2, fresh2 = _shard_layers(make()), _shard_layers(make(seed=5))
    _train(m2, ember.optim.AdamW(m2.parameters(), lr=LR), X, Y, None, mine)
    fresh2.load_state_dict(m2.state_dict())                 # sharded: DTensor values
    _close(_full_params(fresh2), _full_params(m2), 0, "fsdp2 sharded")
    fresh3 = _shard_layers(make(seed=5))
    from ember.distributed.tensor import distribute_tensor, Shard
    fresh3.load_state_dict({k: distribute_tensor(v, placements=[Shard(0)])
                            for k, v in _full_params(m2).items()})   # full -> sharded
    _close(_full_params(fresh3), _full_params(m2), 0, "fsdp2 full")
    plain, ref = make(), make()
    zero = ZeroRedundancyOptimizer(plain.parameters(), ember.optim.AdamW, lr=LR)
    adam = ember.optim.AdamW(ref.parameters(), lr=LR)
    _train(plain, zero, X, Y, None, slice(None))
    _train(ref, adam, X, Y, None, slice(None))
    zero.consolidate_state_dict(to=0)
    if rank == 0:
        sd, want = zero.state_dict(), adam.state_dict()
        assert sorted(sd["state"]) == sorted(want["state"])
        for i, st in want["state"].items():
            for k, v in st.items():
                assert (sd["state"][i][k] - v).abs().max().item() < 1e-12, (i, k)
        assert {k: v for k, v in sd["param_groups"][0].items() if k != "params"} == \
            {k: v for k, v in want["param_groups"][0].items() if k != "params"}
    else:
        try:
            zero.state_dict()
            raise AssertionError("state_dict() before consolidation on this rank must raise")
        except RuntimeError as e:
            assert "has not been consolidated" in str(e)
    full = [None]
    if rank == 0:
        full = [zero.state_dict()]
    dist.broadcast_object_list(full, src=0)
    zero2 = ZeroRedundancyOptimizer(make().parameters(), ember.optim.AdamW, lr=LR)
    zero2.load_state_dict(full[0])
    for i, st in zero2.optim.state_dict()["state"].items():
        gi = zero2._local_to_global(zero2.rank)[i]
        for k, v in st.items():
            assert (full[0]["state"][gi][k] - v).abs().max().item() == 0


def features(rank, n, init_method):
    """reshard_after_forward frees the unsharded parameters, set_requires_gradient_sync
    accumulates, mixed precision computes in float32 and reduces in float64."""
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    X, Y = _data(n)
    mine = slice(4 * rank, 4 * (rank + 1))
    m = _shard_layers(make())
    sizes = {}
    m[2].register_forward_pre_hook(lambda mod, a: sizes.update(inside=(
        type(mod.weight), mod.weight._data.shape)))         # runs after FSDP's pre-hook
    out = m(X[0, mine])
    st = m[2]._fsdp_state
    assert sizes["inside"] == (ember.nn.Parameter, (32, 32))
    assert st.unsharded[0]._data.size == 0                  # freed after forward
    assert isinstance(m[2].weight, ember.distributed.tensor.DTensor)
    ((out - Y[0, mine]) ** 2).sum().backward()
    assert st.unsharded[0]._data.size == 0 and m[2].weight.grad.to_local().shape == \
        (32 // n, 32)
    # accumulation without sync == one synced backward of the sum
    ref = make()
    ((ref(X[0]) - Y[0]) ** 2).sum().backward()
    for p in m.parameters():
        p.grad = None
    m.set_requires_gradient_sync(False)
    ((m(X[0, mine][:2]) - Y[0, mine][:2]) ** 2).sum().backward()
    assert all(p.grad is None for p in m.parameters())
    m.set_requires_gradient_sync(True)
    ((m(X[0, mine][2:]) - Y[0, mine][2:]) ** 2).sum().backward()
    for (k, a), b in zip(ref.named_parameters(), m.parameters()):
        g = b.grad.full_tensor()
        assert (a.grad / n - g).abs().max().item() < 1e-12, k
    # rows that do not split evenly, and a layer of one row (rank 1's shards are empty)
    def odd(seed=0):
        ember.manual_seed(seed)
        return ember.nn.Sequential(ember.nn.Linear(32, 5), ember.nn.Tanh(),
                                   ember.nn.Linear(5, 1)).double()
    ref = odd()
    ref_losses = _train(ref, ember.optim.AdamW(ref.parameters(), lr=LR), X, Y[..., :1])
    for model in (_shard_layers(odd()), FSDP(odd(), use_orig_params=True),
                  FSDP(odd(), auto_wrap_policy=ModuleWrapPolicy({ember.nn.Linear}))):
        losses = _train(model, ember.optim.AdamW(model.parameters(), lr=LR), X, Y[..., :1],
                        None, mine)
        assert np.abs(losses - ref_losses).max() < 1e-6
        _close(_full_params(model), ref.state_dict(), 1e-9, "uneven")
    assert model[2]._flat_param.numel() == 3 and _shard_layers(odd())[2].bias.to_local() \
        .shape == ((1,) if rank == 0 else (0,))
    # one forward, two backwards (retain_graph): twice the gradient, reduced both times
    for p in m.parameters():
        p.grad = None
    loss = ((m(X[0, mine]) - Y[0, mine]) ** 2).sum()
    loss.backward(retain_graph=True)
    once = [p.grad.full_tensor() for p in m.parameters()]
    loss.backward()
    for a, p in zip(once, m.parameters()):
        assert (2 * a - p.grad.full_tensor()).abs().max().item() < 1e-12
    # unshard()/reshard() by hand
    m[0].unshard()
    assert type(m[0].weight) is ember.nn.Parameter and m[0].weight.shape == (32, 32)
    m[0].reshard()
    # mixed precision: compute in float32, reduce in float64; shards stay float64
    mp = make()
    seen = []
    for layer in mp:
        if isinstance(layer, ember.nn.Linear):
            layer.register_forward_hook(lambda mod, a, o: seen.append(o.dtype))
            fully_shard(layer, mp_policy=MixedPrecisionPolicy(param_dtype=ember.float32,
                                                              reduce_dtype=ember.float64))
    fully_shard(mp, mp_policy=MixedPrecisionPolicy(param_dtype=ember.float32,
                                                   reduce_dtype=ember.float64))
    ref = make()
    losses = _train(mp, ember.optim.AdamW(mp.parameters(), lr=LR), X, Y, None, mine)
    ref_losses = _train(ref, ember.optim.AdamW(ref.parameters(), lr=LR), X, Y)
    assert set(seen) == {ember.float32} and mp[0].weight.dtype == ember.float64
    assert mp[0].weight.grad.dtype == ember.float64
    assert np.abs(losses - ref_losses).max() < 1e-4, np.abs(losses - ref_losses).max()
    f1 = FSDP(make(), auto_wrap_policy=ModuleWrapPolicy({ember.nn.Linear}))   # no_sync()
    with f1.no_sync():
        ((f1(X[0, mine][:2]) - Y[0, mine][:2]) ** 2).sum().backward()
    assert all(p.grad is None for p in f1.parameters())
    ((f1(X[0, mine][2:]) - Y[0, mine][2:]) ** 2).sum().backward()
    with FSDP.summon_full_params(f1, with_grads=False):
        pass
    ref = make()
    ((ref(X[0]) - Y[0]) ** 2).sum().backward()
    flat = [ember.cat([p.grad.reshape(-1) for p in layer.parameters()]) / n
            for layer in ref if isinstance(layer, ember.nn.Linear)]
    shards = [m._flat_param.grad for m in FSDP.fsdp_modules(f1) if not m._is_root]
    for full, shard in zip(flat, shards):
        c = shard.numel()
        assert (full[rank * c:(rank + 1) * c] - shard[:max(0, min(c, full.numel() - rank * c))]
                ).abs().max().item() < 1e-12
    assert len(shards) == 4 and FSDP.fsdp_modules(f1, root_only=True) == [f1]
    synced = FSDP(make(seed=rank), sync_module_states=True)      # rank 0's initial values
    _close(synced.state_dict(), make(seed=0).state_dict(), 0, "sync_module_states")
    m1 = FSDP(make(), auto_wrap_policy=ModuleWrapPolicy({ember.nn.Linear}),
              mixed_precision=MixedPrecision(param_dtype=ember.float32))
    losses = _train(m1, ember.optim.AdamW(m1.parameters(), lr=LR), X, Y, None, mine)
    assert np.abs(losses - ref_losses).max() < 1e-4 and m1[0]._flat_param.dtype == ember.float64
    peaks = {name: _traced_peak(build) for name, build in (
        ("ddp", lambda m: DDP(m)), ("fsdp2", _shard_layers),
        ("fsdp1", lambda m: FSDP(m, auto_wrap_policy=ModuleWrapPolicy({ember.nn.Linear}))))}
    for name in ("fsdp2", "fsdp1"):     # the whole step: 1/n of DDP's + a unit's transients
        assert peaks[name] / peaks["ddp"] < 0.7, (name, peaks)
    dist.destroy_process_group()


def _shard_layers(m, **kw):
    for layer in m:
        if isinstance(layer, ember.nn.Linear):
            fully_shard(layer, **kw)
    return fully_shard(m, **kw)


def hybrid(rank, n, init_method):
    """HSDP on a 2 x 2 mesh (replicate, shard): FSDP2 on the 2-D mesh, FSDP1 HYBRID_SHARD and
    _HYBRID_SHARD_ZERO2 (mesh, group pair, node groups from LOCAL_WORLD_SIZE): losses equal
    DDP's and one process's, parameters one process's; each rank holds half of DDP's bytes
    (the shard group's size is 2) and shards equal its replica's."""
    import os
    from ember.distributed.device_mesh import init_device_mesh
    from ember.distributed.tensor import Replicate, Shard
    os.environ["LOCAL_WORLD_SIZE"] = "2"            # two "nodes" of two ranks
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    X, Y = _data(n)
    mine = slice(4 * rank, 4 * (rank + 1))
    ref = make()
    ref_losses = _train(ref, ember.optim.AdamW(ref.parameters(), lr=LR), X, Y)
    ddp = DDP(make())
    opt = ember.optim.AdamW(ddp.parameters(), lr=LR)
    ddp_losses = _train(ddp, opt, X, Y, None, mine)
    ddp_bytes = held_bytes(list(ddp.parameters()), opt)
    models = {"fsdp2": lambda: _shard_layers(make(), mesh=mesh)}
    for name, kw in [("hybrid", {"device_mesh": mesh}),
                     ("zero2", {"process_group": (mesh.get_group("shard"),
                                                  mesh.get_group("replicate")),
                                "sharding_strategy": ShardingStrategy._HYBRID_SHARD_ZERO2}),
                     ("node_groups", {})]:
        kw = {"auto_wrap_policy": ModuleWrapPolicy({ember.nn.Linear}),
              "sharding_strategy": ShardingStrategy.HYBRID_SHARD, **kw}
        models[name] = lambda kw=kw: FSDP(make(), **kw)
    for name, build in models.items():
        m = build()
        opt = ember.optim.AdamW(m.parameters(), lr=LR)
        losses = _train(m, opt, X, Y, None, mine)
        assert np.abs(losses - ddp_losses).max() < 1e-6, name
        assert np.abs(losses - ref_losses).max() < 1e-6, name
        ratio = held_bytes(list(m.parameters()), opt) / ddp_bytes
        assert 0.5 * 0.95 < ratio < 0.5 * 1.1, (name, ratio)
        for p in m.parameters():                    # the same shard in both replicas
            p = p.to_local() if name == "fsdp2" else p.detach()
            both = [ember.zeros_like(p) for _ in range(2)]
            dist.all_gather(both, p, group=mesh.get_group("replicate"))
            assert ember.equal(both[0], both[1]), name
        full = _full_params(m) if name == "fsdp2" else m.state_dict()
        _close(full, ref.state_dict(), 1e-9, name)
    node = rank // 2 * 2                            # the last model: FSDP1 on node groups
    assert dist.get_process_group_ranks(m._unit.group) == [node, node + 1]
    assert dist.get_process_group_ranks(m._unit.replica_group) == [rank % 2, rank % 2 + 2]
    p2 = _shard_layers(make(), mesh=mesh)[0].weight
    assert p2.placements == (Replicate(), Shard(0)) and p2.to_local().shape == (16, 32)
    from ember.distributed.tensor import distribute_tensor      # 2-D DTensors: rank 0's values
    d = distribute_tensor(ember.arange(6.0).reshape(3, 2) + rank, mesh, [Replicate(), Shard(0)])
    assert d.to_local().shape == ((2, 2) if mesh.get_local_rank("shard") == 0 else (1, 2))
    want = ember.arange(6.0).reshape(3, 2)
    assert ember.equal(d.full_tensor(), want) and ember.equal(
        d.redistribute(mesh, [Replicate(), Replicate()]).to_local(), want)
    ref_c = make()          # clipping: the norm sums the shards of one replica
    clip_ref = _train(ref_c, ember.optim.AdamW(ref_c.parameters(), lr=LR), X, Y,
                      lambda m: ember.nn.utils.clip_grad_norm_(m.parameters(), CLIP))
    for name, clip in (("hybrid", lambda m: m.clip_grad_norm_(CLIP)), ("fsdp2", lambda m: (
            ember.nn.utils.clip_grad_norm_(m.parameters(), CLIP)))):
        m = models[name]()
        losses = _train(m, ember.optim.AdamW(m.parameters(), lr=LR), X, Y, clip, mine)
        assert np.abs(losses - clip_ref).max() < 1e-6, (name, "clip")
    dist.destroy_process_group()


def _logged(log):
    """Record every all-gather as it starts and as its wait ends (units told apart by
    size), and every reduce-scatter, in ``log``."""
    import ember.distributed.distributed_c10d as c10d
    gather, scatter = c10d.all_gather_into_tensor, c10d.reduce_scatter_tensor
    size = {104: 0, 54: 1, 22: 2, 28: 2}        # 2 ranks' padded chunks (FSDP1; FSDP2: 28)

    def all_gather_into_tensor(out, inp, group=None, async_op=False):
        unit = size[out.numel()]
        log.append(("ag", unit))
        w = gather(out, inp, group=group, async_op=True)
        wait = w.wait
        w.wait = lambda *a: (wait(*a), log.append(("waited", unit)))[0]
        return w if async_op else w.wait()

    def reduce_scatter_tensor(out, inp, *a, **k):
        log.append(("rs", size[inp.numel()]))
        return scatter(out, inp, *a, **k)
    c10d.all_gather_into_tensor, c10d.reduce_scatter_tensor = all_gather_into_tensor, \
        reduce_scatter_tensor
    return lambda: setattr(c10d, "all_gather_into_tensor", gather) or setattr(
        c10d, "reduce_scatter_tensor", scatter)


def _tapered(seed=0):
    ember.manual_seed(seed)             # layers of different sizes tell units apart in the log
    return ember.nn.Sequential(ember.nn.Linear(12, 8), ember.nn.Tanh(), ember.nn.Linear(8, 6),
                               ember.nn.Tanh(), ember.nn.Linear(6, 3)).double()


def prefetch(rank, n, init_method):
    """Prefetching starts a unit's all-gather (a non-blocking MPI request) before the unit
    before it runs: FSDP1's forward_prefetch and BackwardPrefetch, FSDP2's explicit lists and
    unshard(async_op=True); losses equal those without prefetching, step by step."""
    from ember.distributed.fsdp import BackwardPrefetch
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    X, Y = _data(n)
    mine = slice(4 * rank, 4 * (rank + 1))
    log, policy = [], ModuleWrapPolicy({ember.nn.Linear})

    def run(model, steps=4):
        opt, out = ember.optim.AdamW(model.parameters(), lr=LR), []
        inner = [x for x in model.modules() if type(x) is ember.nn.Linear or
                 type(x).__name__ == "FSDPLinear"]
        for i, x in enumerate(inner):
            x.register_forward_hook(lambda *a, i=i: log.append(("fwd", i)))
        for _ in range(steps):
            del log[:]
            opt.zero_grad()
            loss = ((model(X[0, mine, :12]) - Y[0, mine, :3]) ** 2).mean()
            log.append(("backward",))
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out, list(log)

    restore = _logged(log)
    try:
        base, plain = run(FSDP(_tapered(), auto_wrap_policy=policy, backward_prefetch=None))
        assert plain == [("ag", 0), ("waited", 0), ("fwd", 0), ("ag", 1), ("waited", 1),
                         ("fwd", 1), ("ag", 2), ("waited", 2), ("fwd", 2), ("backward",),
                         ("ag", 2), ("waited", 2), ("rs", 2), ("ag", 1), ("waited", 1),
                         ("rs", 1), ("ag", 0), ("waited", 0), ("rs", 0)], plain
        fwd = [("ag", 0), ("ag", 1), ("waited", 0), ("fwd", 0), ("ag", 2), ("waited", 1),
               ("fwd", 1), ("waited", 2), ("fwd", 2), ("backward",)]
        pre = fwd + [("ag", 2), ("ag", 1), ("waited", 2), ("rs", 2), ("ag", 0),
                     ("waited", 1), ("rs", 1), ("waited", 0), ("rs", 0)]
        post = fwd + [("ag", 2), ("waited", 2), ("ag", 1), ("rs", 2), ("waited", 1),
                      ("ag", 0), ("rs", 1), ("waited", 0), ("rs", 0)]
        for kind, want in ((BackwardPrefetch.BACKWARD_PRE, pre),
                           (BackwardPrefetch.BACKWARD_POST, post)):
            losses, seen = run(FSDP(_tapered(), auto_wrap_policy=policy, forward_prefetch=True,
                                    backward_prefetch=kind, limit_all_gathers=True))
            assert losses == base and seen == want, (kind, seen)
        m = _shard_layers(_tapered())           # FSDP2: explicit forward lists, default back
        m[0].set_modules_to_forward_prefetch([m[2], m[4]])
        losses, seen = run(m)
        assert np.allclose(losses, base, 0, 1e-12) and seen[:8] == [("ag", 0), ("ag", 1), ("ag", 2),
                                               ("waited", 0), ("fwd", 0), ("waited", 1),
                                               ("fwd", 1), ("waited", 2)], seen
        assert seen[-10:] == [("backward",), ("ag", 2), ("ag", 1), ("waited", 2), ("rs", 2),
                              ("ag", 0), ("waited", 1), ("rs", 1), ("waited", 0), ("rs", 0)]
        m[4].set_modules_to_backward_prefetch([m[2], m[0]])
        _, seen = run(m, 1)
        assert seen[seen.index(("backward",)):] == [
            ("backward",), ("ag", 2), ("ag", 1), ("ag", 0), ("waited", 2), ("rs", 2),
            ("waited", 1), ("rs", 1), ("waited", 0), ("rs", 0)], seen
        del log[:]
        handle = m[2].unshard(async_op=True)
        assert log == [("ag", 1)] and type(m[2].weight).__name__ == "_DParam"
        handle.wait()
        assert log[-1] == ("waited", 1) and type(m[2].weight) is ember.nn.Parameter
        m[2].reshard()
        m[0].unshard(async_op=True)             # the forward waits for it
        del log[:]
        m(X[0, mine, :12])
        assert log[:3] == [("ag", 1), ("ag", 2), ("waited", 0)], log
    finally:
        restore()
    dist.destroy_process_group()


def _traced_peak(build):
    """tracemalloc's peak over one AdamW step (the third) of 4 Linear(256, 256) layers in
    float64, everything allocated since the model was built counted. (foreach=True would add
    flat copies of the parameters, gradients and state: ember's foreach path concatenates
    tensors below a size limit, which sharding moves small tensors under.)"""
    import tracemalloc
    tracemalloc.start()
    ember.manual_seed(0)
    m = build(ember.nn.Sequential(*[ember.nn.Linear(256, 256) for _ in range(4)]).double())
    opt = ember.optim.AdamW(m.parameters(), lr=LR, foreach=False)   # no flat copies
    x = ember.randn(4, 256, dtype=ember.float64)
    for i in range(3):
        if i == 2:
            tracemalloc.reset_peak()
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def checkpoint(rank, n, init_method, path):
    """FSDP2 + AdamW trained on ``n`` ranks, saved with distributed.checkpoint: each rank
    writes its shards of the parameters and of the optimizer state (DTensors too)."""
    import ember.distributed.checkpoint as dcp
    from ember.distributed.checkpoint.state_dict import get_state_dict
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    X, Y = _data(n)
    m = _shard_layers(make())
    opt = ember.optim.AdamW(m.parameters(), lr=LR)
    _train(m, opt, X, Y, None, slice(4 * rank, 4 * (rank + 1)))
    assert all(isinstance(v, ember.distributed.tensor.DTensor) for st in opt.state.values()
               for k, v in st.items() if k != "step")
    msd, osd = get_state_dict(m, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    dist.destroy_process_group()


def hybrid_checkpoint(rank, n, init_method, path):
    """FSDP1 HYBRID_SHARD on a 2 x 2 mesh, SHARDED_STATE_DICT: DTensors (Replicate(),
    Shard(0)) whose shard is the same in both replicas, saved with distributed.checkpoint
    (each shard written once), then loaded into FULL_SHARD models of 2 ranks (one per pair of
    ranks, a subgroup) at another seed: their parameters equal the saved ones."""
    import ember.distributed.checkpoint as dcp
    from ember.distributed.device_mesh import init_device_mesh
    from ember.distributed.tensor import Replicate, Shard
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    X, Y = _data(n)
    wrap = {"auto_wrap_policy": ModuleWrapPolicy({ember.nn.Linear})}
    m = FSDP(make(), device_mesh=mesh, sharding_strategy=ShardingStrategy.HYBRID_SHARD, **wrap)
    _train(m, ember.optim.AdamW(m.parameters(), lr=LR), X, Y, None, slice(4 * rank, 4 * rank + 4))
    full = m.state_dict()
    with FSDP.state_dict_type(m, StateDictType.SHARDED_STATE_DICT):
        sd = m.state_dict()
    v = sd["0.weight"]
    assert v.placements == (Replicate(), Shard(0)) and v.to_local().shape == (16, 32), v
    both = [ember.zeros_like(v.to_local()) for _ in range(2)]
    dist.all_gather(both, v.to_local(), group=mesh.get_group("replicate"))
    assert ember.equal(both[0], both[1])
    meta = dcp.save({"model": sd}, checkpoint_id=path)
    assert len(meta.state_dict_metadata["model.0.weight"].chunks) == 2     # once per shard
    pair = [dist.new_group(r) for r in ([0, 1], [2, 3])][rank // 2]
    fresh = FSDP(make(seed=5), process_group=pair, **wrap)
    with FSDP.state_dict_type(fresh, StateDictType.SHARDED_STATE_DICT):
        sd = fresh.state_dict()
        assert sd["0.weight"].placements == (Shard(0),)
        dcp.load({"model": sd}, checkpoint_id=path)
        fresh.load_state_dict(sd)
    _close(fresh.state_dict(), full, 0, "hybrid checkpoint -> 2 ranks")
    dist.destroy_process_group()
