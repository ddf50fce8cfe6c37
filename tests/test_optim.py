"""Optimizers against torch.optim: the same parameters and loss in float64, 25 steps, over the
options that change the math; torch-layout state dicts crossing between the libraries."""
import warnings

import numpy as np
import pytest

import ember
from oracle import torch

# (optimizer name, kwargs): each row is one option combination that changes the update.
CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.1, foreach=True)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, foreach=True)),
    ("SGD", dict(lr=0.05, foreach=True, maximize=True)),
    ("Adam", dict(lr=0.05)),
    ("Adam", dict(lr=0.05, amsgrad=True, weight_decay=0.1)),
    ("Adam", dict(lr=0.05, betas=(0.8, 0.9), maximize=True, decoupled_weight_decay=True,
                  weight_decay=0.1)),
    ("Adam", dict(lr=0.05, foreach=True, fused=False, capturable=False, differentiable=False)),
    ("AdamW", dict(lr=0.05)),
    ("AdamW", dict(lr=0.05, amsgrad=True, weight_decay=0.3, maximize=True)),
    ("AdamW", dict(lr=0.05, amsgrad=True, weight_decay=0.3, maximize=True, foreach=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2,
                     eps=1e-6)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, momentum=0.9, maximize=True)),
    ("Adamax", dict(lr=0.05)),
    ("Adamax", dict(lr=0.05, weight_decay=0.1, maximize=True)),
    ("NAdam", dict(lr=0.05)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict(lr=0.05)),
    ("RAdam", dict(lr=0.05, betas=(0.9, 0.5), weight_decay=0.1)),
    ("RAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, weight_decay=0.1, maximize=True)),
    ("Rprop", dict(lr=0.01)),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.1), maximize=True)),
    ("ASGD", dict(lr=0.05)),
    ("ASGD", dict(lr=0.05, lambd=0.01, alpha=0.5, t0=5, weight_decay=0.1)),
    ("Adafactor", dict()),
    ("Adafactor", dict(lr=0.05, beta2_decay=-0.5, eps=(1e-20, 1e-2), d=1.5, weight_decay=0.1,
                       maximize=True)),
]

rng = np.random.default_rng(0)
X, Y = rng.standard_normal((8, 5)), rng.standard_normal((8, 1))
INIT = [rng.standard_normal((5, 6)) * 0.5, rng.standard_normal(6) * 0.1,
        rng.standard_normal((6, 1)) * 0.5]


def _params(lib, values=INIT):
    return [lib.nn.Parameter(lib.tensor(v.copy())) for v in values]


def _loss(lib, ps):
    """A small tanh MLP with a squared error, the same float64 data in either library."""
    x, y = lib.tensor(X, dtype=ps[0].dtype), lib.tensor(Y, dtype=ps[0].dtype)
    h = (x @ ps[0] + ps[1]).tanh()
    return ((h @ ps[2] - y) ** 2).mean()


def _groups(ps, kw):
    # two param groups, the second with half the lr, so per-group options are exercised
    return [{"params": ps[:2]}, {"params": ps[2:], "lr": kw.get("lr", 1e-3) / 2}]


def _run(lib, opt, ps, steps):
    for _ in range(steps):
        opt.zero_grad()
        _loss(lib, ps).backward()
        opt.step()


def _closure(lib, opt, ps):
    """LBFGS's closure: zero the grads, compute the loss, backward."""
    def f():
        opt.zero_grad()
        loss = _loss(lib, ps)
        loss.backward()
        return loss
    return f


def _rel_diff(e_ps, t_ps):
    return max(float(np.abs(e.detach().numpy() - t.detach().numpy()).max()
                     / max(np.abs(t.detach().numpy()).max(), 1e-12)) for e, t in zip(e_ps, t_ps))


def _make(lib, name, kw, ps):
    return getattr(lib.optim, name)(_groups(ps, kw), **kw)


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_trajectory_matches_torch(name, kw):
    e_ps, t_ps = _params(ember), _params(torch)
    e_opt, t_opt = _make(ember, name, kw, e_ps), _make(torch, name, kw, t_ps)
    for step in range(25):
        _run(ember, e_opt, e_ps, 1)
        _run(torch, t_opt, t_ps, 1)
        assert _rel_diff(e_ps, t_ps) < 1e-6, f"{name} {kw}: step {step + 1}"
    assert _rel_diff(e_ps, [torch.tensor(v) for v in INIT]) > 1e-3    # it did move


def _to_ember(obj):
    return _convert(obj, torch.Tensor, lambda t: ember.tensor(t.numpy()))


def _to_torch(obj):
    return _convert(obj, ember.Tensor, lambda t: torch.tensor(t.numpy()))


def _convert(obj, cls, fn):
    if isinstance(obj, cls):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _convert(v, cls, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_convert(v, cls, fn) for v in obj)
    return obj


def _layout(sd):
    """What must agree between the libraries: keys, group options, and state dtypes/shapes."""
    def leaf(v):
        if isinstance(v, (ember.Tensor, torch.Tensor)):
            return ("tensor", str(v.dtype).replace("torch.", ""), tuple(v.shape))
        return v
    state = {k: {n: leaf(v) for n, v in s.items()} for k, s in sd["state"].items()}
    return state, sd["param_groups"]


@pytest.mark.parametrize("direction", ["torch_to_ember", "ember_to_torch"])
@pytest.mark.parametrize("name,kw", [c for i, c in enumerate(CASES) if i % 2 == 1],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_state_dict_crosses_libraries(name, kw, direction):
    src_lib, dst_lib = (torch, ember) if direction == "torch_to_ember" else (ember, torch)
    convert = _to_ember if dst_lib is ember else _to_torch
    src_ps = _params(src_lib)
    src_opt = _make(src_lib, name, kw, src_ps)
    _run(src_lib, src_opt, src_ps, 10)
    sd = src_opt.state_dict()
    dst_ps = _params(dst_lib, [p.detach().numpy() for p in src_ps])
    dst_opt = _make(dst_lib, name, kw, dst_ps)
    dst_opt.load_state_dict(convert(sd))
    # NOTE: loading casts state (but not `step`) to the parameter's dtype in torch too, so the
    # reference layout is the source library loading its own state dict.
    ref = _make(src_lib, name, kw, _params(src_lib))
    ref.load_state_dict(sd)
    assert _layout(dst_opt.state_dict()) == _layout(ref.state_dict())
    _run(src_lib, src_opt, src_ps, 10)
    _run(dst_lib, dst_opt, dst_ps, 10)
    assert _rel_diff(*((dst_ps, src_ps) if dst_lib is ember else (src_ps, dst_ps))) < 1e-6


def test_adam_state_layout_is_torchs():
    (w,) = _params(ember, INIT[:1])
    opt = ember.optim.Adam([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    sd = opt.state_dict()
    assert list(sd) == ["state", "param_groups"] and list(sd["state"]) == [0]
    step = sd["state"][0]["step"]
    assert isinstance(step, ember.Tensor) and step.dtype == ember.float32 and step.dim() == 0
    assert sd["param_groups"][0]["params"] == [0]
    t_opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    assert sd["param_groups"][0].keys() == t_opt.state_dict()["param_groups"][0].keys()


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_lbfgs_matches_torch(line_search):
    e_ps, t_ps = _params(ember), _params(torch)
    opts = [lib.optim.LBFGS(ps, lr=0.5, max_iter=6, history_size=4, line_search_fn=line_search)
            for lib, ps in ((ember, e_ps), (torch, t_ps))]
    for _ in range(4):
        le = opts[0].step(_closure(ember, opts[0], e_ps))
        lt = opts[1].step(_closure(torch, opts[1], t_ps))
        assert abs(le.item() - lt.item()) <= 1e-6 * abs(lt.item())
        assert _rel_diff(e_ps, t_ps) < 1e-6
    e_state, t_state = opts[0].state[e_ps[0]], opts[1].state[t_ps[0]]
    assert e_state["func_evals"] == t_state["func_evals"]
    assert e_state["n_iter"] == t_state["n_iter"]
    assert set(e_state) == set(t_state) - {"al"}


@pytest.mark.parametrize("src", [torch, ember], ids=["from_torch", "from_ember"])
def test_lbfgs_state_dict_crosses(src):
    dst = ember if src is torch else torch
    convert = _to_ember if dst is ember else _to_torch
    s_ps = _params(src)
    s_opt = src.optim.LBFGS(s_ps, max_iter=3)
    s_opt.step(_closure(src, s_opt, s_ps))
    d_ps = _params(dst, [p.detach().numpy() for p in s_ps])
    d_opt = dst.optim.LBFGS(d_ps, max_iter=3)
    d_opt.load_state_dict(convert(s_opt.state_dict()))
    for _ in range(2):
        s_opt.step(_closure(src, s_opt, s_ps))
        d_opt.step(_closure(dst, d_opt, d_ps))
    assert _rel_diff(*((d_ps, s_ps) if dst is ember else (s_ps, d_ps))) < 1e-6


def test_number_step_in_loaded_state():
    w = ember.nn.Parameter(ember.ones(2))
    opt = ember.optim.Adam([w], lr=0.1)
    sd = {"state": {0: {"step": 3, "exp_avg": ember.zeros(2), "exp_avg_sq": ember.zeros(2)}},
          "param_groups": opt.state_dict()["param_groups"]}
    opt.load_state_dict(sd)
    w.grad = ember.ones(2)
    opt.step()
    assert float(opt.state[w]["step"]) == 4.0 and opt.state[w]["step"].dtype == ember.float32


BAD = [
    ("SGD", dict(lr=-1.0), "Invalid learning rate: -1.0"),
    ("SGD", dict(momentum=-0.5), "Invalid momentum value: -0.5"),
    ("SGD", dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    ("SGD", dict(nesterov=True), "Nesterov momentum requires a momentum and zero dampening"),
    ("Adam", dict(eps=-1e-8), "Invalid epsilon value: -1e-08"),
    ("Adam", dict(betas=(1.0, 0.999)), "Invalid beta parameter at index 0: 1.0"),
    ("AdamW", dict(betas=(0.9, 1.5)), "Invalid beta parameter at index 1: 1.5"),
    ("Adagrad", dict(lr_decay=-1), "Invalid lr_decay value: -1"),
    ("Adagrad", dict(initial_accumulator_value=-1),
     "Invalid initial_accumulator_value value: -1"),
    ("RMSprop", dict(alpha=-1), "Invalid alpha value: -1"),
    ("NAdam", dict(momentum_decay=-1), "Invalid momentum_decay value: -1"),
    ("Adadelta", dict(rho=1.5), "Invalid rho value: 1.5"),
    ("Rprop", dict(etas=(1.5, 1.2)), "Invalid eta values: 1.5, 1.2"),
    ("ASGD", dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    ("LBFGS", dict(lr=-2), "Invalid learning rate: -2"),
    ("Adafactor", dict(beta2_decay=0.5), "beta2_decay should be <= 0 but is: 0.5"),
    ("Adafactor", dict(d=0.5), "Clipping threshold d should be >= 1 but is: 0.5"),
    ("Adafactor", dict(eps=(-1.0, 1e-3)), "epsilon1 should be >= 0 but is: -1.0"),
    ("Muon", dict(momentum=-1), "momentum should be >= 0 but is: -1"),
    ("Muon", dict(adjust_lr_fn="x"), "Adjust learning rate function x is not supported"),
]


@pytest.mark.parametrize("kw", [dict(), dict(lr=0.02, nesterov=False, weight_decay=0.0,
                                              adjust_lr_fn="match_rms_adamw", ns_steps=3)])
def test_muon_matches_torch(kw):
    """Muon orthogonalizes in bfloat16 (as torch): agreement to bfloat16's precision."""
    vals = [INIT[0], INIT[2]]
    e_ps, t_ps = _params(ember, vals), _params(torch, vals)
    e_opt, t_opt = ember.optim.Muon(e_ps, **kw), torch.optim.Muon(t_ps, **kw)
    for _ in range(5):
        for lib, opt, ps in ((ember, e_opt, e_ps), (torch, t_opt, t_ps)):
            opt.zero_grad()
            x, y = lib.tensor(X), lib.tensor(Y)
            ((x @ ps[0]).tanh() @ ps[1] - y).pow(2).mean().backward()
            opt.step()
    assert _rel_diff(e_ps, t_ps) < 2e-2
    for lib in (ember, torch):
        with pytest.raises(ValueError, match="Muon only supports 2D parameters"):
            lib.optim.Muon(_params(lib)[1:2])


@pytest.mark.parametrize("name,kw,msg", BAD, ids=[b[2][:30] for b in BAD])
def test_bad_hyperparameters_raise_like_torch(name, kw, msg):
    for lib in (ember, torch):
        with pytest.raises(ValueError, match="^" + msg.replace("(", r"\(").replace(")", r"\)")):
            getattr(lib.optim, name)(_params(lib)[:1], **kw)


def test_param_group_errors():
    w = ember.nn.Parameter(ember.ones(2))
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        ember.optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        ember.optim.SGD(w, lr=0.1)
    with pytest.raises(TypeError, match="ordering of tensors in sets"):
        ember.optim.SGD([{"params": {w}}], lr=0.1)
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors"):
        ember.optim.SGD([1.0], lr=0.1)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        ember.optim.SGD([w * 2], lr=0.1)
    opt = ember.optim.SGD([w], lr=0.1)
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter"):
        opt.add_param_group({"params": [w]})
    v = ember.nn.Parameter(ember.ones(1))
    opt.add_param_group({"params": v, "lr": 0.5})
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["momentum"] == 0
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict(ember.optim.SGD([w], lr=0.1).state_dict())
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        opt.load_state_dict(ember.optim.SGD([{"params": [w, v]}, {"params": []}]).state_dict())
    with pytest.raises(ValueError, match="LBFGS doesn't support per-parameter options"):
        ember.optim.LBFGS([{"params": [w]}, {"params": [v]}])


def test_zero_grad_and_named_params():
    w = ember.nn.Parameter(ember.ones(2))
    opt = ember.optim.SGD([("w", w)], lr=0.1)
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["w"]
    (w * 3).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None
    opt.step()                         # no gradient: nothing moves, no state
    assert w.tolist() == [1.0, 1.0] and len(opt.state) == 0


def test_step_hooks_and_closure():
    w = ember.nn.Parameter(ember.ones(1))
    opt = ember.optim.Adam([w], lr=0.1)
    calls = []
    pre = opt.register_step_pre_hook(lambda o, a, k: calls.append(("pre", o is opt)))
    opt.register_step_post_hook(lambda o, a, k: calls.append(("post", len(o.state))))

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss
    loss = opt.step(closure)
    assert float(loss) == 1.0 and calls == [("pre", True), ("post", 1)]
    pre.remove()
    opt.step(closure)
    assert calls[-1] == ("post", 1) and len(calls) == 3
    h = ember.optim.optimizer.register_optimizer_step_pre_hook(lambda o, a, k: calls.append(1))
    opt.step(closure)
    h.remove()
    assert calls[-2:] == [1, ("post", 1)]


def test_foreach_matches_per_parameter_float32():
    # the flat-buffer path is a speed path: it must give the per-parameter result
    vals = [v.astype(np.float32) for v in INIT]
    res = []
    for foreach in (False, True):
        ps = _params(ember, vals)
        opt = ember.optim.AdamW(ps, lr=0.05, amsgrad=True, foreach=foreach)
        _run(ember, opt, ps, 5)
        res.append([p.detach().numpy() for p in ps])
        assert ps[0].dtype == ember.float32
        assert opt.state[ps[0]]["exp_avg"].dtype == ember.float32
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_foreach_with_uneven_steps_and_reload():
    # a param that missed a step has its own bias correction: the flat path must notice, and
    # a state dict loaded mid-run must replace the flat buffers
    e_ps, t_ps = _params(ember), _params(torch)
    e_opt = ember.optim.Adam(e_ps, lr=0.05, foreach=True)
    t_opt = torch.optim.Adam(t_ps, lr=0.05, foreach=False)
    for step in range(12):
        for lib, opt, ps in ((ember, e_opt, e_ps), (torch, t_opt, t_ps)):
            opt.zero_grad()
            _loss(lib, ps).backward()
            if step == 3:
                ps[1].grad = None
            opt.step()
        if step == 6:
            e_opt.load_state_dict(_to_ember(t_opt.state_dict()))
        assert _rel_diff(e_ps, t_ps) < 1e-6, f"step {step + 1}"
        assert len(e_opt.__dict__.get("_flat_cache", {})) <= 1       # stale buffers dropped


def test_adamw_always_decoupled_after_load():
    w = ember.nn.Parameter(ember.ones(1))
    sd = ember.optim.Adam([w], weight_decay=0.1).state_dict()
    opt = ember.optim.AdamW([w])
    opt.load_state_dict(sd)
    assert opt.param_groups[0]["decoupled_weight_decay"] is True


def test_repr():
    opt = ember.optim.SGD([ember.nn.Parameter(ember.ones(1))], lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = repr(opt)
    assert r.startswith("SGD (\nParameter Group 0\n    dampening: 0\n") and "lr: 0.1\n" in r


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1, momentum=0.9)),
                                     ("Adam", dict(lr=0.05, amsgrad=True)),
                                     ("Adam", dict(lr=0.05, foreach=True)),
                                     ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5)),
                                     ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.1)),
                                     ("Rprop", dict(lr=0.05))])
def test_complex_params_match_torch(name, kw):
    # torch optimizes a complex parameter as its real pairs; fixed gradients of a smooth map
    z = rng.standard_normal((2, 3, 2))
    z = [z[0, ..., 0] + 1j * z[0, ..., 1], z[1, ..., 0] + 1j * z[1, ..., 1]]
    res = {}
    for lib in (ember, torch):
        ps = _params(lib, z)
        opt = getattr(lib.optim, name)(ps, **kw)
        for _ in range(10):
            for p in ps:
                x = p.detach().numpy()
                p.grad = lib.tensor(x * x.conj() * x + 0.5j)
            opt.step()
        res[lib.__name__] = ps
    assert res["ember"][0].dtype == ember.complex128
    assert _rel_diff(res["ember"], res["torch"]) < 1e-6


def test_group_defaults_match_torch():
    for name in ["SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adamax", "NAdam", "RAdam",
                 "Adadelta", "Rprop", "ASGD", "LBFGS"]:
        groups = [getattr(lib.optim, name)(_params(lib)[:1]).state_dict()["param_groups"]
                  for lib in (ember, torch)]
        assert groups[0] == groups[1], name
        assert list(groups[0][0]) == list(groups[1][0]), name


def test_custom_optimizer_the_torch_way():
    # a user optimizer written as in torch tutorials: its own step() over param_groups/state
    class SignSGD(ember.optim.Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(params, dict(lr=lr))

        @ember.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self.state[p]["n"] = self.state[p].get("n", 0) + 1
                        p.add_(p.grad.sign(), alpha=-group["lr"])

    w = ember.nn.Parameter(ember.tensor([1.0, -1.0]))
    opt = SignSGD([w])
    seen = []
    opt.register_step_post_hook(lambda o, a, k: seen.append(1))
    (w * 3).sum().backward()
    opt.step()
    assert np.allclose(w.tolist(), [0.9, -1.1]) and seen == [1]
    assert opt.state_dict()["state"] == {0: {"n": 1}}


def test_tensor_lr_with_a_scheduler_matches_torch():
    res = {}
    for lib in (ember, torch):
        ps = _params(lib)
        opt = lib.optim.Adam(ps, lr=lib.tensor(0.05))
        sched = lib.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        lr = opt.param_groups[0]["lr"]
        for _ in range(5):
            _run(lib, opt, ps, 1)
            sched.step()
        assert opt.param_groups[0]["lr"] is lr and abs(lr.item() - 0.05 * 0.9 ** 5) < 1e-7
        res[lib.__name__] = ps
    assert _rel_diff(res["ember"], res["torch"]) < 1e-6
    for lib in (ember, torch):
        with pytest.raises(ValueError, match="lr as a Tensor is not supported"):
            lib.optim.Adam(_params(lib), lr=lib.tensor(0.1), foreach=True)
        with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
            lib.optim.SGD(_params(lib), lr=lib.tensor([0.1, 0.2]))
