"""Every registry op, forward and backward, on the ``cuda`` TEST DOUBLE (tests/cuda_double.py:
NumPy arrays that refuse NumPy, presented as a GPU; no GPU runs here) equals the cpu result
and stays on cuda; and the device plumbing around ops: moves, mixed-device errors, modules,
optimizers, checkpoints, the DataLoader.

No op is excused: every one runs through the backend's ``xp`` on cuda. The double has the
gaps of CuPy's ufuncs (no reduce/accumulate/reduceat, ``at`` for add/maximum/minimum only),
so ops that needed them have a path of their own there (``_backends.accumulate``,
``multiply_at``); it does not know which NumPy functions CuPy lacks beyond those."""
import copy
import io

import numpy as np
import pytest

import ember
from cuda_double import cuda, cuda_double  # noqa: F401  (cuda: the fixture)
from ember._backends import backend
from ember._ops.registry import all_ops
from ember._ops.samples import public_call

CUDA = ember.device("cuda:0")
TOL = {"float32": (1e-5, 1e-6), "complex64": (1e-5, 1e-6), "bfloat16": (1.6e-2, 1e-2),
       "float16": (2e-3, 1e-3)}
OPS = [d for d in all_ops() if d.samples is not None]
FAST_DTYPES = [ember.float32, ember.float64]
SLOW_DTYPES = [ember.int64, ember.bool, ember.complex128]     # (no bfloat16 in CuPy)


def _device_array(a):
    return isinstance(a, backend(CUDA).xp.ndarray) and not isinstance(a, np.ndarray)


def _dtypes():
    return [pytest.param(d, id=d.name) for d in FAST_DTYPES] + \
        [pytest.param(d, id=d.name, marks=pytest.mark.slow) for d in SLOW_DTYPES]


def _tensors(args, device, requires_grad=False):
    def one(x):
        if not isinstance(x, np.ndarray):
            return x
        t = ember.tensor(x).to(device)
        return t.requires_grad_(requires_grad and t.dtype.category >= 2)
    return tuple([one(x) for x in a] if isinstance(a, list) else one(a) for a in args)


def _call(opdef, args, kwargs):
    if opdef.hermitian_input and isinstance(args[0], ember.Tensor) and args[0].dim() >= 2 and \
            args[0].shape[-1] == args[0].shape[-2]:
        args = ((args[0] + args[0].mH) / 2,) + tuple(args[1:])
    ember.manual_seed(0)
    return public_call(ember, opdef, args, kwargs)


def _flat(x):
    if isinstance(x, (tuple, list)):
        for v in x:
            yield from _flat(v)
    else:
        yield x


def _same(got, want, what, tol=None):
    """``got`` (from cuda) is ``want`` (from cpu) moved to cuda: tensors on cuda0 with the
    cpu's dtype, shape and values; anything else equal."""
    got, want = list(_flat(got)), list(_flat(want))
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        if not isinstance(w, ember.Tensor):
            assert not isinstance(g, ember.Tensor) and (g == w or g != g and w != w), what
            continue
        assert isinstance(g, ember.Tensor) and g.device == CUDA, f"{what}: {g!r} left cuda"
        assert _device_array(g._data) or g.is_sparse, f"{what}: {type(g._data)}"
        assert (g.dtype, tuple(g.shape)) == (w.dtype, tuple(w.shape)), what
        g, w = g.detach().cpu(), w.detach()
        if g.is_sparse:
            g, w = g.to_dense(), w.to_dense()
        # (cpu and cuda may take different paths: C kernels, the order of a scatter's repeats)
        rtol, atol = tol or TOL.get(g.dtype.name, (1e-9, 1e-12))
        np.testing.assert_allclose(g.numpy().astype(np.complex128 if g.is_complex() else
                                                    np.float64), w.numpy().astype(
            np.complex128 if w.is_complex() else np.float64), rtol, atol, err_msg=what)


def _samples(opdef, dt):
    if dt.name in opdef.skips:
        pytest.skip(opdef.skips[dt.name])
    return opdef.samples("cpu", dt) or pytest.skip(f"{opdef.name} has no samples for {dt.name}")


@pytest.mark.parametrize("dt", _dtypes())
@pytest.mark.parametrize("opdef", OPS, ids=str)
def test_forward_on_cuda_equals_cpu(cuda, opdef, dt):
    for s in _samples(opdef, dt):
        what = f"{opdef.name}({s}) on cuda"
        try:
            want = _call(opdef, _tensors(s.args, "cpu"), s.kwargs)
        except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError) as e:
            with pytest.raises(type(e)):
                _call(opdef, _tensors(s.args, "cuda"), s.kwargs)
            continue
        got = _call(opdef, _tensors(s.args, "cuda"), s.kwargs)
        if opdef.gauge is not None:     # (cpu's float32 LAPACK, the double's float64 NumPy)
            got, want = opdef.gauge(got), opdef.gauge(want)
        _same(got, want, what, opdef.tol.get(dt.name))


def _grads(opdef, args, kwargs):
    outs = [o for o in _flat(_call(opdef, args, kwargs)) if isinstance(o, ember.Tensor) and
            o.requires_grad]
    inputs = [a for a in _flat(args) if isinstance(a, ember.Tensor) and a.requires_grad]
    if not outs or not inputs:
        return None
    rng = np.random.default_rng(1)
    loss = sum((o * ember.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype,
                                 device=o.device)).sum().real for o in outs)
    return ember.autograd.grad(loss, inputs, allow_unused=True)


@pytest.mark.parametrize("opdef", [d for d in OPS if d.differentiable], ids=str)
def test_backward_on_cuda_equals_cpu(cuda, opdef):
    for s in _samples(opdef, ember.float64):
        try:
            want = _grads(opdef, _tensors(s.args, "cpu", True), s.kwargs)
        except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError):
            continue        # not a valid call: the forward test checks cuda raises alike
        if want is not None:
            got = _grads(opdef, _tensors(s.args, "cuda", True), s.kwargs)
            _same(got, want, f"grad {opdef.name}({s}) on cuda")


# ---- the device plumbing around ops ----------------------------------------------------------
def _on_cuda(*tensors):
    for t in tensors:
        assert t.device == CUDA and t.is_cuda and _device_array(t._data), repr(t)


def test_moves_and_factories(cuda):
    x = ember.randn(3, 4)
    for y in (x.cuda(), x.to("cuda"), x.to("cuda:0", non_blocking=True), x.to(CUDA),
              x.to(ember.zeros(1, device="cuda")), ember.tensor(x.numpy(), device="cuda")):
        _on_cuda(y)
        assert y.get_device() == 0 and y.cpu().device.type == "cpu"
        np.testing.assert_array_equal(y.cpu().numpy(), x.numpy())
    y = x.cuda()
    assert y.cuda() is y and y.to("cuda") is y and y.to("cpu") is not y
    y.add_(1)                                       # a move copies: the cpu tensor is unchanged
    assert not np.array_equal(y.cpu().numpy(), x.numpy())
    _on_cuda(y.to(ember.float64), y.double(), y.clone(), y[1:, ::2], y.T.contiguous())
    _on_cuda(*(f(device="cuda") for f in (
        lambda **k: ember.zeros(2, 3, **k), lambda **k: ember.ones(2, **k),
        lambda **k: ember.full((2,), 7.0, **k), lambda **k: ember.arange(5, **k),
        lambda **k: ember.randn(4, **k), lambda **k: ember.rand(2, 2, **k),
        lambda **k: ember.randint(0, 9, (3,), **k), lambda **k: ember.empty(3, **k),
        lambda **k: ember.eye(3, **k), lambda **k: ember.linspace(0, 1, 5, **k))))
    _on_cuda(ember.zeros_like(y), ember.randn_like(y), y.new_zeros(2), y.new_tensor([1.0]))
    with ember.device("cuda"):
        _on_cuda(ember.zeros(2), ember.nn.Linear(2, 3).weight)
    ember.set_default_device("cuda")
    try:
        _on_cuda(ember.ones(2), ember.tensor([1.0, 2.0]))
    finally:
        ember.set_default_device(None)
    assert ember.ones(2).device.type == "cpu"


def test_host_reads_of_a_cuda_tensor(cuda):
    a = ember.arange(3, dtype=ember.float32, device="cuda")
    for implicit in (a.numpy, lambda: np.asarray(a)):
        with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
            implicit()
    assert a.tolist() == [0.0, 1.0, 2.0] and a[2].item() == 2.0 and float(a[1]) == 1.0
    assert bool(a.sum() > 2) and repr(a) == "tensor([0., 1., 2.], device='cuda:0')"
    np.testing.assert_array_equal(a.numpy(force=True), [0.0, 1.0, 2.0])
    assert a.untyped_storage().tolist() == ember.arange(3.0).untyped_storage().tolist()


def test_ops_keep_the_device_and_autograd_runs_there(cuda):
    x = ember.randn(4, 5, device="cuda", requires_grad=True)
    w = ember.randn(5, 3).cuda().requires_grad_()
    y = (x @ w).relu().softmax(-1).log().mean() + ember.tensor(2.0)   # a 0-dim cpu tensor joins
    _on_cuda(y)
    y.backward()
    _on_cuda(x.grad, w.grad)
    g = ember.autograd.grad((x * x).sum(), x, create_graph=True)[0]
    _on_cuda(g, ember.autograd.grad(g.sum(), x)[0])
    # moving a tensor that requires grad is differentiable: the gradient comes back to cpu
    a = ember.randn(3, requires_grad=True)
    (a.cuda() * 3).sum().backward()
    assert a.grad.device.type == "cpu"
    np.testing.assert_array_equal(a.grad.numpy(), np.full(3, 3.0, np.float32))


MIXED = {"add": lambda a, b: a + b, "matmul": lambda a, b: ember.matmul(a, b),
         "cat": lambda a, b: ember.cat([a, b]), "where": lambda a, b: ember.where(a > 0, a, b),
         "index_add": lambda a, b: a.index_add(0, ember.tensor([0, 1], device=a.device), b),
         "mse_loss": lambda a, b: ember.nn.functional.mse_loss(a, b)}


@pytest.mark.parametrize("op", MIXED)
def test_mixed_devices_raise_torchs_error_naming_the_op(cuda, op):
    a, b = ember.ones(2, 2, device="cuda"), ember.ones(2, 2)
    for x, y, first, second in ((a, b, "cuda:0", "cpu"), (b, a, "cpu", "cuda:0")):
        with pytest.raises(RuntimeError) as e:
            MIXED[op](x, y)
        msg = str(e.value)
        assert msg.startswith(f"{op}: Expected all tensors to be on the same device, but found "
                              f"at least two devices, {first} and {second}!"), msg
    # copy_ between devices is a move, as in torch
    c = ember.zeros(2, 2, device="cuda").copy_(b)
    _on_cuda(c)
    assert ember.zeros(2, 2).copy_(a).device.type == "cpu"


def _train(model, opt, x, steps=3):
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    return [p.detach().cpu().numpy() for p in model.parameters()]


@pytest.mark.parametrize("name, kw", [
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}), ("Adam", {"lr": 0.01}),
    ("AdamW", {"lr": 0.01, "amsgrad": True}), ("RMSprop", {"lr": 0.01, "centered": True}),
    ("Adagrad", {"lr": 0.1}), ("Adadelta", {}), ("Adamax", {}), ("RAdam", {}), ("NAdam", {}),
    ("Rprop", {}), ("ASGD", {}), ("SGD", {"lr": 0.1, "weight_decay": 0.1, "maximize": True})])
def test_module_to_and_optimizer_step_on_cuda_match_cpu(cuda, name, kw):
    ember.manual_seed(0)
    nn = ember.nn
    cpu = nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(),
                        nn.Linear(8, 2)).double()
    gpu = copy.deepcopy(cpu)
    assert gpu.to("cuda") is gpu
    _on_cuda(*gpu.parameters(), *gpu.buffers())
    x = ember.randn(6, 4, dtype=ember.float64)
    opts = [getattr(ember.optim, name)(m.parameters(), **kw) for m in (cpu, gpu)]
    want, got = _train(cpu, opts[0], x), _train(gpu, opts[1], x.cuda())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    state = [v for s in opts[1].state.values() for v in s.values() if isinstance(v, ember.Tensor)
             and v.dim()]
    _on_cuda(*state)
    # an optimizer's state_dict from cuda loads into a cpu model's optimizer on cpu (and back)
    sd = opts[1].state_dict()
    fresh = getattr(ember.optim, name)(cpu.parameters(), **kw)
    fresh.load_state_dict(sd)
    for s in fresh.state.values():
        for k, v in s.items():
            if isinstance(v, ember.Tensor) and k != "step":
                assert v.device.type == "cpu", k
    back = getattr(ember.optim, name)(gpu.parameters(), **kw)
    back.load_state_dict(opts[0].state_dict())
    _on_cuda(*[v for s in back.state.values() for k, v in s.items()
               if isinstance(v, ember.Tensor) and k != "step"])
    # a model's state_dict moves both ways
    _on_cuda(*gpu.state_dict().values())
    cpu.load_state_dict(gpu.state_dict())
    assert all(v.device.type == "cpu" for v in cpu.state_dict().values())
    gpu.cpu()
    assert all(p.device.type == "cpu" for p in gpu.parameters())
    if any(s for s in opts[1].state.values()):      # its state stayed on cuda, as torch's does
        gpu(x).sum().backward()
        with pytest.raises(RuntimeError, match="same device, but found at least two devices, "
                                               "cpu and cuda:0!"):
            opts[1].step()


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_on_cuda_matches_cpu(cuda, line_search_fn):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 3)), rng.standard_normal(8)
    out = []
    for dev in ("cpu", "cuda"):
        w = ember.zeros(3, dtype=ember.float64, device=dev, requires_grad=True)
        A, y = ember.tensor(a, device=dev), ember.tensor(b, device=dev)
        opt = ember.optim.LBFGS([w], lr=0.5, max_iter=6, line_search_fn=line_search_fn)

        def closure():
            opt.zero_grad()
            loss = ((A @ w - y) ** 2).sum()
            loss.backward()
            return loss
        for _ in range(2):
            opt.step(closure)
        out.append(w.detach().cpu().numpy())
        if dev == "cuda":
            _on_cuda(w, *[v for v in opt.state[w].values() if isinstance(v, ember.Tensor) and
                         v.dim()])
    np.testing.assert_allclose(out[1], out[0], rtol=1e-9, atol=1e-12)


def test_checkpoint_map_location(cuda):
    sd = {"w": ember.randn(3, 4, device="cuda"), "b": ember.arange(3).cuda(),
          "view": None, "cpu": ember.ones(2)}
    sd["view"] = sd["w"][1]
    buf = io.BytesIO()
    ember.save(sd, buf)

    def load(map_location):
        buf.seek(0)
        return ember.load(buf, map_location=map_location)
    same = load(None)                       # as saved: cuda stays cuda, cpu stays cpu
    _on_cuda(same["w"], same["b"], same["view"])
    assert same["cpu"].device.type == "cpu"
    for loc in ("cpu", ember.device("cpu"), {"cuda:0": "cpu"}, lambda s, loc: s):
        out = load(loc)
        assert all(v.device.type == "cpu" for v in out.values()), loc
        np.testing.assert_array_equal(out["w"].numpy(), sd["w"].cpu().numpy())
        np.testing.assert_array_equal(out["view"].numpy(), sd["w"][1].cpu().numpy())
    buf = io.BytesIO()
    ember.save({k: v.cpu() for k, v in sd.items()}, buf)
    for loc in ("cuda", "cuda:0", {"cpu": "cuda:0"}, lambda s, loc: s.cuda()):
        out = load(loc)
        _on_cuda(*out.values())
        np.testing.assert_array_equal(out["w"].cpu().numpy(), sd["w"].cpu().numpy())


class _Pairs(ember.utils.data.Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": ember.full((3,), float(i)), "y": i}


def test_dataloader_pin_memory_pins_batches_for_cuda(cuda, recwarn):
    batches = list(ember.utils.data.DataLoader(_Pairs(), batch_size=2, pin_memory=True))
    assert not [w for w in recwarn if "pin_memory" in str(w.message)]
    for b in batches:
        assert b["x"].is_pinned() and b["y"].is_pinned() and b["x"].device.type == "cpu"
        _on_cuda(b["x"].to("cuda", non_blocking=True))
    x = ember.ones(3)
    p = x.pin_memory()
    assert not x.is_pinned() and p.is_pinned() and p.pin_memory() is p
    assert p[1:].is_pinned() and not p.clone().is_pinned()
    np.testing.assert_array_equal(p.numpy(), x.numpy())
    with pytest.raises(RuntimeError, match="pin"):
        p.cuda().pin_memory()


def test_ember_cuda_queries_see_the_double():
    with cuda_double():
        assert ember.cuda.is_available() and ember.cuda.device_count() == 1
        assert ember.cuda.current_device() == 0
        assert ember.cuda.get_device_name() == "ember test double"
        assert ember.get_device_module().__name__ == "ember.cuda"
        ember.cuda.synchronize()


def test_cuda_tensors_cannot_be_bfloat16_as_cupy_has_no_such_dtype(cuda):
    x = ember.ones(3, dtype=ember.bfloat16)
    for move in (lambda: x.cuda(), lambda: x.to("cuda"), lambda: ember.tensor(
            [1.0], dtype=ember.bfloat16, device="cuda")):
        with pytest.raises(TypeError, match="ember's cuda device has no bfloat16 tensors"):
            move()
    for make in (lambda: ember.ones(3, dtype=ember.bfloat16, device="cuda"),
                 lambda: ember.ones(3, device="cuda").bfloat16()):
        with pytest.raises((TypeError, ValueError, RuntimeError), match="bfloat16"):
            make()
    assert not ember.cuda.is_bf16_supported()
    with pytest.raises(RuntimeError, match="Current CUDA Device does not support bfloat16. "
                                           "Please switch dtype to float16."):
        ember.autocast("cuda", dtype=ember.bfloat16)


def test_the_double_refuses_numpy():
    with cuda_double() as cupy:
        a = ember.ones(3, device="cuda")._data
        for stray in (np.asarray, np.exp, np.sum, lambda a: a + np.ones(3),
                      lambda a: a.ctypes.data):
            with pytest.raises((TypeError, AttributeError)):
                stray(a)
        np.testing.assert_array_equal((a * np.float32(2)).get(), np.full(3, 2.0, np.float32))
        # names CuPy 14 lacks (tests/cupy_names.json), and CuPy's full refusing None
        for missing in (lambda: cupy.geomspace, lambda: cupy.linalg.matrix_exp,
                        lambda: a.resize, lambda: cupy.full(3, None)):
            with pytest.raises(AttributeError):
                missing()
        with pytest.raises(TypeError, match="unexpected keyword argument 'initial'"):
            a.max(initial=0)        # (CuPy's max has no initial=, NumPy's has)
    assert not ember.cuda.is_available() or ember.cuda.get_device_name() != "ember test double"
