"""Fold an eval-mode BatchNorm into the preceding convolution or linear layer, as
``torch.nn.utils.fusion``."""
import copy

import ember

from ..parameter import Parameter


def _fuse(w, b, rm, rv, eps, bn_w, bn_b, shape):
    """Weight and bias of a layer computing ``bn(layer(x))``, in torch's operation order so
    float32 results agree bit for bit."""
    b_dtype = b.dtype if b is not None else w.dtype
    b = ember.zeros_like(rm) if b is None else b
    bn_w = ember.ones_like(rm) if bn_w is None else bn_w
    bn_b = ember.zeros_like(rm) if bn_b is None else bn_b
    rsqrt = ember.rsqrt(rv + eps)
    new_w = (w * (bn_w * rsqrt).reshape(shape)).to(w.dtype)
    new_b = ((b - rm) * rsqrt * bn_w + bn_b).to(b_dtype)
    return Parameter(new_w, w.requires_grad), Parameter(new_b, b.requires_grad)


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose=False):
    """The (weight, bias) Parameters of a conv that computes ``bn(conv(x))`` in eval mode.

    Example:
        >>> import ember
        >>> w, b = ember.nn.utils.fuse_conv_bn_weights(ember.ones(2, 1, 1, 1), None,
        ...     ember.zeros(2), ember.full((2,), 3.0), 1.0, None, ember.ones(2))
        >>> w.flatten().tolist(), b.tolist()
        ([0.5, 0.5], [1.0, 1.0])
    """
    rest = [1] * (conv_w.dim() - 2)
    return _fuse(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b,
                 [1, -1, *rest] if transpose else [-1, 1, *rest])


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """The (weight, bias) Parameters of a linear layer that computes ``bn(linear(x))``."""
    return _fuse(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, [-1, 1])


def _check_eval(a, b):
    if a.training or b.training:
        raise AssertionError("Fusion only for eval!")
    if b.running_mean is None or b.running_var is None:
        raise AssertionError("fusion needs a BatchNorm with running statistics")


def fuse_conv_bn_eval(conv, bn, transpose=False):
    """A copy of ``conv`` whose output equals ``bn(conv(x))``; both must be in eval mode.

    Example:
        >>> import ember
        >>> conv, bn = ember.nn.Conv2d(1, 2, 3).eval(), ember.nn.BatchNorm2d(2).eval()
        >>> fused = ember.nn.utils.fuse_conv_bn_eval(conv, bn)
        >>> x = ember.randn(1, 1, 5, 5)
        >>> bool((fused(x) - bn(conv(x))).abs().max() < 1e-5)
        True
    """
    _check_eval(conv, bn)
    fused = copy.deepcopy(conv)
    fused.weight, fused.bias = fuse_conv_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias,
        transpose)
    return fused


def fuse_linear_bn_eval(linear, bn):
    """A copy of ``linear`` whose output equals ``bn(linear(x))``; both in eval mode."""
    _check_eval(linear, bn)
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    return fused
