"""Helpers shared by the distributions, as ``torch.distributions.utils``.

Example:
    >>> from ember.distributions.utils import broadcast_all, probs_to_logits
    >>> [t.shape for t in broadcast_all(ember.zeros(2, 1), 3.0)]
    [torch.Size([2, 1]), torch.Size([2, 1])]
    >>> probs_to_logits(ember.tensor([0.5]), is_binary=True)
    tensor([0.])
"""
from functools import update_wrapper
from numbers import Number

import ember

euler_constant = 0.5772156649015329     # Euler-Mascheroni constant
__all__ = ["broadcast_all", "logits_to_probs", "clamp_probs", "probs_to_logits",
           "lazy_property", "tril_matrix_to_vec", "vec_to_tril_matrix"]


def broadcast_all(*values):
    """Broadcast tensors and numbers together; numbers become tensors of the first tensor's
    dtype and device (the default dtype when there is none).

    Example:
        >>> from ember.distributions.utils import broadcast_all
        >>> broadcast_all(1, ember.tensor([1., 2.]))
        (tensor([1., 1.]), tensor([1., 2.]))
    """
    Tensor = ember.Tensor
    if not all(isinstance(v, (Tensor, Number)) for v in values):
        raise ValueError("Input arguments must all be instances of Number, torch.Tensor or "
                         "objects implementing __torch_function__.")
    if not all(isinstance(v, Tensor) for v in values):
        like = next((v for v in values if isinstance(v, Tensor)), None)
        opts = (dict(dtype=like.dtype, device=like.device) if like is not None else
                dict(dtype=ember.get_default_dtype()))
        values = [v if isinstance(v, Tensor) else ember.tensor(v, **opts) for v in values]
    return ember.broadcast_tensors(*values)


def _standard_normal(shape, dtype, device):
    return ember.randn(shape, dtype=dtype, device=device)


def _sum_rightmost(value, dim):
    """``value`` summed over its ``dim`` rightmost dimensions."""
    return value if dim == 0 else value.reshape(value.shape[:-dim] + (-1,)).sum(-1)


def logits_to_probs(logits, is_binary=False):
    """Probabilities from logits: sigmoid when ``is_binary``, else softmax over the last dim.

    Example:
        >>> from ember.distributions.utils import logits_to_probs
        >>> logits_to_probs(ember.zeros(2))
        tensor([0.5000, 0.5000])
    """
    return ember.sigmoid(logits) if is_binary else ember.softmax(logits, dim=-1)


def clamp_probs(probs):
    """``probs`` clamped into ``[eps, 1 - eps]`` of their dtype.

    Example:
        >>> from ember.distributions.utils import clamp_probs
        >>> clamp_probs(ember.tensor([0., 1.], dtype=ember.float64)) > 0
        tensor([True, True])
    """
    eps = ember.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary=False):
    """Logits from probabilities (clamped away from 0 and 1): log-odds when ``is_binary``.

    Example:
        >>> from ember.distributions.utils import probs_to_logits
        >>> probs_to_logits(ember.tensor([1., 1.]))
        tensor([-1.1921e-07, -1.1921e-07])
    """
    p = clamp_probs(probs)
    return ember.log(p) - ember.log1p(-p) if is_binary else ember.log(p)


class lazy_property:
    """A property computed on first access and then stored on the instance (under grad mode,
    so a value cached inside ``no_grad`` still carries its graph).

    Example:
        >>> from ember.distributions.utils import lazy_property
        >>> class A:
        ...     @lazy_property
        ...     def x(self):
        ...         return 3
        >>> a = A(); a.x, 'x' in vars(a)
        (3, True)
    """

    def __init__(self, wrapped):
        self.wrapped = wrapped
        update_wrapper(self, wrapped)

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return _lazy_property_and_property(self.wrapped)
        with ember.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


class _lazy_property_and_property(lazy_property, property):
    """What a lazy_property is on its class: also a ``property``, for documentation tools."""

    def __init__(self, wrapped):
        property.__init__(self, wrapped)
        lazy_property.__init__(self, wrapped)


def _tril_mask(n, diag, device):
    arange = ember.arange(n, device=device)
    return arange < arange.view(-1, 1) + (diag + 1)


def tril_matrix_to_vec(mat, diag=0):
    """The lower triangle (from diagonal ``diag``) of ``mat``'s last two dims, row by row.

    Example:
        >>> from ember.distributions.utils import tril_matrix_to_vec
        >>> tril_matrix_to_vec(ember.arange(4.).view(2, 2))
        tensor([0., 2., 3.])
    """
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    return mat[..., _tril_mask(n, diag, mat.device)]


def vec_to_tril_matrix(vec, diag=0):
    """The inverse of ``tril_matrix_to_vec``: a lower-triangular matrix from its entries.

    Example:
        >>> from ember.distributions.utils import vec_to_tril_matrix
        >>> vec_to_tril_matrix(ember.tensor([1., 2., 3.]))
        tensor([[1., 0.],
                [2., 3.]])
    """
    n = (-(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * vec.shape[-1] +
                            4 * abs(diag) * (diag + 1)) ** 0.5) / 2
    if round(n) - n > ember.finfo(vec.dtype).eps:
        raise ValueError(f"The size of last dimension is {vec.shape[-1]} which cannot be "
                         "expressed as the lower triangular part of a square D x D matrix.")
    n = round(n)
    mat = vec.new_zeros(vec.shape[:-1] + (n, n))
    mat[..., _tril_mask(n, diag, vec.device)] = vec
    return mat
