"""DDP's communication overlaps backward, as the profiler's trace shows it (event order, not
timing): on 2 ranks, the all-reduce of the first gradient bucket starts before backward has
run its last node, and every bucket has its own all-reduce range."""
import json
import os
import socket

import pytest

import ember
import ember.distributed as dist
import ember.multiprocessing as mp

try:
    import mpi4py  # noqa: F401
    HAVE_MPI = True
except ImportError:
    HAVE_MPI = False


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _trace_ddp_step(rank, n, init_method, out_dir):
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    nn = ember.nn
    ember.manual_seed(0)
    # the first bucket (1 MiB, as torch) closes at fc2.weight: it holds fc3 and fc2.bias,
    # whose gradients backward makes first; fc2.weight and fc1 go in the second
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    x, y = ember.randn(32, 784), ember.randint(0, 10, (32,))
    with ember.profiler.profile() as prof:
        nn.functional.cross_entropy(ddp(x), y).backward()
    path = os.path.join(out_dir, f"trace_{rank}.json")
    prof.export_chrome_trace(path)
    dist.destroy_process_group()
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    comm = sorted((e for e in events if e["name"] == "gloo:all_reduce"), key=lambda e: e["ts"])
    backward = [e for e in events if e["name"].startswith("autograd::engine::evaluate_function")]
    assert len(comm) == 2, [e["name"] for e in comm]                 # one per bucket
    assert backward, "no backward events in the trace"
    after = [e["name"] for e in backward if e["ts"] > comm[0]["ts"]]
    # backward nodes ran after the first bucket's all-reduce had started: among them the
    # first layer's matmul gradient (the second bucket's) and its AccumulateGrad
    assert any("AddmmBackward0" in a for a in after), after
    assert any("AccumulateGrad" in a for a in after), after
    assert comm[1]["ts"] > comm[0]["ts"] and comm[0]["dur"] >= 0


@pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")
def test_first_bucket_all_reduce_starts_before_backward_ends(tmp_path):
    mp.spawn(_trace_ddp_step, args=(2, f"tcp://127.0.0.1:{_port()}", str(tmp_path)), nprocs=2)
