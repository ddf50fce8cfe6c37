r"""Probability distributions and their sampling, log densities and KL divergences, as
``torch.distributions`` (written in ember ops, so densities and reparameterised samples are
differentiable).

Sampling is reparameterised (``rsample``) where torch's is: location-scale families through
``loc + scale * eps``, Gamma (and Beta, Dirichlet, Chi2, StudentT, FisherSnedecor...) through
the implicit gradient of the Gamma draws, relaxed categorical ones through Gumbel noise.

Example:
    >>> from ember.distributions import Categorical, Normal
    >>> m = Categorical(ember.tensor([0.25, 0.75]))
    >>> a = m.sample()
    >>> m.log_prob(ember.tensor(1))
    tensor(-0.2877)
    >>> loc = ember.tensor(0., requires_grad=True)
    >>> Normal(loc, 1.).rsample((4,)).shape
    torch.Size([4])
"""
import importlib
import sys

from . import constraints, transforms
from .compound import Independent, MixtureSameFamily, TransformedDistribution
from .constraint_registry import biject_to, transform_to
from .continuous import (Beta, Cauchy, Chi2, ContinuousBernoulli, Exponential, FisherSnedecor,
                         Gamma, GeneralizedPareto, Gumbel, HalfCauchy, HalfNormal, InverseGamma,
                         Kumaraswamy, Laplace, LogNormal, Normal, Pareto, StudentT, Uniform,
                         VonMises, Weibull)
from .discrete import (Bernoulli, Binomial, Categorical, Geometric, Multinomial, NegativeBinomial,
                       OneHotCategorical, OneHotCategoricalStraightThrough, Poisson)
from .distribution import Distribution, ExponentialFamily
from .kl import kl_divergence, register_kl
from .multivariate import (Dirichlet, LKJCholesky, LogisticNormal, LowRankMultivariateNormal,
                           MultivariateNormal, Wishart)
from .relaxed import RelaxedBernoulli, RelaxedOneHotCategorical
from .transforms import *  # noqa: F401,F403

__all__ = ["Bernoulli", "Beta", "Binomial", "Categorical", "Cauchy", "Chi2",
           "ContinuousBernoulli", "Dirichlet", "Distribution", "Exponential", "ExponentialFamily",
           "FisherSnedecor", "Gamma", "GeneralizedPareto", "Geometric", "Gumbel", "HalfCauchy",
           "HalfNormal", "Independent", "InverseGamma", "Kumaraswamy", "LKJCholesky", "Laplace",
           "LogNormal", "LogisticNormal", "LowRankMultivariateNormal", "MixtureSameFamily",
           "Multinomial", "MultivariateNormal", "NegativeBinomial", "Normal",
           "OneHotCategorical", "OneHotCategoricalStraightThrough", "Pareto",
           "RelaxedBernoulli", "RelaxedOneHotCategorical", "StudentT", "Poisson", "Uniform",
           "VonMises", "Weibull", "Wishart", "TransformedDistribution", "biject_to",
           "kl_divergence", "register_kl", "transform_to"] + transforms.__all__

# torch's one-module-per-distribution names (``torch.distributions.normal.Normal``), mapped
# onto the topic modules above so that ``from torch.distributions.normal import Normal`` works
_SUBMODULES = {
    "bernoulli": "discrete", "binomial": "discrete", "categorical": "discrete",
    "geometric": "discrete", "multinomial": "discrete", "negative_binomial": "discrete",
    "one_hot_categorical": "discrete", "poisson": "discrete",
    "beta": "continuous", "cauchy": "continuous", "chi2": "continuous",
    "continuous_bernoulli": "continuous", "exponential": "continuous",
    "fishersnedecor": "continuous", "gamma": "continuous", "generalized_pareto": "continuous",
    "gumbel": "continuous", "half_cauchy": "continuous", "half_normal": "continuous",
    "inverse_gamma": "continuous", "kumaraswamy": "continuous", "laplace": "continuous",
    "log_normal": "continuous", "normal": "continuous", "pareto": "continuous",
    "studentT": "continuous", "uniform": "continuous", "von_mises": "continuous",
    "weibull": "continuous",
    "dirichlet": "multivariate", "lkj_cholesky": "multivariate",
    "logistic_normal": "multivariate", "lowrank_multivariate_normal": "multivariate",
    "multivariate_normal": "multivariate", "wishart": "multivariate",
    "relaxed_bernoulli": "relaxed", "relaxed_categorical": "relaxed",
    "independent": "compound", "mixture_same_family": "compound",
    "transformed_distribution": "compound", "exp_family": "distribution"}
for _alias, _target in _SUBMODULES.items():
    sys.modules[f"{__name__}.{_alias}"] = sys.modules[f"{__name__}.{_target}"]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{_SUBMODULES[name]}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
