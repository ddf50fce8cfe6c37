"""Learning-rate schedulers against torch.optim.lr_scheduler: the lr (and momentum) sequence of
each over 30 steps, state_dict round trips, and torch's warnings."""
import warnings

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
    "OneCycleLR": lambda S, o: S.OneCycleLR(o, max_lr=0.5, total_steps=31),
    "OneCycleLR-3phase-linear": lambda S, o: S.OneCycleLR(
        o, max_lr=[0.5, 1.0], epochs=3, steps_per_epoch=11, anneal_strategy="linear",
        three_phase=True, pct_start=0.25),
    "SequentialLR": lambda S, o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.2, total_iters=5), S.ExponentialLR(o, gamma=0.9),
            S.CosineAnnealingLR(o, T_max=8)], milestones=[5, 15]),
    "ChainedScheduler": lambda S, o: S.ChainedScheduler(
        [S.ConstantLR(o, factor=0.5, total_iters=4), S.ExponentialLR(o, gamma=0.95),
         S.StepLR(o, step_size=7, gamma=0.5)]),
}


def _optimizer(lib, name="SGD"):
    ps = [lib.nn.Parameter(lib.zeros(2)), lib.nn.Parameter(lib.zeros(1))]
    groups = [{"params": ps[:1]}, {"params": ps[1:], "lr": 0.05}]
    if name == "Adam":
        return lib.optim.Adam(groups, lr=0.1)
    return lib.optim.SGD(groups, lr=0.1, momentum=0.9)


def _trace(lib, make, steps=30, opt_name="SGD"):
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
        return S.OneCycleLR(o, max_lr=0.3, total_steps=30)
    assert all(_close(a, b) for a, b in zip(_trace(ember, make, 29, "Adam"),
                                            _trace(torch, make, 29, "Adam")))


@pytest.mark.parametrize("kw", [dict(), dict(mode="max", threshold_mode="abs", patience=2,
                                             cooldown=2, factor=0.5, min_lr=[0.02, 0.01])])
def test_reduce_lr_on_plateau_matches_torch(kw):
    metrics = [1.0, 0.9, 0.95, 0.95, 0.95, 0.8, 0.8, 0.8, 0.8, 0.9, 0.7] * 3
    kw = dict(kw, patience=kw.get("patience", 1))
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
    assert _close(lrs["ember"], lrs["torch"])


def test_step_with_epoch_uses_closed_form():
    for lib in (ember, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        opt.step()
        with pytest.warns(UserWarning, match="epoch parameter in `scheduler.step\\(\\)`"):
            sched.step(7)
        assert _close(sched.get_last_lr(), [0.025, 0.0125])


@pytest.mark.parametrize("name", ["StepLR", "CosineAnnealingWarmRestarts", "SequentialLR",
                                  "CyclicLR", "OneCycleLR", "ChainedScheduler", "LambdaLR"])
def test_state_dict_resumes_the_sequence(name):
    make = SCHEDULERS[name]
    full = _trace(ember, make, 20)
    opt = _optimizer(ember)
    sched = make(ember.optim.lr_scheduler, opt)
    for _ in range(8):
        opt.step()
        sched.step()
    sd = sched.state_dict()
    assert "optimizer" not in sd
    opt2 = _optimizer(ember)
    opt2.load_state_dict(opt.state_dict())
    sched2 = make(ember.optim.lr_scheduler, opt2)
    sched2.load_state_dict(sd)
    for group, saved in zip(opt2.param_groups, opt.param_groups):
        group["lr"] = saved["lr"]
    rest = []
    for _ in range(12):
        opt2.step()
        sched2.step()
        rest.append(sched2.get_last_lr())
    assert _close(rest, [lr for lr, _ in full[9:]])


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
