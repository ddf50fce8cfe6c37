"""``torch.nn.functional``: normalization layers (batch, instance, group, local response) and
distances (normalize, cosine_similarity, pairwise_distance), compositions of ember ops.
"""
import math

import numpy as np

import ember

from .._ops import normalization as _norm
from .._ops.dispatch import dispatch
from ..amp.autocast_mode import autocast_policy
from ..autograd.composite import one_node
from ._conv_functional import avg_pool2d, avg_pool3d, pad

__all__ = ["batch_norm", "group_norm", "instance_norm", "local_response_norm", "normalize",
           "cosine_similarity", "pairwise_distance"]


# ---- normalization -----------------------------------------------------------------------------

def _update_running(running, value, momentum):
    with ember.no_grad():
        running.mul_(1 - momentum).add_(value.detach().to(running.dtype) * momentum)


def _native(*args):
    """torch's native_batch_norm: ``(output, mean, biased variance)``, one node."""
    return dispatch(_norm.native_batch_norm, args, {})


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Normalize each channel of (N, C, *) ``input`` by batch statistics (training, which also
    updates the running stats in place with the unbiased variance) or by the running stats.

    Example:
        >>> import ember
        >>> x = ember.tensor([[1.], [3.]])
        >>> rm, rv = ember.zeros(1), ember.ones(1)
        >>> ember.nn.functional.batch_norm(x, rm, rv, training=True).flatten().tolist()
        [-0.99999..., 0.99999...]
        >>> rm.tolist(), rv.tolist()
        ([0.2...], [1.1...])
    """
    if training:
        n = input.numel() // input.shape[1]
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"size {input.shape}")
    elif running_mean is None or running_var is None:
        raise RuntimeError("batch_norm: running_mean and running_var must be defined in "
                           "evaluation mode")
    # NOTE: one op, as torch's native_batch_norm (its node NativeBatchNormBackward0)
    out, mean, var = _native(input, weight, bias, None if training else running_mean,
                             None if training else running_var, training, eps)
    if training and running_mean is not None:
        _update_running(running_mean, mean, momentum)
    if training and running_var is not None:
        _update_running(running_var, var * (n / (n - 1)), momentum)
    return out


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalize each (sample, channel) over its spatial dims.

    Example:
        >>> import ember
        >>> x = ember.tensor([[[1., 3.], [2., 2.]]])
        >>> ember.nn.functional.instance_norm(x).tolist()
        [[[-0.99999..., 0.99999...], [0.0, 0.0]]]
    """
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    n = math.prod(input.shape[2:])
    if n <= 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size "
                         f"{input.shape}")
    # NOTE: as torch, a batch norm of (1, N * C, *spatial), viewed back (its node ViewBackward0)
    b, c = input.shape[0], input.shape[1]
    out, mean, var = _native(input.reshape((1, b * c) + tuple(input.shape[2:])), None if weight
                             is None else weight.repeat(b), None if bias is None else
                             bias.repeat(b), None, None, True, eps)
    if running_mean is not None:   # the batch average of the per-instance statistics
        _update_running(running_mean, mean.reshape(b, c).mean(0), momentum)
    if running_var is not None:
        _update_running(running_var, var.reshape(b, c).mean(0) * (n / (n - 1)), momentum)
    return out.view(input.shape)


@autocast_policy("autocast_fp32_cuda")
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalize groups of ``num_groups`` channels over (channels in group, *spatial).

    Example:
        >>> import ember
        >>> x = ember.tensor([[1., 3., 5., 5.]])
        >>> ember.nn.functional.group_norm(x, 2).tolist()
        [[-0.99999..., 0.99999..., 0.0, 0.0]]
    """
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input.shape)} and "
                           f"num_groups={num_groups}")
    # NOTE: one op, as torch's native_group_norm (its node NativeGroupNormBackward0)
    return dispatch(_norm.native_group_norm, (input, weight, bias, num_groups, eps), {})


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """Divide each value by a power of the summed squares of its ``size`` neighbouring channels
    (torch's composite, which averages then rescales).

    Example:
        >>> import ember
        >>> ember.nn.functional.local_response_norm(ember.ones(1, 3, 2), 2).shape
        torch.Size([1, 3, 2])
    """
    dim = input.dim()
    if dim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {dim} dimensions)")
    if input.numel() == 0:
        return input
    div = input * input
    if dim == 3:
        div = pad(div.unsqueeze(1), (0, 0, size // 2, (size - 1) // 2))
        div = avg_pool2d(div, (size, 1), stride=1).squeeze(1)
    else:
        sizes = tuple(input.shape)
        div = div.reshape(sizes[0], 1, sizes[1], sizes[2], -1)
        div = pad(div, (0, 0, 0, 0, size // 2, (size - 1) // 2))
        div = avg_pool3d(div, (size, 1, 1), stride=1).squeeze(1).reshape(sizes)
    return input / (div * alpha + k).pow(beta)


# ---- distances --------------------------------------------------------------------------------

def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``input / max(||input||_p, eps)`` along ``dim``.

    Example:
        >>> import ember
        >>> ember.nn.functional.normalize(ember.tensor([[3., 4.]]))
        tensor([[0.6000, 0.8000]])
    """
    r = input / input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input)
    return out.copy_(r) if out is not None else r


@autocast_policy("autocast_fp32_cuda")
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (each norm clamped to
    ``eps``).

    Example:
        >>> import ember
        >>> ember.nn.functional.cosine_similarity(ember.tensor([[1., 0.]]),
        ...                                       ember.tensor([[1., 1.]])).tolist()
        [0.7071067...]
    """
    shape = tuple(np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape)))

    def unit(x):
        x = x.expand(shape)         # NOTE: torch takes the norms after broadcasting
        n = x.norm(2, dim, keepdim=True)
        # NOTE: torch clamps the norms in place under no_grad: the clamp has no gradient
        return x / (n + (n.clamp_min(eps) - n).detach())
    return (unit(x1) * unit(x2)).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last dim.

    Example:
        >>> import ember
        >>> ember.nn.functional.pairwise_distance(ember.tensor([[0., 0.]]),
        ...                                       ember.tensor([[3., 4.]])).tolist()
        [4.99999...]
    """
    d = max(x1.dim(), x2.dim()) - 1
    # NOTE: torch's is aten's norm (NormBackward1), not linalg.vector_norm
    return one_node("NormBackward1", ember.norm, x1 - x2 + eps, p, d, keepdim)
