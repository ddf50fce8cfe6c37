"""``biject_to`` and ``transform_to``: from a constraint to a transform from the real numbers
onto it, as ``torch.distributions.constraint_registry``. ``biject_to(c)`` is bijective (for
HMC and other samplers in unconstrained space); ``transform_to(c)`` need not be (for
optimisation, e.g. softmax onto the simplex).

Example:
    >>> from ember.distributions import biject_to, transform_to, constraints
    >>> biject_to(constraints.real_vector)
    IndependentTransform(ComposeTransform(
    ), 1)
    >>> transform_to(constraints.simplex)(ember.zeros(2))
    tensor([0.5000, 0.5000])
"""
import functools
from numbers import Number

from . import constraints, transforms

__all__ = ["ConstraintRegistry", "biject_to", "transform_to"]


class ConstraintRegistry:
    """A table from constraint types to transform factories.

    Example:
        >>> from ember.distributions.constraint_registry import ConstraintRegistry
        >>> from ember.distributions import constraints, transforms
        >>> r = ConstraintRegistry()
        >>> _ = r.register(constraints.positive, lambda c: transforms.ExpTransform())
        >>> r(constraints.positive)
        ExpTransform()
    """

    def __init__(self):
        self._registry = {}

    def register(self, constraint, factory=None):
        """Register ``factory(constraint) -> Transform`` for a constraint type (or the type of
        an instance); a decorator when ``factory`` is not given."""
        if factory is None:
            return lambda factory: self.register(constraint, factory)
        if isinstance(constraint, constraints.Constraint):
            constraint = type(constraint)
        if not isinstance(constraint, type) or not issubclass(constraint, constraints.Constraint):
            raise TypeError(f"Expected constraint to be either a Constraint subclass or "
                            f"instance, but got {constraint}")
        self._registry[constraint] = factory
        return factory

    def __call__(self, constraint):
        try:
            factory = self._registry[type(constraint)]
        except KeyError:
            raise NotImplementedError(f"Cannot transform {type(constraint).__name__} "
                                      "constraints") from None
        return factory(constraint)


biject_to = ConstraintRegistry()
transform_to = ConstraintRegistry()


def _both(*cs, by_parts=False):
    """Register the decorated factory for ``cs`` in both registries; ``by_parts``: it is
    ``fn(registry, constraint)``, a transform built of the ones that same registry gives the
    constraint's parts."""
    def deco(fn):
        for c in cs:
            for registry in (biject_to, transform_to):
                registry.register(c, functools.partial(fn, registry) if by_parts else fn)
        return fn
    return deco


@_both(constraints.real)
def _transform_to_real(constraint):
    return transforms.identity_transform


@_both(constraints.independent, by_parts=True)
def _independent(registry, constraint):
    return transforms.IndependentTransform(registry(constraint.base_constraint),
                                           constraint.reinterpreted_batch_ndims)


@_both(constraints.positive, constraints.nonnegative)
def _transform_to_positive(constraint):
    return transforms.ExpTransform()


@_both(constraints.greater_than, constraints.greater_than_eq)
def _transform_to_greater_than(constraint):
    return transforms.ComposeTransform([transforms.ExpTransform(),
                                        transforms.AffineTransform(constraint.lower_bound, 1)])


@_both(constraints.less_than)
def _transform_to_less_than(constraint):
    return transforms.ComposeTransform([transforms.ExpTransform(),
                                        transforms.AffineTransform(constraint.upper_bound, -1)])


@_both(constraints.interval, constraints.half_open_interval)
def _transform_to_interval(constraint):
    lo, hi = constraint.lower_bound, constraint.upper_bound
    if isinstance(lo, Number) and lo == 0 and isinstance(hi, Number) and hi == 1:
        return transforms.SigmoidTransform()
    return transforms.ComposeTransform([transforms.SigmoidTransform(),
                                        transforms.AffineTransform(lo, hi - lo)])


@biject_to.register(constraints.simplex)
def _biject_to_simplex(constraint):
    return transforms.StickBreakingTransform()


@transform_to.register(constraints.simplex)
def _transform_to_simplex(constraint):
    return transforms.SoftmaxTransform()


@transform_to.register(constraints.lower_cholesky)
def _transform_to_lower_cholesky(constraint):
    return transforms.LowerCholeskyTransform()


@transform_to.register(constraints.positive_definite)
@transform_to.register(constraints.positive_semidefinite)
def _transform_to_positive_definite(constraint):
    return transforms.PositiveDefiniteTransform()


@_both(constraints.corr_cholesky)
def _transform_to_corr_cholesky(constraint):
    return transforms.CorrCholeskyTransform()


@_both(constraints.cat, by_parts=True)
def _cat(registry, constraint):
    return transforms.CatTransform([registry(c) for c in constraint.cseq], constraint.dim,
                                   constraint.lengths)


@_both(constraints.stack, by_parts=True)
def _stack(registry, constraint):
    return transforms.StackTransform([registry(c) for c in constraint.cseq], constraint.dim)
