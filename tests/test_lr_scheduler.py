"""Learning-rate schedulers against torch.optim.lr_scheduler: the lr (and momentum) sequence of
each over 200 steps, state_dict resume mid-way, and torch's warnings (issue #6)."""
import warnings

import numpy as np
import pytest

import ember
from oracle import torch


def _lam(e):
    return 0.95 ** e


def _mult(e):
    return 0.9 if e % 3 else 1.05


# name -> function (lib.optim.lr_scheduler, optimizer) -> scheduler
SCHEDULERS = {
    "LambdaLR": lambda S, o: S.LambdaLR(o, _lam),
    "LambdaLR-list": lambda S, o: S.LambdaLR(o, [_lam, lambda e: 1 / (e + 1)]),
    "MultiplicativeLR": lambda S, o: S.MultiplicativeLR(o, _mult),
    "StepLR": lambda S, o: S.StepLR(o, step_size=4, gamma=0.5),
    "MultiStepLR": lambda S, o: S.MultiStepLR(o, milestones=[3, 7, 7, 20], gamma=0.3),
    "ConstantLR": lambda S, o: S.ConstantLR(o, factor=0.25, total_iters=6),
    "LinearLR": lambda S, o: S.LinearLR(o, start_factor=0.1, end_factor=0.9, total_iters=12),
    "ExponentialLR": lambda S, o: S.ExponentialLR(o, gamma=0.9),
    "PolynomialLR": lambda S, o: S.PolynomialLR(o, total_iters=20, power=2.0),
    "CosineAnnealingLR": lambda S, o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
    "CosineAnnealingWarmRestarts": lambda S, o: S.CosineAnnealingWarmRestarts(
        o, T_0=4, T_mult=2, eta_min=0.01),
    "CyclicLR": lambda S, o: S.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.2], step_size_up=4,
                                        step_size_down=6),
    "CyclicLR-triangular2": lambda S, o: S.CyclicLR(o, 0.01, 0.1, step_size_up=3,
                                                    mode="triangular2"),
    "CyclicLR-exp_range": lambda S, o: S.CyclicLR(o, 0.01, 0.1, step_size_up=3,
                                                  mode="exp_range", gamma=0.9,
                                                  cycle_momentum=False),
    "CyclicLR-momentum": lambda S, o: S.CyclicLR(o, [0.01, 0.02], 0.1, step_size_up=7,
                                                 base_momentum=0.8, max_momentum=[0.95, 0.9]),
    "OneCycleLR": lambda S, o: S.OneCycleLR(o, max_lr=0.5, total_steps=STEPS + 1),
    "OneCycleLR-3phase-linear": lambda S, o: S.OneCycleLR(
        o, max_lr=[0.5, 1.0], epochs=3, steps_per_epoch=67, anneal_strategy="linear",
        three_phase=True, pct_start=0.25),
    "OneCycleLR-no-momentum": lambda S, o: S.OneCycleLR(
        o, max_lr=0.5, total_steps=STEPS + 1, cycle_momentum=False, div_factor=10,
        final_div_factor=100, pct_start=0.4),
    "SequentialLR": lambda S, o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.2, total_iters=5), S.ExponentialLR(o, gamma=0.9),
            S.CosineAnnealingLR(o, T_max=8)], milestones=[5, 15]),
    "ChainedScheduler": lambda S, o: S.ChainedScheduler(
        [S.ConstantLR(o, factor=0.5, total_iters=4), S.ExponentialLR(o, gamma=0.95),
         S.StepLR(o, step_size=7, gamma=0.5)]),
    "SequentialLR-warmup-cosine": lambda S, o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.01, total_iters=20),
            S.CosineAnnealingWarmRestarts(o, T_0=30, T_mult=2, eta_min=1e-4)], milestones=[20]),
    "ChainedScheduler-cyclic": lambda S, o: S.ChainedScheduler(
        [S.MultiStepLR(o, milestones=[50, 120], gamma=0.5),
         S.LambdaLR(o, lambda e: 1 + 0.5 * ((e // 10) % 2))]),
}
STEPS = 200


def _optimizer(lib, name="SGD"):
    ps = [lib.nn.Parameter(lib.zeros(2)), lib.nn.Parameter(lib.zeros(1))]
    groups = [{"params": ps[:1]}, {"params": ps[1:], "lr": 0.05}]
    if name == "Adam":
        return lib.optim.Adam(groups, lr=0.1)
    return lib.optim.SGD(groups, lr=0.1, momentum=0.9)


def _trace(lib, make, steps=STEPS, opt_name="SGD"):
    opt = _optimizer(lib, opt_name)
    sched = make(lib.optim.lr_scheduler, opt)
    out = [(sched.get_last_lr(), _momenta(opt))]
    for _ in range(steps):
        opt.step()
        sched.step()
        out.append((sched.get_last_lr(), _momenta(opt)))
    return out


def _momenta(opt):
    return [g.get("momentum", g.get("betas")) for g in opt.param_groups]


def _close(a, b):
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return abs(a - b) <= 1e-12 * max(abs(b), 1.0)


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_lr_sequence_matches_torch(name):
    e, t = _trace(ember, SCHEDULERS[name]), _trace(torch, SCHEDULERS[name])
    for i, (a, b) in enumerate(zip(e, t)):
        assert _close(a, b), f"{name} step {i}: ember {a} != torch {b}"


def test_cyclic_momentum_on_adam_betas():
    def make(S, o):
        return S.OneCycleLR(o, max_lr=0.3, total_steps=STEPS + 1)
    e, t = _trace(ember, make, opt_name="Adam"), _trace(torch, make, opt_name="Adam")
    assert len(e) == STEPS + 1 and all(_close(a, b) for a, b in zip(e, t))


def _metrics(n=STEPS):
    """A noisy, slowly improving validation loss with plateaus (fixed seed)."""
    rng = np.random.default_rng(3)
    base = np.repeat(np.linspace(1.0, 0.2, n // 8), 8)[:n]
    return (base + rng.normal(0, 0.02, n) * (rng.random(n) < 0.5)).tolist()


@pytest.mark.parametrize("kw", [
    dict(patience=1),
    dict(mode="max", threshold_mode="abs", patience=2, cooldown=2, factor=0.5,
         min_lr=[0.02, 0.01]),
    dict(patience=4, threshold=0.05, threshold_mode="rel", cooldown=3, factor=0.7, eps=1e-3),
    dict(patience=0, min_lr=1e-3, factor=0.9)])
def test_reduce_lr_on_plateau_matches_torch(kw):
    metrics = _metrics()
    lrs = {}
    for lib in (ember, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
        seq = []
        for m in metrics:
            opt.step()
            sched.step(m)
            seq.append(sched.get_last_lr())
        lrs[lib.__name__] = seq
    assert len(set(map(tuple, lrs["torch"]))) > 2, "the metric sequence never reduced the lr"
    assert _close(lrs["ember"], lrs["torch"])


@pytest.mark.parametrize("T_mult", [1, 2])
def test_cosine_warm_restarts_with_fractional_epochs(T_mult):
    # torch's documented per-batch use: scheduler.step(epoch + i / iters)
    seqs = {}
    for lib in (ember, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=T_mult,
                                                                   eta_min=0.001)
        seq, iters = [], 7
        for epoch in range(STEPS // iters):
            for i in range(iters):
                opt.step()
                sched.step(epoch + i / iters)
                seq.append((sched.get_last_lr(), sched.T_cur, sched.T_i))
        seqs[lib.__name__] = seq
    assert _close(seqs["ember"], seqs["torch"])


def test_step_with_epoch_uses_closed_form():
    for lib in (ember, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        opt.step()
        with pytest.warns(UserWarning, match="epoch parameter in `scheduler.step\\(\\)`"):
            sched.step(7)
        assert _close(sched.get_last_lr(), [0.025, 0.0125])


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_state_dict_resumes_the_sequence(name):
    """Stop at step 97, rebuild optimizer and scheduler from their state dicts, run to 200:
    the whole lr and momentum sequence equals torch's uninterrupted one."""
    make, stop = SCHEDULERS[name], 97
    want = _trace(torch, make)
    opt = _optimizer(ember)
    sched = make(ember.optim.lr_scheduler, opt)
    got = [(sched.get_last_lr(), _momenta(opt))]
    for _ in range(stop):
        opt.step()
        sched.step()
        got.append((sched.get_last_lr(), _momenta(opt)))
    sd, opt_sd = sched.state_dict(), opt.state_dict()
    assert "optimizer" not in sd
    opt2 = _optimizer(ember)
    sched2 = make(ember.optim.lr_scheduler, opt2)     # construction moves the lr: reload after
    opt2.load_state_dict(opt_sd)
    sched2.load_state_dict(sd)
    for _ in range(STEPS - stop):
        opt2.step()
        sched2.step()
        got.append((sched2.get_last_lr(), _momenta(opt2)))
    for i, (a, b) in enumerate(zip(got, want)):
        assert _close(a, b), f"{name} step {i}: ember {a} != torch {b}"


def test_reduce_lr_on_plateau_state_dict_resumes():
    metrics, stop = _metrics(), 120
    kw = dict(patience=3, cooldown=1, factor=0.5)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
    want = []
    for m in metrics:
        sched.step(m)
        want.append(sched.get_last_lr())
    opt = ember.optim.SGD([ember.nn.Parameter(ember.zeros(1))], lr=0.1)
    sched = ember.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
    got = []
    for m in metrics[:stop]:
        sched.step(m)
        got.append(sched.get_last_lr())
    opt2 = ember.optim.SGD([ember.nn.Parameter(ember.zeros(1))], lr=0.1)
    sched2 = ember.optim.lr_scheduler.ReduceLROnPlateau(opt2, **kw)
    opt2.load_state_dict(opt.state_dict())
    sched2.load_state_dict(sched.state_dict())
    for m in metrics[stop:]:
        sched2.step(m)
        got.append(sched2.get_last_lr())
    assert _close(got, want)


def test_state_dict_keys_match_torch():
    sds = {}
    for lib in (ember, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5)
        opt.step()
        sched.step()
        sds[lib.__name__] = sched.state_dict()
    assert set(sds["ember"]) == set(sds["torch"])
    assert {k: v for k, v in sds["ember"].items()} == sds["torch"]


def test_warns_when_scheduler_steps_before_optimizer():
    for lib in (ember, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.StepLR(opt, step_size=2)
        with pytest.warns(UserWarning, match="Detected call of `lr_scheduler.step\\(\\)` before"):
            sched.step()
    opt = _optimizer(ember)
    sched = ember.optim.lr_scheduler.StepLR(opt, step_size=2)
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        sched.get_lr()


def test_constructor_errors_match_torch():
    cases = [
        (lambda S, o: S.ConstantLR(o, factor=2.0), ValueError, "Constant multiplicative factor"),
        (lambda S, o: S.LinearLR(o, start_factor=0), ValueError, "Starting multiplicative"),
        (lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=0), ValueError,
         "Expected positive integer T_0, but got 0"),
        (lambda S, o: S.OneCycleLR(o, max_lr=1.0), ValueError, "You must define either"),
        (lambda S, o: S.OneCycleLR(o, max_lr=[1.0], total_steps=5), ValueError,
         "max_lr must have the same length as optimizer.param_groups"),
        (lambda S, o: S.ReduceLROnPlateau(o, factor=1.0), ValueError, "Factor should be < 1.0."),
        (lambda S, o: S.ReduceLROnPlateau(o, mode="up"), ValueError, "mode up is unknown!"),
        (lambda S, o: S.LambdaLR(o, [_lam]), ValueError, "Expected 2 lr_lambdas, but got 1"),
        (lambda S, o: S.StepLR(object(), 2), TypeError, "object is not an Optimizer"),
        (lambda S, o: S.StepLR(o, 2, last_epoch=3), KeyError, "initial_lr"),
        (lambda S, o: S.SequentialLR(o, [S.StepLR(o, 2)], milestones=[1]), ValueError,
         "one more than the number of milestone points"),
        (lambda S, o: S.CyclicLR(o, 0.1, 1.0, mode="bad"), ValueError,
         "mode is invalid and scale_fn is None"),
    ]
    for make, exc, msg in cases:
        for lib in (ember, torch):
            with pytest.raises(exc, match=msg.replace("(", r"\(").replace(")", r"\)")):
                make(lib.optim.lr_scheduler, _optimizer(lib))
