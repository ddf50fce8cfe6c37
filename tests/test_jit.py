"""ember.jit: trace, check_trace, TracerWarning, save/load in a fresh process, script, freeze."""
import io
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import ember

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _mlp(T):
    T.manual_seed(0)
    return T.nn.Sequential(T.nn.Linear(6, 8), T.nn.ReLU(), T.nn.Linear(8, 3))


class _CNN(ember.nn.Module):
    def __init__(self):
        super().__init__()
        nn = ember.nn
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.pool, self.fc = nn.MaxPool2d(2), nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = self.pool(ember.nn.functional.relu(self.bn(self.conv(x)), inplace=True))
        values, _ = x.max(dim=1, keepdim=True)       # a multi-output op
        return self.fc((x - values).flatten(1)), values


def test_trace_replays_the_module_and_shares_its_parameters():
    m = _mlp(ember)
    x = ember.randn(4, 6)
    tm = ember.jit.trace(m, x)
    y = ember.randn(5, 6)           # (linear layers take any batch)
    np.testing.assert_allclose(tm(y).detach().numpy(), m(y).detach().numpy(), rtol=1e-6)
    assert list(tm.state_dict()) == list(m.state_dict())
    assert getattr(tm, "0").weight is m[0].weight
    tm(y).sum().backward()
    assert m[0].weight.grad.shape == (8, 6)
    assert "aten.linear(x, _0_weight, _0_bias)" in tm.code
    assert [n.op for n in tm.graph.nodes].count("call_function") == 3
    relu = next(n for n in tm.graph.nodes if getattr(n.target, "name", "") == "relu")
    assert relu.meta["val"].shape == (4, 8) and relu.meta["scope"] == "1"


def test_trace_matches_torch_on_a_cnn_with_inplace_and_multi_output_ops():
    m = _CNN().eval()
    x = ember.randn(2, 3, 8, 8)
    tm = ember.jit.trace(m, x)
    want = m(x)
    got = tm(x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6)
    targets = [getattr(n.target, "name", n.target) for n in tm.graph.nodes]
    assert "max" in targets and "relu" in targets


def test_trace_of_a_function_and_its_warnings_match_torch():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - x.sum().item()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        g = ember.jit.trace(f, ember.ones(3))
    with warnings.catch_warnings(record=True) as wt:
        warnings.simplefilter("always")
        torch.jit.trace(f, torch.ones(3))
    ours = [str(x.message) for x in w if x.category is ember.jit.TracerWarning]
    theirs = [str(x.message) for x in wt if x.category is torch.jit.TracerWarning]
    assert ours and ours == theirs
    # the branch was baked in: a negative input still doubles (as torch's trace does)
    assert g(ember.tensor([-1.0])).tolist() == [-2.0]


def test_check_trace_catches_a_nondeterministic_trace():
    m = ember.nn.Sequential(ember.nn.Linear(4, 4), ember.nn.Dropout(0.5))
    with pytest.raises(ember.jit.TracingCheckError, match="Graphs differed across invocations"):
        ember.jit.trace(m, ember.randn(3, 4))
    ember.jit.trace(m.eval(), ember.randn(3, 4))        # eval: deterministic, traces
    ember.jit.trace(m.train(), ember.randn(3, 4), check_trace=False)


def test_strict_refuses_a_list_output():
    def f(x):
        return [x + 1, x * 2]
    with pytest.raises(RuntimeError, match="Encountering a list at the output of the tracer"):
        ember.jit.trace(f, ember.ones(2))
    assert [t.tolist() for t in ember.jit.trace(f, ember.ones(2), strict=False)(
        ember.zeros(2))] == [[1.0, 1.0], [0.0, 0.0]]


def test_save_and_load_in_a_fresh_process(tmp_path):
    m = _CNN().eval()
    x = ember.randn(2, 3, 8, 8)
    path, data = tmp_path / "m.pt", tmp_path / "io.pt"
    ember.jit.save(ember.jit.trace(m, x), str(path))
    ember.save({"x": x, "y": m(x)[0].detach()}, str(data))
    code = ("import ember, sys; m = ember.jit.load(sys.argv[1]); d = ember.load(sys.argv[2]); "
            "print(type(m).__name__, m.original_name, 'bn.bias' in m.state_dict(), "
            "float((m(d['x'])[0] - d['y']).abs().max()))")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(data)], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ScriptModule", "_CNN", "True", "0.0"]


def test_load_rejects_other_files_and_save_rejects_unsavable_graphs():
    buf = io.BytesIO()
    ember.save({"a": ember.ones(1)}, buf)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="not an archive ember.jit.save wrote"):
        ember.jit.load(buf)
    with pytest.raises(TypeError, match="expected a ScriptModule"):
        ember.jit.save(ember.nn.ReLU(), io.BytesIO())


def test_trace_module_traces_other_methods():
    class M(ember.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = ember.nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x)

        def double(self, x):
            return self.lin(x) * 2
    m = M()
    x = ember.randn(1, 2)
    tm = ember.jit.trace_module(m, {"forward": x, "double": x})
    np.testing.assert_allclose(tm.double(x).detach().numpy(), (m(x) * 2).detach().numpy())


def test_script_traces_plain_modules_and_refuses_data_dependent_ones():
    m = _mlp(ember)
    x = ember.randn(2, 6)
    s = ember.jit.script(m)
    np.testing.assert_allclose(s(x).detach().numpy(), m(x).detach().numpy())
    assert "aten.relu" in s.code

    class Branchy(ember.nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x
    with pytest.raises(RuntimeError, match="use ember.jit.trace|Use ember.jit.trace"):
        ember.jit.script(Branchy(), example_inputs=[(x,)])

    @ember.jit.ignore
    def helper(x):
        return x
    assert ember.jit.unused(helper) is helper and ember.jit.export(helper) is helper
    assert ember.jit.ignore(drop=True)(helper) is helper


def test_freeze_and_optimize_for_inference():
    m = _CNN().eval()
    x = ember.randn(2, 3, 8, 8)
    tm = ember.jit.trace(m, x)
    with pytest.raises(RuntimeError, match="only implemented for modules in eval mode"):
        ember.jit.freeze(ember.jit.trace(_mlp(ember), ember.randn(1, 6)))
    fr = ember.jit.freeze(tm)
    assert list(fr.state_dict()) == []
    np.testing.assert_allclose(fr(x)[0].numpy(), m(x)[0].detach().numpy(), rtol=1e-6)
    opt = ember.jit.optimize_for_inference(tm)
    np.testing.assert_allclose(opt(x)[0].numpy(), m(x)[0].detach().numpy(), rtol=1e-6)
    buf = io.BytesIO()
    fr.save(buf)
    buf.seek(0)
    np.testing.assert_allclose(ember.jit.load(buf)(x)[0].numpy(), fr(x)[0].numpy())


def test_trace_of_the_small_gpt_records_attention_as_ops():
    sys.path.insert(0, ROOT)
    from benchmarks.models import gpt_model
    cfg = dict(vocab=11, block=8, n_layer=1, n_head=2, n_embd=16)
    ember.manual_seed(0)
    m = gpt_model(ember, **cfg)
    idx, tgt = ember.randint(0, 11, (2, 8)), ember.randint(0, 11, (2, 8))
    tm = ember.jit.trace(m, (idx, tgt))
    idx2 = ember.randint(0, 11, (2, 8))
    assert float(tm(idx2, tgt)) == pytest.approx(float(m(idx2, tgt)), rel=1e-6)
    names = {getattr(n.target, "name", None) for n in tm.graph.nodes}
    assert {"softmax", "matmul", "cross_entropy"} <= names or "softmax" in names


def test_is_tracing():
    seen = []
    ember.jit.trace(lambda x: seen.append(ember.jit.is_tracing()) or x + 1, ember.ones(1),
                    check_trace=False)
    assert seen and all(seen) and not ember.jit.is_tracing() and not ember.jit.is_scripting()


def test_replay_updates_batchnorm_running_stats_and_keeps_no_grad_and_detach():
    def make():
        ember.manual_seed(0)
        return ember.nn.Sequential(ember.nn.Linear(3, 4), ember.nn.BatchNorm1d(4))
    eager, traced_src = make(), make()
    x = ember.randn(8, 3)
    traced = ember.jit.trace(traced_src, x, check_trace=False)
    traced_src.load_state_dict(eager.state_dict())      # (undo the trace's own update)
    for _ in range(3):
        np.testing.assert_allclose(traced(x).detach().numpy(), eager(x).detach().numpy(),
                                   rtol=1e-6)
    for k in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
        np.testing.assert_allclose(traced.state_dict()[k].numpy(), eager.state_dict()[k].numpy(),
                                   rtol=1e-6)
    assert not traced_src[1].running_mean.requires_grad
    assert "with torch.no_grad(): " in traced.code and ".copy_(" in traced.code

    def f(x):           # normalize's clamp correction is detached: the gradient must be too
        return ember.nn.functional.normalize(x, dim=-1) * x.detach().sum()
    x = ember.randn(4, 3, requires_grad=True)
    t = ember.jit.trace(f, x)
    want, = ember.autograd.grad(f(x).sum(), x)
    got, = ember.autograd.grad(t(x).sum(), x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_sizes_follow_the_batch_and_other_shapes_are_refused():
    class Flat(ember.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = ember.nn.Conv2d(1, 2, 3), ember.nn.Linear(2 * 4 * 4, 3)

        def forward(self, x):
            return self.fc(self.conv(x).view(x.size(0), -1))
    m = Flat()
    tm = ember.jit.trace(m, ember.randn(2, 1, 6, 6))
    assert "x.size(0)" in tm.code
    x = ember.randn(5, 1, 6, 6)             # another batch: the view follows it
    np.testing.assert_allclose(tm(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6)
    buf = io.BytesIO()
    tm.save(buf)
    buf.seek(0)
    np.testing.assert_allclose(ember.jit.load(buf)(x).detach().numpy(), m(x).detach().numpy(),
                               rtol=1e-6)
    with pytest.raises(RuntimeError, match=r"input 0 has shape \(2, 1, 7, 7\), but the trace "
                                           r"fixed it to \(2, 1, 6, 6\) \(dim 0 may vary\)"):
        tm(ember.randn(2, 1, 7, 7))


def test_a_custom_autograd_function_replays_and_refuses_to_save():
    class Cube(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return ember.from_numpy(x.detach().numpy() ** 3)     # (off the dispatch)

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 3 * x * x * g
    x = ember.tensor([1.0, 2.0], requires_grad=True)
    tm = ember.jit.trace(lambda x: Cube.apply(x) + 1, x)
    y = ember.tensor([3.0], requires_grad=True)
    out = tm(y)
    out.sum().backward()
    assert out.tolist() == [28.0] and y.grad.tolist() == [27.0]
    with pytest.raises(TypeError, match="calls .*Cube.apply, which is not an op"):
        tm.save(io.BytesIO())
