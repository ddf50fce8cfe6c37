"""Sharded data parallelism (ember.distributed.fsdp, ZeroRedundancyOptimizer) on 2 and 4
processes, oversubscribed on CI's 2 cores: losses and parameters against DDP and one process
on the whole batch (float64), state dicts, memory per rank. Bodies in _fsdp_workers.py."""
import os
import sys

import pytest

import ember
import ember.distributed as dist
import ember.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
import _fsdp_workers as W  # noqa: E402
from test_distributed import _port, needs_mpi  # noqa: E402


def _spawn(fn, n, *args):
    mp.spawn(fn, args=(n, f"tcp://127.0.0.1:{_port()}") + args, nprocs=n)


def _figures(n):
    q = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_report, args=(n, f"tcp://127.0.0.1:{_port()}", q), nprocs=n)
    return [q.get() for _ in range(n)]


def _report(rank, n, init_method, q):
    q.put((rank, W.train_all(rank, n, init_method, None)))


def _check_memory(figures, n):
    """Every rank holds about 1/n of DDP's parameters + gradients + optimizer state (the
    shards are padded to equal rows; ZeRO shards only the optimizer state)."""
    for rank, f in figures:
        ddp = f["ddp"][0]
        for name in ("fsdp2", "fsdp1", "fsdp1_orig", "fsdp1_grad_op"):
            ratio = f[name][0] / ddp
            assert 1 / n * 0.95 < ratio < 1 / n * 1.1, (rank, name, ratio)
        assert abs(f["fsdp1_no_shard"][0] / ddp - 1) < 0.01
        state = ddp / 2                 # AdamW: params, grads and two buffers of their size
        assert abs(f["zero_state"] / state - 1 / n) < 0.1 / n, (rank, f["zero_state"])
        assert f["zero"][0] < ddp * (1 - 0.4 / n)


@needs_mpi
def test_two_ranks_match_ddp_and_one_process():
    figures = _figures(2)
    print({r: {k: v for k, v in f.items()} for r, f in figures})
    _check_memory(figures, 2)


@needs_mpi
def test_fsdp2_reshard_accumulate_mixed_precision():
    _spawn(W.features, 2)


@needs_mpi
def test_prefetch_starts_the_next_all_gather_first():
    _spawn(W.prefetch, 2)


@needs_mpi
@pytest.mark.slow
def test_hybrid_sharding_2x2_matches_ddp():
    _spawn(W.hybrid, 4)


@needs_mpi
def test_fsdp2_checkpoint_loads_into_one_process(tmp_path):
    """The optimizer state of sharded parameters is sharded as they are (DTensors), so a
    2-rank FSDP2 checkpoint loads into one plain process: parameters and AdamW state equal
    one process's training on the whole batch."""
    import warnings
    import ember.distributed.checkpoint as dcp
    from ember.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    _spawn(W.checkpoint, 2, str(tmp_path))
    X, Y = W._data(2)
    ref = W.make()
    ref_opt = ember.optim.AdamW(ref.parameters(), lr=W.LR)
    W._train(ref, ref_opt, X, Y)
    plain = W.make(seed=3)
    opt = ember.optim.AdamW(plain.parameters(), lr=W.LR)
    msd, osd = get_state_dict(plain, opt)
    sd = {"model": msd, "optim": osd}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # no process group here: a one-process load
        dcp.load(sd, checkpoint_id=str(tmp_path))
    set_state_dict(plain, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    for a, b in zip(ref.parameters(), plain.parameters()):
        assert (a - b).abs().max().item() < 1e-12
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert (ref_opt.state[a][k] - opt.state[b][k]).abs().max().item() < 1e-12


@needs_mpi
@pytest.mark.slow
def test_hybrid_sharded_state_dict_checkpoint_loads_at_other_world_sizes(tmp_path):
    """A 4-rank HYBRID_SHARD SHARDED_STATE_DICT checkpoint loads into 2-rank FULL_SHARD models
    (in the worker) and into one plain process: parameters equal one process's training."""
    import warnings
    import ember.distributed.checkpoint as dcp
    _spawn(W.hybrid_checkpoint, 4, str(tmp_path))
    X, Y = W._data(4)
    ref = W.make()
    W._train(ref, ember.optim.AdamW(ref.parameters(), lr=W.LR), X, Y)
    plain = W.make(seed=3)
    sd = {"model": plain.state_dict()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # no process group here: a one-process load
        dcp.load(sd, checkpoint_id=str(tmp_path))
    for k, v in ref.state_dict().items():
        assert (v - sd["model"][k]).abs().max().item() < 1e-9, k


@needs_mpi
@pytest.mark.slow
def test_four_ranks_match_ddp_and_one_process():
    _check_memory(_figures(4), 4)


@needs_mpi
def test_one_process_and_errors():
    from ember.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy, fully_shard
    from ember.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="does not support containers"):
            fully_shard(ember.nn.ModuleList([ember.nn.Linear(2, 2)]))
        m = fully_shard(ember.nn.Linear(2, 2))
        with pytest.raises(ValueError, match="already applied"):
            fully_shard(m)
        with pytest.raises(ValueError, match="Manual wrapping with ShardingStrategy.HYBRID_SHARD"):
            FullyShardedDataParallel(ember.nn.Linear(2, 2),
                                     sharding_strategy=ShardingStrategy.HYBRID_SHARD)
        with pytest.raises(ValueError, match="expects a 1D or 2D DeviceMesh"):
            fully_shard(ember.nn.Linear(2, 2), mesh=init_device_mesh("cpu", (1, 1, 1)))
        with pytest.raises(AssertionError, match="HSDP with mesh_dim_names"):
            fully_shard(ember.nn.Linear(2, 2), mesh=init_device_mesh("cpu", (1, 1)))
        with pytest.raises(ValueError, match="Expects FSDPModule"):
            m.set_modules_to_forward_prefetch([ember.nn.Linear(2, 2)])
        with pytest.raises(ValueError, match="share a dtype"):
            FullyShardedDataParallel(ember.nn.Sequential(ember.nn.Linear(2, 2),
                                                         ember.nn.Linear(2, 2).double()))
        a, b = ember.nn.Linear(2, 2), ember.nn.Linear(2, 2)
        b.weight = a.weight                         # tied across two units
        fully_shard(a)
        with pytest.raises(ValueError, match="Linear.weight is already managed"):
            fully_shard(b)
        inner = FullyShardedDataParallel(ember.nn.Linear(2, 2))
        outer = FullyShardedDataParallel(ember.nn.Sequential(inner))
        with pytest.raises(RuntimeError, match="only be called on the root"):
            inner.clip_grad_norm_(1.0)
        assert outer.module[0] is inner and outer[0] is inner and inner.in_features == 2
        with pytest.raises(RuntimeError, match="mixed torch.Tensor and DTensor"):
            m.weight.copy_(ember.zeros(2, 2))
    finally:
        dist.destroy_process_group()


def test_api_matches_torch():
    """Names, parameters and defaults as torch 2.13's; shard sizes as torch.chunk's."""
    import inspect
    torch = pytest.importorskip("torch")
    import torch.distributed.fsdp as tf
    import torch.distributed.fsdp.wrap as tw
    import torch.distributed.optim as to
    import torch.distributed.tensor as tt
    import ember.distributed.fsdp as ef
    import ember.distributed.fsdp.wrap as ew
    import ember.distributed.optim as eo
    import ember.distributed.tensor as et
    from ember.distributed.tensor import _rows
    pairs = [(ef.fully_shard, tf.fully_shard), (ef.FullyShardedDataParallel.__init__,
                                                 tf.FullyShardedDataParallel.__init__),
             (ef.MixedPrecisionPolicy, tf.MixedPrecisionPolicy),
             (ef.MixedPrecision, tf.MixedPrecision),
             (ef.FullyShardedDataParallel.state_dict_type,
              tf.FullyShardedDataParallel.state_dict_type),
             (ef.FullyShardedDataParallel.summon_full_params,
              tf.FullyShardedDataParallel.summon_full_params),
             (ef.FullyShardedDataParallel.clip_grad_norm_,
              tf.FullyShardedDataParallel.clip_grad_norm_),
             (ef.FullyShardedDataParallel.optim_state_dict,
              tf.FullyShardedDataParallel.optim_state_dict),
             (ef.FullyShardedDataParallel.optim_state_dict_to_load,
              tf.FullyShardedDataParallel.optim_state_dict_to_load),
             (ew.size_based_auto_wrap_policy, tw.size_based_auto_wrap_policy),
             (ew.transformer_auto_wrap_policy, tw.transformer_auto_wrap_policy),
             (eo.ZeroRedundancyOptimizer.__init__, to.ZeroRedundancyOptimizer.__init__),
             (eo.ZeroRedundancyOptimizer.consolidate_state_dict,
              to.ZeroRedundancyOptimizer.consolidate_state_dict),
             (et.distribute_tensor, tt.distribute_tensor),
             (ef.FSDPModule.set_requires_gradient_sync, tf.FSDPModule.set_requires_gradient_sync),
             (ef.FSDPModule.unshard, tf.FSDPModule.unshard),
             (ef.FSDPModule.set_modules_to_forward_prefetch,
              tf.FSDPModule.set_modules_to_forward_prefetch),
             (ef.FSDPModule.set_modules_to_backward_prefetch,
              tf.FSDPModule.set_modules_to_backward_prefetch)]
    skip = {"dp_mesh_dims", "_module_classes_to_ignore"}    # newer than ember's / class lists
    for mine, theirs in pairs:
        a, b = inspect.signature(mine).parameters, inspect.signature(theirs).parameters
        assert [k for k in a if k not in skip] == [k for k in b if k not in skip], mine
        for k in a:
            d = b[k].default if k in b else None
            if k not in skip and isinstance(d, (bool, int, float, str, type(None))):
                assert a[k].default == d, (mine, k)
    for enum in ("ShardingStrategy", "StateDictType", "BackwardPrefetch"):
        assert [e.name for e in getattr(ef, enum)] == [e.name for e in getattr(tf, enum)]
    for n in range(0, 11):
        for world in (1, 2, 3, 4):
            sizes = [c.shape[0] for c in torch.arange(n).chunk(world)] if n else []
            sizes += [0] * (world - len(sizes))
            assert [(lambda a, b, c: b - a)(*_rows(n, world, r)) for r in range(world)] == sizes


_TORCH_FSDP = """
import os, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
def worker(rank, world, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    b = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    b.load_state_dict(a.state_dict())
    fully_shard(a[0]); fully_shard(a[2]); fully_shard(a)
    b = FSDP(b, auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}))
    c = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    for m in (a, b, c):
        opt = ZeroRedundancyOptimizer(m.parameters(), torch.optim.SGD, lr=0.1) if m is c \\
            else torch.optim.AdamW(m.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad(); m(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
    w = a[0].weight
    assert torch.__name__ == "ember" and isinstance(w, DTensor) and w.full_tensor().shape == (8, 4)
    assert list(b.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(worker, args=(2, os.environ["PORT"]), nprocs=2)
    print("trained")
"""


@needs_mpi
@pytest.mark.slow
def test_torch_script_under_ember_run(tmp_path):
    """A torch script using fully_shard, FSDP and ZeRO runs unchanged through `ember run`."""
    import subprocess
    from test_distributed import ROOT
    script = tmp_path / "train.py"
    script.write_text(_TORCH_FSDP)
    r = subprocess.run([sys.executable, "-m", "ember", "run", str(script)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PORT=str(_port())))
    assert r.returncode == 0 and "trained" in r.stdout, r.stderr


def test_import_is_light():
    import subprocess
    from test_distributed import ROOT
    out = subprocess.run([sys.executable, "-c", "import sys, ember.distributed.fsdp, "
                          "ember.distributed.tensor, ember.distributed.optim, "
                          "ember.distributed._composable.fsdp, ember.distributed._tensor; "
                          "print('mpi4py' in sys.modules, 'torch' in sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
