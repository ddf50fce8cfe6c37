"""Relaxed (Concrete / Gumbel-softmax) distributions: continuous, reparameterisable
stand-ins for Bernoulli and one-hot categorical samples at a ``temperature``."""
import ember
from . import constraints
from .compound import TransformedDistribution
from .continuous import _check
from .discrete import Bernoulli, Categorical, _ProbsOrLogits
from .distribution import Distribution
from .transforms import ExpTransform, SigmoidTransform
from .utils import broadcast_all, clamp_probs

__all__ = ["ExpRelaxedCategorical", "LogitRelaxedBernoulli", "RelaxedBernoulli",
           "RelaxedOneHotCategorical"]


class LogitRelaxedBernoulli(_ProbsOrLogits, Distribution):
    """The logit of a ``RelaxedBernoulli`` sample (Maddison et al., 2017).

    Example:
        >>> from ember.distributions.relaxed import LogitRelaxedBernoulli
        >>> LogitRelaxedBernoulli(ember.tensor(0.5), logits=ember.tensor(0.)).log_prob(
        ...     ember.tensor(0.))
        tensor(-2.0794)
    """
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self.temperature = temperature
        Bernoulli.__init__(self, probs, logits, validate_args=validate_args)

    _unexpanded = ("temperature",)

    def rsample(self, sample_shape=ember.Size()):
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(shape))
        uniforms = clamp_probs(ember.rand(shape, dtype=probs.dtype, device=probs.device))
        return (uniforms.log() - (-uniforms).log1p() + probs.log() - (-probs).log1p()) / \
            self.temperature

    def log_prob(self, value):
        _check(self, value)
        logits, value = broadcast_all(self.logits, value)
        diff = logits - value.mul(self.temperature)
        return self.temperature.log() + diff - 2 * diff.exp().log1p()


class RelaxedBernoulli(TransformedDistribution):
    """A relaxed Bernoulli on the unit interval: samples approach 0/1 as ``temperature``
    goes to zero, and ``rsample`` is differentiable in ``probs``/``logits``.

    Example:
        >>> from ember.distributions import RelaxedBernoulli
        >>> d = RelaxedBernoulli(ember.tensor(0.5), probs=ember.tensor(0.5))
        >>> d.log_prob(ember.tensor(0.5))
        tensor(-0.6931)
    """
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support, has_rsample = constraints.unit_interval, True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        super().__init__(LogitRelaxedBernoulli(temperature, probs, logits), SigmoidTransform(),
                         validate_args=validate_args)

    temperature = property(lambda self: self.base_dist.temperature)
    logits = property(lambda self: self.base_dist.logits)
    probs = property(lambda self: self.base_dist.probs)


class ExpRelaxedCategorical(Distribution):
    """The log of a ``RelaxedOneHotCategorical`` sample (the Gumbel-softmax scores).

    Example:
        >>> from ember.distributions.relaxed import ExpRelaxedCategorical
        >>> d = ExpRelaxedCategorical(ember.tensor(1.), ember.tensor([0.5, 0.5]))
        >>> bool(d.rsample().exp().sum().isclose(ember.tensor(1.)))
        True
    """
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support, has_rsample = constraints.real_vector, True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        self.temperature = temperature
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:],
                         validate_args=validate_args)

    _unexpanded = ("temperature",)

    def _new(self, *args, **kwargs):
        return self._categorical._new(*args, **kwargs)

    param_shape = property(lambda self: self._categorical.param_shape)
    logits = property(lambda self: self._categorical.logits)
    probs = property(lambda self: self._categorical.probs)

    def rsample(self, sample_shape=ember.Size()):
        uniforms = clamp_probs(ember.rand(self._extended_shape(sample_shape),
                                          dtype=self.logits.dtype, device=self.logits.device))
        gumbels = -(-uniforms.log()).log()
        scores = (self.logits + gumbels) / self.temperature
        return scores - scores.logsumexp(dim=-1, keepdim=True)

    def log_prob(self, value):
        K = self._categorical._num_events
        _check(self, value)
        logits, value = broadcast_all(self.logits, value)
        log_scale = ember.full_like(self.temperature, float(K)).lgamma() - \
            self.temperature.log().mul(-(K - 1))
        score = logits - value.mul(self.temperature)
        return (score - score.logsumexp(dim=-1, keepdim=True)).sum(-1) + log_scale


class RelaxedOneHotCategorical(TransformedDistribution):
    """The Gumbel-softmax (Concrete) distribution on the simplex: ``softmax((logits + G) /
    temperature)`` with Gumbel noise ``G``; reparameterised.

    Example:
        >>> from ember.distributions import RelaxedOneHotCategorical
        >>> d = RelaxedOneHotCategorical(ember.tensor(0.5), ember.tensor([0.25, 0.75]))
        >>> bool(d.rsample().sum().isclose(ember.tensor(1.)))
        True
        >>> d.log_prob(ember.tensor([0.5, 0.5]))
        tensor(-0.9808)
    """
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support, has_rsample = constraints.simplex, True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        super().__init__(ExpRelaxedCategorical(temperature, probs, logits,
                                               validate_args=validate_args), ExpTransform(),
                         validate_args=validate_args)

    temperature = property(lambda self: self.base_dist.temperature)
    logits = property(lambda self: self.base_dist.logits)
    probs = property(lambda self: self.base_dist.probs)
