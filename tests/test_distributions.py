"""ember.distributions against torch.distributions (the oracle) and scipy.stats.

One table, CASES, lists every distribution with parameters; the tests run each through its
methods (log_prob, cdf, icdf, entropy, mean, mode, variance, stddev, perplexity,
enumerate_support, shapes, expand) in float64 and compare with torch, and the univariate and
a few multivariate ones with scipy. Sample moments of 20k draws are held to the analytic
ones, gradients of log_prob and of rsample (with the random stream fixed) to finite
differences, Gamma-family implicit gradients to d/dalpha of the mean, every transform's
log_abs_det_jacobian to a numerical Jacobian and every registered KL pair to Monte Carlo.
"""
import math
import warnings

import numpy as np
import pytest

import ember
from oracle import to_numpy

torch = pytest.importorskip("torch")
stats = pytest.importorskip("scipy.stats")
ED, TD = ember.distributions, torch.distributions


def U(lo, hi, shape=(3,), seed=0):
    return np.random.default_rng(seed + 11 * len(shape)).uniform(lo, hi, shape)


def _spd(n, batch=(), seed=0):
    a = np.random.default_rng(seed).normal(size=batch + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


_L3 = np.linalg.cholesky(_spd(3))
# (id, constructor(D, **params), params): float arrays are differentiable parameters
CASES = [
    ("Normal", lambda D, loc, scale: D.Normal(loc, scale),
     dict(loc=U(-1, 1), scale=U(0.5, 2, seed=1))),
    ("Normal-broadcast", lambda D, loc, scale: D.Normal(loc, scale),
     dict(loc=U(-1, 1, (2, 1)), scale=U(0.5, 2, (3,), seed=1))),
    ("Normal-scalars", lambda D: D.Normal(0.5, 2.0), {}),
    ("Uniform", lambda D, low, high: D.Uniform(low, high), dict(low=U(-2, 0), high=U(1, 3))),
    ("Cauchy", lambda D, loc, scale: D.Cauchy(loc, scale), dict(loc=U(-1, 1), scale=U(.5, 2))),
    ("HalfCauchy", lambda D, scale: D.HalfCauchy(scale), dict(scale=U(0.5, 2))),
    ("HalfNormal", lambda D, scale: D.HalfNormal(scale), dict(scale=U(0.5, 2))),
    ("Laplace", lambda D, loc, scale: D.Laplace(loc, scale), dict(loc=U(-1, 1), scale=U(.5, 2))),
    ("LogNormal", lambda D, loc, scale: D.LogNormal(loc, scale),
     dict(loc=U(-.5, .5), scale=U(0.3, 0.8))),
    ("Gumbel", lambda D, loc, scale: D.Gumbel(loc, scale), dict(loc=U(-1, 1), scale=U(.5, 2))),
    ("Exponential", lambda D, rate: D.Exponential(rate), dict(rate=U(0.5, 2))),
    ("Gamma", lambda D, concentration, rate: D.Gamma(concentration, rate),
     dict(concentration=np.array([0.4, 1.5, 9.0]), rate=U(0.5, 2))),
    ("Chi2", lambda D, df: D.Chi2(df), dict(df=np.array([0.8, 3.0, 12.0]))),
    ("InverseGamma", lambda D, concentration, rate: D.InverseGamma(concentration, rate),
     dict(concentration=np.array([2.5, 4.0, 6.0]), rate=U(0.5, 2))),
    ("Beta", lambda D, a, b: D.Beta(a, b), dict(a=np.array([0.5, 2.0, 5.0]),
                                                  b=np.array([0.8, 3.0, 1.5]))),
    ("StudentT", lambda D, df, loc, scale: D.StudentT(df, loc, scale),
     dict(df=np.array([0.8, 1.5, 5.0]), loc=U(-1, 1), scale=U(0.5, 2))),
    ("FisherSnedecor", lambda D, df1, df2: D.FisherSnedecor(df1, df2),
     dict(df1=np.array([3.0, 5.0, 8.0]), df2=np.array([5.0, 9.0, 12.0]))),
    ("Pareto", lambda D, scale, alpha: D.Pareto(scale, alpha),
     dict(scale=U(0.5, 2), alpha=np.array([2.5, 4.5, 6.0]))),
    ("Weibull", lambda D, scale, concentration: D.Weibull(scale, concentration),
     dict(scale=U(0.5, 2), concentration=np.array([0.8, 1.5, 3.0]))),
    ("Kumaraswamy", lambda D, a, b: D.Kumaraswamy(a, b), dict(a=np.array([0.7, 2.0, 3.0]),
                                                                b=np.array([1.2, 2.0, 4.0]))),
    ("GeneralizedPareto", lambda D, loc, scale, c: D.GeneralizedPareto(loc, scale, c),
     dict(loc=U(-1, 1), scale=U(0.5, 2), c=np.array([-0.3, 0.0, 0.2]))),
    ("VonMises", lambda D, loc, concentration: D.VonMises(loc, concentration),
     dict(loc=U(-1, 1), concentration=np.array([0.5, 2.0, 8.0]))),
    ("ContinuousBernoulli", lambda D, probs: D.ContinuousBernoulli(probs),
     dict(probs=np.array([0.2, 0.4995, 0.8]))),
    ("ContinuousBernoulli-logits", lambda D, logits: D.ContinuousBernoulli(logits=logits),
     dict(logits=np.array([-1.5, 0.3, 2.0]))),
    ("Bernoulli", lambda D, probs: D.Bernoulli(probs), dict(probs=np.array([0.2, 0.5, 0.9]))),
    ("Bernoulli-logits", lambda D, logits: D.Bernoulli(logits=logits),
     dict(logits=np.array([-1.0, 0.5, 2.0]))),
    ("Binomial", lambda D, probs: D.Binomial(ember_or_torch(D).tensor([10.] * 3,
                                                                      dtype=probs.dtype), probs),
     dict(probs=np.array([0.2, 0.5, 0.9]))),
    ("Binomial-logits", lambda D, logits: D.Binomial(7, logits=logits),
     dict(logits=np.array([-1.0, 0.5, 2.0]))),
    ("Categorical", lambda D, probs: D.Categorical(probs), dict(probs=U(0.1, 1, (2, 4)))),
    ("Categorical-logits", lambda D, logits: D.Categorical(logits=logits),
     dict(logits=U(-2, 2, (3, 5)))),
    ("OneHotCategorical", lambda D, probs: D.OneHotCategorical(probs),
     dict(probs=U(0.1, 1, (2, 4)))),
    ("OneHotCategoricalStraightThrough", lambda D, probs: D.OneHotCategoricalStraightThrough(
        probs), dict(probs=U(0.1, 1, (2, 4)))),
    ("Geometric", lambda D, probs: D.Geometric(probs), dict(probs=np.array([0.2, 0.5, 0.9]))),
    ("NegativeBinomial", lambda D, total_count, probs: D.NegativeBinomial(total_count, probs),
     dict(total_count=np.array([2.0, 4.5, 10.0]), probs=np.array([0.2, 0.5, 0.7]))),
    ("Poisson", lambda D, rate: D.Poisson(rate), dict(rate=np.array([0.5, 3.0, 12.0]))),
    ("Multinomial", lambda D, probs: D.Multinomial(6, probs), dict(probs=U(0.1, 1, (2, 3)))),
    ("MultivariateNormal", lambda D, loc, scale_tril: D.MultivariateNormal(
        loc, scale_tril=scale_tril), dict(loc=U(-1, 1, (2, 3)), scale_tril=_L3)),
    ("MultivariateNormal-cov", lambda D, loc, cov: D.MultivariateNormal(loc, cov),
     dict(loc=U(-1, 1, (3,)), cov=_spd(3, (2,)))),
    ("MultivariateNormal-precision", lambda D, loc, prec: D.MultivariateNormal(
        loc, precision_matrix=prec), dict(loc=U(-1, 1, (2, 3)), prec=_spd(3))),
    ("LowRankMultivariateNormal", lambda D, loc, W, d: D.LowRankMultivariateNormal(loc, W, d),
     dict(loc=U(-1, 1, (2, 3)), W=U(-1, 1, (3, 2)), d=U(0.5, 2, (3,)))),
    ("Dirichlet", lambda D, concentration: D.Dirichlet(concentration),
     dict(concentration=U(0.5, 4, (2, 3)))),
    ("LogisticNormal", lambda D, loc, scale: D.LogisticNormal(loc, scale),
     dict(loc=U(-1, 1, (2, 3)), scale=U(0.5, 1.5, (2, 3)))),
    ("Wishart", lambda D, df, cov: D.Wishart(df, cov), dict(df=np.array([4.0, 6.5]),
                                                           cov=_spd(3, (2,)) / 4)),
    ("LKJCholesky", lambda D, concentration: D.LKJCholesky(3, concentration),
     dict(concentration=np.array([0.5, 1.0, 3.0]))),
    ("RelaxedBernoulli", lambda D, probs: D.RelaxedBernoulli(
        ember_or_torch(D).tensor(0.7, dtype=probs.dtype), probs),
     dict(probs=np.array([0.2, 0.5, 0.9]))),
    ("RelaxedOneHotCategorical", lambda D, logits: D.RelaxedOneHotCategorical(
        ember_or_torch(D).tensor(0.8, dtype=logits.dtype), logits=logits),
     dict(logits=U(-1, 1, (2, 3)))),
    ("Independent", lambda D, loc, scale: D.Independent(D.Normal(loc, scale), 1),
     dict(loc=U(-1, 1, (2, 3)), scale=U(0.5, 2, (2, 3)))),
    ("MixtureSameFamily", lambda D, logits, loc, scale: D.MixtureSameFamily(
        D.Categorical(logits=logits), D.Normal(loc, scale)),
     dict(logits=U(-1, 1, (2, 3)), loc=U(-2, 2, (2, 3)), scale=U(0.5, 1.5, (2, 3)))),
    ("TransformedDistribution", lambda D, loc, scale: D.TransformedDistribution(
        D.Normal(loc, scale), [D.AffineTransform(1.0, -2.0), D.TanhTransform()]),
     dict(loc=U(-0.5, 0.5), scale=U(0.2, 0.6))),
]
IDS = [c[0] for c in CASES]


def ember_or_torch(D):
    return ember if D is ED else torch


def make(case, lib="ember", requires_grad=False, params=None):
    _, ctor, ps = case
    ps = ps if params is None else params
    conv = (lambda a: ember.tensor(a, requires_grad=requires_grad)) if lib == "ember" else \
        (lambda a: torch.tensor(a, requires_grad=requires_grad))
    args = {k: conv(v) if isinstance(v, np.ndarray) else v for k, v in ps.items()}
    return ctor(ED if lib == "ember" else TD, **args), args


def _cmp(e, t, what, rtol=1e-6, atol=1e-9):
    if isinstance(t, torch.Size):
        assert tuple(e) == tuple(t), f"{what}: {e} vs {t}"
        return
    assert isinstance(e, ember.Tensor), f"{what}: {type(e)}"
    assert tuple(e.shape) == tuple(t.shape), f"{what}: shape {tuple(e.shape)} vs {tuple(t.shape)}"
    assert e.dtype.name == str(t.dtype).replace("torch.", ""), f"{what}: {e.dtype} vs {t.dtype}"
    np.testing.assert_allclose(to_numpy(e).astype(np.float64), to_numpy(t).astype(np.float64),
                               rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def _both(what, fe, ft, **tol):
    """Run ``fe`` (ember) and ``ft`` (torch): equal results, or the same exception type."""
    try:
        t = ft()
    except Exception as err:        # noqa: BLE001  (any exception type torch raises)
        with pytest.raises(type(err)):
            fe()
        return None
    _cmp(fe(), t, what, **tol)
    return t


# VonMises: torch's log Bessel functions are polynomial fits (~1e-7), ember's the exact ones
TOL = {"VonMises": dict(rtol=2e-6, atol=2e-7)}
METHODS = ("mean", "mode", "variance", "stddev", "entropy", "perplexity")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_matches_torch(case):
    ember.manual_seed(0)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e, _ = make(case)
        t, _ = make(case, "torch")
        tol = TOL.get(case[0], {})
        _cmp(e.batch_shape, t.batch_shape, "batch_shape")
        _cmp(e.event_shape, t.event_shape, "event_shape")
        assert (e.has_rsample, e.has_enumerate_support) == (t.has_rsample,
                                                            t.has_enumerate_support)
        assert repr(e.support) == repr(t.support) or type(e.support).__name__ == \
            type(t.support).__name__
        for m in METHODS:
            _both(m, lambda: getattr(e, m)() if m in ("entropy", "perplexity") else
                  getattr(e, m), lambda: getattr(t, m)() if m in ("entropy", "perplexity")
                  else getattr(t, m), **tol)
        for attr in ("probs", "logits", "covariance_matrix", "precision_matrix", "scale_tril",
                     "temperature", "total_count", "df", "loc", "scale", "concentration"):
            if hasattr(t, attr) and isinstance(getattr(t, attr), torch.Tensor):
                _cmp(getattr(e, attr), getattr(t, attr), attr, rtol=1e-9)
        x = t.sample((2,))
        xe = ember.tensor(x.numpy())
        assert tuple(e.sample((2,)).shape) == tuple(x.shape)
        if e.has_rsample:
            assert tuple(e.rsample((4, 1)).shape) == tuple(t.rsample((4, 1)).shape)
        if case[0] == "GeneralizedPareto":
            # NOTE: torch's float64 log_prob and cdf fail (isclose(concentration,
            # tensor(0.0)) mixes float64 and float32): compared with its float32 results
            t32 = TD.GeneralizedPareto(*(torch.tensor(v).float() for v in case[2].values()))
            for m in ("log_prob", "cdf"):
                _cmp(getattr(e, m)(xe).float(), getattr(t32, m)(x.float()), m, rtol=1e-5)
        else:
            _both("log_prob", lambda: e.log_prob(xe), lambda: t.log_prob(x), **tol)
            _both("cdf", lambda: e.cdf(xe), lambda: t.cdf(x), **tol)
        u = torch.tensor(U(0.05, 0.95, tuple(x.shape), seed=3))
        _both("icdf", lambda: e.icdf(ember.tensor(u.numpy())), lambda: t.icdf(u), **tol)
        for expand in (True, False):
            _both("enumerate_support", lambda: e.enumerate_support(expand),
                  lambda: t.enumerate_support(expand))
        big = (4,) + tuple(t.batch_shape)
        ee, te = e.expand(big), t.expand(big)
        _cmp(ee.batch_shape, te.batch_shape, "expand")
        assert tuple(ee.sample().shape) == tuple(te.sample().shape)
        if case[0] != "GeneralizedPareto":
            _both("expand log_prob", lambda: ee.log_prob(xe), lambda: te.log_prob(x), **tol)
        assert repr(e).replace("ember", "torch") == repr(t) or case[0] in ("Wishart",)


# ---- scipy.stats ----------------------------------------------------------------------------

def _scipy(name, p):
    """A frozen scipy distribution per batch element, for the cases scipy has."""
    s = stats
    f = {
        "Normal": lambda: s.norm(p["loc"], p["scale"]),
        "Uniform": lambda: s.uniform(p["low"], p["high"] - p["low"]),
        "Cauchy": lambda: s.cauchy(p["loc"], p["scale"]),
        "HalfCauchy": lambda: s.halfcauchy(scale=p["scale"]),
        "HalfNormal": lambda: s.halfnorm(scale=p["scale"]),
        "Laplace": lambda: s.laplace(p["loc"], p["scale"]),
        "LogNormal": lambda: s.lognorm(p["scale"], scale=np.exp(p["loc"])),
        "Gumbel": lambda: s.gumbel_r(p["loc"], p["scale"]),
        "Exponential": lambda: s.expon(scale=1 / p["rate"]),
        "Gamma": lambda: s.gamma(p["concentration"], scale=1 / p["rate"]),
        "Chi2": lambda: s.chi2(p["df"]),
        "InverseGamma": lambda: s.invgamma(p["concentration"], scale=p["rate"]),
        "Beta": lambda: s.beta(p["a"], p["b"]),
        "StudentT": lambda: s.t(p["df"], p["loc"], p["scale"]),
        "FisherSnedecor": lambda: s.f(p["df1"], p["df2"]),
        "Pareto": lambda: s.pareto(p["alpha"], scale=p["scale"]),
        "Weibull": lambda: s.weibull_min(p["concentration"], scale=p["scale"]),
        "GeneralizedPareto": lambda: s.genpareto(p["c"], p["loc"], p["scale"]),
        "VonMises": lambda: s.vonmises(p["concentration"], p["loc"]),
        "Bernoulli": lambda: s.bernoulli(p["probs"]),
        "Binomial": lambda: s.binom(10, p["probs"]),
        "Geometric": lambda: s.geom(p["probs"], loc=-1),
        # torch counts successes (probability probs) before total_count failures
        "NegativeBinomial": lambda: s.nbinom(p["total_count"], 1 - p["probs"]),
        "Poisson": lambda: s.poisson(p["rate"]),
    }.get(name)
    return f and f()


SCIPY = [c for c in CASES if _scipy(c[0], c[2]) is not None]


@pytest.mark.parametrize("case", SCIPY, ids=[c[0] for c in SCIPY])
def test_matches_scipy(case):
    name, _, p = case
    sp = _scipy(name, p)
    e, _ = make(case)
    discrete = e.support.is_discrete
    ember.manual_seed(1)
    x = e.sample((5,))
    xs = x.numpy()
    lp = sp.logpmf(xs) if discrete else sp.logpdf(xs)
    np.testing.assert_allclose(e.log_prob(x).numpy(), lp, rtol=1e-6, atol=1e-9)
    for m, ref in (("entropy", sp.entropy), ("mean", sp.mean), ("variance", sp.var)):
        try:
            got = (getattr(e, m)() if m == "entropy" else getattr(e, m)).numpy()
        except NotImplementedError:
            continue
        if name == "VonMises" and m == "variance":
            continue            # (torch's is the circular variance 1 - I1/I0, scipy's is not)
        want = np.broadcast_to(ref(), got.shape)
        # where the moment does not exist torch says nan or inf, scipy inf or nan: both
        # undefined
        fin = np.isfinite(want)
        assert (~np.isfinite(got) == ~fin).all(), (m, got, want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-6, atol=1e-9, err_msg=m)
    if discrete:
        return
    q = U(0.05, 0.95, tuple(x.shape), seed=4)
    for got, want in ((lambda: e.cdf(x), lambda: sp.cdf(xs)),
                      (lambda: e.icdf(ember.tensor(q)), lambda: sp.ppf(q))):
        try:            # (as torch, several have no cdf or icdf)
            got = got().numpy()
        except NotImplementedError:
            continue
        np.testing.assert_allclose(got, want(), rtol=1e-6, atol=1e-9)


def test_multivariate_match_scipy():
    loc, L = np.array([0.5, -1.0, 0.2]), _L3
    d = ED.MultivariateNormal(ember.tensor(loc), scale_tril=ember.tensor(L))
    sp = stats.multivariate_normal(loc, L @ L.T)
    x = d.sample((4,))
    np.testing.assert_allclose(d.log_prob(x).numpy(), sp.logpdf(x.numpy()), rtol=1e-9)
    np.testing.assert_allclose(d.entropy().item(), sp.entropy(), rtol=1e-9)
    c = np.array([0.7, 2.0, 3.5])
    d = ED.Dirichlet(ember.tensor(c))
    sp = stats.dirichlet(c)
    x = d.sample()
    np.testing.assert_allclose(d.log_prob(x).item(), sp.logpdf(x.numpy()), rtol=1e-9)
    np.testing.assert_allclose(d.entropy().item(), sp.entropy(), rtol=1e-9)
    np.testing.assert_allclose(d.variance.numpy(), sp.var(), rtol=1e-9)
    pr = np.array([0.2, 0.3, 0.5])
    d = ED.Multinomial(5, ember.tensor(pr))
    x = d.sample()
    np.testing.assert_allclose(d.log_prob(x).item(), stats.multinomial(5, pr).logpmf(
        x.numpy()), rtol=1e-9)
    cov = _spd(3) / 4
    d = ED.Wishart(ember.tensor(5.0, dtype=ember.float64), ember.tensor(cov))
    x = d.sample()
    sp = stats.wishart(5.0, cov)
    np.testing.assert_allclose(d.log_prob(x).item(), sp.logpdf(x.numpy()), rtol=1e-9)
    np.testing.assert_allclose(d.entropy().item(), sp.entropy(), rtol=1e-9)


# ---- sample moments -------------------------------------------------------------------------

N = 20000


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_sample_moments(case):
    """The mean of 20k draws lies within 5 standard errors of ``mean``; the sample variance
    within 5 standard errors (from the sample fourth moment) of ``variance``."""
    ember.manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d, _ = make(case)
        x = d.sample((N,)).double().numpy()
    if case[0] == "VonMises":       # circular: the mean direction and 1 - |E exp(ix)|
        r = np.exp(1j * x).mean(0)
        np.testing.assert_allclose(np.angle(r), d.mean.numpy(), atol=0.05)
        np.testing.assert_allclose(1 - np.abs(r), d.variance.numpy(), atol=0.02)
        return
    try:
        mean, var = d.mean.numpy(), d.variance.numpy()
    except NotImplementedError:     # (e.g. LKJCholesky, Wishart's matrices are checked below)
        assert x.shape[1:] == tuple(d.batch_shape + d.event_shape)
        return
    assert d.support.check(ember.tensor(x[:100])).all()
    ok = np.isfinite(var) & np.isfinite(mean)
    if case[0] in ("Pareto", "StudentT", "FisherSnedecor", "InverseGamma"):
        ok &= np.isfinite(np.broadcast_to(var, ok.shape))   # heavy tails: mean only
    m_hat, v_hat = x.mean(0), x.var(0)
    se_mean = np.sqrt(var / N)
    assert (np.abs(m_hat - mean) <= 5 * se_mean + 1e-9)[ok].all(), (m_hat, mean)
    m4 = ((x - m_hat) ** 4).mean(0)
    se_var = np.sqrt(np.maximum(m4 - v_hat ** 2, 0) / N)
    heavy = case[0] in ("Pareto", "StudentT", "FisherSnedecor", "InverseGamma")
    if not heavy:
        assert (np.abs(v_hat - var) <= 6 * se_var + 1e-9)[ok].all(), (v_hat, var)


def test_lkj_and_wishart_moments():
    ember.manual_seed(3)
    L = ED.LKJCholesky(3, ember.tensor(2.0, dtype=ember.float64)).sample((N,))
    C = (L @ L.mT).numpy()
    np.testing.assert_allclose(np.diagonal(C, axis1=-2, axis2=-1), 1, atol=1e-9)
    # LKJ(eta): each off-diagonal correlation has mean 0 and variance 1 / (2 eta + d - 1)
    assert abs(C[:, 1, 0].mean()) < 5 * math.sqrt(1 / 6 / N)
    assert abs(C[:, 1, 0].var() - 1 / 6) < 0.01


# ---- gradients ------------------------------------------------------------------------------

def _float_params(case):
    # (matrices read through a Cholesky factorisation see one triangle only: finite
    # differences of the other would not match; their gradients are torch's, test_ops)
    return [k for k, v in case[2].items() if isinstance(v, np.ndarray) and
            k not in ("cov", "prec", "scale_tril")]


# GeneralizedPareto switches formulas at concentration 0, where its derivative is not defined
GRAD_CASES = [(n, f, dict(p, c=np.array([-0.3, 0.1, 0.2])) if n == "GeneralizedPareto" else p)
              for n, f, p in CASES if _float_params((n, f, p))]


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_log_prob_gradcheck(case):
    """log_prob is differentiable in every float parameter (finite differences)."""
    names = _float_params(case)
    ember.manual_seed(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = make(case)[0].sample((2,))

    def f(*vals):
        ps = dict(case[2])
        d = case[1](ED, **{**{k: ember.tensor(v) if isinstance(v, np.ndarray) else v
                              for k, v in ps.items()}, **dict(zip(names, vals))})
        return d.log_prob(x)
    inputs = [ember.tensor(case[2][k], requires_grad=True) for k in names]
    assert ember.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


# rsample is a smooth function of the parameters for a fixed random stream, except for the
# Gamma family, whose implicit gradient is checked by test_implicit_gamma_gradients
RSAMPLE = [c for c in GRAD_CASES if make(c)[0].has_rsample and c[0] not in (
    "Gamma", "Chi2", "InverseGamma", "Beta", "StudentT", "FisherSnedecor", "Dirichlet",
    "Wishart", "OneHotCategoricalStraightThrough")]


@pytest.mark.parametrize("case", RSAMPLE, ids=[c[0] for c in RSAMPLE])
def test_rsample_gradcheck(case):
    names = _float_params(case)

    def f(*vals):
        ember.manual_seed(5)
        d = case[1](ED, **{**{k: ember.tensor(v) if isinstance(v, np.ndarray) else v
                              for k, v in case[2].items()}, **dict(zip(names, vals))})
        return d.rsample((2,))
    inputs = [ember.tensor(case[2][k], requires_grad=True) for k in names]
    assert ember.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_implicit_gamma_gradients():
    """E[dx/dtheta] = d E[x] / dtheta for the implicitly reparameterised samplers."""
    ember.manual_seed(6)
    a = ember.tensor([0.3, 1.0, 4.0, 20.0], requires_grad=True)
    ED.Gamma(a, 2.0).rsample((N,)).mean(0).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 0.5, rtol=0.03)          # E[x] = a / rate
    a = ember.tensor([0.5, 2.0], dtype=ember.float64, requires_grad=True)
    b = ember.tensor([1.5, 3.0], dtype=ember.float64, requires_grad=True)
    ED.Beta(a, b).rsample((N,)).mean(0).sum().backward()
    s = (a + b).detach().numpy()
    np.testing.assert_allclose(a.grad.numpy(), b.detach().numpy() / s ** 2, rtol=0.05)
    np.testing.assert_allclose(b.grad.numpy(), -a.detach().numpy() / s ** 2, rtol=0.05)
    c = ember.tensor([0.7, 1.5, 3.0], dtype=ember.float64, requires_grad=True)
    ED.Dirichlet(c).rsample((N,))[:, 0].mean().backward()
    c0, s = c.detach().numpy(), c.detach().numpy().sum()
    want = np.array([1 / s - c0[0] / s ** 2, -c0[0] / s ** 2, -c0[0] / s ** 2])
    np.testing.assert_allclose(c.grad.numpy(), want, rtol=0.05, atol=2e-3)
    df = ember.tensor([3.0, 6.0], dtype=ember.float64, requires_grad=True)
    ED.Chi2(df).rsample((N,)).mean(0).sum().backward()
    np.testing.assert_allclose(df.grad.numpy(), 1.0, rtol=0.03)


def test_standard_gamma_grad_matches_torch():
    a = np.array([0.2, 0.9, 3.0, 7.5, 9.0, 30.0, 150.0])
    x = np.array([0.05, 0.7, 2.5, 8.0, 9.5, 31.0, 140.0])
    np.testing.assert_allclose(ember._standard_gamma_grad(ember.tensor(a), ember.tensor(x))
                               .numpy(), torch._standard_gamma_grad(torch.tensor(a),
                                                                    torch.tensor(x)).numpy(),
                               rtol=1e-12)


# ---- transforms -----------------------------------------------------------------------------

def _jac(f, x):
    """The Jacobian of ``f`` (a NumPy function on flat vectors) at ``x``, central differences."""
    h = 1e-6
    cols = [(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)]
    return np.stack(cols, -1)


TRANSFORMS = [
    ("Exp", lambda D: D.ExpTransform(), (3,), lambda y: y),
    ("Affine", lambda D: D.AffineTransform(0.5, ember_or_torch(D).tensor([2.0, -3.0, 0.5],
                                                                          dtype=torch.float64
                                                                          if D is TD else
                                                                          ember.float64)),
     (3,), lambda y: y),
    ("Affine-event", lambda D: D.AffineTransform(1.0, 2.0, event_dim=1), (3,), lambda y: y),
    ("Sigmoid", lambda D: D.SigmoidTransform(), (3,), lambda y: y),
    ("Softplus", lambda D: D.SoftplusTransform(), (3,), lambda y: y),
    ("Tanh", lambda D: D.TanhTransform(), (3,), lambda y: y),
    ("Power", lambda D: D.PowerTransform(ember_or_torch(D).tensor(2.5, dtype=torch.float64
                                                                   if D is TD else
                                                                   ember.float64)), (3,),
     lambda y: y),
    ("StickBreaking", lambda D: D.StickBreakingTransform(), (3,), lambda y: y[..., :-1]),
    ("CorrCholesky", lambda D: D.CorrCholeskyTransform(), (3,),
     lambda y: y[..., np.tril_indices(3, -1)[0], np.tril_indices(3, -1)[1]]),
    ("Compose", lambda D: D.ComposeTransform([D.AffineTransform(0.3, 0.5), D.ExpTransform(),
                                              D.PowerTransform(
        ember_or_torch(D).tensor(0.5, dtype=torch.float64 if D is TD else ember.float64))]),
     (3,), lambda y: y),
    ("Independent", lambda D: D.IndependentTransform(D.SigmoidTransform(), 1), (3,),
     lambda y: y),
    ("Reshape", lambda D: D.ReshapeTransform((4,), (2, 2)), (4,), lambda y: y.reshape(-1)),
    ("Cat", lambda D: D.CatTransform([D.ExpTransform(), D.SigmoidTransform()], 0, [1, 2]),
     (3,), lambda y: y),
    ("Stack", lambda D: D.StackTransform([D.ExpTransform(), D.TanhTransform(),
                                          D.identity_transform], 0), (3,), lambda y: y),
    ("CumulativeDistribution", lambda D: D.CumulativeDistributionTransform(D.Normal(0.3, 1.5)),
     (3,), lambda y: y),
    ("Inverse-Sigmoid", lambda D: D.SigmoidTransform().inv, (3,), lambda y: y),
]


@pytest.mark.parametrize("entry", TRANSFORMS, ids=[t[0] for t in TRANSFORMS])
def test_transform_jacobian(entry):
    """log|det J| of every transform against a numerical Jacobian, and values, inverse and
    log_abs_det_jacobian against torch."""
    name, ctor, shape, keep = entry
    t, tt = ctor(ED), ctor(TD)
    x = U(-0.8, 0.8, shape, seed=7)
    if name.startswith(("Inverse", "Power")):
        x = U(0.1, 0.9, shape, seed=7)
    xe = ember.tensor(x)
    y = t(xe)
    ldj = t.log_abs_det_jacobian(xe, y)
    _cmp(y, tt(torch.tensor(x)), "forward")
    _cmp(ldj, tt.log_abs_det_jacobian(torch.tensor(x), tt(torch.tensor(x))), "ldj")
    np.testing.assert_allclose(t.inv(y).numpy(), x, rtol=1e-7, atol=1e-9)
    J = _jac(lambda v: keep(t(ember.tensor(v.reshape(shape))).numpy()).reshape(-1),
             x.reshape(-1))
    event = t.domain.event_dim
    if event == 0:
        want = np.log(np.abs(np.diagonal(J)))
    else:
        want = np.linalg.slogdet(J)[1]
    np.testing.assert_allclose(ldj.numpy().reshape(-1) if event == 0 else ldj.sum().item(),
                               want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["AbsTransform", "SoftmaxTransform", "LowerCholeskyTransform",
                                  "PositiveDefiniteTransform"])
def test_transforms_without_jacobian(name):
    """The transforms torch gives no log_abs_det_jacobian (not bijective, or matrices):
    values and inverses as torch's, and NotImplementedError for the Jacobian alike."""
    te, tt = getattr(ED, name)(), getattr(TD, name)()
    x = U(-1, 1, (2, 3, 3), seed=10)
    y = tt(torch.tensor(x))
    _cmp(te(ember.tensor(x)), y, "forward")
    _cmp(te.inv(ember.tensor(y.numpy())), tt.inv(y), "inverse", rtol=1e-9)
    _both("ldj", lambda: te.log_abs_det_jacobian(ember.tensor(x), ember.tensor(y.numpy())),
          lambda: tt.log_abs_det_jacobian(torch.tensor(x), y))
    assert (te.bijective, repr(te.domain), repr(te.codomain)) == (
        tt.bijective, repr(tt.domain), repr(tt.codomain))


def test_transform_caching_and_api():
    t = ED.ExpTransform(cache_size=1)
    x = ember.tensor([0.5])
    y = t(x)
    assert t.inv(y) is x and t(x) is y
    with pytest.raises(ValueError, match="cache_size must be 0 or 1"):
        ED.ExpTransform(cache_size=2)
    assert ED.ExpTransform() == ED.ExpTransform() and ED.ExpTransform().inv.inv == \
        ED.ExpTransform()
    c = ED.ComposeTransform([ED.ExpTransform(), ED.AffineTransform(1.0, 2.0)]).with_cache()
    assert all(p._cache_size == 1 for p in c.parts)
    assert repr(ED.identity_transform) == repr(TD.identity_transform)
    assert ED.StickBreakingTransform().forward_shape((2, 3)) == (2, 4)
    assert ED.CorrCholeskyTransform().forward_shape((6,)) == (4, 4)


CONSTRAINTS = ["real", "positive", "nonnegative", "unit_interval", "simplex",
               "lower_cholesky", "positive_definite", "corr_cholesky", "real_vector",
               "greater_than(1.5)", "less_than(-1.0)", "interval(-2.0, 3.0)",
               "half_open_interval(0.0, 2.0)", "cat([positive, real], -1, [2, 2])",
               "stack([positive, unit_interval], -1)"]


@pytest.mark.parametrize("spec", CONSTRAINTS)
def test_biject_to_and_transform_to(spec):
    """Both registries give torch's transform, whose values satisfy the constraint."""
    def c(C):
        return eval(spec, {k: getattr(C, k) for k in dir(C) if not k.startswith("__")})
    ce, ct = c(ED.constraints), c(TD.constraints)
    assert repr(ce) == repr(ct)
    shape = (2, 4) if spec.startswith("cat") else (3, 2) if spec.startswith("stack") else \
        (2, 6) if "corr" in spec else (2, 3, 3) if "cholesky" in spec or "definite" in spec \
        else (2, 3)
    x = U(-1.5, 1.5, shape, seed=8)
    for reg in ("biject_to", "transform_to"):
        try:
            tt = getattr(TD, reg)(ct)
        except NotImplementedError:
            with pytest.raises(NotImplementedError):
                getattr(ED, reg)(ce)
            continue
        te = getattr(ED, reg)(ce)
        assert repr(te) == repr(tt)
        y = te(ember.tensor(x))
        _cmp(y, tt(torch.tensor(x)), reg, rtol=1e-9)
        assert ce.check(y).all()
        _cmp(ce.check(y), ct.check(tt(torch.tensor(x))), "check")


# ---- KL divergence --------------------------------------------------------------------------

def _kl_instances(D, tp, tq):
    """p of type ``tp`` and q of type ``tq``, with parameters where KL(p || q) is finite when
    the supports allow it."""
    f64 = ember_or_torch(D).float64
    tensor = ember_or_torch(D).tensor

    def v(*x):
        return tensor(list(x), dtype=f64)
    make_one = {
        "Bernoulli": lambda i: D.Bernoulli(v(0.3, 0.6) if i else v(0.4, 0.5)),
        "Beta": lambda i: D.Beta(v(1.5, 2.0) if i else v(2.5, 3.0), v(2.0, 1.2)),
        "Binomial": lambda i: D.Binomial(v(5, 5), v(0.3, 0.6) if i else v(0.4, 0.5)),
        "Categorical": lambda i: D.Categorical(tensor([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]
                                                      if i else [[0.3, 0.3, 0.4]] * 2,
                                                      dtype=f64)),
        "ContinuousBernoulli": lambda i: D.ContinuousBernoulli(v(0.3, 0.7) if i else
                                                               v(0.6, 0.2)),
        "Dirichlet": lambda i: D.Dirichlet(tensor([[1.5, 2.0, 0.7]] if i else [[2.0, 1.0, 1.2]],
                                                  dtype=f64)),
        "Exponential": lambda i: D.Exponential(v(1.5, 0.7) if i else v(0.9, 1.2)),
        "Gamma": lambda i: D.Gamma(v(2.0, 3.5) if i else v(1.5, 2.0), v(1.2, 0.8)),
        "Gumbel": lambda i: D.Gumbel(v(0.3, -0.2) if i else v(0.0, 0.4), v(1.2, 0.7)),
        "Geometric": lambda i: D.Geometric(v(0.3, 0.6) if i else v(0.4, 0.5)),
        "HalfNormal": lambda i: D.HalfNormal(v(1.2, 0.7) if i else v(0.9, 1.5)),
        "Laplace": lambda i: D.Laplace(v(0.3, -0.2) if i else v(0.0, 0.4), v(1.2, 0.7)),
        "LowRankMultivariateNormal": lambda i: D.LowRankMultivariateNormal(
            tensor([0.2, -0.1] if i else [0.0, 0.3], dtype=f64),
            tensor([[0.5], [0.3]] if i else [[0.2], [-0.4]], dtype=f64), v(1.0, 0.7)),
        "MultivariateNormal": lambda i: D.MultivariateNormal(
            tensor([0.2, -0.1] if i else [0.0, 0.3], dtype=f64),
            tensor([[1.0, 0.3], [0.3, 0.8]] if i else [[0.7, -0.2], [-0.2, 1.1]], dtype=f64)),
        "Normal": lambda i: D.Normal(v(0.3, -0.2) if i else v(0.0, 0.4), v(1.2, 0.7)),
        "OneHotCategorical": lambda i: D.OneHotCategorical(
            tensor([0.2, 0.3, 0.5] if i else [0.3, 0.3, 0.4], dtype=f64)),
        "Pareto": lambda i: D.Pareto(v(1.0, 1.5) if i else v(0.1, 0.05), v(3.5, 4.0)),
        "Poisson": lambda i: D.Poisson(v(1.5, 3.0) if i else v(2.0, 2.5)),
        "Uniform": lambda i: D.Uniform(v(0.2, 0.1) if i else v(-0.1, -0.2), v(0.7, 0.9) if i
                                       else v(1.2, 1.1)),
        "Cauchy": lambda i: D.Cauchy(v(0.3, -0.2) if i else v(0.0, 0.4), v(1.2, 0.7)),
        "Independent": lambda i: D.Independent(D.Normal(v(0.3, -0.2) if i else v(0.0, 0.4),
                                                        v(1.2, 0.7)), 1),
        "TransformedDistribution": lambda i: D.TransformedDistribution(
            D.Normal(v(0.3, -0.2) if i else v(0.0, 0.4), v(1.2, 0.7)), D.ExpTransform()),
        "ExponentialFamily": lambda i: D.Poisson(v(1.5, 3.0) if i else v(2.0, 2.5)),
    }
    return make_one[tp.__name__](1), make_one[tq.__name__](0)


KL_PAIRS = sorted(ED.kl._KL_REGISTRY, key=lambda pq: (pq[0].__name__, pq[1].__name__))


@pytest.mark.parametrize("pair", KL_PAIRS, ids=[f"{p.__name__}-{q.__name__}"
                                                 for p, q in KL_PAIRS])
def test_kl_matches_torch_and_monte_carlo(pair):
    tp, tq = pair
    pe, qe = _kl_instances(ED, *pair)
    pt, qt = _kl_instances(TD, getattr(TD, tp.__name__), getattr(TD, tq.__name__))
    kt = _both("kl", lambda: ED.kl_divergence(pe, qe), lambda: TD.kl_divergence(pt, qt))
    if kt is None or not np.isfinite(kt.numpy()).all():
        return
    ember.manual_seed(9)
    x = pe.sample((N,))
    diff = (pe.log_prob(x) - qe.log_prob(x)).numpy()
    kl = ED.kl_divergence(pe, qe).numpy()
    se = diff.std(0) / math.sqrt(N)
    assert (np.abs(diff.mean(0) - kl) <= 5 * se + 1e-6).all(), (diff.mean(0), kl)


def test_kl_not_implemented_and_register():
    with pytest.raises(NotImplementedError, match="No KL\\(p \\|\\| q\\) is implemented for "
                                                  "p type Categorical and q type Normal"):
        ED.kl_divergence(ED.Categorical(ember.ones(2)), ED.Normal(0.0, 1.0))

    class MyNormal(ED.Normal):
        pass
    # a subclass takes its parent's closed form until it registers its own
    p, q = MyNormal(0.0, 1.0), MyNormal(1.0, 1.0)
    assert ED.kl_divergence(p, q).item() == pytest.approx(0.5)

    @ED.register_kl(MyNormal, MyNormal)
    def _kl(p, q):
        return ember.tensor(-1.0)
    assert ED.kl_divergence(p, q).item() == -1.0
    assert ED.kl_divergence(ED.Normal(0.0, 1.0), ED.Normal(1.0, 1.0)).item() == \
        pytest.approx(0.5)


# ---- validation, the module layout, the examples' patterns ----------------------------------

ERRORS = [
    "D.Normal(lib.tensor([0., 1.]), lib.tensor([1., -1.]))",
    "D.Normal(0., 1.).log_prob(lib.tensor([[1.]] * 2).expand(2, 3)[:, :1].squeeze(1) + "
    "float('nan'))",
    "D.Categorical(lib.tensor([0.5, 0.5])).log_prob(lib.tensor(3))",
    "D.Bernoulli(lib.tensor([0.5])).log_prob(lib.tensor([0.5]))",
    "D.MultivariateNormal(lib.zeros(2), lib.eye(2), scale_tril=lib.eye(2))",
    "D.MultivariateNormal(lib.zeros(2), lib.eye(2) * -1)",
    "D.MultivariateNormal(lib.zeros(2), lib.eye(2)).log_prob(lib.zeros(3))",
    "D.Normal(lib.zeros(3), 1.).log_prob(lib.zeros(2))",
    "D.Normal(0., 1.).log_prob(1.)",
    "D.Categorical()",
    "D.Bernoulli(0.5, 0.2)",
    "D.Gamma(1., 0.)",
    "D.Dirichlet(lib.tensor(1.))",
    "D.Uniform(2., 1.)",
    "D.Binomial(lib.tensor([2.5]), lib.tensor([0.5]))",
    "D.Independent(D.Normal(0., 1.), 1)",
    "D.TransformedDistribution(D.Normal(0., 1.), 3)",
    "D.Multinomial(lib.tensor(3), lib.tensor([0.5, 0.5]))",
    "D.Distribution.set_default_validate_args(3)",
]


@pytest.mark.parametrize("expr", ERRORS)
def test_validation_errors_match_torch(expr):
    def run(lib, D):
        try:
            eval(expr, {"lib": lib, "D": D})
        except Exception as err:        # noqa: BLE001
            return type(err), str(err).replace("ember", "torch")
        return None
    want = run(torch, TD)
    assert want is not None
    assert run(ember, ED) == want


def test_validate_args_off():
    d = ED.Normal(0.0, -1.0, validate_args=False)
    assert math.isnan(d.log_prob(ember.tensor(0.0)).item())
    ED.Distribution.set_default_validate_args(False)
    try:
        assert ED.Normal(0.0, -1.0)._validate_args is False
    finally:
        ED.Distribution.set_default_validate_args(True)
    assert ED.Normal(0.0, 1.0)._validate_args is True


def test_submodules_and_names():
    assert sorted(ED.__all__) == sorted(TD.__all__)
    from ember.distributions.normal import Normal
    from ember.distributions.relaxed_categorical import ExpRelaxedCategorical  # noqa: F401
    from ember.distributions.utils import probs_to_logits  # noqa: F401
    assert Normal is ED.Normal and ember.distributions.gamma.Gamma is ED.Gamma
    assert ED.kl.kl_divergence is ED.kl_divergence
    assert sorted((p.__name__, q.__name__) for p, q in ED.kl._KL_REGISTRY
                  if p.__module__.startswith("ember.")) == sorted(
        (p.__name__, q.__name__) for p, q in TD.kl._KL_REGISTRY)
    for name in ("constraints", "transforms", "kl", "utils", "constraint_registry"):
        assert hasattr(ED, name)


def test_reinforce_pattern():
    """pytorch/examples' reinforcement_learning/reinforce.py."""
    logits = ember.tensor([[0.1, 0.5]], requires_grad=True)
    probs = ember.softmax(logits, dim=1)
    m = ED.Categorical(probs)
    action = m.sample()
    loss = -m.log_prob(action) * 2.0
    loss.sum().backward()
    assert action.dtype == ember.int64 and logits.grad.shape == (1, 2)
    p = probs.detach().numpy()[0]
    onehot = np.eye(2)[action.item()]
    np.testing.assert_allclose(logits.grad.numpy()[0], -2.0 * (onehot - p), rtol=1e-5)


def test_reparameterised_normal_gradient():
    """The VAE pattern: rsample keeps the graph to loc and scale."""
    loc = ember.tensor([0.5, -1.0], requires_grad=True)
    scale = ember.tensor([1.0, 2.0], requires_grad=True)
    ember.manual_seed(0)
    z = ED.Normal(loc, scale).rsample()
    ember.manual_seed(0)
    eps = ember.randn(2)
    z.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), 1.0)
    np.testing.assert_allclose(scale.grad.numpy(), eps.numpy(), rtol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_float32_dtypes(case):
    """float32 parameters give torch's dtypes throughout (no float64 from Python scalars)."""
    ps = {k: v.astype(np.float32) if isinstance(v, np.ndarray) else v
          for k, v in case[2].items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e, t = make(case, params=ps)[0], make(case, "torch", params=ps)[0]
        x = t.sample((2,))
        xe = ember.tensor(x.numpy())
        tol = dict(rtol=2e-4, atol=1e-5)
        for m in METHODS:
            _both(m, lambda: getattr(e, m)() if m in ("entropy", "perplexity") else
                  getattr(e, m), lambda: getattr(t, m)() if m in ("entropy", "perplexity")
                  else getattr(t, m), **tol)
        assert e.sample().dtype.name == str(t.sample().dtype).replace("torch.", "")
        if e.has_rsample:
            assert e.rsample().dtype.name == str(t.rsample().dtype).replace("torch.", "")
        _both("log_prob", lambda: e.log_prob(xe), lambda: t.log_prob(x), **tol)


def test_standard_gamma_and_dirichlet_samplers():
    """Edge values as torch's sampler (the smallest normal number below it, inf at inf), the
    error for an integer tensor, and Dirichlet draws on the simplex with the right mean."""
    a = [-1.0, 0.0, float("nan"), 1e-30, float("inf")]
    for dt in ("float32", "float64"):
        _cmp(ember._standard_gamma(ember.tensor(a, dtype=getattr(ember, dt))),
             torch._standard_gamma(torch.tensor(a, dtype=getattr(torch, dt))), dt)
    _both("int", lambda: ember._standard_gamma(ember.tensor([1, 2])),
          lambda: torch._standard_gamma(torch.tensor([1, 2])))
    ember.manual_seed(11)
    c = ember.tensor([0.5, 1.0, 3.0], dtype=ember.float64)
    x = ember._sample_dirichlet(c.expand(N, 3))
    np.testing.assert_allclose(x.sum(-1).numpy(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(x.mean(0).numpy(), (c / c.sum()).numpy(), atol=0.01)
