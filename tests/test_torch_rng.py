"""ember's CPU generator against torch 2.13's: the same seed gives the same numbers, bit for bit,
and the state tensors are interchangeable."""
import numpy as np
import pytest
import torch

import ember

SIZES = [1, 5, 15, 16, 17, 100, 1000]
SEEDS = [0, 7, 2 ** 40 + 3]
FLOATS = ["float32", "float64", "float16", "bfloat16"]


def same(calls, seed=0):
    """Run ``calls(lib)`` (a list of draws) after ``manual_seed(seed)`` in both libraries and
    check each draw and the final states are identical."""
    out = []
    for lib in (torch, ember):
        lib.manual_seed(seed)
        out.append([np.ascontiguousarray((x.float() if x.dtype == lib.bfloat16 else x).numpy())
                    for x in calls(lib)] + [lib.get_rng_state().numpy()])
    for i, (a, b) in enumerate(zip(*out)):
        assert a.shape == b.shape and a.dtype.name == b.dtype.name, i
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (i, a, b)


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_state(seed):
    same(lambda lib: [], seed)
    assert ember.initial_seed() == torch.initial_seed() == seed


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("seed", SEEDS)
def test_rand_uniform(dt, seed):
    same(lambda lib: [x for n in SIZES for x in (
        lib.rand(n, dtype=getattr(lib, dt)),
        lib.empty(n, dtype=getattr(lib, dt)).uniform_(-3.3, 7.1),
        lib.empty(n, dtype=getattr(lib, dt)).uniform_(1e-3, 0.1))], seed)


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("seed", SEEDS)
def test_randn_normal(dt, seed):
    same(lambda lib: [x for n in SIZES for x in (
        lib.randn(n, dtype=getattr(lib, dt)),
        lib.empty(n, dtype=getattr(lib, dt)).normal_(0.3, 2.7),
        lib.randn(3, n, dtype=getattr(lib, dt)).t())], seed)


def test_shapes_views_complex():
    same(lambda lib: [lib.rand(3, 4, 5), lib.randn(2, 9), lib.empty(4, 6).t().normal_(),
                      lib.empty(4, 6).t().uniform_(), lib.randn(40, dtype=lib.complex64),
                      lib.rand(3, dtype=lib.complex128), lib.normal(2., 3., (20,)),
                      lib.normal(lib.ones(20), 2.), lib.normal(lib.ones(5), lib.ones(5) * 3),
                      lib.normal(1., lib.ones(17)), lib.randn(1), lib.randn(1)], 1)


def test_generator_objects():
    out = []
    for lib in (torch, ember):
        g = lib.Generator().manual_seed(5)
        out.append([lib.rand(4, generator=g), lib.randn(3, generator=g),
                    lib.empty(20).normal_(generator=g), g.get_state()])
    for a, b in zip(*out):
        assert np.array_equal(a.numpy(), b.numpy())
    assert ember.Generator().initial_seed() == torch.Generator().initial_seed()


@pytest.mark.parametrize("n", [0, 1, 3, 623, 624, 625, 2000])
def test_state_round_trips(n):
    """A state from torch sets ember's generator, and one from ember sets torch's, mid-stream
    and with a cached normal sample (an odd count of scalar normals)."""
    torch.manual_seed(11)
    torch.rand(n), torch.randn(3)
    ts = torch.get_rng_state()
    ember.set_rng_state(ember.tensor(ts.numpy()))
    assert np.array_equal(ember.get_rng_state().numpy(), ts.numpy())
    a, b = torch.randn(5), ember.randn(5)
    assert np.array_equal(a.numpy(), b.numpy())
    ember.rand(n + 1), ember.randn(1)
    torch.set_rng_state(torch.from_numpy(ember.get_rng_state().numpy()))
    assert np.array_equal(torch.rand(9).numpy(), ember.rand(9).numpy())
    assert np.array_equal(torch.randn(2).numpy(), ember.randn(2).numpy())


def test_state_errors():
    with pytest.raises(RuntimeError, match="size") as e:
        torch.set_rng_state(torch.zeros(10, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match=str(e.value)):
        ember.set_rng_state(ember.zeros(10, dtype=ember.uint8))
    with pytest.raises(TypeError):
        ember.set_rng_state(ember.zeros(5056))
    bad = torch.get_rng_state().numpy().copy()
    bad[8:12] = 0                                        # left = 0
    with pytest.raises(RuntimeError, match="Invalid mt19937 state"):
        torch.set_rng_state(torch.from_numpy(bad))
    with pytest.raises(RuntimeError, match="Invalid mt19937 state"):
        ember.set_rng_state(ember.tensor(bad))


INTS = ["int64", "int32", "int16", "uint8", "int8", "float32", "float64", "bool"]


@pytest.mark.parametrize("seed", SEEDS)
def test_randint_random_(seed):
    same(lambda lib: [x for n in SIZES for x in (
        lib.randint(10, (n,)), lib.randint(-5, 2 ** 40, (n,)), lib.randint(-2 ** 62, 2 ** 62, (n,)),
        lib.randint(0, 2 ** 32, (n,)), lib.randint(3, 100, (n,), dtype=lib.float32),
        lib.randint(0, 2 ** 33, (n,), dtype=lib.float64))], seed)


@pytest.mark.parametrize("dt", INTS)
def test_random_fill(dt):
    same(lambda lib: [x for n in SIZES for x in (
        lib.empty(n, dtype=getattr(lib, dt)).random_(),
        lib.empty(n, dtype=getattr(lib, dt)).random_(2),
        lib.empty(n, dtype=getattr(lib, dt)).random_(0 if dt in ("uint8", "bool") else -3, 2))],
        3)


@pytest.mark.parametrize("seed", SEEDS)
def test_randperm(seed):
    same(lambda lib: [lib.randperm(n) for n in [0] + SIZES + [5000]] + [
        lib.randperm(17, dtype=lib.float32), lib.randperm(100, dtype=lib.int32)], seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_bernoulli(seed):
    same(lambda lib: [x for n in SIZES for x in (
        lib.empty(n).bernoulli_(0.3), lib.empty(n, dtype=lib.float64).bernoulli_(0.7),
        lib.bernoulli(lib.linspace(0, 1, n)), lib.bernoulli(lib.linspace(0, 1, n).double()),
        lib.bernoulli(lib.ones(n), 0.4), lib.empty(n, dtype=lib.int64).bernoulli_(
            lib.linspace(0, 1, n)), lib.empty(3, n).t().bernoulli_(lib.rand(n, 3)))], seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_exponential_dropout(seed):
    def calls(lib):
        F = lib.nn.functional
        x = lib.ones(4, 8, 5, 5)
        return [lib.empty(n, dtype=d).exponential_(2.5) for n in SIZES
                for d in (lib.float32, lib.float64)] + [
            F.dropout(x, 0.3), F.dropout(x.double(), 0.5), F.dropout2d(x, 0.4),
            F.dropout1d(x[0], 0.2), F.dropout3d(x, 0.6), lib.nn.Dropout(0.1)(x),
            F.alpha_dropout(x, 0.2, True) != 0, F.feature_alpha_dropout(x, 0.3, True) != 0]
    same(calls, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_multinomial(seed):
    def calls(lib):
        p = lib.rand(4, 30) + 0.01
        return [lib.multinomial(p, 1), lib.multinomial(p, 7), lib.multinomial(p, 30),
                lib.multinomial(p, 50, replacement=True), lib.multinomial(p[0], 5, True),
                lib.multinomial(p.double(), 9, True), lib.multinomial(p.double(), 9),
                lib.multinomial(lib.tensor([0., 1., 3.]), 2)]
    same(calls, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_nn_init(seed):
    def calls(lib):
        I, w = lib.nn.init, lib.empty
        return [I.uniform_(w(5, 7), -2, 3), I.normal_(w(30, 7), 1, 2), I.xavier_uniform_(w(20, 30)),
                I.xavier_normal_(w(20, 30), 2.), I.kaiming_uniform_(w(20, 30), a=5 ** .5),
                I.kaiming_normal_(w(8, 3, 3, 3)), I.trunc_normal_(w(50, 40), 0.1, 0.5, -0.5, 0.6),
                I.trunc_normal_(w(30, 10), 0., 3., -0.5, 0.5), I.sparse_(w(10, 6), 0.3),
                lib.nn.Linear(13, 7).weight.detach(), lib.nn.Linear(13, 7).bias.detach(),
                lib.nn.Conv2d(3, 4, 3).weight.detach(), lib.nn.Embedding(10, 4).weight.detach(),
                I.orthogonal_(w(6, 9)).abs() < 2, lib.rand(3)]
    same(calls, seed)


def test_orthogonal_close():
    """orthogonal_ draws torch's normal sample; its QR is LAPACK's (equal to rounding)."""
    torch.manual_seed(2), ember.manual_seed(2)
    a = torch.nn.init.orthogonal_(torch.empty(6, 9))
    b = ember.nn.init.orthogonal_(ember.empty(6, 9))
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)


@pytest.mark.parametrize("dt", FLOATS)
def test_cauchy_log_normal_geometric(dt):
    same(lambda lib: [x for n in SIZES for x in (
        lib.empty(n, dtype=getattr(lib, dt)).cauchy_(0.5, 2.0),
        lib.empty(n, dtype=getattr(lib, dt)).log_normal_(0.3, 0.7),
        lib.empty(n, dtype=getattr(lib, dt)).geometric_(0.3),
        lib.empty(n, dtype=lib.int64).geometric_(0.05))], 4)


def test_data_shuffles():
    """Samplers, random_split and a shuffling DataLoader draw torch's orders."""
    out = []
    for lib in (torch, ember):
        lib.manual_seed(0)
        D = lib.utils.data
        out.append([list(D.RandomSampler(range(10))), list(D.RandomSampler(
            range(10), replacement=True, num_samples=40)), list(D.WeightedRandomSampler(
                [0.1, 0.5, 0.4], 5)), D.random_split(range(6), [3, 3])[0].indices,
            [b.tolist() for b in D.DataLoader(lib.arange(8), batch_size=4, shuffle=True)],
            list(D.SubsetRandomSampler([5, 6, 7, 8])),
            list(D.DistributedSampler(range(9), num_replicas=2, rank=1, seed=3))])
    assert out[0] == out[1]


def test_distribution_samples():
    """Samplers built on the draws above give torch's samples (those whose transforms are
    exact: Laplace, Gumbel, LogNormal, ... apply a float32 log/exp that may differ by an ulp)."""
    def calls(lib):
        D, t = lib.distributions, lib.tensor
        ds = [D.Normal(t([0., 1.]), t([1., 2.])), D.Uniform(t([0., 1.]), t([1., 3.])),
              D.Bernoulli(t([0.3, 0.6])), D.Categorical(t([0.2, 0.3, 0.5])),
              D.Exponential(t([1., 2.])), D.Cauchy(t([0.]), t([1.])), D.Geometric(t([0.3])),
              D.MultivariateNormal(lib.zeros(2), lib.eye(2)), D.OneHotCategorical(t([0.2, 0.8])),
              D.Multinomial(5, t([0.2, 0.8]))]
        return [d.sample((7,)) for d in ds] + [ds[0].rsample((20,))]
    same(calls, 0)


def test_rrelu():
    def calls(lib):
        x = (lib.arange(-23., 17.) / 7).reshape(5, 8)
        return [lib.nn.functional.rrelu(x, training=True), lib.nn.functional.rrelu(
            x.double(), 0.2, 0.5, training=True), lib.nn.RReLU()(x), lib.rand(2)]
    same(calls, 0)
