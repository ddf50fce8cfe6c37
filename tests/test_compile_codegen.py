"""ember.compile's code generation: every op with a C lowering gives eager's result through
compile, forward and backward (generated from the registry); the disk cache survives a new
process and a changed graph misses it; training loops follow eager's losses; reduce-overhead
replays on kept buffers; no compiler runs eagerly with one warning."""
import os
import functools
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

import ember
from ember._C import kernels
from ember._graph import cgen, toolchain
from ember._graph.record import flatten_tensors
from ember._ops.registry import all_ops
from helpers import accepted_samples

# (EMBER_NO_C=1: compiled functions run eagerly, no program to look at; the last test below
# checks that path with the switch set in process)
pytestmark = pytest.mark.skipif(toolchain.compiler() is None or kernels._off,
                                reason="no C compiler, or EMBER_NO_C")

LOWERED = [d for d in all_ops() if cgen.lowering(d) is not None and d.samples is not None]
# float32: the kernels' exp/erf are vecmath.h's (~1 ulp) and sums run in SIMD order, not
# NumPy's pairwise order; float64 uses libm and differs only by summation order
TOL = {ember.float32: dict(rtol=2e-5, atol=2e-6), ember.float64: dict(rtol=1e-12, atol=1e-13)}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))


def _float(t):
    return isinstance(t, ember.Tensor) and t.dtype.is_floating_point


def _calls(opdef, dtype):
    """The samples of ``opdef`` that run eagerly, as (args, kwargs) with float inputs needing
    gradients."""
    return [(args, kwargs) for _, args, kwargs, _ in accepted_samples(opdef, dtype, True)]


def _grads(fn, calls):
    """Outputs of ``fn`` on every call, and the gradients of a fixed weighted sum of them."""
    outs, ins = [], []
    for args, kwargs in calls:
        outs += flatten_tensors(fn(args, kwargs))
        ins += [t for t in flatten_tensors((args, kwargs))
                if _float(t)]
    rng = np.random.default_rng(0)
    total = sum((o * ember.from_numpy(rng.standard_normal(o.shape).astype(
        o.detach().numpy().dtype))).sum() for o in outs if _float(o) and o.requires_grad)
    grads = ember.autograd.grad(total, ins, allow_unused=True) if ins and \
        isinstance(total, ember.Tensor) else []
    return outs, grads


@pytest.mark.parametrize("opdef", LOWERED, ids=str)
def test_every_lowered_op_equals_eager_forward_and_backward(opdef):
    calls = [(c, dt) for dt in TOL for c in _calls(opdef, dt)]
    if not calls:
        pytest.skip(f"{opdef.name} has no float sample that runs")

    def every(*flat_calls):       # (one graph per op: one C compile for all its samples)
        return tuple(opdef(*a, **k) for a, k in flat_calls)
    one = [dt for c, dt in calls for _ in flatten_tensors(opdef(*c[0], **c[1]))]
    compiled = ember.compile(every)
    want, gwant = _grads(lambda a, k: opdef(*a, **k), [c for c, _ in calls])
    got = compiled(*[c for c, _ in calls])
    prog = next(iter(compiled.programs.values()))
    assert prog is not False, opdef.name
    assert "void k" in "".join(p[1] for p in prog.programs), f"{opdef.name}: no kernel made"
    _, ggot = _grads(lambda a, k, it=iter(got): next(it), [c for c, _ in calls])
    got = flatten_tensors(got)
    assert len(flatten_tensors(got)) == len(want) == len(one)
    for o, w, dt in zip(flatten_tensors(got), want, one):
        np.testing.assert_allclose(o.detach().numpy(), w.detach().numpy(), **TOL[dt],
                                   err_msg=opdef.name)
    dts = [dt for (a, k), dt in calls for t in flatten_tensors((a, k)) if _float(t)]
    for o, w, dt in zip(ggot, gwant, dts):
        assert (o is None) == (w is None), opdef.name
        if w is not None:
            np.testing.assert_allclose(o.numpy(), w.numpy(), **TOL[dt], err_msg=opdef.name)


def test_fusion_groups_are_one_kernel_each():
    """softmax, layer_norm and GELU(x + b) with its backward: one row kernel each way."""
    x = ember.randn(64, 32, requires_grad=True)
    b, w = ember.randn(32, requires_grad=True), ember.randn(32, requires_grad=True)
    f = ember.compile(lambda x: ember.nn.functional.layer_norm(
        ember.nn.functional.gelu(x + b).softmax(-1), (32,), w, b))
    y = f(x)
    y.backward(ember.ones_like(y))
    prog = next(iter(f.programs.values()))
    fwd, bwd = (p[0] for p in prog.programs)
    assert fwd.count("_lib.") == 1 and "_k[" not in fwd
    gx = x.grad.clone()
    x.grad = None
    (ember.nn.functional.layer_norm(ember.nn.functional.gelu(x + b).softmax(-1), (32,), w, b)
     .backward(ember.ones_like(y)))
    np.testing.assert_allclose(gx.numpy(), x.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert bwd.count("_lib.") >= 1


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_rows_with_nan_and_inf_equal_eager(fn):
    """The kernel's row max skips NaN (the sum of exp(x - max) carries it) and divides by the
    sum through its reciprocal: rows holding NaN, +-inf or only -inf still give eager's."""
    x = ember.randn(6, 33, dtype=ember.float64).float()
    x[1, 5], x[2, 0], x[3, 7], x[4] = float("nan"), float("inf"), float("-inf"), float("-inf")
    x.requires_grad_(True)
    g = ember.randn(6, 33)
    f = ember.compile(lambda x: getattr(x, fn)(-1))
    y = f(x)
    (gx,) = ember.autograd.grad(y, x, g)
    want = getattr(x, fn)(-1)
    (gwant,) = ember.autograd.grad(want, x, g)
    np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), **TOL[ember.float32])
    np.testing.assert_allclose(gx.numpy(), gwant.numpy(), **TOL[ember.float32])



def _group_norm(T, x, w, b):
    r = x.view(x.shape[0] * 4, -1)
    r = (r - r.mean(-1, keepdim=True)) * (r.var(-1, keepdim=True, unbiased=False) + 1e-5).rsqrt()
    return r.view(x.shape) * w + b


NORMS = {"layer_norm": lambda T, x, w, b: T.nn.functional.layer_norm(x, (64,), w, b),
         "rms_norm": lambda T, x, w, b: T.nn.functional.rms_norm(x, (64,), w),
         "group_norm": _group_norm}


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")      # (eager, inf rows)
@pytest.mark.parametrize("name", NORMS)
def test_norms_take_their_row_sums_in_one_pass_and_equal_eager(name):
    """A row sum over a value that depends on earlier row results (var's (x - mean)^2, the
    backward's g * w * xhat) is expanded into sums taken in the first pass (in double): a
    normalization forward and backward are two passes over a row each, its weight and bias
    gradients summed in them. Rows holding NaN or +-inf give torch's NaN; on a row whose mean is
    400 standard deviations (where the expanded sums cancel) float64's result is missed by no
    more than eager float32 misses it."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    x[1, 5], x[2, 0], x[3, 7], x[3, 9], x[5] = np.nan, np.inf, -np.inf, np.inf, x[5] + 400
    w, b = (ember.tensor(rng.standard_normal(64).astype(np.float32), requires_grad=True)
            for _ in range(2))
    # (g in float64: the compiled backward casts it as eager does)
    xt, g = ember.tensor(x, requires_grad=True), ember.tensor(rng.standard_normal((8, 64)))
    fn, ins = functools.partial(NORMS[name], ember), (xt, w) + ((b,) if name != "rms_norm" else ())
    f = ember.compile(fn)
    f(xt, w, b)         # (the capturing call returns what eager computed)
    got = [f(xt, w, b)] + list(ember.autograd.grad(f(xt, w, b), ins, g))
    rows = [c for p in next(iter(f.programs.values())).programs for c in p[1].split("\n\n")
            if "reduction(+" in c]      # (the kernels with row sums: forward, backward)
    assert [c.count("j++) {") for c in rows] == [2, 2]
    want, exact = ([fn(*ts)] + list(ember.autograd.grad(fn(*ts), ts[:len(ins)], g.to(dt)))
                   for dt in (ember.float32, ember.float64)
                   for ts in [tuple(t.to(dt) for t in (xt, w, b))])
    ts = [torch.tensor(t.detach().numpy(), requires_grad=True) for t in (xt, w, b)]
    y = NORMS[name](torch, *ts)
    nans = [y] + list(torch.autograd.grad(y, ts[:len(ins)], torch.tensor(g.numpy())))
    for a, w32, w64, tn in zip(*([t.detach().numpy() for t in ts] for ts in (got, want, exact,
                                                                          nans))):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(tn))
        if a.ndim == 2:
            np.testing.assert_allclose(a[[0, 4, 6, 7]], w32[[0, 4, 6, 7]], **TOL[ember.float32])
            assert np.abs(a[5] - w64[5]).max() <= 1.5 * np.abs(w32[5] - w64[5]).max() + 1e-6


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_a_backward_adds_into_grad_as_accumulate_grad_would(mode, monkeypatch):
    """In backward() the kernel writing a leaf's gradient adds it into the leaf's ``.grad``
    (no result to add in a second pass): the same sums as eager over repeated backwards, the
    same ``.grad`` array with its version bumped; autograd.grad leaves ``.grad`` alone and a
    hook on the leaf still gets the gradient."""
    x, w, b = ember.randn(16, 32, requires_grad=True), ember.randn(32), ember.randn(32)
    w.requires_grad_(True)
    fn = lambda x: ember.nn.functional.layer_norm(x, (32,), w, b)      # noqa: E731
    f, g = ember.compile(fn, mode=mode), ember.randn(16, 32)
    f(x).backward(g)
    data, version, added = x.grad._data, x.grad._version, []
    add = ember.Tensor._inplace_add
    monkeypatch.setattr(ember.Tensor, "_inplace_add", lambda t, o: (added.append(id(t)), add(t, o)))
    f(x).backward(g)
    monkeypatch.undo()
    assert x.grad._data is data and x.grad._version > version
    assert id(w.grad) in added and id(x.grad) not in added     # (w: a column sum, added after)
    got = [x.grad.clone(), w.grad.clone()]
    x.grad = w.grad = None
    for _ in range(2):
        fn(x).backward(g)
    for a, t in zip(got, (x, w)):
        np.testing.assert_allclose(a.numpy(), t.grad.numpy(), **TOL[ember.float32])
    kept, seen = x.grad.clone(), []
    (gx,) = ember.autograd.grad(f(x), x, g)
    assert (x.grad == kept).all()
    x.register_hook(seen.append)
    f(x).backward(g)
    np.testing.assert_allclose(seen[0].numpy(), gx.numpy())
    np.testing.assert_allclose(x.grad.numpy(), (kept + gx).numpy(), **TOL[ember.float32])

def test_a_saved_output_makes_no_reference_cycle():
    """The forward's output, also saved for the backward, is freed with its last reference,
    not by the cyclic garbage collector (a cycle kept each step's activations alive)."""
    import gc
    import weakref
    f = ember.compile(lambda x: x.softmax(-1))
    x = ember.randn(4, 8, requires_grad=True)
    gc.disable()
    try:
        y = f(x)
        y.backward(ember.ones_like(y))
        node = weakref.ref(y.grad_fn)
        del y
        assert node() is None
    finally:
        gc.enable()


def test_causal_attentions_masked_softmax_is_one_kernel():
    """The math path of causal attention: the mask's fill, softmax, the row max of the
    detached scores compared with -inf and the fill of fully masked rows (torch's safe
    softmax) run as one kernel; the comparison is stored as a bool for the backward."""
    q, k, v = (ember.randn(2, 3, 8, 4, requires_grad=True) for _ in range(3))
    f = ember.compile(lambda q, k, v: ember.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True))
    g = ember.randn(2, 3, 8, 4)
    got = ember.autograd.grad(f(q, k, v), (q, k, v), g)
    fwd, c = next(iter(f.programs.values())).programs[0][:2]
    assert fwd.count("_lib.") == 1 and "_bool)" in fwd
    assert c.count("reduction(max:") == 1       # (softmax's max and the masked-row test's)
    want = ember.autograd.grad(ember.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True), (q, k, v), g)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), **TOL[ember.float32])


def test_masked_softmax_rows_with_nan_or_fully_masked_equal_eager():
    """One NaN-propagating row max serves softmax and the fully-masked-row test: a row with a
    NaN score gives NaN as eager's, a row every key of which is masked gives zeros."""
    q, k, v = (ember.randn(2, 8, 4) for _ in range(3))
    q[0, 2, 1] = float("nan")
    mask = ember.ones(8, 8, dtype=ember.bool).tril()
    mask[5] = False
    for t in (q, k, v):
        t.requires_grad_(True)
    sdpa = ember.nn.functional.scaled_dot_product_attention
    f = ember.compile(lambda q, k, v: sdpa(q, k, v, attn_mask=mask))
    g = ember.randn(2, 8, 4)
    y = f(q, k, v)
    got = ember.autograd.grad(y, (q, k, v), g)
    want = sdpa(q, k, v, attn_mask=mask)
    assert (y[:, 5] == 0).all() and y[0, 2].isnan().all() and not y[1].isnan().any()
    np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), **TOL[ember.float32])
    for a, b in zip(got, ember.autograd.grad(want, (q, k, v), g)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), **TOL[ember.float32])


_CACHE_SCRIPT = textwrap.dedent("""
    import subprocess, sys, ember
    built = []
    class Spy(subprocess.Popen):
        def __init__(self, cmd, *a, **k):
            if "-shared" in cmd:
                built.append(cmd)
            super().__init__(cmd, *a, **k)
    subprocess.Popen = Spy
    f = ember.compile(lambda x: (x * float(sys.argv[1])).exp().sum(-1))
    f(ember.ones(3, 4))         # (a first call compiles in the background: the second waits)
    print(f(ember.ones(3, 4)).tolist(), len(built))
""")


def test_disk_cache_survives_a_new_process_and_a_changed_graph_misses_it(tmp_path):
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path))

    def run(k):
        r = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT, k], env=env, text=True,
                           capture_output=True, cwd=os.path.dirname(os.path.dirname(
                               os.path.abspath(ember.__file__))))
        assert r.returncode == 0, r.stderr
        return r.stdout.split("]")[-1].strip()
    assert run("2") == "1"                      # compiled
    assert run("2") == "0"                      # a new process finds it on disk
    assert run("3") == "1"                      # another constant: another graph, compiled
    assert len(os.listdir(tmp_path / "codegen")) == 2


class _Sq(ember.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        return g * 2 * ctx.saved_tensors[0]


def _hooked(x):
    y = x.exp()
    y.register_hook(lambda g: g * 3)
    return y.softmax(-1)


@pytest.mark.parametrize("fn,kept", [(lambda x: (x.exp() * 2).softmax(-1), True),
                                     (_hooked, False), (lambda x: _Sq.apply(x).tanh(), False)],
                         ids=["ops", "hook", "function"])
def test_a_backward_recorded_before_is_read_from_disk(fn, kept, monkeypatch):
    """A new capture of a forward graph seen before reads the backward from the disk cache
    instead of recording autograd.grad again, and computes the same gradients bit for bit;
    where the backward runs user code the forward graph does not show (a hook, a Function's
    backward) or ember's code changed, it is recorded again."""
    from ember.compiler import _aot
    real, grads = ember.autograd.grad, []
    monkeypatch.setattr(ember.autograd, "grad", lambda *a, **k: grads.append(1) or real(*a, **k))
    x = ember.randn(4, 8, requires_grad=True)
    got, code = [], []
    for _ in range(2):
        f = ember.compile(fn)
        for _ in range(2):      # (the second call's backward is the compiled one)
            x.grad = None
            f(x).backward(ember.ones(4, 8))
        got.append(x.grad.numpy())
        code.append([p[:2] for p in next(iter(f.programs.values())).programs])
    np.testing.assert_array_equal(got[0], got[1])
    assert code[0] == code[1]                   # (the same Python and C)
    assert len(grads) == (1 if kept else 2)
    monkeypatch.setattr(_aot, "_ember_files", lambda: "another ember")
    ember.compile(fn)(x)
    assert len(grads) == (2 if kept else 3)


@pytest.mark.parametrize("fn,kept", [(lambda x: (x.exp() * 2).softmax(-1), True),
                                     (lambda x: (x * 2).add_(1).softmax(-1), False)],
                         ids=["ops", "in-place"])
def test_the_capturing_call_keeps_the_captures_forward_values(fn, kept, monkeypatch):
    """The call that captures runs no compiled forward: it returns and saves the values the
    capture computed, except after an in-place write (a written tensor holds a later value
    than the node it was recorded for); then its library compiles in the background and its
    backward runs the backward graph's ops, and the next call binds the runners; gradients
    equal eager's on every call."""
    make, runs = toolchain.make, []
    monkeypatch.setattr(toolchain, "_loaded", {})       # (not compiled in this process yet)

    def counted(*a, **k):
        f, i = make(*a, **k), len(runs)
        runs.append(0)
        return lambda *xs, **kw: runs.__setitem__(i, runs[i] + 1) or f(*xs, **kw)
    monkeypatch.setattr(toolchain, "make", counted)
    # (float64: exp's ulp differences between the C loop and NumPy, scaled by exp(x) * 2 in
    # the chain rule, reach ~4e-6 in float32; softmax's gradient for ones is 0: use a random g)
    x = ember.randn(4, 8, dtype=ember.float64, requires_grad=True)
    g = ember.randn(4, 8, dtype=ember.float64)
    want = ember.autograd.grad(fn(x), x, g)[0].numpy()
    f = ember.compile(fn)
    for i in range(2):
        x.grad = None
        f(x).backward(g)
        np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5, atol=1e-6)
        assert runs == ([[], [1, 1]][i] if kept else [i + 1, i + 1])  # (forward, backward)


def test_a_compiler_failure_in_the_background_raises_at_the_next_call(monkeypatch):
    monkeypatch.setattr(toolchain, "_loaded", {})

    def fail(*a):
        raise RuntimeError("ember.compile: the C compiler failed: (test)")
    monkeypatch.setattr(toolchain, "_build_so", fail)
    x = ember.randn(3, 5, requires_grad=True)
    f = ember.compile(lambda x: (x * 1.5).tanh().sum())
    f(x).backward()                 # (the capture's values, the backward graph's ops)
    np.testing.assert_allclose(x.grad.numpy(), 1.5 * (1 - np.tanh(1.5 * x.detach().numpy()) ** 2),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="C compiler failed"):
        f(x)


def test_the_compilers_version_is_asked_once_per_cache(tmp_path, monkeypatch):
    """The compiler's version line (part of every library's key) is kept in the cache folder, so
    a new process starts no compiler to find it."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "_cc", {})
    found = toolchain.compiler()
    assert [f.name.startswith("cc-") for f in tmp_path.iterdir()] == [True]

    def fail(*a, **k):
        raise AssertionError("the compiler was started")
    monkeypatch.setattr(toolchain, "_cc", {})
    monkeypatch.setattr(subprocess, "run", fail)
    assert toolchain.compiler() == found


def test_no_compiler_runs_eagerly_with_one_warning(monkeypatch):
    monkeypatch.setattr(toolchain, "_cc", {"cc": None})
    from ember import compiler
    monkeypatch.setattr(compiler, "_warned", [])
    f = ember.compile(lambda x: x.exp() + 1)
    with pytest.warns(UserWarning, match="no C compiler"):
        assert f(ember.zeros(2)).tolist() == [2.0, 2.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(ember.zeros(3)).tolist() == [2.0, 2.0, 2.0]
        ember.compile(lambda x: x.sin())(ember.zeros(1))


def test_without_c_kernels_compiled_functions_run_eagerly(monkeypatch):
    """EMBER_NO_C=1 (the NumPy reference path): no program is made, the function and its
    backward run eagerly, without a warning."""
    monkeypatch.setattr(kernels, "_off", True)
    x = ember.randn(5, requires_grad=True)
    f = ember.compile(lambda x: x.exp() * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(x.detach().numpy()), rtol=1e-6)
    assert list(f.programs.values()) == [False]


def _train(build, steps, compiled, mode=None):
    ember.manual_seed(0)
    model, opt, batch = build()
    run = ember.compile(model, mode=mode) if compiled else model
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = run(*batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


def _gpt(**size):
    from benchmarks.models import GPT, gpt_model
    size = dict(GPT, **size)
    model = gpt_model(ember, **size)
    idx = ember.randint(0, GPT["vocab"], (size["batch"], size["block"]))
    return model, ember.optim.AdamW(model.parameters(), lr=3e-4), (idx, idx.roll(-1, 1))


def _mlp(sizes=(784, 512, 512, 10), batch=128):
    nn = ember.nn
    d0, d1, d2, d3 = sizes
    net = nn.Sequential(nn.Linear(d0, d1), nn.ReLU(), nn.Linear(d1, d2), nn.ReLU(),
                        nn.Linear(d2, d3))
    x, y = ember.randn(batch, d0), ember.randint(0, d3, (batch,))

    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x, y):
            return nn.functional.cross_entropy(self.net(x), y)
    m = Step()
    return m, ember.optim.AdamW(m.parameters(), lr=1e-3), (x, y)


_SMALL_GPT, _SMALL_MLP = dict(n_layer=1, batch=4, block=32), ((784, 128, 128, 10), 32)


@pytest.mark.parametrize("build,mode", [(lambda: _gpt(**_SMALL_GPT), None),
                                        (lambda: _mlp(*_SMALL_MLP), None),
                                        (lambda: _mlp(*_SMALL_MLP), "reduce-overhead")],
                         ids=["gpt", "mlp", "mlp-reduce-overhead"])
def test_training_loops_reach_eagers_loss(build, mode):
    eager, compiled = _train(build, 30, False), _train(build, 30, True, mode)
    np.testing.assert_allclose(compiled, eager, rtol=0, atol=1e-5)
    assert compiled[-1] < compiled[0]


def test_reduce_overhead_refuses_a_backward_whose_buffers_were_overwritten():
    w = ember.randn(8, 8, requires_grad=True)
    f = ember.compile(lambda x: (x @ w).tanh().sum(-1), mode="reduce-overhead")
    x = ember.randn(4, 8)
    a = f(x).sum()
    f(x * 2)
    with pytest.raises(RuntimeError, match="overwriting the buffers"):
        a.backward()
    y = f(x)
    y.sum().backward()
    want = ember.autograd.grad((x @ w).tanh().sum(-1).sum(), w)[0]
    np.testing.assert_allclose(w.grad.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.shares_memory(f(x).detach().numpy(), y.detach().numpy())


@pytest.mark.slow
@pytest.mark.parametrize("build,mode", [(_gpt, None), (_mlp, None), (_mlp, "reduce-overhead")],
                         ids=["gpt", "mlp", "mlp-reduce-overhead"])
def test_the_benchmark_models_train_as_eager(build, mode):
    """The benchmarks' GPT (4 layers, batch 16 x 64) and MLP (784-512-512-10, batch 128)
    through compile: 30 steps within 1e-5 of eager's losses."""
    eager, compiled = _train(build, 30, False), _train(build, 30, True, mode)
    np.testing.assert_allclose(compiled, eager, rtol=0, atol=1e-5)


def test_a_function_drawing_random_numbers_runs_eagerly():
    """randn and dropout's mask are drawn off the dispatch: replaying the first call's draws
    would be wrong, so such a function runs eagerly (fresh draws each call, as eager)."""
    for fn in (lambda x: x + ember.randn(3), lambda x: ember.nn.functional.dropout(x, 0.5)):
        f = ember.compile(fn)
        ember.manual_seed(0)
        a, b = f(ember.ones(3)), f(ember.ones(3))
        ember.manual_seed(0)
        np.testing.assert_array_equal(a.numpy(), fn(ember.ones(3)).numpy())
        assert not np.array_equal(a.numpy(), b.numpy())
        assert list(f.programs.values()) == [False]


def test_python_values_and_frozen_parameters_are_guarded():
    f = ember.compile(lambda x, k: x * k)
    assert f(ember.ones(2), 2.0).tolist() == [2.0, 2.0]
    assert f(ember.ones(2), 3.0).tolist() == [3.0, 3.0]
    lin = ember.nn.Linear(3, 2)
    m = ember.compile(lin)
    x = ember.randn(4, 3)
    m(x).sum().backward()
    assert lin.weight.grad is not None
    lin.weight.requires_grad_(False)
    lin.weight.grad = None
    m(x).sum().backward()
    assert lin.weight.grad is None and lin.bias.grad is not None


def test_batchnorm_training_updates_running_stats_as_eager():
    """Writes into buffers (BatchNorm's running statistics) keep their order against the
    kernels reading them; the capture run's own update is undone."""
    def run(compiled):
        ember.manual_seed(0)
        m = ember.nn.Sequential(ember.nn.Linear(4, 6), ember.nn.BatchNorm1d(6), ember.nn.GELU())
        f = ember.compile(m) if compiled else m
        x = ember.randn(8, 4)
        outs = [f(x * (i + 1)).detach().numpy().copy() for i in range(3)]
        return outs, m[1].running_mean.numpy().copy(), m[1].running_var.numpy().copy()
    for a, b in zip(run(False), run(True)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)


def test_past_the_cache_size_limit_new_shapes_run_eagerly(monkeypatch):
    monkeypatch.setattr(ember._dynamo.config, "cache_size_limit", 2)
    f = ember.compile(lambda x: x.exp() * 2, dynamic=False)     # (a program per shape)
    for n in (1, 2):
        f(ember.zeros(n))
    with pytest.warns(UserWarning, match="cache_size_limit"):
        assert f(ember.zeros(3)).tolist() == [2.0] * 3
    assert len(f.programs) == 2


def test_a_closed_over_models_mode_and_frozen_weights_are_guarded():
    model = ember.nn.Sequential(ember.nn.Linear(4, 4), ember.nn.BatchNorm1d(4))
    f = ember.compile(lambda x: model(x).tanh())
    x = ember.randn(8, 4)
    f(x)
    model.eval()
    np.testing.assert_allclose(f(x).detach().numpy(), model(x).tanh().detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    model[0].weight.requires_grad_(False)
    f(x).sum().backward()
    assert model[0].weight.grad is None and model[0].bias.grad is not None


@pytest.mark.parametrize("threads", [1, 2])
def test_kernels_large_enough_to_split_over_threads_equal_eager(threads):
    """Kernels of at least cgen.PAR_MIN elements split their rows over OpenMP threads (the
    column sums of a bias or LayerNorm weight gradient per thread, then added up)."""
    before = ember.get_num_threads()
    ember.set_num_threads(threads)
    try:
        x = ember.randn(cgen.PAR_MIN // 512, 512, requires_grad=True)
        w, b = ember.randn(512, requires_grad=True), ember.randn(512, requires_grad=True)
        fn = lambda x: ember.nn.functional.layer_norm(x, (512,), w, b).softmax(-1)  # noqa: E731
        g = ember.randn(x.shape)
        got = ember.autograd.grad(ember.compile(fn)(x), (x, w, b), g)
        want = ember.autograd.grad(fn(x), (x, w, b), g)
        for a, e in zip(got, want):
            np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)
    finally:
        ember.set_num_threads(before)
