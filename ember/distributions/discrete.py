"""Discrete distributions: Bernoulli, Binomial, Categorical, OneHotCategorical (and its
straight-through variant), Geometric, NegativeBinomial, Poisson and Multinomial."""
import math
from numbers import Number

import ember
from . import constraints
from .continuous import Gamma, _check
from .distribution import Distribution, ExponentialFamily
from .utils import broadcast_all, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["Bernoulli", "Binomial", "Categorical", "Geometric", "Multinomial", "NegativeBinomial",
           "OneHotCategorical", "OneHotCategoricalStraightThrough", "Poisson"]


def _bce(logits, target):
    return ember.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none")


class _ProbsOrLogits:
    """Parameterised by ``probs`` or ``logits`` (exactly one given); the other is computed
    on first use. ``_binary``: log-odds (sigmoid) rather than softmax logits."""
    _binary = True

    def _set(self, probs, logits, total_count=None):
        """Set the given parameter (broadcast with ``total_count`` when there is one) and
        return it."""
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        name, value = ("probs", probs) if probs is not None else ("logits", logits)
        if total_count is None:
            value, = broadcast_all(value)
        else:
            total_count, value = broadcast_all(total_count, value)
            self.total_count = total_count.type_as(value)
        setattr(self, name, value)
        self._param = value
        return value

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=self._binary)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=self._binary)

    param_shape = property(lambda self: self._param.size())

    def _new(self, *args, **kwargs):
        return self._param.new(*args, **kwargs)

    def expand(self, batch_shape, _instance=None):
        new = Distribution.expand(self, batch_shape, _instance)
        new._param = new.probs if "probs" in new.__dict__ else new.logits
        return new


def _enumerate(self, values):
    """``values`` (the support, first dim) viewed against the batch, expanded or not."""
    values = values.view((-1,) + (1,) * len(self._batch_shape) + values.shape[1:])
    return values


class Bernoulli(_ProbsOrLogits, ExponentialFamily):
    """The Bernoulli distribution: 1 with probability ``probs`` (or ``sigmoid(logits)``),
    else 0.

    Example:
        >>> from ember.distributions import Bernoulli
        >>> d = Bernoulli(ember.tensor([0.25, 0.5]))
        >>> d.log_prob(ember.tensor([1., 1.])), d.entropy()
        (tensor([-1.3863, -0.6931]), tensor([0.5623, 0.6931]))
    """
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support, has_enumerate_support, _mean_carrier_measure = constraints.boolean, True, 0

    def __init__(self, probs=None, logits=None, validate_args=None):
        p = self._set(probs, logits)
        scalar = isinstance(probs if probs is not None else logits, Number)
        Distribution.__init__(self, ember.Size() if scalar else p.size(),
                              validate_args=validate_args)

    mean = property(lambda self: self.probs)
    mode = property(lambda self: ember.where(self.probs == 0.5, math.nan,
                                             (self.probs >= 0.5).to(self.probs)))
    variance = property(lambda self: self.probs * (1 - self.probs))

    def sample(self, sample_shape=ember.Size()):
        with ember.no_grad():
            return ember.bernoulli(self.probs.expand(self._extended_shape(sample_shape)))

    def log_prob(self, value):
        _check(self, value)
        return -_bce(*broadcast_all(self.logits, value))

    def entropy(self):
        return _bce(self.logits, self.probs)

    def enumerate_support(self, expand=True):
        values = _enumerate(self, ember.arange(2, dtype=self._param.dtype,
                                               device=self._param.device))
        return values.expand((-1,) + self._batch_shape) if expand else values

    _natural_params = property(lambda self: (ember.logit(self.probs),))

    def _log_normalizer(self, x):
        return ember.log1p(ember.exp(x))


def _clamp_by_zero(x):
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


def _homogeneous_count(self, what):
    total_count = int(self.total_count.max())
    if not self.total_count.min() == total_count:
        raise NotImplementedError(f"Inhomogeneous total count not supported by `{what}`.")
    return total_count


class Binomial(_ProbsOrLogits, Distribution):
    """The binomial distribution: successes in ``total_count`` trials of probability
    ``probs`` (or ``sigmoid(logits)``).

    Example:
        >>> from ember.distributions import Binomial
        >>> d = Binomial(10, ember.tensor([0.5]))
        >>> d.log_prob(ember.tensor([5.])), d.mean, d.variance
        (tensor([-1.4020]), tensor([5.]), tensor([2.5000]))
    """
    arg_constraints = {"total_count": constraints.nonnegative_integer,
                       "probs": constraints.unit_interval, "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        p = self._set(probs, logits, total_count)
        Distribution.__init__(self, p.size(), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    mean = property(lambda self: self.total_count * self.probs)
    mode = property(lambda self: ((self.total_count + 1) * self.probs).floor().clamp(
        max=self.total_count))
    variance = property(lambda self: self.total_count * self.probs * (1 - self.probs))

    def sample(self, sample_shape=ember.Size()):
        shape = self._extended_shape(sample_shape)
        with ember.no_grad():
            return ember.binomial(self.total_count.expand(shape), self.probs.expand(shape))

    def log_prob(self, value):
        _check(self, value)
        n = self.total_count
        log_factorial_n = ember.lgamma(n + 1)
        log_factorial_k = ember.lgamma(value + 1)
        log_factorial_nmk = ember.lgamma(n - value + 1)
        # n * log(1 + exp(logits)), computed without overflow
        normalize_term = n * _clamp_by_zero(self.logits) + n * ember.log1p(
            ember.exp(-ember.abs(self.logits))) - log_factorial_n
        return value * self.logits - log_factorial_k - log_factorial_nmk - normalize_term

    def entropy(self):
        _homogeneous_count(self, "entropy")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(ember.exp(log_prob) * log_prob).sum(0)

    def enumerate_support(self, expand=True):
        n = _homogeneous_count(self, "enumerate_support")
        values = _enumerate(self, ember.arange(1 + n, dtype=self._param.dtype,
                                               device=self._param.device))
        return values.expand((-1,) + self._batch_shape) if expand else values


class Categorical(_ProbsOrLogits, Distribution):
    """A categorical distribution over ``0 .. K-1`` with ``probs`` (normalised to sum to one
    over the last dim) or ``logits`` (unnormalised log-probabilities).

    Example:
        >>> from ember.distributions import Categorical
        >>> d = Categorical(ember.tensor([0.25, 0.25, 0.5]))
        >>> a = d.sample()
        >>> d.log_prob(ember.tensor(2)), d.entropy(), d.sample((4,)).shape
        (tensor(-0.6931), tensor(1.0397), torch.Size([4]))
    """
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support, _binary = True, False

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = self._param = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = self._param = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._num_events = self._param.size()[-1]
        batch = self._param.size()[:-1] if self._param.ndimension() > 1 else ember.Size()
        Distribution.__init__(self, batch, validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    mean = property(lambda self: ember.full(self._extended_shape(), math.nan,
                                            dtype=self.probs.dtype, device=self.probs.device))
    mode = property(lambda self: self.probs.argmax(dim=-1))
    variance = mean

    def sample(self, sample_shape=ember.Size()):
        sample_shape = ember.Size(sample_shape)
        probs_2d = self.probs.reshape(-1, self._num_events)
        with ember.no_grad():
            samples_2d = ember.multinomial(probs_2d, sample_shape.numel(), True).T
        return samples_2d.reshape(self._extended_shape(sample_shape))

    def log_prob(self, value):
        _check(self, value)
        value, log_pmf = ember.broadcast_tensors(value.long().unsqueeze(-1), self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self):
        logits = ember.clamp(self.logits, min=ember.finfo(self.logits.dtype).min)
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand=True):
        values = _enumerate(self, ember.arange(self._num_events, dtype=ember.long,
                                               device=self._param.device))
        return values.expand((-1,) + self._batch_shape) if expand else values


class OneHotCategorical(Distribution):
    """A categorical distribution whose samples are one-hot vectors of length ``K``.

    Example:
        >>> from ember.distributions import OneHotCategorical
        >>> d = OneHotCategorical(ember.tensor([0.25, 0.75]))
        >>> d.sample().shape, d.log_prob(ember.tensor([0., 1.])), d.mode
        (torch.Size([2]), tensor(-0.2877), tensor([0., 1.]))
    """
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support, has_enumerate_support = constraints.one_hot, True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:],
                         validate_args=validate_args)

    def _new(self, *args, **kwargs):
        return self._categorical._new(*args, **kwargs)

    _param = property(lambda self: self._categorical._param)
    probs = property(lambda self: self._categorical.probs)
    logits = property(lambda self: self._categorical.logits)
    mean = property(lambda self: self._categorical.probs)
    mode = property(lambda self: ember.nn.functional.one_hot(
        self.probs.argmax(dim=-1), num_classes=self.probs.shape[-1]).to(self.probs))
    variance = property(lambda self: self.probs * (1 - self.probs))
    param_shape = property(lambda self: self._categorical.param_shape)

    def sample(self, sample_shape=ember.Size()):
        indices = self._categorical.sample(ember.Size(sample_shape))
        return ember.nn.functional.one_hot(indices, self._categorical._num_events).to(self.probs)

    def log_prob(self, value):
        _check(self, value)
        return self._categorical.log_prob(value.max(-1)[1])

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand=True):
        n = self.event_shape[0]
        values = ember.eye(n, dtype=self._param.dtype, device=self._param.device)
        values = values.view((n,) + (1,) * len(self.batch_shape) + (n,))
        return values.expand((n,) + self.batch_shape + (n,)) if expand else values


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """``OneHotCategorical`` with the straight-through gradient estimator (Bengio et al.,
    2013): ``rsample`` returns the one-hot sample, with the gradient of ``probs``.

    Example:
        >>> from ember.distributions import OneHotCategoricalStraightThrough
        >>> p = ember.tensor([0.5, 0.5], requires_grad=True)
        >>> s = OneHotCategoricalStraightThrough(p).rsample()
        >>> s.sum().item(), s.requires_grad
        (1.0, True)
    """
    has_rsample = True

    def rsample(self, sample_shape=ember.Size()):
        samples = self.sample(sample_shape)
        probs = self._categorical.probs
        return samples + (probs - probs.detach())


class Geometric(_ProbsOrLogits, Distribution):
    """The number of failures before the first success of Bernoulli trials with ``probs``.

    Example:
        >>> from ember.distributions import Geometric
        >>> d = Geometric(ember.tensor(0.25))
        >>> d.mean, d.log_prob(ember.tensor(2.))
        (tensor(3.), tensor(-1.9617))
    """
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args=None):
        p = self._set(probs, logits)
        scalar = isinstance(probs if probs is not None else logits, Number)
        Distribution.__init__(self, ember.Size() if scalar else p.size(),
                              validate_args=validate_args)
        if self._validate_args and probs is not None:
            value = self.probs
            valid = value > 0
            if not valid.all():
                raise ValueError(f"Expected parameter probs ({type(value).__name__} of shape "
                                 f"{tuple(value.shape)}) of distribution {self!r} to be "
                                 f"positive but found invalid values:\n{value.data[~valid]}")

    mean = property(lambda self: 1.0 / self.probs - 1.0)
    mode = property(lambda self: ember.zeros_like(self.probs))
    variance = property(lambda self: (1.0 / self.probs - 1.0) / self.probs)

    def sample(self, sample_shape=ember.Size()):
        tiny = ember.finfo(self.probs.dtype).tiny
        with ember.no_grad():
            u = self.probs.new_empty(self._extended_shape(sample_shape)).uniform_(tiny, 1)
            return (u.log() / (-self.probs).log1p()).floor()

    def log_prob(self, value):
        _check(self, value)
        value, probs = broadcast_all(value, self.probs)
        # NOTE: as torch, probs == 1 gives log_prob(0) = 0, not nan
        probs = ember.where((probs == 1) & (value == 0), 0.0, probs)
        return value * (-probs).log1p() + self.probs.log()

    def entropy(self):
        return _bce(self.logits, self.probs) / self.probs


class NegativeBinomial(_ProbsOrLogits, Distribution):
    """The number of successes before ``total_count`` failures, in Bernoulli trials whose
    success probability is ``probs``.

    Example:
        >>> from ember.distributions import NegativeBinomial
        >>> d = NegativeBinomial(3., ember.tensor(0.5))
        >>> d.mean, d.log_prob(ember.tensor(2.))
        (tensor(3.), tensor(-1.6740))
    """
    arg_constraints = {"total_count": constraints.greater_than_eq(0),
                       "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        p = self._set(probs, logits, total_count)
        Distribution.__init__(self, p.size(), validate_args=validate_args)

    mean = property(lambda self: self.total_count * ember.exp(self.logits))
    mode = property(lambda self: ((self.total_count - 1) * self.logits.exp()).floor().clamp(
        min=0.0))
    variance = property(lambda self: self.mean / ember.sigmoid(-self.logits))

    @lazy_property
    def _gamma(self):
        return Gamma(concentration=self.total_count, rate=ember.exp(-self.logits),
                     validate_args=False)

    def sample(self, sample_shape=ember.Size()):
        with ember.no_grad():
            return ember.poisson(self._gamma.sample(sample_shape=sample_shape))

    def log_prob(self, value):
        _check(self, value)
        logsigmoid = ember.nn.functional.logsigmoid
        n = self.total_count
        log_unnormalized = n * logsigmoid(-self.logits) + value * logsigmoid(self.logits)
        log_normalization = -ember.lgamma(n + value) + ember.lgamma(1.0 + value) + ember.lgamma(n)
        # NOTE: as torch, total_count + value == 0 has probability one
        log_normalization = log_normalization.masked_fill(n + value == 0.0, 0.0)
        return log_unnormalized - log_normalization


class Poisson(ExponentialFamily):
    """The Poisson distribution with ``rate``.

    Example:
        >>> from ember.distributions import Poisson
        >>> Poisson(2.).log_prob(ember.tensor(3.))
        tensor(-1.7123)
    """
    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer
    mean = property(lambda self: self.rate)
    mode = property(lambda self: self.rate.floor())
    variance = property(lambda self: self.rate)

    def __init__(self, rate, validate_args=None):
        self.rate, = broadcast_all(rate)
        super().__init__(ember.Size() if isinstance(rate, Number) else self.rate.size(),
                         validate_args=validate_args)

    def sample(self, sample_shape=ember.Size()):
        with ember.no_grad():
            return ember.poisson(self.rate.expand(self._extended_shape(sample_shape)))

    def log_prob(self, value):
        _check(self, value)
        rate, value = broadcast_all(self.rate, value)
        return value.xlogy(rate) - rate - (value + 1).lgamma()

    _natural_params = property(lambda self: (ember.log(self.rate),))

    def _log_normalizer(self, x):
        return ember.exp(x)


class Multinomial(Distribution):
    """Counts of ``total_count`` draws from a categorical distribution over ``K`` classes
    (``probs`` or ``logits``, as ``Categorical``).

    Example:
        >>> from ember.distributions import Multinomial
        >>> d = Multinomial(4, ember.tensor([0.25, 0.75]))
        >>> d.sample().sum(), d.log_prob(ember.tensor([1., 3.])), d.mean
        (tensor(4.), tensor(-0.8630), tensor([1., 3.]))
    """
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    mean = property(lambda self: self.probs * self.total_count)
    variance = property(lambda self: self.total_count * self.probs * (1 - self.probs))

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Multinomial, _instance)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        new._binomial = Binomial(self.total_count, probs=new.probs)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _new(self, *args, **kwargs):
        return self._categorical._new(*args, **kwargs)

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    logits = property(lambda self: self._categorical.logits)
    probs = property(lambda self: self._categorical.probs)
    param_shape = property(lambda self: self._categorical.param_shape)

    def sample(self, sample_shape=ember.Size()):
        sample_shape = ember.Size(sample_shape)
        samples = self._categorical.sample(ember.Size((self.total_count,)) + sample_shape)
        # (total_count, *sample, *batch) -> (*sample, *batch, total_count)
        samples = samples.permute(*range(1, samples.dim()), 0)
        counts = ember.zeros(self._extended_shape(sample_shape), dtype=samples.dtype,
                             device=samples.device)
        counts.scatter_add_(-1, samples, ember.ones_like(samples))
        return counts.type_as(self.probs)

    def entropy(self):
        n = ember.tensor(self.total_count)
        term1 = n * self._categorical.entropy() - ember.lgamma(n + 1)
        support = self._binomial.enumerate_support(expand=False)[1:]
        binomial_probs = ember.exp(self._binomial.log_prob(support))
        term2 = (binomial_probs * ember.lgamma(support + 1)).sum([0, -1])
        return term1 + term2

    def log_prob(self, value):
        _check(self, value)
        logits, value = broadcast_all(self.logits, value)
        log_factorial_n = ember.lgamma(value.sum(-1) + 1)
        log_factorial_xs = ember.lgamma(value + 1).sum(-1)
        # NOTE: as torch, a category of probability zero drawn zero times contributes 0
        logits = ember.where((value == 0) & (logits == -math.inf), 0.0, logits)
        return log_factorial_n - log_factorial_xs + (logits * value).sum(-1)
