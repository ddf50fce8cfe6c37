"""The ``Distribution`` base class and ``ExponentialFamily``, as in torch.distributions."""
import warnings

import ember
from . import constraints
from .utils import lazy_property

__all__ = ["Distribution", "ExponentialFamily"]


def _all_true(valid):
    return bool(valid.all()) if isinstance(valid, ember.Tensor) else bool(valid)


def _compact(value):
    """``value`` without the copies an ``expand`` made: its stride-0 dims narrowed to one
    element, so a constraint check reads each distinct element once (a scale_tril expanded
    over a batch of 4096 is one matrix)."""
    for d, (n, st) in enumerate(zip(value.shape, value.stride())):
        if st == 0 and n > 1:
            value = value.narrow(d, 0, 1)
    return value


class Distribution:
    """The base class of probability distributions: a batch of independent distributions
    (``batch_shape``) over events of ``event_shape``.

    Arguments are validated against ``arg_constraints`` (and values against ``support``) unless
    ``validate_args=False`` or ``Distribution.set_default_validate_args(False)``; an invalid
    one raises ``ValueError`` in torch's words.

    Example:
        >>> from ember.distributions import Normal
        >>> d = Normal(ember.zeros(3), 1.0)
        >>> d.batch_shape, d.event_shape, d.sample((2,)).shape
        (torch.Size([3]), torch.Size([]), torch.Size([2, 3]))
        >>> Normal(0., -1.)
        Traceback (most recent call last):
        ...
        ValueError: Expected parameter scale (Tensor of shape ()) of distribution Normal(loc:
        0.0, scale: -1.0) to satisfy the constraint GreaterThan(lower_bound=0.0), but found
        invalid values: -1.0
    """
    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__
    # tensor attributes that keep their own (unbroadcast) shape when the batch is expanded
    _unexpanded = ()

    @staticmethod
    def set_default_validate_args(value):
        """Turn argument validation on or off for distributions made from now on."""
        if value not in [True, False]:
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=ember.Size(), event_shape=ember.Size(), validate_args=None):
        self._batch_shape, self._event_shape = ember.Size(batch_shape), ember.Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if not self._validate_args:
            return
        try:
            arg_constraints = self.arg_constraints
        except NotImplementedError:
            arg_constraints = {}
            warnings.warn(f"{self.__class__} does not define `arg_constraints`. Please set "
                          "`arg_constraints = {}` or initialize the distribution with "
                          "`validate_args=False` to turn off validation.", stacklevel=2)
        for param, constraint in arg_constraints.items():
            if constraints.is_dependent(constraint):
                continue        # cannot be checked
            if param not in self.__dict__ and isinstance(getattr(type(self), param), lazy_property):
                continue        # not made yet: making it now would cost what laziness saves
            value = getattr(self, param)
            if not _all_true(constraint.check(_compact(value))):
                raise ValueError(
                    f"Expected parameter {param} ({type(value).__name__} of shape "
                    f"{tuple(value.shape)}) of distribution {self!r} to satisfy the constraint "
                    f"{constraint!r}, but found invalid values:\n{value}")

    def expand(self, batch_shape, _instance=None):
        """A view of this distribution with a larger batch (parameters are expanded, not
        copied).

        Example:
            >>> from ember.distributions import Bernoulli
            >>> Bernoulli(0.3).expand([2, 3]).sample().shape
            torch.Size([2, 3])
        """
        batch_shape = ember.Size(batch_shape)
        new = self._get_checked_instance(type(self), _instance)
        n = len(self._batch_shape)
        for k, v in self.__dict__.items():
            if k in self._unexpanded or k.startswith("_batch_shape"):
                pass
            elif isinstance(v, ember.Tensor) and v.shape[:n] == self._batch_shape:
                v = v.expand(batch_shape + v.shape[n:])
            elif isinstance(v, Distribution) and v.batch_shape == self._batch_shape:
                v = v.expand(batch_shape)
            new.__dict__[k] = v
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    batch_shape = property(lambda self: self._batch_shape, doc="The shape of the batch.")
    event_shape = property(lambda self: self._event_shape, doc="The shape of one sample.")

    @property
    def arg_constraints(self):
        """``{parameter name: Constraint}`` the parameters must satisfy."""
        raise NotImplementedError

    @property
    def support(self):
        """The ``Constraint`` of the values this distribution takes."""
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError

    stddev = property(lambda self: self.variance.sqrt())

    def sample(self, sample_shape=ember.Size()):
        """Draw ``sample_shape`` samples (shape ``sample_shape + batch_shape + event_shape``),
        without gradient."""
        with ember.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=ember.Size()):
        """Draw reparameterised samples: gradients flow to the parameters."""
        raise NotImplementedError

    def sample_n(self, n):
        warnings.warn("`sample_n(n)` will be deprecated. Use `sample((n,))` instead.",
                      FutureWarning, stacklevel=2)
        return self.sample(ember.Size((n,)))

    def log_prob(self, value):
        raise NotImplementedError

    def cdf(self, value):
        raise NotImplementedError

    def icdf(self, value):
        raise NotImplementedError

    def enumerate_support(self, expand=True):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def perplexity(self):
        """``exp(entropy)``."""
        return ember.exp(self.entropy())

    def _extended_shape(self, sample_shape=ember.Size()):
        return ember.Size(tuple(sample_shape) + self._batch_shape + self._event_shape)

    def _validate_sample(self, value):
        if not isinstance(value, ember.Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        start = len(value.size()) - len(self._event_shape)
        if value.size()[start:] != self._event_shape:
            raise ValueError(f"The right-most size of value must match event_shape: "
                             f"{value.size()} vs {self._event_shape}.")
        actual, expected = value.size(), self._batch_shape + self._event_shape
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: "
                                 f"{actual} vs {expected}.")
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{self.__class__} does not define `support` to enable sample "
                          "validation. Please initialize the distribution with "
                          "`validate_args=False` to turn off validation.", stacklevel=2)
            return
        if not _all_true(support.check(value)):
            raise ValueError(f"Expected value argument ({type(value).__name__} of shape "
                             f"{tuple(value.shape)}) to be within the support ({support!r}) "
                             f"of the distribution {self!r}, but found invalid values:\n{value}")

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                "__init__ method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self):
        names = [k for k in self.arg_constraints if k in self.__dict__]
        return self.__class__.__name__ + "(" + ", ".join(
            f"{p}: {self.__dict__[p] if self.__dict__[p].numel() == 1 else self.__dict__[p].size()}"
            for p in names) + ")"


class ExponentialFamily(Distribution):
    """A distribution of the exponential family, ``p(x; theta) = exp(<t(x), theta> - F(theta)
    + k(x))``: its entropy comes from the log normaliser ``F`` by the Bregman divergence, and
    the KL divergence between two of the same type likewise.

    Example:
        >>> from ember.distributions import Poisson, ExponentialFamily
        >>> isinstance(Poisson(1.0), ExponentialFamily)
        True
    """

    @property
    def _natural_params(self):
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError

    def entropy(self):
        nparams = [p.detach().requires_grad_() for p in self._natural_params]
        lg_normal = self._log_normalizer(*nparams)
        grads = ember.autograd.grad(lg_normal.sum(), nparams, create_graph=True)
        result = lg_normal - self._mean_carrier_measure
        for p, g in zip(nparams, grads):
            result = result - (p * g).reshape(self._batch_shape + (-1,)).sum(-1)
        return result
