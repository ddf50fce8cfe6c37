"""``torch.nn.functional``: convolution, pooling, padding, fold/unfold (resampling is in
_resample_functional.py, normalization layers and distances in _norm_functional.py).

The windowed ops (``convolution``, ``constant_pad_nd``, max pooling) are OpDefs in
ember/_ops/conv.py and pooling.py; everything here is a composition of ember ops, so autograd
(double backward included) needs no new rules.
"""
import functools
import math
import numbers

import numpy as np

import ember

from .._ops import conv as _C
from .._ops import pooling as _P
from .._ops.dispatch import dispatch
from ..amp.autocast_mode import autocast_policy
from ..autograd.composite import one_node

_E = {}

__all__ = [
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices",
    "max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d",
    "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices",
    "adaptive_max_pool3d_with_indices", "lp_pool1d", "lp_pool2d", "lp_pool3d", "max_unpool1d",
    "max_unpool2d", "max_unpool3d", "fold", "unfold", "pad"]


def _ntuple(v, n):
    if type(v) is tuple and len(v) == n and all(type(a) is int for a in v):
        return v        # (the common call: no ABC check, no new tuple)
    if type(v) is int or isinstance(v, numbers.Integral):
        return (int(v),) * n
    v = tuple(int(a) for a in v)
    return v * n if len(v) == 1 else v


def _check_dims(input, nd, name):
    if (n := input.dim()) - nd not in (1, 2):
        raise RuntimeError(f"{name}: Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) "
                           f"input, but got input of size: {list(input.shape)}")
    return n == nd + 2


# ---- convolution -------------------------------------------------------------------------------

def _conv(input, weight, bias, stride, padding, dilation, groups, nd, name):
    batched = _check_dims(input, nd, name)
    x = input if batched else input.unsqueeze(0)
    stride, dilation = _ntuple(stride, nd), _ntuple(dilation, nd)
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"Invalid padding string '{padding}', should be one of "
                             "{'valid', 'same'}")
        if padding == "same" and any(s != 1 for s in stride):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) if padding == "same" else 0
                 for d, k in zip(dilation, weight.shape[2:])]
        padding = tuple(t // 2 for t in total)
        # NOTE: an odd total padding goes one more on the right, as torch does
        if any(t % 2 for t in total):
            x = pad(x, [a for t in reversed(total) for a in (0, t % 2)])
    out = dispatch(_C.convolution, (x, weight, bias, stride, _ntuple(padding, nd), dilation,
                                    False, (0,) * nd, groups), _E)
    return out if batched else out.squeeze(0)


def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation,
                    nd, name, output_size=None):
    batched = _check_dims(input, nd, name)
    x = input if batched else input.unsqueeze(0)
    stride, padding = _ntuple(stride, nd), _ntuple(padding, nd)
    dilation, output_padding = _ntuple(dilation, nd), _ntuple(output_padding, nd)
    if any(o >= s and o >= d for o, s, d in zip(output_padding, stride, dilation)):
        raise RuntimeError(f"{name}: output padding must be smaller than either stride or "
                           f"dilation, but got output_padding={list(output_padding)}, "
                           f"stride={list(stride)}, dilation={list(dilation)}")
    out = dispatch(_C.convolution, (x, weight, bias, stride, padding, dilation, True,
                                    output_padding, groups), _E)
    return out if batched else out.squeeze(0)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d convolution of (N, C, H, W) ``input`` with (out, C / groups, kH, kW) ``weight``;
    ``padding`` may be ints or ``'valid'`` / ``'same'``. See torch.nn.functional.conv2d.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.conv2d(ember.ones(1, 2, 5, 5), ember.ones(3, 2, 3, 3), padding=1).shape
        torch.Size([1, 3, 5, 5])
        >>> F.conv2d(ember.ones(1, 1, 3, 3), ember.ones(1, 1, 2, 2))
        tensor([[[[4., 4.],
                  [4., 4.]]]])
    """
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d convolution of (N, C, L) ``input``; see :func:`conv2d`.

    Example:
        >>> import ember
        >>> ember.nn.functional.conv1d(ember.ones(1, 1, 4), ember.ones(1, 1, 2), stride=2)
        tensor([[[2., 2.]]])
    """
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d convolution of (N, C, D, H, W) ``input``; see :func:`conv2d`.

    Example:
        >>> import ember
        >>> ember.nn.functional.conv3d(ember.ones(1, 1, 3, 3, 3), ember.ones(2, 1, 2, 2, 2)).shape
        torch.Size([1, 2, 2, 2, 2])
    """
    return _conv(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Transposed 2-d convolution (the gradient of conv2d with respect to its input);
    ``weight`` is (in, out / groups, kH, kW).

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.conv_transpose2d(ember.ones(1, 4, 3, 3), ember.ones(4, 2, 3, 3), stride=2,
        ...                    padding=1, output_padding=1).shape
        torch.Size([1, 2, 6, 6])
    """
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                           dilation, 2, "conv_transpose2d")


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Transposed 1-d convolution; see :func:`conv_transpose2d`.

    Example:
        >>> import ember
        >>> ember.nn.functional.conv_transpose1d(ember.ones(1, 1, 2), ember.ones(1, 1, 2))
        tensor([[[1., 2., 1.]]])
    """
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                           dilation, 1, "conv_transpose1d")


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Transposed 3-d convolution; see :func:`conv_transpose2d`.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.conv_transpose3d(ember.ones(1, 2, 2, 2, 2), ember.ones(2, 1, 2, 2, 2)).shape
        torch.Size([1, 1, 3, 3, 3])
    """
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                           dilation, 3, "conv_transpose3d")


# ---- padding -----------------------------------------------------------------------------------

def _pad_index(mode, n, lo, hi):
    """Source index of each padded position along one dim (negative pads crop)."""
    i = np.arange(-lo, n + hi)
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    if mode == "circular":
        return i % n
    i = np.abs(i)                                              # reflect
    return np.where(i >= n, 2 * (n - 1) - i, i)


def pad(input, pad, mode="constant", value=None):
    """Pad the last ``len(pad) // 2`` dims: ``pad`` is (left, right, top, bottom, ...) from the
    last dim backwards; ``mode`` is constant, reflect, replicate or circular.

    Example:
        >>> import ember
        >>> x = ember.arange(3.).reshape(1, 1, 3)
        >>> ember.nn.functional.pad(x, (2, 1), mode="reflect")
        tensor([[[2., 1., 0., 1., 2., 1.]]])
        >>> ember.nn.functional.pad(x, (1, 1), value=-1.0)
        tensor([[[-1.,  0.,  1.,  2., -1.]]])
    """
    if mode == "constant":
        return dispatch(_P.constant_pad_nd, (input, tuple(pad), 0 if value is None else value), _E)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    lo, hi = _P._pad_pairs(input.dim(), pad)
    nd = len(lo)
    if input.dim() not in (nd + 1, nd + 2) or nd > 3:
        raise NotImplementedError(f"Only 2D, 3D, 4D, 5D padding with non-constant padding are "
                                  f"supported for now (got {input.dim()}D input and padding "
                                  f"{list(pad)} in mode {mode})")
    for i, (a, b) in enumerate(zip(lo, hi)):
        d, n = input.dim() - nd + i, input.shape[input.dim() - nd + i]
        if mode == "reflect" and (a >= n or b >= n) or mode == "circular" and (a > n or b > n):
            raise RuntimeError(f"pad: padding ({a}, {b}) at dimension {d} of input "
                               f"{list(input.shape)} is too large for mode '{mode}'")

    def gather(x):
        for i, (a, b) in enumerate(zip(lo, hi)):
            d = input.dim() - nd + i
            x = x.index_select(d, ember.tensor(_pad_index(mode, input.shape[d], a, b),
                                               device=input.device))
        return x
    # (torch's circular pad copies into slices of a new tensor: its node is CopySlices)
    name = {"reflect": f"ReflectionPad{nd}DBackward0", "replicate": f"ReplicationPad{nd}DBackward0",
            "circular": "torch::autograd::CopySlices"}[mode]
    return one_node(name, gather, input)


# ---- pooling -----------------------------------------------------------------------------------

def _pool_args(input, kernel_size, stride, padding, dilation, nd, name):
    _check_dims(input, nd, name)
    try:
        return _pool_geometry(kernel_size, stride, padding, dilation, nd, name)
    except TypeError:       # (a list: unhashable)
        return _pool_geometry.__wrapped__(kernel_size, stride, padding, dilation, nd, name)


@functools.lru_cache(maxsize=256, typed=True)       # (a small pool's Python cost)
def _pool_geometry(kernel_size, stride, padding, dilation, nd, name):
    k = _ntuple(kernel_size, nd)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else \
        _ntuple(stride, nd)
    p, d = _ntuple(padding, nd), _ntuple(dilation, nd)
    for a, kk, dd in zip(p, k, d):
        if a > (dd * (kk - 1) + 1) // 2:
            raise RuntimeError(f"{name}: pad should be at most half of effective kernel size, "
                               f"but got pad={a}, kernel_size={kk} and dilation={dd}")
    return k, s, p, d


def _max_pool(nd):
    def with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                     return_indices=False):
        k, s, p, d = _pool_args(input, kernel_size, stride, padding, dilation, nd, f"max_pool{nd}d")
        return dispatch(_P.max_pool_nd, (input, k, s, p, d, bool(ceil_mode)), _E)

    def max_pool(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                 return_indices=False):
        out, idx = with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
        return (out, idx) if return_indices else out
    with_indices.__name__ = f"max_pool{nd}d_with_indices"
    max_pool.__name__ = f"max_pool{nd}d"
    max_pool.__doc__ = f"""{nd}-d max pooling (padding with -inf); ``return_indices`` also gives
    each maximum's flat index in the pooled dims of the input (for max_unpool{nd}d).

    Example:
        >>> import ember
        >>> x = ember.arange({4.0 ** nd}).reshape({(1, 1) + (4,) * nd})
        >>> ember.nn.functional.max_pool{nd}d(x, 2).flatten().tolist()[:2]
        {[[1.0, 3.0], [5.0, 7.0], [21.0, 23.0]][nd - 1]}
    """
    with_indices.__doc__ = f"""``max_pool{nd}d`` returning (values, flat indices).

    Example:
        >>> import ember
        >>> x = ember.arange({4.0 ** nd}).reshape({(1, 1) + (4,) * nd})
        >>> ember.nn.functional.max_pool{nd}d_with_indices(x, 4)[1].flatten().tolist()
        [{4 ** nd - 1}]
    """
    return with_indices, max_pool


max_pool1d_with_indices, max_pool1d = _max_pool(1)
max_pool2d_with_indices, max_pool2d = _max_pool(2)
max_pool3d_with_indices, max_pool3d = _max_pool(3)


@functools.lru_cache(maxsize=256, typed=True)       # (a small pool's Python cost)
def _avg_args(shape, kernel_size, stride, padding, ceil_mode, nd, name):
    k, s, p, _ = _pool_geometry.__wrapped__(kernel_size, stride, padding, 1, nd, name)
    _P.check_pool_output(name, shape, _P._avg_geometry(shape[len(shape) - nd:], k, s, p,
                                                       ceil_mode)[0])
    return k, s, p


@autocast_policy("autocast_keep")
def _avg_pool_nd(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                 divisor_override, nd, name):
    _check_dims(input, nd, name)
    args = (input.shape, kernel_size, stride, padding, bool(ceil_mode), nd, name)
    try:
        k, s, p = _avg_args(*args)
    except TypeError:       # (a list: unhashable)
        k, s, p = _avg_args.__wrapped__(*args)
    args = (bool(ceil_mode), bool(count_include_pad), divisor_override)
    if nd == 1:     # NOTE: torch's is avg_pool2d between an unsqueeze and a squeeze: so is its graph
        return dispatch(_P.avg_pool_nd, (input.unsqueeze(-2), (1,) + k, (1,) + s, (0,) + p) +
                        args, _E).squeeze(-2)
    return dispatch(_P.avg_pool_nd, (input, k, s, p) + args, _E)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """2-d average pooling; see torch.nn.functional.avg_pool2d for the divisor options.

    Example:
        >>> import ember
        >>> x = ember.arange(16.).reshape(1, 1, 4, 4)
        >>> ember.nn.functional.avg_pool2d(x, 2)
        tensor([[[[ 2.5000,  4.5000],
                  [10.5000, 12.5000]]]])
    """
    return _avg_pool_nd(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override, 2, "avg_pool2d")


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """1-d average pooling; see :func:`avg_pool2d`.

    Example:
        >>> import ember
        >>> ember.nn.functional.avg_pool1d(ember.arange(4.).reshape(1, 1, 4), 2)
        tensor([[[0.5000, 2.5000]]])
    """
    # NOTE: torch's is avg_pool2d between an unsqueeze and a squeeze: so is its graph
    return _avg_pool_nd(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None,
                        1, "avg_pool1d")


@autocast_policy("autocast_fp32_cpu")
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """3-d average pooling; see :func:`avg_pool2d`.

    Example:
        >>> import ember
        >>> ember.nn.functional.avg_pool3d(ember.ones(1, 1, 4, 4, 4), 2).shape
        torch.Size([1, 1, 2, 2, 2])
    """
    return _avg_pool_nd(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override, 3, "avg_pool3d")


def _lp_pool(nd):
    avg = {1: avg_pool1d, 2: avg_pool2d, 3: avg_pool3d}[nd]

    def lp_pool(input, norm_type, kernel_size, stride=None, ceil_mode=False):
        k = _ntuple(kernel_size, nd)
        out = avg(input.pow(norm_type), k, stride, 0, ceil_mode)
        # NOTE: torch's formula: sign(out) * relu(|out|) keeps odd powers' sign through pow
        return (ember.sign(out) * (out.abs().relu())).mul(math.prod(k)).pow(1.0 / norm_type)
    lp_pool.__name__ = f"lp_pool{nd}d"
    lp_pool.__doc__ = f"""{nd}-d power-average pooling: ``(sum over window of x^p)^(1/p)``.

    Example:
        >>> import ember
        >>> x = ember.ones({", ".join(["1", "1"] + ["2"] * nd)})
        >>> ember.nn.functional.lp_pool{nd}d(x, 1, 2).flatten().tolist()
        [{2.0 ** nd}]
    """
    return lp_pool


lp_pool1d, lp_pool2d, lp_pool3d = _lp_pool(1), _lp_pool(2), _lp_pool(3)


def _adaptive_size(input, output_size, nd, name):
    _check_dims(input, nd, name)
    out = (output_size,) * nd if isinstance(output_size, numbers.Integral) or \
        output_size is None else tuple(output_size)
    return tuple(int(input.shape[input.dim() - nd + i]) if o is None else int(o)
                 for i, o in enumerate(out))


def _adaptive_matrix(n, o):
    """(o, n) matrix averaging torch's adaptive windows: [floor(i n / o), ceil((i+1) n / o))."""
    i = np.arange(o)
    start, end = (i * n) // o, -((-(i + 1) * n) // o)
    j = np.arange(n)
    m = (j >= start[:, None]) & (j < end[:, None])
    return m / m.sum(1, keepdims=True)


# adaptive average pooling is one matmul per dim: keep it out of autocast's lower precision
_ADAPTIVE_AVG_POLICY = {1: ("autocast_keep",), 2: ("autocast_keep",),
                        3: ("autocast_fp32_cpu", "autocast_keep_cuda")}


def _adaptive_avg_pool(input, osize):
    x = input
    for i, o in enumerate(osize):          # the windows are separable: one dim at a time
        d = input.dim() - len(osize) + i
        n = x.shape[d]
        if n == o:
            continue
        if o == 1:
            x = x.mean(d, keepdim=True)
            continue
        a = ember.tensor(_adaptive_matrix(n, o).T, dtype=x.dtype, device=x.device)
        x = (x.movedim(d, -1) @ a).movedim(-1, d)
    return x if x is not input else x.clone()


def _adaptive_avg(nd):
    @autocast_policy(*_ADAPTIVE_AVG_POLICY[nd])
    def adaptive_avg_pool(input, output_size):
        osize = _adaptive_size(input, output_size, nd, f"adaptive_avg_pool{nd}d")
        if nd == 1:     # NOTE: torch's is the 2-d pool between an unsqueeze and a squeeze
            return adaptive_avg_pool2d(input.unsqueeze(-2), (1,) + osize).squeeze(-2)
        if all(o == 1 for o in osize):    # NOTE: torch's global pooling: one mean
            return input.mean(tuple(range(-nd, 0)), keepdim=True)
        return one_node(f"AdaptiveAvgPool{nd}DBackward0", _adaptive_avg_pool, input, osize)
    adaptive_avg_pool.__name__ = f"adaptive_avg_pool{nd}d"
    adaptive_avg_pool.__doc__ = f"""{nd}-d average pooling to a fixed ``output_size`` (None
    keeps a dim's size).

    Example:
        >>> import ember
        >>> x = ember.ones({", ".join(["2", "3"] + ["5"] * nd)})
        >>> ember.nn.functional.adaptive_avg_pool{nd}d(x, 2).shape
        torch.Size({[2, 3] + [2] * nd})
    """
    return adaptive_avg_pool


adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d = (
    _adaptive_avg(1), _adaptive_avg(2), _adaptive_avg(3))


def _adaptive_max(nd):
    def with_indices(input, output_size, return_indices=False):
        osize = _adaptive_size(input, output_size, nd, f"adaptive_max_pool{nd}d")
        return dispatch(_P.adaptive_max_pool_nd, (input, osize), _E)

    def adaptive_max_pool(input, output_size, return_indices=False):
        out, idx = with_indices(input, output_size)
        return (out, idx) if return_indices else out
    with_indices.__name__ = f"adaptive_max_pool{nd}d_with_indices"
    with_indices.__doc__ = f"""``adaptive_max_pool{nd}d`` returning (values, flat indices).

    Example:
        >>> import ember
        >>> x = ember.arange({4.0 ** nd}).reshape({(1, 1) + (4,) * nd})
        >>> ember.nn.functional.adaptive_max_pool{nd}d_with_indices(x, 1)[1].flatten().tolist()
        [{4 ** nd - 1}]
    """
    adaptive_max_pool.__name__ = f"adaptive_max_pool{nd}d"
    adaptive_max_pool.__doc__ = f"""{nd}-d max pooling to a fixed ``output_size``.

    Example:
        >>> import ember
        >>> x = ember.arange({4.0 ** nd}).reshape({(1, 1) + (4,) * nd})
        >>> ember.nn.functional.adaptive_max_pool{nd}d(x, 1).flatten().tolist()
        [{4.0 ** nd - 1}]
    """
    return with_indices, adaptive_max_pool


adaptive_max_pool1d_with_indices, adaptive_max_pool1d = _adaptive_max(1)
adaptive_max_pool2d_with_indices, adaptive_max_pool2d = _adaptive_max(2)
adaptive_max_pool3d_with_indices, adaptive_max_pool3d = _adaptive_max(3)


def _max_unpool(nd):
    def max_unpool(input, indices, kernel_size, stride=None, padding=0, output_size=None):
        k, s, p, _ = _pool_args(input, kernel_size, stride, padding, 1, nd, f"max_unpool{nd}d")
        size = tuple(input.shape[-nd:])
        if output_size is None:
            osize = tuple((n - 1) * ss - 2 * pp + kk for n, ss, pp, kk in zip(size, s, p, k))
        else:
            osize = tuple(output_size)[-nd:]
        if nd == 1:     # NOTE: torch's is the 2-d unpool between an unsqueeze and a squeeze
            return one_node("MaxUnpool2DBackward0", lambda x: _P.max_unpool_grad(
                x.squeeze(-1), indices, tuple(input.shape[:-1]) + osize, 1,
                accumulate=False).unsqueeze(-1), input.unsqueeze(-1)).squeeze(-1)
        return one_node(f"MaxUnpool{nd}DBackward0", _P.max_unpool_grad, input, indices,
                        tuple(input.shape[:-nd]) + osize, nd, False)
    max_unpool.__name__ = f"max_unpool{nd}d"
    max_unpool.__doc__ = f"""Inverse of ``max_pool{nd}d``: each value goes to its index, the
    rest is zero.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> x = ember.tensor([[[1., 5., 2., 3.]]])
        >>> F.max_unpool1d(*F.max_pool1d(x, 2, return_indices=True), 2)
        tensor([[[0., 5., 0., 3.]]])
    """
    return max_unpool


max_unpool1d, max_unpool2d, max_unpool3d = _max_unpool(1), _max_unpool(2), _max_unpool(3)


# ---- fold / unfold -----------------------------------------------------------------------------

def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Extract sliding blocks (im2col): (N, C, *spatial) -> (N, C * prod(kernel), blocks).

    Example:
        >>> import ember
        >>> ember.nn.functional.unfold(ember.ones(2, 3, 4, 5), (2, 3)).shape
        torch.Size([2, 18, 9])
    """
    return one_node("Im2ColBackward0", _unfold, input, kernel_size, dilation, padding, stride)


def _unfold(input, kernel_size, dilation, padding, stride):
    nd = input.dim() - 2 if input.dim() == 4 else 2
    batched = _check_dims(input, nd, "unfold")
    x = input if batched else input.unsqueeze(0)
    k, d = _ntuple(kernel_size, nd), _ntuple(dilation, nd)
    p, s = _ntuple(padding, nd), _ntuple(stride, nd)
    if any(p):
        x = pad(x, [a for pp in reversed(p) for a in (pp, pp)])
    for i in range(nd):                     # windows as trailing dims, then the dilation step
        x = x.unfold(2 + i, d[i] * (k[i] - 1) + 1, s[i])
    if any(dd > 1 for dd in d):
        x = x[(Ellipsis,) + tuple(slice(None, None, dd) for dd in d)]
    n, c, blocks = x.shape[0], x.shape[1], x.shape[2:2 + nd]
    x = x.permute((0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd)))
    out = x.reshape(n, c * math.prod(k), math.prod(blocks))
    return out if batched else out.squeeze(0)


@autocast_policy("autocast_keep")
def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sum sliding blocks back into an image (col2im), the adjoint of :func:`unfold`:
    (N, C * prod(kernel), blocks) -> (N, C, *output_size).

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.fold(F.unfold(ember.ones(1, 1, 3, 3), 2), (3, 3), 2)
        tensor([[[[1., 2., 1.],
                  [2., 4., 2.],
                  [1., 2., 1.]]]])
    """
    nd = 2
    batched = input.dim() == 3
    if input.dim() not in (2, 3):
        raise RuntimeError(f"fold: Expected 2D or 3D (batch mode) tensor for input with "
                           f"possibly 0 batch size and non-zero dimensions for input, but got: "
                           f"{list(input.shape)}")
    x = input if batched else input.unsqueeze(0)
    osize, k = _ntuple(output_size, nd), _ntuple(kernel_size, nd)
    d, p, s = _ntuple(dilation, nd), _ntuple(padding, nd), _ntuple(stride, nd)
    kk = math.prod(k)
    blocks = tuple(_C.conv_output_size(o, a, b, c, e) for o, a, b, c, e in zip(osize, k, s, p, d))
    if x.shape[1] % kk or x.shape[2] != math.prod(blocks):
        raise RuntimeError(f"fold: expected input of shape (N, C * {kk}, {math.prod(blocks)}) "
                           f"for output_size={list(osize)}, kernel_size={list(k)}, got "
                           f"{list(input.shape)}")
    c = x.shape[1] // kk
    # a transposed convolution whose weight routes channel (c, tap) to tap of channel c
    w = ember.tensor(np.tile(np.eye(kk).reshape((kk, 1) + k), (c, 1) + (1,) * nd),
                     dtype=x.dtype, device=x.device)
    fit = tuple(o - _C.conv_output_size(b, a, ss, pp, dd, True) for o, b, a, ss, pp, dd in zip(
        osize, blocks, k, s, p, d))

    def col2im(x):
        out = dispatch(_C.convolution, (x.reshape((x.shape[0], x.shape[1]) + blocks), w, None,
                                        s, p, d, True, fit, c), _E)
        return out if batched else out.squeeze(0)
    return one_node("Col2ImBackward0", col2im, x)
