"""Transforms: invertible maps with the log absolute determinant of their Jacobian, as
``torch.distributions.transforms``. ``TransformedDistribution`` pushes a base distribution
through them; ``constraint_registry`` maps constraints to them.

Example:
    >>> from ember.distributions.transforms import ExpTransform, AffineTransform
    >>> t = ExpTransform()
    >>> x = ember.tensor([0., 1.])
    >>> t(x), t.inv(t(x)), t.log_abs_det_jacobian(x, t(x))
    (tensor([1.0000, 2.7183]), tensor([0.0000, 1.0000]), tensor([0., 1.]))
"""
import copy
import math
from numbers import Number

import ember
from . import constraints
from .utils import _sum_rightmost, broadcast_all, lazy_property, tril_matrix_to_vec, \
    vec_to_tril_matrix

__all__ = ["AbsTransform", "AffineTransform", "CatTransform", "ComposeTransform",
           "CorrCholeskyTransform", "CumulativeDistributionTransform", "ExpTransform",
           "IndependentTransform", "LowerCholeskyTransform", "PositiveDefiniteTransform",
           "PowerTransform", "ReshapeTransform", "SigmoidTransform", "SoftplusTransform",
           "TanhTransform", "SoftmaxTransform", "StackTransform", "StickBreakingTransform",
           "Transform", "identity_transform"]


def _softplus(x):
    return ember.nn.functional.softplus(x)


def _pad(x, lr, value):
    return ember.nn.functional.pad(x, lr, value=value)


class Transform:
    """An invertible (or at least computable) map ``y = t(x)`` with ``t.inv(y)`` and
    ``t.log_abs_det_jacobian(x, y)``. ``cache_size=1`` remembers the last ``(x, y)`` pair, so
    ``t.inv(t(x))`` returns ``x`` itself (the identity of the object).

    Example:
        >>> from ember.distributions.transforms import ExpTransform
        >>> t = ExpTransform(cache_size=1)
        >>> x = ember.tensor([1.])
        >>> t.inv(t(x)) is x
        True
    """
    bijective = False

    def __init__(self, cache_size=0):
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size, self._inv = cache_size, None
        if cache_size:
            self._cached_x_y = (None, None)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_inv"] = None
        return state

    @property
    def event_dim(self):
        if self.domain.event_dim == self.codomain.event_dim:
            return self.domain.event_dim
        raise ValueError("Please use either .domain.event_dim or .codomain.event_dim")

    @property
    def inv(self):
        """The inverse transform (``t.inv(t(x)) == x``)."""
        if self._inv is None:
            self._inv = _InverseTransform(self)
        return self._inv

    @property
    def sign(self):
        """The sign of the Jacobian determinant, for bijective univariate transforms."""
        raise NotImplementedError

    _children = ()      # names of attributes holding sub-transforms, cached alike

    def with_cache(self, cache_size=1):
        """This transform with ``cache_size`` (0 or 1)."""
        if self._cache_size == cache_size:
            return self
        new = copy.copy(self)
        Transform.__init__(new, cache_size)
        for name in self._children:
            sub = getattr(self, name)
            setattr(new, name, [t.with_cache(cache_size) for t in sub] if isinstance(
                sub, list) else sub.with_cache(cache_size))
        return new

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def __call__(self, x):
        if self._cache_size == 0:
            return self._call(x)
        x_old, y_old = self._cached_x_y
        if x is x_old:
            return y_old
        y = self._call(x)
        self._cached_x_y = (x, y)
        return y

    def _inv_call(self, y):
        if self._cache_size == 0:
            return self._inverse(y)
        x_old, y_old = self._cached_x_y
        if y is y_old:
            return x_old
        x = self._inverse(y)
        self._cached_x_y = (x, y)
        return x

    def _call(self, x):
        raise NotImplementedError

    def _inverse(self, y):
        raise NotImplementedError

    def log_abs_det_jacobian(self, x, y):
        """``log |det dy/dx|`` summed over the event dims (per batch element)."""
        raise NotImplementedError

    def __repr__(self):
        return self.__class__.__name__ + "()"

    def forward_shape(self, shape):
        """The shape of ``t(x)`` for ``x`` of ``shape``."""
        return shape

    def inverse_shape(self, shape):
        """The shape of ``t.inv(y)`` for ``y`` of ``shape``."""
        return shape


class _Stateless(Transform):
    """A transform with no parameters: instances of one class are all equal."""

    def __eq__(self, other):
        return isinstance(other, type(self))

    __hash__ = Transform.__hash__


class _InverseTransform(Transform):
    """The inverse of a transform, made by ``Transform.inv``."""

    def __init__(self, transform):
        super().__init__(cache_size=transform._cache_size)
        self._inv = transform

    domain = constraints.dependent_property(lambda self: self._inv.codomain, is_discrete=False)
    codomain = constraints.dependent_property(lambda self: self._inv.domain, is_discrete=False)
    bijective = property(lambda self: self._inv.bijective)
    sign = property(lambda self: self._inv.sign)
    inv = property(lambda self: self._inv)

    def with_cache(self, cache_size=1):
        return self.inv.with_cache(cache_size).inv

    def __eq__(self, other):
        return isinstance(other, _InverseTransform) and self._inv == other._inv

    __hash__ = Transform.__hash__

    def __repr__(self):
        return f"{self.__class__.__name__}({self._inv!r})"

    def __call__(self, x):
        return self._inv._inv_call(x)

    def log_abs_det_jacobian(self, x, y):
        return -self._inv.log_abs_det_jacobian(y, x)

    def forward_shape(self, shape):
        return self._inv.inverse_shape(shape)

    def inverse_shape(self, shape):
        return self._inv.forward_shape(shape)


class ComposeTransform(Transform):
    """Apply ``parts`` in order (the log-Jacobians add up, summed to a common event dim).

    Example:
        >>> from ember.distributions.transforms import ComposeTransform, ExpTransform, \\
        ...     AffineTransform
        >>> t = ComposeTransform([AffineTransform(1., 2.), ExpTransform()])
        >>> t(ember.tensor([0.])), t.log_abs_det_jacobian(ember.tensor([0.]), t(ember.tensor([0.])))
        (tensor([2.7183]), tensor([1.6931]))
    """
    _children = ("parts",)

    def __init__(self, parts, cache_size=0):
        if cache_size:
            parts = [part.with_cache(cache_size) for part in parts]
        super().__init__(cache_size=cache_size)
        self.parts = list(parts)

    def __eq__(self, other):
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    __hash__ = Transform.__hash__

    def _event_dim(self, parts, first, last):
        event_dim = getattr(parts[-1], last).event_dim
        for part in reversed(parts):
            event_dim += getattr(part, first).event_dim - getattr(part, last).event_dim
            event_dim = max(event_dim, getattr(part, first).event_dim)
        return event_dim

    def _end(self, parts, first, last):
        if not parts:
            return constraints.real
        c = getattr(parts[0], first)
        event_dim = self._event_dim(parts, first, last)
        return constraints.independent(c, event_dim - c.event_dim) if event_dim > c.event_dim else c

    domain = constraints.dependent_property(
        lambda self: self._end(self.parts, "domain", "codomain"), is_discrete=False)
    codomain = constraints.dependent_property(
        lambda self: self._end(self.parts[::-1], "codomain", "domain"), is_discrete=False)
    bijective = lazy_property(lambda self: all(p.bijective for p in self.parts))
    bijective.wrapped.__name__ = "bijective"

    @lazy_property
    def sign(self):
        sign = 1
        for p in self.parts:
            sign = sign * p.sign
        return sign

    @property
    def inv(self):
        if self._inv is None:
            self._inv = ComposeTransform([p.inv for p in reversed(self.parts)])
            self._inv._inv = self
        return self._inv

    def __call__(self, x):
        for part in self.parts:
            x = part(x)
        return x

    def log_abs_det_jacobian(self, x, y):
        if not self.parts:
            return ember.zeros_like(x)
        xs = [x]
        for part in self.parts[:-1]:
            xs.append(part(xs[-1]))
        xs.append(y)
        result, event_dim = 0, self.domain.event_dim
        for part, a, b in zip(self.parts, xs[:-1], xs[1:]):
            result = result + _sum_rightmost(part.log_abs_det_jacobian(a, b),
                                             event_dim - part.domain.event_dim)
            event_dim += part.codomain.event_dim - part.domain.event_dim
        return result

    def forward_shape(self, shape):
        for part in self.parts:
            shape = part.forward_shape(shape)
        return shape

    def inverse_shape(self, shape):
        for part in reversed(self.parts):
            shape = part.inverse_shape(shape)
        return shape

    def __repr__(self):
        return self.__class__.__name__ + "(\n    " + ",\n    ".join(
            repr(p) for p in self.parts) + "\n)"


identity_transform = ComposeTransform([])


class IndependentTransform(Transform):
    """``base_transform`` with ``reinterpreted_batch_ndims`` more event dims: its
    log-Jacobian is summed over them.

    Example:
        >>> from ember.distributions.transforms import IndependentTransform, ExpTransform
        >>> t = IndependentTransform(ExpTransform(), 1)
        >>> x = ember.tensor([[0., 1.]]); t.log_abs_det_jacobian(x, t(x))
        tensor([1.])
    """
    _children = ("base_transform",)

    def __init__(self, base_transform, reinterpreted_batch_ndims, cache_size=0):
        super().__init__(cache_size=cache_size)
        self.base_transform = base_transform.with_cache(cache_size)
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    domain = constraints.dependent_property(lambda self: constraints.independent(
        self.base_transform.domain, self.reinterpreted_batch_ndims), is_discrete=False)
    codomain = constraints.dependent_property(lambda self: constraints.independent(
        self.base_transform.codomain, self.reinterpreted_batch_ndims), is_discrete=False)
    bijective = property(lambda self: self.base_transform.bijective)
    sign = property(lambda self: self.base_transform.sign)

    def _call(self, x):
        if x.dim() < self.domain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform(x)

    def _inverse(self, y):
        if y.dim() < self.codomain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform.inv(y)

    def log_abs_det_jacobian(self, x, y):
        return _sum_rightmost(self.base_transform.log_abs_det_jacobian(x, y),
                              self.reinterpreted_batch_ndims)

    def __repr__(self):
        return f"{self.__class__.__name__}({self.base_transform!r}, " \
               f"{self.reinterpreted_batch_ndims})"

    def forward_shape(self, shape):
        return self.base_transform.forward_shape(shape)

    def inverse_shape(self, shape):
        return self.base_transform.inverse_shape(shape)


def _check_tail(shape, tail):
    if len(shape) < len(tail):
        raise ValueError("Too few dimensions on input")
    cut = len(shape) - len(tail)
    if shape[cut:] != tail:
        raise ValueError(f"Shape mismatch: expected {shape[cut:]} but got {tail}")
    return shape[:cut]


class ReshapeTransform(Transform):
    """Reshape the rightmost ``in_shape`` dims to ``out_shape`` (log-Jacobian zero).

    Example:
        >>> from ember.distributions.transforms import ReshapeTransform
        >>> ReshapeTransform((4,), (2, 2))(ember.zeros(3, 4)).shape
        torch.Size([3, 2, 2])
    """
    bijective = True

    def __init__(self, in_shape, out_shape, cache_size=0):
        self.in_shape, self.out_shape = ember.Size(in_shape), ember.Size(out_shape)
        if self.in_shape.numel() != self.out_shape.numel():
            raise ValueError("in_shape, out_shape have different numbers of elements")
        super().__init__(cache_size=cache_size)

    domain = constraints.dependent_property(
        lambda self: constraints.independent(constraints.real, len(self.in_shape)))
    codomain = constraints.dependent_property(
        lambda self: constraints.independent(constraints.real, len(self.out_shape)))

    def _call(self, x):
        return x.reshape(x.shape[:x.dim() - len(self.in_shape)] + self.out_shape)

    def _inverse(self, y):
        return y.reshape(y.shape[:y.dim() - len(self.out_shape)] + self.in_shape)

    def log_abs_det_jacobian(self, x, y):
        return x.new_zeros(x.shape[:x.dim() - len(self.in_shape)])

    def forward_shape(self, shape):
        return _check_tail(shape, self.in_shape) + self.out_shape

    def inverse_shape(self, shape):
        return _check_tail(shape, self.out_shape) + self.in_shape


class ExpTransform(_Stateless):
    """``y = exp(x)``.

    Example:
        >>> from ember.distributions.transforms import ExpTransform
        >>> ExpTransform().inv(ember.tensor([1.]))
        tensor([0.])
    """
    domain, codomain, bijective, sign = constraints.real, constraints.positive, True, +1

    def _call(self, x):
        return x.exp()

    def _inverse(self, y):
        return y.log()

    def log_abs_det_jacobian(self, x, y):
        return x


def _shape_with(shape, *params):
    return ember.broadcast_shapes(shape, *(getattr(p, "shape", ()) for p in params))


class PowerTransform(Transform):
    """``y = x ** exponent`` on the positive reals.

    Example:
        >>> from ember.distributions.transforms import PowerTransform
        >>> PowerTransform(ember.tensor(2.))(ember.tensor([3.]))
        tensor([9.])
    """
    domain, codomain, bijective = constraints.positive, constraints.positive, True

    def __init__(self, exponent, cache_size=0):
        super().__init__(cache_size=cache_size)
        self.exponent, = broadcast_all(exponent)

    sign = lazy_property(lambda self: self.exponent.sign())
    sign.wrapped.__name__ = "sign"

    def __eq__(self, other):
        return isinstance(other, PowerTransform) and self.exponent.eq(other.exponent).all().item()

    __hash__ = Transform.__hash__

    def _call(self, x):
        return x.pow(self.exponent)

    def _inverse(self, y):
        return y.pow(1 / self.exponent)

    def log_abs_det_jacobian(self, x, y):
        return (self.exponent * y / x).abs().log()

    def forward_shape(self, shape):
        return _shape_with(shape, self.exponent)

    inverse_shape = forward_shape


def _clipped_sigmoid(x):
    finfo = ember.finfo(x.dtype)
    return ember.clamp(ember.sigmoid(x), min=finfo.tiny, max=1.0 - finfo.eps)


class SigmoidTransform(_Stateless):
    """``y = sigmoid(x)``, clipped into the open unit interval.

    Example:
        >>> from ember.distributions.transforms import SigmoidTransform
        >>> SigmoidTransform()(ember.tensor([0.]))
        tensor([0.5000])
    """
    domain, codomain, bijective, sign = constraints.real, constraints.unit_interval, True, +1

    def _call(self, x):
        return _clipped_sigmoid(x)

    def _inverse(self, y):
        finfo = ember.finfo(y.dtype)
        y = y.clamp(min=finfo.tiny, max=1.0 - finfo.eps)
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x, y):
        return -_softplus(-x) - _softplus(x)


class SoftplusTransform(_Stateless):
    """``y = log(1 + exp(x))``.

    Example:
        >>> from ember.distributions.transforms import SoftplusTransform
        >>> SoftplusTransform()(ember.tensor([0.]))
        tensor([0.6931])
    """
    domain, codomain, bijective, sign = constraints.real, constraints.positive, True, +1

    def _call(self, x):
        return _softplus(x)

    def _inverse(self, y):
        return (-y).expm1().neg().log() + y

    def log_abs_det_jacobian(self, x, y):
        return -_softplus(-x)


class TanhTransform(_Stateless):
    """``y = tanh(x)`` (``cache_size=1`` avoids ``atanh`` of values rounded to +-1).

    Example:
        >>> from ember.distributions.transforms import TanhTransform
        >>> TanhTransform().inv(ember.tensor([0.5]))
        tensor([0.5493])
    """
    domain, codomain, bijective, sign = constraints.real, constraints.interval(-1.0, 1.0), True, +1

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        return ember.atanh(y)

    def log_abs_det_jacobian(self, x, y):
        # log(1 - tanh(x)^2) in a form that is stable for large |x|
        return 2.0 * (math.log(2.0) - x - _softplus(-2.0 * x))


class AbsTransform(_Stateless):
    """``y = |x|`` (not bijective: the inverse picks the positive root).

    Example:
        >>> from ember.distributions.transforms import AbsTransform
        >>> AbsTransform()(ember.tensor([-2.]))
        tensor([2.])
    """
    domain, codomain = constraints.real, constraints.positive

    def _call(self, x):
        return x.abs()

    def _inverse(self, y):
        return y


def _same(a, b):
    return a == b if isinstance(a, Number) and isinstance(b, Number) else bool((a == b).all())


class AffineTransform(Transform):
    """``y = loc + scale * x``, over ``event_dim`` rightmost dims.

    Example:
        >>> from ember.distributions.transforms import AffineTransform
        >>> t = AffineTransform(1., ember.tensor([2., -3.]))
        >>> x = ember.zeros(2); t(x), t.log_abs_det_jacobian(x, t(x)), t.sign
        (tensor([1., 1.]), tensor([0.6931, 1.0986]), tensor([ 1., -1.]))
    """
    bijective = True

    def __init__(self, loc, scale, event_dim=0, cache_size=0):
        super().__init__(cache_size=cache_size)
        self.loc, self.scale, self._event_dim = loc, scale, event_dim

    event_dim = property(lambda self: self._event_dim)

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        return constraints.independent(constraints.real, self.event_dim) if self.event_dim \
            else constraints.real

    codomain = domain

    def __eq__(self, other):
        return isinstance(other, AffineTransform) and _same(self.loc, other.loc) and \
            _same(self.scale, other.scale)

    __hash__ = Transform.__hash__

    @property
    def sign(self):
        if isinstance(self.scale, Number):
            return 1 if float(self.scale) > 0 else -1 if float(self.scale) < 0 else 0
        return self.scale.sign()

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        shape, scale = x.shape, self.scale
        result = (ember.full_like(x, math.log(abs(scale))) if isinstance(scale, Number) else
                  ember.abs(scale).log())
        if self.event_dim:
            result = result.reshape(result.size()[:-self.event_dim] + (-1,)).sum(-1)
            shape = shape[:-self.event_dim]
        return result.expand(shape)

    def forward_shape(self, shape):
        return _shape_with(shape, self.loc, self.scale)

    inverse_shape = forward_shape


class CorrCholeskyTransform(Transform):
    """A vector of ``D(D-1)/2`` reals to the Cholesky factor of a ``D x D`` correlation
    matrix (tanh, then stick breaking along each row).

    Example:
        >>> from ember.distributions.transforms import CorrCholeskyTransform
        >>> L = CorrCholeskyTransform()(ember.zeros(3))
        >>> L @ L.T
        tensor([[1., 0., 0.],
                [0., 1., 0.],
                [0., 0., 1.]])
    """
    domain, codomain, bijective = constraints.real_vector, constraints.corr_cholesky, True

    def _call(self, x):
        eps = ember.finfo(x.dtype).eps
        r = vec_to_tril_matrix(ember.tanh(x).clamp(min=-1 + eps, max=1 - eps), diag=-1)
        z1m_cumprod_sqrt = (1 - r ** 2).sqrt().cumprod(-1)
        r = r + ember.eye(r.shape[-1], dtype=r.dtype, device=r.device)
        return r * _pad(z1m_cumprod_sqrt[..., :-1], [1, 0], 1)

    def _inverse(self, y):
        y_cumsum = 1 - ember.cumsum(y * y, dim=-1)
        y_cumsum_vec = tril_matrix_to_vec(_pad(y_cumsum[..., :-1], [1, 0], 1), diag=-1)
        t = tril_matrix_to_vec(y, diag=-1) / y_cumsum_vec.sqrt()
        return (t.log1p() - t.neg().log1p()) / 2

    def log_abs_det_jacobian(self, x, y, intermediates=None):
        y1m_cumsum_tril = tril_matrix_to_vec(1 - (y * y).cumsum(dim=-1), diag=-2)
        stick_breaking_logdet = 0.5 * y1m_cumsum_tril.log().sum(-1)
        tanh_logdet = -2 * (x + _softplus(-2 * x) - math.log(2.0)).sum(dim=-1)
        return stick_breaking_logdet + tanh_logdet

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        N = shape[-1]
        D = round((0.25 + 2 * N) ** 0.5 + 0.5)
        if D * (D - 1) // 2 != N:
            raise ValueError("Input is not a flattened lower-diagonal number")
        return shape[:-1] + (D, D)

    def inverse_shape(self, shape):
        if len(shape) < 2:
            raise ValueError("Too few dimensions on input")
        if shape[-2] != shape[-1]:
            raise ValueError("Input is not square")
        return shape[:-2] + (shape[-1] * (shape[-1] - 1) // 2,)


def _at_least_1d(shape):
    if len(shape) < 1:
        raise ValueError("Too few dimensions on input")
    return shape


class SoftmaxTransform(_Stateless):
    """Unconstrained vectors to the simplex by softmax (not bijective; the inverse is log).

    Example:
        >>> from ember.distributions.transforms import SoftmaxTransform
        >>> SoftmaxTransform()(ember.zeros(2))
        tensor([0.5000, 0.5000])
    """
    domain, codomain = constraints.real_vector, constraints.simplex

    def _call(self, x):
        probs = (x - x.max(-1, True)[0]).exp()
        return probs / probs.sum(-1, True)

    def _inverse(self, y):
        return y.log()

    forward_shape = inverse_shape = staticmethod(_at_least_1d)


class StickBreakingTransform(_Stateless):
    """``K - 1`` reals to the ``K``-simplex by stick breaking (bijective, unlike softmax).

    Example:
        >>> from ember.distributions.transforms import StickBreakingTransform
        >>> StickBreakingTransform()(ember.zeros(2))
        tensor([0.3333, 0.3333, 0.3333])
    """
    domain, codomain, bijective = constraints.real_vector, constraints.simplex, True

    def _call(self, x):
        offset = x.shape[-1] + 1 - x.new_ones(x.shape[-1]).cumsum(-1)
        z = _clipped_sigmoid(x - offset.log())
        return _pad(z, [0, 1], 1) * _pad((1 - z).cumprod(-1), [1, 0], 1)

    def _inverse(self, y):
        y_crop = y[..., :-1]
        offset = y.shape[-1] - y.new_ones(y_crop.shape[-1]).cumsum(-1)
        sf = ember.clamp(1 - y_crop.cumsum(-1), min=ember.finfo(y.dtype).tiny)
        return y_crop.log() - sf.log() + offset.log()

    def log_abs_det_jacobian(self, x, y):
        offset = x.shape[-1] + 1 - x.new_ones(x.shape[-1]).cumsum(-1)
        x = x - offset.log()
        return (-x + ember.nn.functional.logsigmoid(x) + y[..., :-1].log()).sum(-1)

    def forward_shape(self, shape):
        return _at_least_1d(shape)[:-1] + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        return _at_least_1d(shape)[:-1] + (shape[-1] - 1,)


class LowerCholeskyTransform(_Stateless):
    """Square matrices to lower-triangular ones with a positive diagonal (exp of the
    diagonal, the strict lower triangle kept).

    Example:
        >>> from ember.distributions.transforms import LowerCholeskyTransform
        >>> LowerCholeskyTransform()(ember.zeros(2, 2))
        tensor([[1., 0.],
                [0., 1.]])
    """
    domain, codomain = constraints.independent(constraints.real, 2), constraints.lower_cholesky

    def _call(self, x):
        return x.tril(-1) + x.diagonal(dim1=-2, dim2=-1).exp().diag_embed()

    def _inverse(self, y):
        return y.tril(-1) + y.diagonal(dim1=-2, dim2=-1).log().diag_embed()


class PositiveDefiniteTransform(_Stateless):
    """Square matrices to positive-definite ones: ``L L^T`` of ``LowerCholeskyTransform``.

    Example:
        >>> from ember.distributions.transforms import PositiveDefiniteTransform
        >>> PositiveDefiniteTransform()(ember.zeros(2, 2))
        tensor([[1., 0.],
                [0., 1.]])
    """
    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def _call(self, x):
        x = LowerCholeskyTransform()(x)
        return x @ x.mT

    def _inverse(self, y):
        return LowerCholeskyTransform().inv(ember.linalg.cholesky(y))


class _SliceTransform(Transform):
    """A transform per slice of a tensor along ``dim`` (Cat: slices of ``lengths``; Stack:
    single indices)."""
    _children = ("transforms",)

    def __init__(self, tseq, dim=0, cache_size=0):
        if not all(isinstance(t, Transform) for t in tseq):
            raise AssertionError("All elements of tseq must be Transform instances")
        super().__init__(cache_size=cache_size)
        self.transforms = [t.with_cache(cache_size) for t in tseq] if cache_size else list(tseq)
        self.dim = dim

    bijective = property(lambda self: all(t.bijective for t in self.transforms))

    def _split(self, z, name):
        if not -z.dim() <= self.dim < z.dim():
            raise AssertionError(f"dim {self.dim} out of range for {name} with {z.dim()} "
                                 "dimensions")
        if z.size(self.dim) != self.length:
            raise AssertionError(f"{name}.size({self.dim}) = {z.size(self.dim)} must equal "
                                 f"{self._length_name} {self.length}")
        return self._slices(z)

    def _call(self, x):
        return self._join([t(s) for t, s in zip(self.transforms, self._split(x, "x"))])

    def _inverse(self, y):
        return self._join([t.inv(s) for t, s in zip(self.transforms, self._split(y, "y"))])


class CatTransform(_SliceTransform):
    """``tseq[i]`` applied to the ``i``-th slice (of ``lengths[i]``) along ``dim``,
    concatenated.

    Example:
        >>> from ember.distributions.transforms import CatTransform, ExpTransform, \\
        ...     identity_transform
        >>> t = CatTransform([ExpTransform(), identity_transform], dim=0, lengths=[1, 1])
        >>> t(ember.tensor([0., 0.]))
        tensor([1., 0.])
    """
    _length_name = "length"

    def __init__(self, tseq, dim=0, lengths=None, cache_size=0):
        super().__init__(tseq, dim, cache_size)
        self.lengths = list(lengths) if lengths is not None else [1] * len(self.transforms)
        if len(self.lengths) != len(self.transforms):
            raise AssertionError(f"lengths ({len(self.lengths)}) must match transforms "
                                 f"({len(self.transforms)})")

    event_dim = lazy_property(lambda self: max(t.event_dim for t in self.transforms))
    event_dim.wrapped.__name__ = "event_dim"
    length = property(lambda self: sum(self.lengths))
    domain = constraints.dependent_property(lambda self: constraints.cat(
        [t.domain for t in self.transforms], self.dim, self.lengths))
    codomain = constraints.dependent_property(lambda self: constraints.cat(
        [t.codomain for t in self.transforms], self.dim, self.lengths))

    def _slices(self, z):
        return [z.narrow(self.dim, sum(self.lengths[:i]), n) for i, n in enumerate(self.lengths)]

    def _join(self, parts):
        return ember.cat(parts, dim=self.dim)

    def log_abs_det_jacobian(self, x, y):
        ldjs = [_sum_rightmost(t.log_abs_det_jacobian(a, b), self.event_dim - t.event_dim)
                for t, a, b in zip(self.transforms, self._split(x, "x"), self._split(y, "y"))]
        dim = (self.dim - x.dim() if self.dim >= 0 else self.dim) + self.event_dim
        return ember.cat(ldjs, dim=dim) if dim < 0 else sum(ldjs)


class StackTransform(_SliceTransform):
    """``tseq[i]`` applied to index ``i`` along ``dim``, stacked.

    Example:
        >>> from ember.distributions.transforms import StackTransform, ExpTransform, \\
        ...     identity_transform
        >>> StackTransform([ExpTransform(), identity_transform], dim=0)(ember.zeros(2))
        tensor([1., 0.])
    """
    _length_name = "len(transforms)"
    length = property(lambda self: len(self.transforms))
    domain = constraints.dependent_property(lambda self: constraints.stack(
        [t.domain for t in self.transforms], self.dim))
    codomain = constraints.dependent_property(lambda self: constraints.stack(
        [t.codomain for t in self.transforms], self.dim))

    def _slices(self, z):
        return [z.select(self.dim, i) for i in range(z.size(self.dim))]

    def _join(self, parts):
        return ember.stack(parts, dim=self.dim)

    def log_abs_det_jacobian(self, x, y):
        return ember.stack([t.log_abs_det_jacobian(a, b) for t, a, b in zip(
            self.transforms, self._split(x, "x"), self._split(y, "y"))], dim=self.dim)


class CumulativeDistributionTransform(Transform):
    """``y = distribution.cdf(x)``: a univariate distribution's values onto the unit
    interval (its log-Jacobian is the log density).

    Example:
        >>> from ember.distributions import Normal
        >>> from ember.distributions.transforms import CumulativeDistributionTransform
        >>> CumulativeDistributionTransform(Normal(0., 1.))(ember.tensor([0.]))
        tensor([0.5000])
    """
    bijective, codomain, sign = True, constraints.unit_interval, +1

    def __init__(self, distribution, cache_size=0):
        super().__init__(cache_size=cache_size)
        self.distribution = distribution

    domain = property(lambda self: self.distribution.support)

    def _call(self, x):
        return self.distribution.cdf(x)

    def _inverse(self, y):
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x, y):
        return self.distribution.log_prob(x)
