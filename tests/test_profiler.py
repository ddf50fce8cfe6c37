"""ember.profiler: events per dispatched op and backward node with shapes and nesting, torch's
table layout, schedules, valid Chrome traces. Times are only checked for consistency."""
import gzip
import json
import os

import numpy as np
import pytest

import ember
from ember._ops.dispatch import hooks
from ember.profiler import (ProfilerAction, ProfilerActivity, profile, record_function,
                            schedule, tensorboard_trace_handler)


def _train_step(x, w):
    with record_function("forward"):
        y = (x @ w).relu().sum()
    y.backward()


def _profiled(**kw):
    x, w = ember.randn(4, 8), ember.randn(8, 3, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], **kw) as prof:
        _train_step(x, w)
    return prof


def test_ops_and_ranges_nest():
    prof = _profiled(record_shapes=True)
    ev = {}
    for e in prof.events():
        ev.setdefault(e.name, e)            # the first event of each name
    fwd = ev["forward"]
    assert [c.name for c in fwd.cpu_children] == ["aten::matmul", "aten::relu", "aten::sum"]
    assert ev["aten::matmul"].cpu_parent is fwd
    assert ev["aten::matmul"].input_shapes == [[4, 8], [8, 3]]
    # backward nodes appear as torch names them, the ops of their vjp inside
    outer = ev["autograd::engine::evaluate_function: MmBackward0"]
    assert [c.name for c in outer.cpu_children] == ["MmBackward0"]
    assert ev["MmBackward0"].cpu_children, "the vjp's ops are children of the node"
    assert "torch::autograd::AccumulateGrad" in ev
    assert ev["aten::matmul"].sequence_nr == ev["MmBackward0"].sequence_nr >= 0


def test_self_and_total_times_are_consistent():
    prof = _profiled()
    for e in prof.events():
        assert e.cpu_time_total >= 0
        kids = sum(c.cpu_time_total for c in e.cpu_children)
        assert e.self_cpu_time_total == pytest.approx(e.cpu_time_total - kids)
        for c in e.cpu_children:
            assert e.start_us <= c.start_us and c.end_us <= e.end_us


def test_key_averages_groups_and_counts():
    x = ember.randn(3, 3)
    with profile(record_shapes=True) as prof:
        for _ in range(3):
            x + x
        ember.ones(2) + ember.ones(2)
    by_name = {a.key: a for a in prof.key_averages()}
    assert by_name["aten::add"].count == 4
    total = sum(e.cpu_time_total for e in prof.events() if e.name == "aten::add")
    assert by_name["aten::add"].cpu_time_total == pytest.approx(total)
    by_shape = {(a.key, str(a.input_shapes)): a.count
                for a in prof.key_averages(group_by_input_shape=True)}
    assert by_shape[("aten::add", "[[3, 3], [3, 3]]")] == 3
    assert by_shape[("aten::add", "[[2], [2]]")] == 1


def test_table_looks_like_torchs():
    prof = _profiled(record_shapes=True, profile_memory=True)
    table = prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total",
                                                               row_limit=5)
    lines = table.splitlines()
    header = lines[1].split()
    for col in ("Name", "Self", "CPU", "%", "total", "avg", "Mem", "Calls", "Input", "Shapes"):
        assert col in header
    assert lines[0] == lines[2] == lines[-2] and set(lines[0]) == {"-", " "}
    assert lines[-1].startswith("Self CPU time total: ")
    assert len(lines) == 3 + 5 + 2
    expect = sorted(prof.key_averages(group_by_input_shape=True),
                    key=lambda a: a.cpu_time_total, reverse=True)[:5]
    for row, avg in zip(lines[3:-2], expect):
        assert row.strip().startswith(avg.key[:40])
    # (not in the top five for sure: on a loaded machine a backward node can outlast it)
    assert "forward" in prof.key_averages().table(sort_by="cpu_time_total")


def test_profile_memory_counts_new_tensors():
    with profile(profile_memory=True) as prof:
        ember.zeros(256, dtype=ember.float32) + 1        # 1 KiB out
    add = next(e for e in prof.events() if e.name == "aten::add")
    assert add.cpu_memory_usage == 1024


def test_with_stack_names_the_callers_file():
    prof = _profiled(with_stack=True)
    mm = next(e for e in prof.events() if e.name == "aten::matmul")
    assert any("test_profiler.py" in s for s in mm.stack)
    ember_dir = os.path.dirname(ember.__file__)
    assert not any(s.startswith(ember_dir) for s in mm.stack)


def test_chrome_trace_is_valid_json(tmp_path):
    prof = _profiled(record_shapes=True)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(prof.events())
    for e in xs:
        assert {"name", "ts", "dur", "pid", "tid", "cat"} <= set(e)
        assert isinstance(e["ts"], float) and e["dur"] >= 0
    mm = next(e for e in xs if e["name"] == "aten::matmul")
    assert mm["args"]["Input Dims"] == [[4, 8], [8, 3]]
    prof.export_chrome_trace(str(tmp_path / "trace.json.gz"))
    with gzip.open(tmp_path / "trace.json.gz", "rt") as fh:
        assert json.load(fh)["traceEvents"]


def test_schedule_actions():
    s = schedule(wait=1, warmup=1, active=2, repeat=1, skip_first=1)
    assert [s(i) for i in range(7)] == [
        ProfilerAction.NONE, ProfilerAction.NONE, ProfilerAction.WARMUP,
        ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE, ProfilerAction.NONE,
        ProfilerAction.NONE]
    with pytest.raises(ValueError, match="active"):
        schedule(wait=0, warmup=0, active=0)


def test_schedule_with_steps_and_trace_handler(tmp_path):
    ready = []
    x = ember.ones(2)
    handler = tensorboard_trace_handler(str(tmp_path), worker_name="w")
    with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=lambda p: (ready.append([e.name for e in p.events()]),
                                           handler(p))) as prof:
        for i in range(10):
            x * float(i)                 # one op per step
            prof.step()
    # two cycles of wait, warmup, 2 active steps: recorded steps 2-3 and 6-7
    assert len(ready) == 2
    for names, first in zip(ready, (2, 6)):
        assert [n for n in names if n.startswith("ProfilerStep")] == \
            [f"ProfilerStep#{first}", f"ProfilerStep#{first + 1}"]
        assert names.count("aten::mul") == 2
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2 and all(f.startswith("w.") and f.endswith(".pt.trace.json")
                                   for f in files)
    assert hooks.profiler is None


def test_record_function_decorator_and_no_cost_when_off():
    @record_function("inner")
    def f(t):
        return t * 2

    assert f(ember.ones(2)).tolist() == [2.0, 2.0]       # no profile: plain call
    with profile() as prof:
        f(ember.ones(2))
    inner = next(e for e in prof.events() if e.name == "inner")
    assert inner.is_user_annotation and [c.name for c in inner.cpu_children] == ["aten::mul"]


def test_profiles_do_not_nest_and_hook_is_cleared():
    with profile():
        with pytest.raises(RuntimeError, match="already enabled"):
            profile().start()
    assert hooks.profiler is None
    with pytest.raises(ValueError, match="ProfilerActivity"):
        profile(activities=["cpu"])


def test_autograd_profiler_spelling():
    with ember.autograd.profiler.profile(record_shapes=True) as prof:
        with ember.autograd.profiler.record_function("block"):
            ember.ones(2) * 2
    assert [e.name for e in prof.function_events] == ["block", "aten::mul"]
    assert "aten::mul" in prof.table()
    with ember.autograd.profiler.profile(enabled=False) as off:
        ember.ones(2) * 2
    assert len(off.function_events) == 0 and hooks.profiler is None


def test_custom_function_forward_is_an_event():
    # NOTE: torch names a custom Function's forward event by its class; its ops nest inside
    class Double(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = ember.ones(3, requires_grad=True)
    with profile() as prof:
        Double.apply(x).sum().backward()
    ev = {e.name: e for e in prof.events()}
    assert [c.name for c in ev["Double"].cpu_children] == ["aten::mul"]
    assert ev["Double"].sequence_nr == ev["DoubleBackward"].sequence_nr >= 0
    # scaled_dot_product_attention's blockwise path is such a Function (it needs the C
    # kernels: without them, EMBER_NO_C=1, attention is composed of ops)
    if ember._C.kernels.kernel("attn_fwd_tile", np.dtype(np.float32)) is None:
        return
    q = ember.randn(1, 2, 8, 4)
    with profile() as prof:
        ember.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert "_FlashAttention" in {e.name for e in prof.events()}


def test_backward_views_are_events():
    # a full sum's backward expands its gradient by a quick view: still an event, as in torch
    x = ember.ones(3, requires_grad=True)
    with profile() as prof:
        x.sum().backward()
    node = next(e for e in prof.events() if e.name == "SumBackward0")
    assert [c.name for c in node.cpu_children] == ["aten::expand"]


def test_profiled_backward_takes_leaf_gradients_as_they_are():
    # a gradient nothing else holds becomes .grad without a copy, profiled or not (the
    # profiler's hook must not hold an extra reference to it)
    w, x = ember.randn(4, 3, requires_grad=True), ember.randn(2, 4)
    with profile() as prof:
        (x @ w).sum().backward()
    names = [e.name for e in prof.events()]
    assert "torch::autograd::AccumulateGrad" in names and "aten::clone" not in names
    assert ember.allclose(w.grad, x.sum(0)[:, None].expand(4, 3))
