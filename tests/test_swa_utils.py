"""ember.optim.swa_utils against torch.optim.swa_utils."""
import numpy as np
import pytest
from oracle import torch

import ember


def _net(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4), lib.nn.ReLU(),
                             lib.nn.Linear(4, 2))


def _copy_weights(src, dst):
    with torch.no_grad():
        for (_, a), (_, b) in zip(src.state_dict().items(), dst.state_dict().items()):
            b.copy_(torch.from_numpy(np.array(a.numpy())))


def _averaging_run(lib, make_avg):
    """Train a few SGD steps, folding the weights into an AveragedModel after each."""
    m = _net(lib)
    if lib is torch:
        _copy_weights(_net(ember), m)
    avg = make_avg(lib.optim.swa_utils, m)
    opt = lib.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    x = lib.tensor(np.linspace(-2, 2, 24, dtype=np.float32).reshape(8, 3))
    for _ in range(5):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
        avg.update_parameters(m)
    return {k: v.numpy() for k, v in avg.state_dict().items()}, avg(x).detach().numpy()


AVERAGERS = {
    "swa": lambda su, m: su.AveragedModel(m),
    "swa_buffers": lambda su, m: su.AveragedModel(m, use_buffers=True),
    "ema_multi": lambda su, m: su.AveragedModel(m, multi_avg_fn=su.get_ema_multi_avg_fn(0.9)),
    "ema_single": lambda su, m: su.AveragedModel(m, avg_fn=su.get_ema_avg_fn(0.8)),
    "ema_buffers": lambda su, m: su.AveragedModel(
        m, multi_avg_fn=su.get_ema_multi_avg_fn(0.5), use_buffers=True),
    "swa_multi": lambda su, m: su.AveragedModel(m, multi_avg_fn=su.get_swa_multi_avg_fn()),
    "custom": lambda su, m: su.AveragedModel(m, avg_fn=lambda a, p, n: 0.3 * a + 0.7 * p),
}


@pytest.mark.parametrize("name", sorted(AVERAGERS))
def test_averaged_model_matches_torch(name):
    es, eo = _averaging_run(ember, AVERAGERS[name])
    ts, to = _averaging_run(torch, AVERAGERS[name])
    assert list(es) == list(ts)
    for k in es:
        np.testing.assert_allclose(es[k], ts[k], rtol=1e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(eo, to, rtol=1e-4, atol=1e-5)


def test_update_bn_matches_torch():
    res = []
    for lib in (ember, torch):
        m = _net(lib)
        if lib is torch:
            _copy_weights(_net(ember), m)
        m.eval()
        rng = np.random.default_rng(0)
        loader = [(lib.tensor(rng.standard_normal((5, 3)).astype(np.float32)), 0)
                  for _ in range(3)] + [lib.tensor(np.ones((2, 3), np.float32))]
        lib.optim.swa_utils.update_bn(loader, m)
        assert not m.training and m[1].momentum == 0.1
        res.append({k: v.numpy() for k, v in m.state_dict().items()})
    for k in res[0]:
        np.testing.assert_allclose(res[0][k], res[1][k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("strategy", ["cos", "linear"])
@pytest.mark.parametrize("anneal_epochs", [0, 1, 4])
def test_swalr_matches_torch(strategy, anneal_epochs):
    lrs = []
    for lib in (ember, torch):
        p = lib.nn.Parameter(lib.ones(2))
        opt = lib.optim.SGD([{"params": [p]}, {"params": [lib.nn.Parameter(lib.ones(1))],
                                                "lr": 0.5}], lr=1.0)
        s = lib.optim.swa_utils.SWALR(opt, swa_lr=[0.05, 0.2], anneal_epochs=anneal_epochs,
                                      anneal_strategy=strategy)
        got = [s.get_last_lr()]
        for _ in range(7):
            opt.step()
            s.step()
            got.append(s.get_last_lr())
        lrs.append(got)
        sd = s.state_dict()
        assert "optimizer" not in sd and "anneal_func" not in sd
    np.testing.assert_allclose(lrs[0], lrs[1], rtol=1e-12)


def test_errors_as_torch():
    su = ember.optim.swa_utils
    m = ember.nn.Linear(1, 1)
    with pytest.raises(AssertionError, match="Only one of avg_fn and multi_avg_fn"):
        su.AveragedModel(m, avg_fn=su.get_ema_avg_fn(), multi_avg_fn=su.get_ema_multi_avg_fn())
    with pytest.raises(ValueError, match="Invalid decay value 1.5"):
        su.get_ema_multi_avg_fn(1.5)
    opt = ember.optim.SGD(m.parameters(), lr=1.0)
    with pytest.raises(ValueError, match="anneal_strategy must be one of"):
        su.SWALR(opt, 0.1, anneal_strategy="step")
    with pytest.raises(ValueError, match="anneal_epochs must be equal or greater than 0"):
        su.SWALR(opt, 0.1, anneal_epochs=-1)
    s = su.SWALR(opt, 0.1)
    s2 = su.SWALR(ember.optim.SGD(ember.nn.Linear(1, 1).parameters(), lr=1.0), 0.1,
                  anneal_strategy="linear")
    s2.load_state_dict(s.state_dict())
    assert s2.anneal_func is su.SWALR._cosine_anneal
