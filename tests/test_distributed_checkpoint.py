"""ember.distributed.checkpoint: save/load in one process, re-sharding a 2-rank checkpoint
to 1 and 3 processes, get/set_state_dict against torch's keys, and a job killed at step k
and restarted by emberrun resuming to the parameters of an uninterrupted run. Multi-process
bodies are in _dcp_workers.py."""
import os
import subprocess
import sys
import uuid

import pytest

import ember
import ember.distributed.checkpoint as dcp
from ember.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict, get_state_dict,
    set_model_state_dict, set_state_dict)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(__file__))
import _dcp_workers as W  # noqa: E402

from test_distributed import _spawn, needs_mpi  # noqa: E402  (the harness)

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _model_opt(seed):
    ember.manual_seed(seed)
    m = ember.nn.Sequential(ember.nn.Linear(3, 4), ember.nn.ReLU(), ember.nn.Linear(4, 2))
    return m, ember.optim.AdamW(m.parameters(), lr=0.1)


def test_round_trip_one_process(tmp_path):
    m, opt = _model_opt(0)
    m(ember.randn(5, 3)).sum().backward()
    opt.step()
    msd, osd = get_state_dict(m, opt)
    dcp.save({"model": msd, "optim": osd, "step": 3, "t": ember.arange(6.).reshape(2, 3)},
             checkpoint_id=tmp_path)
    assert sorted(os.listdir(tmp_path)) == [".metadata", "__0_0.distcp"]
    m2, opt2 = _model_opt(1)
    msd2, osd2 = get_state_dict(m2, opt2)
    state = {"model": msd2, "optim": osd2, "step": 0, "t": ember.zeros(6)}
    with pytest.raises(RuntimeError, match="Size mismatch between saved"):
        dcp.load(dict(state), checkpoint_id=tmp_path)
    state["t"] = ember.zeros(2, 3)
    dcp.load(state, checkpoint_id=tmp_path)
    set_state_dict(m2, opt2, model_state_dict=msd2, optim_state_dict=osd2)
    assert state["step"] == 3 and ember.equal(state["t"], ember.arange(6.).reshape(2, 3))
    for a, b in zip(m.parameters(), m2.parameters()):
        assert ember.equal(a, b)
    s1, s2 = opt.state_dict(), opt2.state_dict()
    for k in s1["state"]:
        for n in s1["state"][k]:
            assert ember.equal(s1["state"][k][n], s2["state"][k][n])
    x = ember.randn(2, 3)                        # both continue identically
    for mm, oo in ((m, opt), (m2, opt2)):
        oo.zero_grad()
        mm(x).sum().backward()
        oo.step()
    assert all(ember.equal(a, b) for a, b in zip(m.parameters(), m2.parameters()))
    with pytest.raises(RuntimeError, match="Missing key in checkpoint state_dict: extra."):
        dcp.load({"extra": ember.zeros(1)}, checkpoint_id=tmp_path)
    with pytest.raises(FileNotFoundError, match="metadata is missing"):
        dcp.load({"x": ember.zeros(1)}, checkpoint_id=tmp_path / "nothing")
    with pytest.raises(dcp.CheckpointException, match="overwrite=False"):
        dcp.save({"t": ember.ones(1)}, storage_writer=dcp.FileSystemWriter(tmp_path,
                                                                           overwrite=False))


def test_state_dict_keys_match_torch():
    torch = pytest.importorskip("torch")
    from torch.distributed.checkpoint.state_dict import get_state_dict as tget
    m, opt = _model_opt(0)
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    topt = torch.optim.AdamW(tm.parameters(), lr=0.1)
    msd, osd = get_state_dict(m, opt)
    tmsd, tosd = tget(tm, topt)
    assert list(msd) == list(tmsd) and list(osd["state"]) == list(tosd["state"])
    assert {k: sorted(v) for k, v in osd["state"].items()} == \
        {k: sorted(v) for k, v in tosd["state"].items()}
    assert osd["param_groups"][0]["params"] == tosd["param_groups"][0]["params"]
    assert [k for k, _, _ in dcp.flatten({"o": osd})] == \
        [k for k, _, _ in dcp.flatten({"o": {"state": tosd["state"], "param_groups": [
            {k: v for k, v in osd["param_groups"][0].items()}]}})]
    flat = get_optimizer_state_dict(m, opt, options=StateDictOptions(
        flatten_optimizer_state_dict=True))
    tflat = torch.distributed.checkpoint.state_dict.get_optimizer_state_dict(
        tm, topt, options=torch.distributed.checkpoint.state_dict.StateDictOptions(
            flatten_optimizer_state_dict=True))
    assert sorted(flat) == sorted(k for k in tflat if not k.startswith("param_groups") or
                                  k.rsplit(".", 1)[1] in osd["param_groups"][0])
    frozen = get_model_state_dict(m, options=StateDictOptions(ignore_frozen_params=True,
                                                              cpu_offload=True))
    assert list(frozen) == list(msd)
    m[0].weight.requires_grad_(False)
    assert "0.weight" not in get_model_state_dict(m, options=StateDictOptions(
        ignore_frozen_params=True))


def test_ddp_prefix_dropped():
    m, opt = _model_opt(0)

    class Wrapper(ember.nn.Module):        # what torch.compile's OptimizedModule looks like
        def __init__(self, mod):
            super().__init__()
            self._orig_mod = mod
    for w in (Wrapper(m), ember.nn.DataParallel(m)):
        assert list(get_model_state_dict(w)) == list(m.state_dict())
        assert get_optimizer_state_dict(w, opt)["param_groups"][0]["params"] == \
            list(m.state_dict())
    dp = ember.nn.DataParallel(m)
    sd = {k: ember.zeros_like(v) for k, v in get_model_state_dict(dp).items()}
    assert str(set_model_state_dict(dp, sd)) == "<All keys matched successfully>"
    assert all((p == 0).all() for p in m.parameters())


@needs_mpi
def test_reshard_2_to_3_and_1(tmp_path):
    """Two of three ranks save their shards; all three load theirs; one process (no group)
    loads the whole tensors."""
    path = str(tmp_path / "ckpt")
    _spawn(W.reshard, 3, path)
    full = W.full_tensors()
    sd = {"x": ember.zeros(10, 3, dtype=ember.float64),
          "nested": {"y": ember.zeros(7, dtype=ember.int32), "b": ember.zeros(2, 3).bfloat16()},
          "step": 0}
    dcp.load(sd, checkpoint_id=path)
    assert ember.equal(sd["x"], full["x"]) and ember.equal(sd["nested"]["y"], full["y"])
    assert ember.equal(sd["nested"]["b"], full["b"]) and sd["step"] == 11


@needs_mpi
@pytest.mark.slow
def test_reshard_2_to_4(tmp_path):
    _spawn(W.reshard, 4, str(tmp_path / "ckpt"))


@needs_mpi
def test_fsdp_dtensor_checkpoint_loads_in_one_process(tmp_path):
    """A model sharded by fully_shard (DTensor parameters and optimizer state) saved by 2
    ranks loads into a plain model and optimizer in one process."""
    path = str(tmp_path / "ckpt")
    _spawn(W.fsdp_save, 2, path)
    m = ember.nn.Sequential(ember.nn.Linear(3, 5), ember.nn.Tanh(), ember.nn.Linear(5, 2))
    opt = ember.optim.AdamW(m.parameters(), lr=0.1)
    msd, osd = get_state_dict(m, opt)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=path)
    set_state_dict(m, opt, model_state_dict=msd, optim_state_dict=osd)
    full_msd, full_osd = ember.load(os.path.join(path, "full.pt"), weights_only=False)
    got_msd, got_osd = get_state_dict(m, opt)
    for k, v in full_msd.items():
        assert ember.equal(got_msd[k], v), k
    for k, st in full_osd["state"].items():
        for name, v in st.items():
            assert ember.equal(got_osd["state"][k][name], v), (k, name)


def _emberrun(ckpt, kill_at, how, restarts, tag):
    """Start the training script under emberrun (not waiting for it)."""
    os.makedirs(ckpt)
    return subprocess.Popen([sys.executable, "-m", "ember.distributed.run", "--nproc-per-node",
                             "2", "--standalone", "--max-restarts", str(restarts),
                             "tests/_dcp_workers.py", str(ckpt), "6", str(kill_at), how],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, EMBER_FAULT_TEST=tag))


def _finish(p):
    out, err = p.communicate(timeout=300)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


@needs_mpi
@pytest.mark.parametrize("how", ["kill", pytest.param("raise", marks=pytest.mark.slow)])
def test_killed_job_resumes_to_the_uninterrupted_parameters(tmp_path, how):
    """DDP + AdamW in float64 for 6 steps, a checkpoint per step. Rank 1 dies at step 3
    (SIGKILL, or an exception); emberrun names it, restarts the job once, the script resumes
    from step 2's checkpoint and ends with exactly the parameters of a run never stopped."""
    tag = uuid.uuid4().hex
    ref, r = _emberrun(tmp_path / "ref", -1, how, 0, tag), _emberrun(tmp_path / "run", 3, how,
                                                                      1, tag)
    ref, r = _finish(ref), _finish(r)           # the two jobs run side by side
    assert W.tagged_processes(tag) == []        # no worker (or anything it started) is left
    assert ref.returncode == 0 and r.returncode == 0, (ref.stderr, r.stderr)
    assert "[emberrun] rank 1 (local_rank 1" in r.stderr, r.stderr
    assert ("failed first with signal SIGKILL" if how == "kill" else
            "RuntimeError: rank 1 fails at step 3") in r.stderr, r.stderr
    assert "restarting the job (1/1)" in r.stderr and "resumed at 3" in r.stdout, r.stdout
    params = [ln for ln in r.stdout.splitlines() if ln.startswith("params")]
    assert params == [ln for ln in ref.stdout.splitlines() if ln.startswith("params")] and \
        len(params) == 1, (params, ref.stdout)


class _ChunkListed:
    """A shard that places itself through torch's protocol, ``__create_chunk_list__``."""

    def __init__(self, local, offsets, shape):
        self.local, self.shape = local, shape
        self.chunks = [dcp.ChunkStorageMetadata(offsets, tuple(local.shape))]

    def to_local(self):
        return self.local

    def __create_chunk_list__(self):
        return self.chunks


def test_shard_through_chunk_list(tmp_path):
    src = _ChunkListed(ember.arange(6.).reshape(2, 3), (2, 0), (6, 3))
    meta = dcp.save({"w": src}, checkpoint_id=tmp_path)
    assert meta.state_dict_metadata["w"].size == (6, 3)
    assert meta.state_dict_metadata["w"].chunks == [dcp.ChunkStorageMetadata((2, 0), (2, 3))]
    dst = _ChunkListed(ember.zeros(1, 3), (3, 0), (6, 3))        # a part of the saved chunk
    dcp.load({"w": dst}, checkpoint_id=tmp_path)
    assert dst.local.tolist() == [[3.0, 4.0, 5.0]]
    with pytest.raises(RuntimeError, match="do not cover the part this rank needs"):
        dcp.load({"w": ember.zeros(6, 3)}, checkpoint_id=tmp_path)
