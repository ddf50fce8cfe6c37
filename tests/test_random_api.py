"""Random fills, poisson/binomial and fork_rng: the distributions (by their moments on many
draws), the seeding, and the errors torch raises for bad parameters."""
import numpy as np
import pytest

import ember
from oracle import torch

N = 20000


def _moments(t):
    a = t.double().numpy()
    return a.mean(), a.std()


@pytest.mark.parametrize("fill, args, mean, std", [
    ("uniform_", (2.0, 4.0), 3.0, 2 / 12 ** 0.5),
    ("normal_", (1.0, 2.0), 1.0, 2.0),
    ("exponential_", (2.0,), 0.5, 0.5),
    ("log_normal_", (0.0, 0.5), np.exp(0.125), np.sqrt((np.exp(0.25) - 1) * np.exp(0.25))),
    ("geometric_", (0.25,), 4.0, np.sqrt(0.75) / 0.25),
    ("random_", (2, 6), 3.5, np.sqrt((16 - 1) / 12)),
    ("random_", (10,), 4.5, np.sqrt((100 - 1) / 12)),
])
def test_fill_moments(fill, args, mean, std):
    t = getattr(ember.empty(N, dtype=ember.float64), fill)(*args)
    m, s = _moments(t)
    assert abs(m - mean) < 5 * std / N ** 0.5 and abs(s - std) < 0.1 * std


def test_cauchy_median_and_quartiles():
    a = np.sort(ember.empty(N).cauchy_(1.0, 2.0).double().numpy())
    q1, med, q3 = a[N // 4], a[N // 2], a[3 * N // 4]
    assert abs(med - 1) < 0.1 and abs(q1 + 1) < 0.15 and abs(q3 - 3) < 0.15


def test_random_ranges_follow_torch():
    ember.manual_seed(0)
    assert set(ember.empty(1000).random_(3).tolist()) == {0.0, 1.0, 2.0}
    b = ember.empty(200, dtype=ember.bool).random_()
    assert b.dtype is ember.bool and 0 < int(b.sum()) < 200
    assert int(ember.empty(1000, dtype=ember.int8).random_().min()) >= 0


def test_poisson_binomial_bernoulli_multinomial():
    ember.manual_seed(0)
    m, _ = _moments(ember.poisson(ember.full((N,), 3.0)))
    assert abs(m - 3) < 0.1
    c = ember.binomial(ember.full((N,), 10.0), ember.full((N,), 0.3))
    assert c.dtype is ember.float32 and abs(_moments(c)[0] - 3) < 0.1
    p = ember.full((N,), 0.25, dtype=ember.float64)
    assert abs(_moments(p.bernoulli())[0] - 0.25) < 0.02
    draws = ember.tensor([0.0, 1.0, 3.0]).multinomial(N, replacement=True)
    assert draws.dtype is ember.int64 and set(draws.tolist()) == {1, 2}
    assert abs((draws == 2).double().mean().item() - 0.75) < 0.02


def test_same_seed_same_numbers():
    def draw():
        ember.manual_seed(7)
        return [ember.empty(4).cauchy_(), ember.empty(4).log_normal_(),
                ember.empty(4).geometric_(0.3), ember.poisson(ember.ones(4))]
    for a, b in zip(draw(), draw()):
        assert ember.equal(a, b)


def test_fork_rng_restores_the_state():
    ember.manual_seed(3)
    with ember.random.fork_rng(devices=[]):
        inside = ember.rand(3)
    after = ember.rand(3)
    ember.manual_seed(3)
    assert ember.equal(ember.rand(3), after) and ember.equal(inside, after)
    state = ember.random.get_rng_state()
    with ember.random.fork_rng(enabled=False):
        ember.rand(1)
    assert not ember.equal(state, ember.random.get_rng_state())       # the draw stayed
    g = ember.Generator().manual_seed(5)
    state = g.get_state()
    x = ember.empty(3).normal_(generator=g)
    g.set_state(state)
    assert ember.equal(x, ember.empty(3).normal_(generator=g))


@pytest.mark.parametrize("call", [
    lambda lib: lib.empty(3).geometric_(0),
    lambda lib: lib.empty(3).geometric_(1.5),
    lambda lib: lib.empty(3).cauchy_(0, -1),
    lambda lib: lib.empty(3).log_normal_(0, -1),
    lambda lib: lib.empty(3).random_(5, 2),
    lambda lib: lib.poisson(lib.tensor([-1.0])),
    lambda lib: lib.poisson(lib.tensor([1])),
    lambda lib: lib.binomial(lib.tensor([1]), lib.tensor([0.5])),
], ids=range(8))
def test_errors_match_torch(call):
    with pytest.raises(Exception) as t:
        call(torch)
    with pytest.raises(type(t.value)):
        call(ember)
