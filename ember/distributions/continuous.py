"""Univariate continuous distributions: Normal, Uniform, Cauchy, Laplace, Exponential, Gamma
and its relatives (Chi2, Beta's Gamma draws, InverseGamma, StudentT, FisherSnedecor), the
transformed ones (LogNormal, HalfNormal, HalfCauchy, Gumbel, Pareto, Weibull, Kumaraswamy),
GeneralizedPareto, VonMises and ContinuousBernoulli."""
import math
from numbers import Number

import ember
from . import constraints
from .compound import TransformedDistribution
from .distribution import Distribution, ExponentialFamily
from .transforms import AbsTransform, AffineTransform, ExpTransform, PowerTransform
from .utils import (broadcast_all, clamp_probs, euler_constant, lazy_property, logits_to_probs,
                    probs_to_logits)

__all__ = ["Beta", "Cauchy", "Chi2", "ContinuousBernoulli", "Exponential", "FisherSnedecor",
           "Gamma", "GeneralizedPareto", "Gumbel", "HalfCauchy", "HalfNormal", "InverseGamma",
           "Kumaraswamy", "Laplace", "LogNormal", "Normal", "Pareto", "StudentT", "Uniform",
           "VonMises", "Weibull"]

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _init(self, validate_args, event_shape=(), **params):
    """Broadcast ``params`` together, set them as attributes and initialise the batch: empty
    when every parameter is a Python number, else their broadcast shape."""
    values = broadcast_all(*params.values())
    for k, v in zip(params, values):
        setattr(self, k, v)
    batch = ember.Size() if all(isinstance(p, Number) for p in params.values()) else \
        values[0].size()
    Distribution.__init__(self, batch, event_shape, validate_args=validate_args)


def _check(self, value):
    if self._validate_args:
        self._validate_sample(value)


def _like(self, p, fill):
    return ember.full(self._extended_shape(), fill, dtype=p.dtype, device=p.device)


def _rand(self, sample_shape, p):
    return ember.rand(self._extended_shape(sample_shape), dtype=p.dtype, device=p.device)


class Normal(ExponentialFamily):
    """The normal (Gaussian) distribution with mean ``loc`` and standard deviation ``scale``.

    Example:
        >>> from ember.distributions import Normal
        >>> d = Normal(ember.tensor([0., 1.]), 2.)
        >>> d.log_prob(ember.tensor([0., 0.])), d.cdf(ember.tensor(1.)), d.entropy()
        (tensor([-1.6121, -1.7371]), tensor([0.6915, 0.5000]), tensor([2.1121, 2.1121]))
    """
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support, has_rsample, _mean_carrier_measure = constraints.real, True, 0
    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)
    stddev = property(lambda self: self.scale)
    variance = property(lambda self: self.stddev.pow(2))

    def __init__(self, loc, scale, validate_args=None):
        _init(self, validate_args, loc=loc, scale=scale)

    def rsample(self, sample_shape=ember.Size()):
        eps = ember.randn(self._extended_shape(sample_shape), dtype=self.loc.dtype,
                          device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        _check(self, value)
        return -((value - self.loc) ** 2) / (2 * self.scale ** 2) - self.scale.log() - _LOG_SQRT_2PI

    def cdf(self, value):
        _check(self, value)
        return 0.5 * (1 + ember.erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))

    def icdf(self, value):
        return self.loc + self.scale * ember.erfinv(2 * value - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + ember.log(self.scale)

    @property
    def _natural_params(self):
        return self.loc / self.scale.pow(2), -0.5 * self.scale.pow(2).reciprocal()

    def _log_normalizer(self, x, y):
        return -0.25 * x.pow(2) / y + 0.5 * ember.log(-math.pi / y)


class Uniform(Distribution):
    """The uniform distribution on the half-open interval ``[low, high)``.

    Example:
        >>> from ember.distributions import Uniform
        >>> d = Uniform(0., 4.)
        >>> d.log_prob(ember.tensor(1.)), d.cdf(ember.tensor(1.)), d.variance
        (tensor(-1.3863), tensor(0.2500), tensor(1.3333))
    """
    has_rsample = True
    arg_constraints = property(lambda self: {"low": constraints.less_than(self.high),
                                             "high": constraints.greater_than(self.low)})
    mean = property(lambda self: (self.high + self.low) / 2)
    mode = property(lambda self: math.nan * self.high)
    stddev = property(lambda self: (self.high - self.low) / 12 ** 0.5)
    variance = property(lambda self: (self.high - self.low).pow(2) / 12)

    def __init__(self, low, high, validate_args=None):
        _init(self, validate_args, low=low, high=high)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.low, self.high)

    def rsample(self, sample_shape=ember.Size()):
        return self.low + _rand(self, sample_shape, self.low) * (self.high - self.low)

    def log_prob(self, value):
        _check(self, value)
        lb, ub = self.low.le(value).type_as(self.low), self.high.gt(value).type_as(self.low)
        return ember.log(lb.mul(ub)) - ember.log(self.high - self.low)

    def cdf(self, value):
        _check(self, value)
        return ((value - self.low) / (self.high - self.low)).clamp(min=0, max=1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return ember.log(self.high - self.low)


class Cauchy(Distribution):
    """The Cauchy (Lorentz) distribution with median ``loc`` and half width ``scale``.

    Example:
        >>> from ember.distributions import Cauchy
        >>> Cauchy(0., 1.).log_prob(ember.tensor(1.)), Cauchy(0., 1.).icdf(ember.tensor(0.75))
        (tensor(-1.8379), tensor(1.))
    """
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support, has_rsample = constraints.real, True
    mean = property(lambda self: _like(self, self.loc, math.nan))
    mode = property(lambda self: self.loc)
    variance = property(lambda self: _like(self, self.loc, math.inf))

    def __init__(self, loc, scale, validate_args=None):
        _init(self, validate_args, loc=loc, scale=scale)

    def rsample(self, sample_shape=ember.Size()):
        eps = self.loc.new_empty(self._extended_shape(sample_shape)).cauchy_()
        return self.loc + eps * self.scale

    def log_prob(self, value):
        _check(self, value)
        return -math.log(math.pi) - self.scale.log() - (((value - self.loc) / self.scale) **
                                                        2).log1p()

    def cdf(self, value):
        _check(self, value)
        return ember.atan((value - self.loc) / self.scale) / math.pi + 0.5

    def icdf(self, value):
        return ember.tan(math.pi * (value - 0.5)) * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()


class Laplace(Distribution):
    """The Laplace (double exponential) distribution with location ``loc`` and scale
    ``scale``.

    Example:
        >>> from ember.distributions import Laplace
        >>> Laplace(0., 1.).log_prob(ember.tensor(1.)), Laplace(0., 1.).cdf(ember.tensor(0.))
        (tensor(-1.6931), tensor(0.5000))
    """
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support, has_rsample = constraints.real, True
    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)
    variance = property(lambda self: 2 * self.scale.pow(2))
    stddev = property(lambda self: 2 ** 0.5 * self.scale)

    def __init__(self, loc, scale, validate_args=None):
        _init(self, validate_args, loc=loc, scale=scale)

    def rsample(self, sample_shape=ember.Size()):
        finfo = ember.finfo(self.loc.dtype)
        u = self.loc.new_empty(self._extended_shape(sample_shape)).uniform_(finfo.eps - 1, 1)
        return self.loc - self.scale * u.sign() * ember.log1p(-u.abs())

    def log_prob(self, value):
        _check(self, value)
        return -ember.log(2 * self.scale) - ember.abs(value - self.loc) / self.scale

    def cdf(self, value):
        _check(self, value)
        return 0.5 - 0.5 * (value - self.loc).sign() * ember.expm1(-(value - self.loc).abs() /
                                                                    self.scale)

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * term.sign() * ember.log1p(-2 * term.abs())

    def entropy(self):
        return 1 + ember.log(2 * self.scale)


class Exponential(ExponentialFamily):
    """The exponential distribution with rate ``rate`` (mean ``1 / rate``).

    Example:
        >>> from ember.distributions import Exponential
        >>> d = Exponential(2.)
        >>> d.log_prob(ember.tensor(1.)), d.cdf(ember.tensor(1.)), d.mean
        (tensor(-1.3069), tensor(0.8647), tensor(0.5000))
    """
    arg_constraints = {"rate": constraints.positive}
    support, has_rsample, _mean_carrier_measure = constraints.nonnegative, True, 0
    mean = property(lambda self: self.rate.reciprocal())
    mode = property(lambda self: ember.zeros_like(self.rate))
    stddev = property(lambda self: self.rate.reciprocal())
    variance = property(lambda self: self.rate.pow(-2))

    def __init__(self, rate, validate_args=None):
        _init(self, validate_args, rate=rate)

    def rsample(self, sample_shape=ember.Size()):
        return self.rate.new_empty(self._extended_shape(sample_shape)).exponential_() / self.rate

    def log_prob(self, value):
        _check(self, value)
        return self.rate.log() - self.rate * value

    def cdf(self, value):
        _check(self, value)
        return 1 - ember.exp(-self.rate * value)

    def icdf(self, value):
        return -ember.log1p(-value) / self.rate

    def entropy(self):
        return 1.0 - ember.log(self.rate)

    _natural_params = property(lambda self: (-self.rate,))

    def _log_normalizer(self, x):
        return -ember.log(-x)


def _standard_gamma(concentration):
    return ember._standard_gamma(concentration)


class Gamma(ExponentialFamily):
    """The Gamma distribution with shape ``concentration`` and ``rate`` (mean
    ``concentration / rate``). ``rsample`` is reparameterised implicitly: the gradient of a
    draw holds its CDF value fixed (``ember._standard_gamma_grad``).

    Example:
        >>> from ember.distributions import Gamma
        >>> d = Gamma(2., 3.)
        >>> d.log_prob(ember.tensor(1.)), d.cdf(ember.tensor(1.)), d.variance
        (tensor(-0.8028), tensor(0.8009), tensor(0.2222))
    """
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support, has_rsample, _mean_carrier_measure = constraints.nonnegative, True, 0
    mean = property(lambda self: self.concentration / self.rate)
    mode = property(lambda self: ((self.concentration - 1) / self.rate).clamp(min=0))
    variance = property(lambda self: self.concentration / self.rate.pow(2))

    def __init__(self, concentration, rate, validate_args=None):
        _init(self, validate_args, concentration=concentration, rate=rate)

    def rsample(self, sample_shape=ember.Size()):
        shape = self._extended_shape(sample_shape)
        value = _standard_gamma(self.concentration.expand(shape)) / self.rate.expand(shape)
        # NOTE: as torch, a draw that underflows to zero becomes the smallest normal number
        value.detach().clamp_(min=ember.finfo(value.dtype).tiny)
        return value

    def log_prob(self, value):
        value = ember.as_tensor(value, dtype=self.rate.dtype, device=self.rate.device)
        _check(self, value)
        return ember.xlogy(self.concentration, self.rate) + ember.xlogy(
            self.concentration - 1, value) - self.rate * value - ember.lgamma(self.concentration)

    def entropy(self):
        c = self.concentration
        return c - ember.log(self.rate) + ember.lgamma(c) + (1.0 - c) * ember.digamma(c)

    _natural_params = property(lambda self: (self.concentration - 1, -self.rate))

    def _log_normalizer(self, x, y):
        return ember.lgamma(x + 1) + (x + 1) * ember.log(-y.reciprocal())

    def cdf(self, value):
        _check(self, value)
        return ember.special.gammainc(self.concentration, self.rate * value)


class Chi2(Gamma):
    """The chi-squared distribution with ``df`` degrees of freedom: ``Gamma(df / 2, 1 / 2)``.

    Example:
        >>> from ember.distributions import Chi2
        >>> Chi2(4.).mean, Chi2(4.).log_prob(ember.tensor(2.))
        (tensor(4.), tensor(-1.6931))
    """
    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args=None):
        super().__init__(0.5 * df, 0.5, validate_args=validate_args)

    df = property(lambda self: self.concentration * 2)


class InverseGamma(TransformedDistribution):
    """The inverse Gamma distribution: ``1 / X`` for ``X ~ Gamma(concentration, rate)``.

    Example:
        >>> from ember.distributions import InverseGamma
        >>> d = InverseGamma(3., 2.)
        >>> d.mean, d.log_prob(ember.tensor(1.))
        (tensor(1.), tensor(-0.6137))
    """
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support, has_rsample = constraints.positive, True

    def __init__(self, concentration, rate, validate_args=None):
        base = Gamma(concentration, rate, validate_args=validate_args)
        super().__init__(base, PowerTransform(-base.rate.new_ones(())), validate_args=validate_args)

    concentration = property(lambda self: self.base_dist.concentration)
    rate = property(lambda self: self.base_dist.rate)

    @property
    def mean(self):
        return ember.where(self.concentration > 1, self.rate / (self.concentration - 1), math.inf)

    mode = property(lambda self: self.rate / (self.concentration + 1))

    @property
    def variance(self):
        c = self.concentration
        return ember.where(c > 2, self.rate.square() / ((c - 1).square() * (c - 2)), math.inf)

    def entropy(self):
        c = self.concentration
        return c + self.rate.log() + c.lgamma() - (1 + c) * c.digamma()


class StudentT(Distribution):
    """Student's t distribution with ``df`` degrees of freedom, location ``loc`` and scale
    ``scale``.

    Example:
        >>> from ember.distributions import StudentT
        >>> d = StudentT(3.)
        >>> d.log_prob(ember.tensor(0.)), d.variance
        (tensor(-1.0009), tensor(3.))
    """
    arg_constraints = {"df": constraints.positive, "loc": constraints.real,
                       "scale": constraints.positive}
    support, has_rsample = constraints.real, True
    mean = property(lambda self: ember.where(self.df <= 1, math.nan, self.loc))
    mode = property(lambda self: self.loc)

    @property
    def variance(self):
        df = self.df
        v = self.scale.pow(2) * df / ember.where(df > 2, df - 2, 1.0)
        return ember.where(df > 2, v, ember.full_like(v, math.inf).where(df > 1, math.nan))

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._chi2 = Chi2(self.df)
        Distribution.__init__(self, self.df.size(), validate_args=validate_args)

    def rsample(self, sample_shape=ember.Size()):
        x = ember.randn(self._extended_shape(sample_shape), dtype=self.df.dtype,
                        device=self.df.device)
        z = self._chi2.rsample(sample_shape)
        return self.loc + self.scale * x * ember.rsqrt(z / self.df)

    def log_prob(self, value):
        _check(self, value)
        y = (value - self.loc) / self.scale
        Z = self.scale.log() + 0.5 * self.df.log() + 0.5 * math.log(math.pi) + ember.lgamma(
            0.5 * self.df) - ember.lgamma(0.5 * (self.df + 1.0))
        return -0.5 * (self.df + 1.0) * ember.log1p(y ** 2.0 / self.df) - Z

    def entropy(self):
        df = self.df
        lbeta = ember.lgamma(0.5 * df) + math.lgamma(0.5) - ember.lgamma(0.5 * (df + 1))
        return self.scale.log() + 0.5 * (df + 1) * (ember.digamma(0.5 * (df + 1)) -
                                                   ember.digamma(0.5 * df)) + \
            0.5 * df.log() + lbeta


class FisherSnedecor(Distribution):
    """The Fisher-Snedecor (F) distribution with ``df1`` and ``df2`` degrees of freedom.

    Example:
        >>> from ember.distributions import FisherSnedecor
        >>> d = FisherSnedecor(4., 6.)
        >>> d.mean, d.log_prob(ember.tensor(1.))
        (tensor(1.5000), tensor(-0.8802))
    """
    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support, has_rsample = constraints.positive, True

    def __init__(self, df1, df2, validate_args=None):
        _init(self, validate_args, df1=df1, df2=df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)

    mean = property(lambda self: ember.where(self.df2 > 2, self.df2 / (self.df2 - 2), math.nan))

    @property
    def mode(self):
        d1, d2 = self.df1, self.df2
        return ember.where(d1 > 2, (d1 - 2) / d1 * d2 / (d2 + 2), math.nan)

    @property
    def variance(self):
        d1, d2 = self.df1, ember.where(self.df2 > 4, self.df2, math.nan)
        return 2 * d2.pow(2) * (d1 + d2 - 2) / (d1 * (d2 - 2).pow(2) * (d2 - 4))

    def rsample(self, sample_shape=ember.Size()):
        shape = self._extended_shape(sample_shape)
        tiny = ember.finfo(self.df1.dtype).tiny
        x1 = self._gamma1.rsample(sample_shape).view(shape)
        x2 = self._gamma2.rsample(sample_shape).view(shape).clamp(min=tiny)
        return (x1 / x2).clamp(min=tiny)

    def log_prob(self, value):
        _check(self, value)
        ct1, ct2, ct3 = self.df1 * 0.5, self.df2 * 0.5, self.df1 / self.df2
        t1 = (ct1 + ct2).lgamma() - ct1.lgamma() - ct2.lgamma()
        t2 = ct1 * ct3.log() + (ct1 - 1) * ember.log(value)
        t3 = (ct1 + ct2) * ember.log1p(ct3 * value)
        return t1 + t2 - t3


class _Folded(TransformedDistribution):
    """``|X|`` of a distribution symmetric about zero: HalfNormal, HalfCauchy."""
    arg_constraints = {"scale": constraints.positive}
    support, has_rsample = constraints.nonnegative, True
    scale = property(lambda self: self.base_dist.scale)
    mode = property(lambda self: ember.zeros_like(self.scale))

    def __init__(self, scale, validate_args=None):
        super().__init__(self._base(0, scale, validate_args=False), AbsTransform(),
                         validate_args=validate_args)

    def log_prob(self, value):
        _check(self, value)
        value = ember.as_tensor(value, dtype=self.scale.dtype, device=self.scale.device)
        return ember.where(value >= 0, self.base_dist.log_prob(value) + math.log(2), -math.inf)

    def cdf(self, value):
        _check(self, value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, prob):
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)


class HalfNormal(_Folded):
    """The half-normal distribution: ``|X|`` for ``X ~ Normal(0, scale)``.

    Example:
        >>> from ember.distributions import HalfNormal
        >>> d = HalfNormal(1.)
        >>> d.mean, d.log_prob(ember.tensor(1.))
        (tensor(0.7979), tensor(-0.7258))
    """
    _base = Normal
    mean = property(lambda self: self.scale * math.sqrt(2 / math.pi))
    variance = property(lambda self: self.scale.pow(2) * (1 - 2 / math.pi))


class HalfCauchy(_Folded):
    """The half-Cauchy distribution: ``|X|`` for ``X ~ Cauchy(0, scale)``.

    Example:
        >>> from ember.distributions import HalfCauchy
        >>> HalfCauchy(1.).log_prob(ember.tensor(1.)), HalfCauchy(1.).cdf(ember.tensor(1.))
        (tensor(-1.1447), tensor(0.5000))
    """
    _base = Cauchy
    mean = property(lambda self: _like(self, self.scale, math.inf))
    variance = property(lambda self: self.base_dist.variance)


class LogNormal(TransformedDistribution):
    """The log-normal distribution: ``exp(X)`` for ``X ~ Normal(loc, scale)``.

    Example:
        >>> from ember.distributions import LogNormal
        >>> d = LogNormal(0., 1.)
        >>> d.mean, d.log_prob(ember.tensor(1.))
        (tensor(1.6487), tensor(-0.9189))
    """
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support, has_rsample = constraints.positive, True

    def __init__(self, loc, scale, validate_args=None):
        super().__init__(Normal(loc, scale, validate_args=validate_args), ExpTransform(),
                         validate_args=validate_args)

    loc = property(lambda self: self.base_dist.loc)
    scale = property(lambda self: self.base_dist.scale)
    mean = property(lambda self: (self.loc + self.scale.pow(2) / 2).exp())
    mode = property(lambda self: (self.loc - self.scale.square()).exp())

    @property
    def variance(self):
        scale_sq = self.scale.pow(2)
        return scale_sq.expm1() * (2 * self.loc + scale_sq).exp()

    def entropy(self):
        return self.base_dist.entropy() + self.loc


class Gumbel(TransformedDistribution):
    """The Gumbel (type-I extreme value) distribution with location ``loc`` and scale
    ``scale``.

    Example:
        >>> from ember.distributions import Gumbel
        >>> d = Gumbel(0., 1.)
        >>> d.mean, d.log_prob(ember.tensor(0.))
        (tensor(0.5772), tensor(-1.))
    """
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        finfo = ember.finfo(self.loc.dtype)
        if isinstance(loc, Number) and isinstance(scale, Number):
            base = Uniform(finfo.tiny, 1 - finfo.eps, validate_args=validate_args)
        else:
            base = Uniform(ember.full_like(self.loc, finfo.tiny),
                           ember.full_like(self.loc, 1 - finfo.eps), validate_args=validate_args)
        # x = loc - scale * log(-log(u))
        transforms = [ExpTransform().inv, AffineTransform(loc=0, scale=-ember.ones_like(
            self.scale)), ExpTransform().inv, AffineTransform(loc=loc, scale=-self.scale)]
        super().__init__(base, transforms, validate_args=validate_args)

    def log_prob(self, value):
        _check(self, value)
        y = (self.loc - value) / self.scale
        return y - y.exp() - self.scale.log()

    mean = property(lambda self: self.loc + self.scale * euler_constant)
    mode = property(lambda self: self.loc)
    stddev = property(lambda self: math.pi / math.sqrt(6) * self.scale)
    variance = property(lambda self: self.stddev.pow(2))

    def entropy(self):
        return self.scale.log() + (1 + euler_constant)


class Pareto(TransformedDistribution):
    """The Pareto (type I) distribution with minimum ``scale`` and tail index ``alpha``.

    Example:
        >>> from ember.distributions import Pareto
        >>> d = Pareto(1., 3.)
        >>> d.mean, d.log_prob(ember.tensor(2.))
        (tensor(1.5000), tensor(-1.6740))
    """
    arg_constraints = {"alpha": constraints.positive, "scale": constraints.positive}

    def __init__(self, scale, alpha, validate_args=None):
        self.scale, self.alpha = broadcast_all(scale, alpha)
        super().__init__(Exponential(self.alpha, validate_args=validate_args),
                         [ExpTransform(), AffineTransform(loc=0, scale=self.scale)],
                         validate_args=validate_args)

    @property
    def mean(self):
        a = self.alpha.clamp(min=1)     # inf for alpha <= 1
        return a * self.scale / (a - 1)

    mode = property(lambda self: self.scale)

    @property
    def variance(self):
        a = self.alpha.clamp(min=2)     # inf for alpha <= 2
        return self.scale.pow(2) * a / ((a - 1).pow(2) * (a - 2))

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.greater_than_eq(self.scale)

    def entropy(self):
        return (self.scale / self.alpha).log() + (1 + self.alpha.reciprocal())


class Weibull(TransformedDistribution):
    """The Weibull distribution with ``scale`` and shape ``concentration``.

    Example:
        >>> from ember.distributions import Weibull
        >>> d = Weibull(1., 2.)
        >>> d.mean, d.log_prob(ember.tensor(1.))
        (tensor(0.8862), tensor(-0.3069))
    """
    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive

    def __init__(self, scale, concentration, validate_args=None):
        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        super().__init__(Exponential(ember.ones_like(self.scale), validate_args=validate_args),
                         [PowerTransform(exponent=self.concentration_reciprocal),
                          AffineTransform(loc=0, scale=self.scale)], validate_args=validate_args)

    mean = property(lambda self: self.scale * ember.exp(ember.lgamma(
        1 + self.concentration_reciprocal)))
    mode = property(lambda self: self.scale * ((self.concentration - 1) / self.concentration) **
                    self.concentration.reciprocal())

    @property
    def variance(self):
        r = self.concentration_reciprocal
        return self.scale.pow(2) * (ember.exp(ember.lgamma(1 + 2 * r)) -
                                    ember.exp(2 * ember.lgamma(1 + r)))

    def entropy(self):
        r = self.concentration_reciprocal
        return euler_constant * (1 - r) + ember.log(self.scale * r) + 1


def _kumaraswamy_moment(a, b, n):
    arg1 = 1 + n / a
    return b * ember.exp(ember.lgamma(arg1) + ember.lgamma(b) - ember.lgamma(arg1 + b))


class Kumaraswamy(TransformedDistribution):
    """The Kumaraswamy distribution on the unit interval, with ``concentration1`` (a) and
    ``concentration0`` (b): ``(1 - (1 - U)^(1/b))^(1/a)`` of a uniform ``U``.

    Example:
        >>> from ember.distributions import Kumaraswamy
        >>> d = Kumaraswamy(2., 3.)
        >>> d.mean, d.log_prob(ember.tensor(0.5))
        (tensor(0.4571), tensor(0.5232))
    """
    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support, has_rsample = constraints.unit_interval, True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base = Uniform(ember.full_like(self.concentration0, 0),
                       ember.full_like(self.concentration0, 1), validate_args=validate_args)
        super().__init__(base, [PowerTransform(exponent=self.concentration0.reciprocal()),
                                AffineTransform(loc=1.0, scale=-1.0),
                                PowerTransform(exponent=self.concentration1.reciprocal())],
                         validate_args=validate_args)

    mean = property(lambda self: _kumaraswamy_moment(self.concentration1, self.concentration0, 1))

    @property
    def mode(self):
        a, b = self.concentration1, self.concentration0
        log_mode = b.reciprocal() * (-b).log1p() - (-b * a).log1p()
        return ember.where((b < 1) | (a < 1), math.nan, log_mode).exp()

    variance = property(lambda self: _kumaraswamy_moment(
        self.concentration1, self.concentration0, 2) - ember.pow(self.mean, 2))

    def entropy(self):
        t1 = 1 - self.concentration1.reciprocal()
        t0 = 1 - self.concentration0.reciprocal()
        H0 = ember.digamma(self.concentration0 + 1) + euler_constant
        return t0 + t1 * H0 - ember.log(self.concentration1) - ember.log(self.concentration0)


class GeneralizedPareto(Distribution):
    """The generalised Pareto distribution with location ``loc``, ``scale`` and shape
    ``concentration`` (exponential at zero, bounded above when negative).

    Example:
        >>> from ember.distributions import GeneralizedPareto
        >>> d = GeneralizedPareto(0., 1., 0.5)
        >>> d.mean, d.log_prob(ember.tensor(1.)), d.cdf(ember.tensor(1.))
        (tensor(2.), tensor(-1.2164), tensor(0.5556))
    """
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive,
                       "concentration": constraints.real}
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args=None):
        _init(self, validate_args, loc=loc, scale=scale, concentration=concentration)

    def rsample(self, sample_shape=ember.Size()):
        return self.icdf(_rand(self, sample_shape, self.loc))

    def _safe(self):
        """(concentration == 0, concentration with zeros replaced by one)"""
        c = self.concentration
        eq_zero = ember.isclose(c, ember.zeros_like(c))
        return eq_zero, ember.where(eq_zero, ember.ones_like(c), c)

    def log_prob(self, value):
        _check(self, value)
        z = (value - self.loc) / self.scale
        eq_zero, c = self._safe()
        y = 1 / c + ember.ones_like(z)
        where_nonzero = ember.where(y == 0, y, y * ember.log1p(c * z))
        return -self.scale.log() - ember.where(eq_zero, z, where_nonzero)

    def log_survival_function(self, value):
        """``log(1 - cdf(value))``."""
        _check(self, value)
        z = (value - self.loc) / self.scale
        eq_zero, c = self._safe()
        return ember.where(eq_zero, -z, -ember.log1p(c * z) / c)

    def log_cdf(self, value):
        """``log(cdf(value))``."""
        return ember.log1p(-ember.exp(self.log_survival_function(value)))

    def cdf(self, value):
        return ember.exp(self.log_cdf(value))

    def icdf(self, value):
        eq_zero, c = self._safe()
        logu = ember.log1p(-value)
        return ember.where(eq_zero, self.loc - self.scale * logu,
                           self.loc + self.scale / c * ember.expm1(-c * logu))

    @property
    def mean(self):
        c = self.concentration
        return ember.where(c < 1, self.loc + self.scale / (1 - ember.where(c < 1, c, 0.5)),
                           math.nan)

    @property
    def variance(self):
        c = self.concentration
        s = ember.where(c < 0.5, c, 0.25)
        return ember.where(c < 0.5, self.scale ** 2 / ((1 - s) ** 2 * (1 - 2 * s)), math.nan)

    def entropy(self):
        return ember.broadcast_to(ember.log(self.scale) + self.concentration + 1, self._batch_shape)

    mode = property(lambda self: self.loc)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        upper = ember.where(self.concentration < 0, self.loc - self.scale / self.concentration,
                            math.inf)
        return constraints.interval(self.loc, upper)


def _log_modified_bessel_fn(x, order=0):
    """``log I_order(x)`` for ``x > 0`` (order 0 or 1), from the scaled Bessel functions."""
    if order not in (0, 1):
        raise AssertionError(f"order must be 0 or 1, got {order}")
    return ember.log((ember.special.i0e if order == 0 else ember.special.i1e)(x)) + x


def _rejection_sample(loc, concentration, proposal_r, x):
    """Best and Fisher's (1979) wrapped Cauchy rejection sampler."""
    done = ember.zeros(x.shape, dtype=ember.bool, device=loc.device)
    while not done.all():
        u1, u2, u3 = ember.rand((3,) + tuple(x.shape), dtype=loc.dtype, device=loc.device).unbind()
        z = ember.cos(math.pi * u1)
        f = (1 + proposal_r * z) / (proposal_r + z)
        c = concentration * (proposal_r - f)
        accept = ((c * (2 - c) - u2) > 0) | ((c / u2).log() + 1 - c >= 0)
        if accept.any():
            x = ember.where(accept, (u3 - 0.5).sign() * f.acos(), x)
            done = done | accept
    return (x + math.pi + loc) % (2 * math.pi) - math.pi


class VonMises(Distribution):
    """The von Mises distribution on the circle, with mean direction ``loc`` and
    ``concentration``; samples lie in ``[-pi, pi)`` (rejection sampling, no ``rsample``).

    Example:
        >>> from ember.distributions import VonMises
        >>> d = VonMises(0., 2.)
        >>> d.log_prob(ember.tensor(0.)), d.variance
        (tensor(-0.6619), tensor(0.3022))
    """
    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support, has_rsample = constraints.real, False
    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)

    def __init__(self, loc, concentration, validate_args=None):
        self.loc, self.concentration = broadcast_all(loc, concentration)
        Distribution.__init__(self, self.loc.shape, ember.Size(), validate_args)

    def log_prob(self, value):
        _check(self, value)
        return self.concentration * ember.cos(value - self.loc) - math.log(2 * math.pi) - \
            _log_modified_bessel_fn(self.concentration, order=0)

    @lazy_property
    def _proposal_r(self):
        kappa = self.concentration.double()
        tau = 1 + (1 + 4 * kappa ** 2).sqrt()
        rho = (tau - (2 * tau).sqrt()) / (2 * kappa)
        return ember.where(kappa < 1e-5, 1 / kappa + kappa, (1 + rho ** 2) / (2 * rho))

    def sample(self, sample_shape=ember.Size()):
        with ember.no_grad():
            x = ember.empty(self._extended_shape(sample_shape), dtype=ember.float64,
                            device=self.loc.device)
            return _rejection_sample(self.loc.double(), self.concentration.double(),
                                     self._proposal_r, x).to(self.loc.dtype)

    @lazy_property
    def variance(self):
        k = self.concentration
        return 1 - (_log_modified_bessel_fn(k, 1) - _log_modified_bessel_fn(k, 0)).exp()


class Beta(ExponentialFamily):
    """The Beta distribution on the unit interval with ``concentration1`` (alpha) and
    ``concentration0`` (beta): the first coordinate of a two-category Dirichlet.

    Example:
        >>> from ember.distributions import Beta
        >>> d = Beta(2., 3.)
        >>> d.mean, d.log_prob(ember.tensor(0.5))
        (tensor(0.4000), tensor(0.4055))
    """
    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support, has_rsample = constraints.unit_interval, True

    def __init__(self, concentration1, concentration0, validate_args=None):
        from .multivariate import Dirichlet
        if isinstance(concentration1, Number) and isinstance(concentration0, Number):
            c = ember.tensor([float(concentration1), float(concentration0)])
        else:
            c = ember.stack(broadcast_all(concentration1, concentration0), -1)
        self._dirichlet = Dirichlet(c, validate_args=validate_args)
        Distribution.__init__(self, self._dirichlet._batch_shape, validate_args=validate_args)

    mean = property(lambda self: self.concentration1 / (self.concentration1 + self.concentration0))
    mode = property(lambda self: self._dirichlet.mode[..., 0])

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()):
        return self._dirichlet.rsample(sample_shape).select(-1, 0)

    def log_prob(self, value):
        _check(self, value)
        return self._dirichlet.log_prob(ember.stack([value, 1.0 - value], -1))

    def entropy(self):
        return self._dirichlet.entropy()

    concentration1 = property(lambda self: self._dirichlet.concentration[..., 0])
    concentration0 = property(lambda self: self._dirichlet.concentration[..., 1])
    _natural_params = property(lambda self: (self.concentration1, self.concentration0))

    def _log_normalizer(self, x, y):
        return ember.lgamma(x) + ember.lgamma(y) - ember.lgamma(x + y)


class ContinuousBernoulli(ExponentialFamily):
    """The continuous Bernoulli distribution on the unit interval (Loaiza-Ganem and
    Cunningham, 2019), parameterised by ``probs`` or ``logits``; near ``probs = 0.5``
    (within ``lims``) Taylor expansions keep it stable.

    Example:
        >>> from ember.distributions import ContinuousBernoulli
        >>> d = ContinuousBernoulli(ember.tensor(0.2))
        >>> d.mean, d.log_prob(ember.tensor(0.5))
        (tensor(0.3880), tensor(-0.0788))
    """
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support, _mean_carrier_measure, has_rsample = constraints.unit_interval, 0, True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            is_scalar = isinstance(probs, Number)
            self.probs, = broadcast_all(probs)
            # clamped below: a check by Distribution.__init__ would come too late
            if validate_args is not None and \
                    not self.arg_constraints["probs"].check(self.probs).all():
                raise ValueError("The parameter probs has invalid values")
            self.probs = clamp_probs(self.probs)
        else:
            is_scalar = isinstance(logits, Number)
            self.logits, = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        self._lims = lims
        Distribution.__init__(self, ember.Size() if is_scalar else self._param.size(),
                              validate_args=validate_args)

    def _new(self, *args, **kwargs):
        return self._param.new(*args, **kwargs)

    def _outside_unstable_region(self):
        return ember.le(self.probs, self._lims[0]) | ember.gt(self.probs, self._lims[1])

    def _cut_probs(self):
        return ember.where(self._outside_unstable_region(), self.probs,
                           self._lims[0] * ember.ones_like(self.probs))

    def _cont_bern_log_norm(self):
        """The log normaliser, with a Taylor expansion near 0.5."""
        cut = self._cut_probs()
        below = ember.where(ember.le(cut, 0.5), cut, ember.zeros_like(cut))
        above = ember.where(ember.ge(cut, 0.5), cut, ember.ones_like(cut))
        log_norm = ember.log(ember.abs(ember.log1p(-cut) - ember.log(cut))) - ember.where(
            ember.le(cut, 0.5), ember.log1p(-2.0 * below), ember.log(2.0 * above - 1.0))
        x = ember.pow(self.probs - 0.5, 2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return ember.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        cut = self._cut_probs()
        mus = cut / (2.0 * cut - 1.0) + 1.0 / (ember.log1p(-cut) - ember.log(cut))
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * ember.pow(x, 2)) * x
        return ember.where(self._outside_unstable_region(), mus, taylor)

    stddev = property(lambda self: ember.sqrt(self.variance))

    @property
    def variance(self):
        cut = self._cut_probs()
        vs = cut * (cut - 1.0) / ember.pow(1.0 - 2.0 * cut, 2) + 1.0 / ember.pow(
            ember.log1p(-cut) - ember.log(cut), 2)
        x = ember.pow(self.probs - 0.5, 2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return ember.where(self._outside_unstable_region(), vs, taylor)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    param_shape = property(lambda self: self._param.size())

    def sample(self, sample_shape=ember.Size()):
        u = _rand(self, sample_shape, self.probs)
        with ember.no_grad():
            return self.icdf(u)

    def rsample(self, sample_shape=ember.Size()):
        return self.icdf(_rand(self, sample_shape, self.probs))

    def log_prob(self, value):
        _check(self, value)
        logits, value = broadcast_all(self.logits, value)
        return -ember.nn.functional.binary_cross_entropy_with_logits(
            logits, value, reduction="none") + self._cont_bern_log_norm()

    def cdf(self, value):
        _check(self, value)
        cut = self._cut_probs()
        cdfs = (ember.pow(cut, value) * ember.pow(1.0 - cut, 1.0 - value) + cut - 1.0) / (
            2.0 * cut - 1.0)
        unbounded = ember.where(self._outside_unstable_region(), cdfs, value)
        return ember.where(ember.le(value, 0.0), ember.zeros_like(value), ember.where(
            ember.ge(value, 1.0), ember.ones_like(value), unbounded))

    def icdf(self, value):
        cut = self._cut_probs()
        return ember.where(self._outside_unstable_region(), (ember.log1p(
            -cut + value * (2.0 * cut - 1.0)) - ember.log1p(-cut)) / (
            ember.log(cut) - ember.log1p(-cut)), value)

    def entropy(self):
        log_probs0, log_probs1 = ember.log1p(-self.probs), ember.log(self.probs)
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    _natural_params = property(lambda self: (self.logits,))

    def _log_normalizer(self, x):
        """The log normaliser as a function of the natural parameter (for entropy and KL)."""
        out = ember.le(x, self._lims[0] - 0.5) | ember.gt(x, self._lims[1] - 0.5)
        cut = ember.where(out, x, (self._lims[0] - 0.5) * ember.ones_like(x))
        log_norm = ember.log(ember.abs(ember.special.expm1(cut))) - ember.log(ember.abs(cut))
        taylor = 0.5 * x + ember.pow(x, 2) / 24.0 - ember.pow(x, 4) / 2880.0
        return ember.where(out, log_norm, taylor)
