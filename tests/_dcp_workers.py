"""Bodies of the multi-process tests in test_distributed_checkpoint.py (spawned ranks import
ember and NumPy only). ``Sharded`` is a test double of a DTensor: the shard-aware hook the
checkpoint code reads (``to_local``, ``shape``, ``placements``, ``device_mesh``)."""
import os
import signal
import sys

import ember
import ember.distributed as dist
import ember.distributed.checkpoint as dcp
from ember.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


class Shard:
    def __init__(self, dim):
        self.dim = dim

    def is_shard(self):
        return True


class Mesh:
    def __init__(self, rank, size):
        self.rank, self.n = rank, size

    def get_coordinate(self):
        return [self.rank]

    def size(self, mesh_dim=0):
        return self.n


class Sharded:
    """Rank ``rank`` of ``n``'s piece of ``full`` split along ``dim`` as torch.chunk."""

    def __init__(self, full, dim, rank, n):
        self.shape, self.placements, self.device_mesh = full.shape, [Shard(dim)], Mesh(rank, n)
        self.local = full.chunk(n, dim)[rank].clone() if rank < len(full.chunk(n, dim)) \
            else full.narrow(dim, 0, 0).clone()

    def to_local(self):
        return self.local


def full_tensors():
    return {"x": ember.arange(30, dtype=ember.float64).reshape(10, 3),
            "y": (ember.arange(7) * 3).to(ember.int32),
            "b": ember.arange(6.).bfloat16().reshape(2, 3)}


def reshard(rank, n, init_method, path):
    """Ranks 0 and 1 (a subgroup) save their shards of x (dim 0) and y, the replicated b,
    and objects; then all n ranks load that into their own shards (n-way) and compare with
    the full tensors."""
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    pair, full = dist.new_group([0, 1]), full_tensors()
    if rank < 2:
        sd = {"x": Sharded(full["x"], 0, rank, 2), "step": 11, "names": ["a", "b"],
              "nested": {"y": Sharded(full["y"], 0, rank, 2), "b": full["b"]}}
        meta = dcp.save(sd, checkpoint_id=path, process_group=pair)
        assert len(meta.state_dict_metadata["x"].chunks) == 2, meta
        assert len(meta.state_dict_metadata["nested.b"].chunks) == 1, meta  # written once
        files = sorted(f for f in os.listdir(path) if f.endswith(".distcp"))
        assert files == ["__0_0.distcp", "__1_0.distcp"], files
    dist.barrier()
    sd = {"x": Sharded(ember.zeros(10, 3, dtype=ember.float64), 0, rank, n),
          "nested": {"y": Sharded(ember.zeros(7, dtype=ember.int32), 0, rank, n),
                     "b": ember.zeros(2, 3, dtype=ember.bfloat16)},
          "step": 0, "names": None}
    dcp.load(sd, checkpoint_id=path)
    for k, t in (("x", sd["x"]), ("y", sd["nested"]["y"])):
        want = Sharded(full[k], 0, rank, n).to_local()
        assert ember.equal(t.to_local(), want), (rank, k, t.to_local(), want)
    assert ember.equal(sd["nested"]["b"], full["b"]) and sd["step"] == 11 and \
        sd["names"] == ["a", "b"], sd
    dist.destroy_process_group()


def tagged_processes(tag):
    """Processes (other than this one) whose environment carries ``tag``: the workers and
    anything they started."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if tag.encode() in f.read() and int(pid) != os.getpid():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def fsdp_save(rank, n, init_method, path):
    """FSDP2 (real DTensor parameters, Shard(0)) trains 2 AdamW steps and saves model and
    optimizer through get_state_dict + dcp.save; rank 0 also writes the full parameters
    (full_state_dict) for the test to compare a 1-process load against."""
    from ember.distributed.checkpoint.state_dict import StateDictOptions
    from ember.distributed.fsdp import fully_shard
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    ember.manual_seed(0)
    model = ember.nn.Sequential(ember.nn.Linear(3, 5), ember.nn.Tanh(), ember.nn.Linear(5, 2))
    fully_shard(model)
    opt = ember.optim.AdamW(model.parameters(), lr=0.1)
    for step in range(2):
        opt.zero_grad()
        model(ember.randn(4, 3, generator=ember.Generator().manual_seed(step * 10 + rank))
              ).pow(2).sum().backward()
        opt.step()
    msd, osd = get_state_dict(model, opt)
    assert all(callable(getattr(v, "to_local", None)) for v in msd.values()), msd
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    full = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))
    if rank == 0:
        ember.save(full, os.path.join(path, "full.pt"))
    dist.destroy_process_group()


# ------------------------------------------------------------- kill and resume under emberrun
def batch(step, rank):
    g = ember.Generator().manual_seed(1000 * step + rank)
    x = ember.randn(8, 4, generator=g, dtype=ember.float64)
    return x, x.sum(1, keepdim=True).sin()


def train(ckpt, steps, kill_at, how):
    """DDP + AdamW, float64; a checkpoint each step into ``ckpt/step_k`` (the newest complete
    one is resumed from). In the first attempt, rank 1 dies at step ``kill_at``: ``how`` is
    'raise' or 'kill' (SIGKILL). Prints the final parameters from rank 0."""
    from ember.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ember.manual_seed(0)
    model = DDP(ember.nn.Sequential(ember.nn.Linear(4, 8), ember.nn.Tanh(),
                                    ember.nn.Linear(8, 1)).double())
    opt = ember.optim.AdamW(model.parameters(), lr=0.05)
    start = 0
    done = sorted((int(d.split("_")[1]) for d in os.listdir(ckpt) if
                   os.path.exists(os.path.join(ckpt, d, ".metadata"))), reverse=True)
    if done:
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "step": -1}
        dcp.load(state, checkpoint_id=os.path.join(ckpt, f"step_{done[0]}"))
        set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
        start = state["step"] + 1
        print(f"resumed at {start}", flush=True)
    for step in range(start, steps):
        if rank == 1 and step == kill_at and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"rank 1 fails at step {step}")
        x, y = batch(step, rank)
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd, "step": step},
                 checkpoint_id=os.path.join(ckpt, f"step_{step}"))
    if rank == 0:
        print("params", [p.tolist() for p in model.parameters()], flush=True)
    dist.destroy_process_group()


def die_at_step(rank, n, init_method, victim, how):
    """Rank ``victim`` raises or SIGKILLs itself at step 3 of a loop of all-reduces (a small
    one, through MPI's all-reduce, then one of 128 KiB, through the shared-memory window);
    every other rank must then fail naming it, well inside the 30 s timeout."""
    import datetime
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=30))
    rank, t, big = dist.get_rank(), ember.ones(2), ember.ones(1 << 15)
    for step in range(1000):
        dist.all_reduce(t)
        if rank == victim and step == 3:    # the others then wait in the window's barrier
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"rank {rank} fails at step {step}")
        dist.all_reduce(big)


if __name__ == "__main__":
    if sys.argv[1] == "die":                    # under mpiexec: ranks from MPI, no store
        die_at_step(-1, -1, None, int(sys.argv[2]), sys.argv[3])
    else:
        train(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
