"""Constant padding, max pooling (plain and adaptive) and average pooling, with the
windowed-view helpers of conv.py. Adaptive averaging, fold/unfold and the other padding modes
are compositions in ember/nn/_conv_functional.py.
"""
import functools
import math

import numpy as np

import ember

from .conv import _flat_strides, _pad, _taps, _windows
from .meta import empty
from .pointwise import type_name
from .tangents import gathered, linear_with
from .registry import op
from .samples import ErrorSample, Sample, make

# ---- constant padding ----------------------------------------------------------------------

def _pad_pairs(ndim, pad):
    """torch's pad list (last dim first, (before, after) pairs) as per-dim (lo, hi) over the
    trailing dims."""
    if len(pad) % 2:
        raise RuntimeError(f"Padding length must be divisible by 2, got {len(pad)}")
    n = len(pad) // 2
    if n > ndim:
        raise RuntimeError(f"Padding length should be less than or equal to two times the "
                           f"input dimension but got padding length {len(pad)} and input of "
                           f"dimension {ndim}")
    lo = tuple(pad[2 * (n - 1 - i)] for i in range(n))
    hi = tuple(pad[2 * (n - 1 - i) + 1] for i in range(n))
    return lo, hi


@op("constant_pad_nd", method=False)
def constant_pad_nd(xp, input, pad, value=0):
    """``input`` with its last ``len(pad) // 2`` dims padded by ``value`` (negative pads crop).

    Example:
        >>> import ember
        >>> ember.constant_pad_nd(ember.ones(2), (1, 2))
        tensor([0., 1., 1., 0., 0.])
    """
    lo, hi = _pad_pairs(input.ndim, pad)
    for s, a, b in zip(input.shape[input.ndim - len(lo):], lo, hi):
        if s + a + b < 0:
            raise RuntimeError(f"The input size {s}, plus negative padding {a} and {b} "
                               f"resulted in a negative output size, which is invalid. Check "
                               f"dimension of your input.")
    out = _pad(xp, input, lo, hi, value)
    return input.copy() if out is input else out


constant_pad_nd.vjp()(lambda g, input, pad, value=0: constant_pad_nd(g, [-p for p in pad]))


def _constant_pad_meta(x, pad, value=0):
    lo, hi = _pad_pairs(x.ndim, pad)
    lead = x.shape[:x.ndim - len(lo)]
    return empty(lead + tuple(s + a + b for s, a, b in zip(x.shape[len(lead):], lo, hi)),
                 x.dtype)


constant_pad_nd.meta = _constant_pad_meta
constant_pad_nd.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), (1, 2)), Sample(make((2, 3, 4), dt), (0, 1, 2, -1)),
    Sample(make((2, 3, 4), dt), (-1, 1, 0, 0, 1, 1)), Sample(make((3, 4), dt), (2, 2), 1)]


# ---- max pooling ---------------------------------------------------------------------------

def pool_output_size(size, k, stride, padding, dilation, ceil_mode):
    """torch's pooling output length: the last window must start inside the (left-padded)
    input when ``ceil_mode`` rounds up."""
    num = size + 2 * padding - dilation * (k - 1) - 1
    out = (-(-num // stride) if ceil_mode else num // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def check_pool_output(name, shape, osize):
    """torch's error for a pooling whose output would be empty."""
    if min(osize, default=1) <= 0:
        shape = tuple(shape[len(shape) - len(osize) - 1:])       # torch leaves out the batch
        lead = shape[:1]
        raise RuntimeError(f"{name}: Given input size: ({'x'.join(map(str, shape))}). "
                           f"Calculated output size: ({'x'.join(map(str, lead + osize))}). "
                           "Output size is too small")


def _lowest(x):
    return -np.inf if x.dtype.kind in "fc" or x.dtype.itemsize < 4 and x.dtype.kind not in \
        "iub" else np.iinfo(x.dtype).min


def _argmax_windows(xp, flat, osize, positions):
    """Values and flat input indices of each window's max: ``flat`` is (*lead, *osize, taps);
    ``positions(arg)`` maps the tap numbers to per-dim input coordinates."""
    # NOTE: argmax picks the first maximum, as torch does, but the first NaN where torch's
    # kernels keep the last one (only the index differs)
    arg = flat.argmax(-1)
    out = xp.take_along_axis(flat, arg[..., None], -1)[..., 0]
    return out, positions(arg)


def _flat_index(coords, size):
    idx = 0
    for c, s in zip(coords, size):
        idx = idx * s + c
    return idx.astype(np.int64)


# window elements below which a copy of the windows is cheaper than a pass per tap
_SMALL_POOL = 1 << 14


@op("_max_pool_nd", method=False, function=False, nondiff_outputs=(1,))
def max_pool_nd(xp, input, kernel_size, stride, padding, dilation, ceil_mode):
    """Max pooling over the trailing ``len(kernel_size)`` dims: (values, flat indices into the
    pooled dims of the input), as ``nn.functional.max_pool*d(..., return_indices=True)``."""
    nd = len(kernel_size)
    size = input.shape[input.ndim - nd:]
    osize = tuple(pool_output_size(n, k, s, p, d, ceil_mode) for n, k, s, p, d in zip(
        size, kernel_size, stride, padding, dilation))
    check_pool_output(f"max_pool{nd}d", input.shape, osize)
    hi = tuple(max(p, (o - 1) * s + d * (k - 1) + 1 - n - p) for o, s, d, k, n, p in zip(
        osize, stride, dilation, kernel_size, size, padding))
    x = _pad(xp, input, padding, hi, _lowest(input))
    win = _windows(xp, x, kernel_size, stride, dilation, osize)       # (*lead, *osize, *k)
    strides = _flat_strides(size)
    offsets = xp.asarray([sum(t * d * st for t, d, st in zip(tap, dilation, strides))
                          for tap in _taps(kernel_size)])
    base = sum(xp.arange(o).reshape((o,) + (1,) * (nd - 1 - i)) * (s * st) - p * st
               for i, (o, s, p, st) in enumerate(zip(osize, stride, padding, strides)))
    if win.size <= _SMALL_POOL:     # one argmax over a copy of the windows: few calls
        flat = win.reshape(win.shape[:win.ndim - nd] + (-1,))
        best, arg = _argmax_windows(xp, flat, osize, lambda arg: arg)
        if best.dtype.kind not in "iub" and xp.isnan(best).any():      # (the last NaN)
            arg = xp.where(best != best, flat.shape[-1] - 1 - xp.isnan(flat[..., ::-1]).argmax(
                -1), arg)
        return best, base + xp.take(offsets, arg)
    lead = (slice(None),) * (win.ndim - nd)
    # NOTE: branch-free passes over the output (a masked copy per tap is several times slower):
    # the max first, then the tap index by torch's rule, a later value wins if greater or NaN,
    # so the first maximum, or the last NaN
    views = [win[lead + tap] for tap in _taps(kernel_size)]
    best = views[0].copy()
    for v in views[1:]:
        xp.maximum(best, v, out=best)
    arg = xp.zeros(best.shape, np.int64)
    for j in range(len(views) - 1, -1, -1):
        arg += (views[j] == best) * (j - arg)
    if best.dtype.kind not in "iub" and xp.isnan(best).any():
        for j, v in enumerate(views):
            arg += (v != v) * (j - arg)
    return best, base + xp.take(offsets, arg)


def _adaptive_windows(size, out):
    """Per-output-cell input indices of adaptive pooling along one dim, (out, longest window);
    short windows repeat their last index (harmless for a max)."""
    o = np.arange(out)
    start, end = (o * size) // out, -((-(o + 1) * size) // out)
    return np.minimum(start[:, None] + np.arange((end - start).max()), end[:, None] - 1)


@op("_adaptive_max_pool_nd", method=False, function=False, nondiff_outputs=(1,))
def adaptive_max_pool_nd(xp, input, output_size):
    """Adaptive max pooling over the trailing ``len(output_size)`` dims: (values, flat
    indices), as ``nn.functional.adaptive_max_pool*d(..., return_indices=True)``."""
    nd = len(output_size)
    size = input.shape[input.ndim - nd:]
    idx = [_adaptive_windows(s, o) for s, o in zip(size, output_size)]
    # input[..., i0[:, :, None, None], i1[None, None]] is (*lead, o0, k0, o1, k1)
    g = input[(Ellipsis,) + tuple(xp.asarray(a.reshape((1, 1) * i + a.shape + (1, 1) * (
        nd - 1 - i))) for i, a in enumerate(idx))]
    lead = input.ndim - nd
    g = g.transpose(tuple(range(lead)) + tuple(range(lead, lead + 2 * nd, 2)) +
                    tuple(range(lead + 1, lead + 2 * nd, 2)))
    flat = g.reshape(g.shape[:lead + nd] + (-1,))

    def positions(arg):
        taps = xp.unravel_index(arg, tuple(a.shape[1] for a in idx))
        return _flat_index([xp.asarray(a)[xp.arange(a.shape[0]).reshape(
            (-1,) + (1,) * (nd - 1 - i)), t] for i, (a, t) in enumerate(zip(idx, taps))], size)
    return _argmax_windows(xp, flat, tuple(output_size), positions)


def max_unpool_grad(g, indices, in_shape, nd, accumulate=True):
    """Scatter ``g`` (*lead, *out) into zeros of ``in_shape`` at the flat ``indices`` of the
    trailing ``nd`` dims (adding where windows overlap); the backward of max pooling and the
    forward of max unpooling."""
    lead = tuple(in_shape[:len(in_shape) - nd])
    m = math.prod(lead)
    z = ember.zeros((m, math.prod(in_shape[len(lead):])), dtype=g.dtype, device=g.device)
    src, idx = g.reshape(m, -1), indices.reshape(m, -1)
    out = z.scatter_add(1, idx, src) if accumulate else z.scatter(1, idx, src)
    return out.reshape(tuple(in_shape))


@max_pool_nd.vjp(save=("result",))
def _(g, input, kernel_size, stride, padding, dilation, ceil_mode, result=None):
    # windows that cannot overlap give unique indices: a plain scatter, no accumulation
    overlap = any(s < d * (k - 1) + 1 for s, d, k in zip(stride, dilation, kernel_size))
    return max_unpool_grad(g[0], result[1], input.shape, len(kernel_size), overlap)


@adaptive_max_pool_nd.vjp(save=("result",))
def _(g, input, output_size, result=None):
    return max_unpool_grad(g[0], result[1], input.shape, len(output_size))


def _pool_meta(x, kernel_size, stride, padding, dilation, ceil_mode):
    nd = len(kernel_size)
    osize = tuple(pool_output_size(*a, ceil_mode) for a in zip(
        x.shape[x.ndim - nd:], kernel_size, stride, padding, dilation))
    check_pool_output(f"max_pool{nd}d", x.shape, osize)
    shape = x.shape[:x.ndim - nd] + osize
    return empty(shape, x.dtype), empty(shape, np.int64)


def _adaptive_meta(x, output_size):
    shape = x.shape[:x.ndim - len(output_size)] + tuple(output_size)
    return empty(shape, x.dtype), empty(shape, np.int64)


max_pool_nd.meta, adaptive_max_pool_nd.meta = _pool_meta, _adaptive_meta
max_pool_nd.torch_fn = "nn.functional.max_pool2d_with_indices"
adaptive_max_pool_nd.torch_fn = "nn.functional.adaptive_max_pool2d_with_indices"
# distinct values keep the argmax (and so the gradient) away from ties
max_pool_nd.samples = lambda dev, dt: [
    Sample(_distinct((2, 3, 7, 6), dt), (3, 2), (2, 1), (1, 0), (1, 2), False),
    Sample(_distinct((3, 5, 5), dt), (2, 2), (2, 2), (1, 1), (1, 1), True),
    Sample(_distinct((1, 2, 8, 7), dt), (3, 3), (3, 2), (1, 1), (2, 1), True)] \
    if dt.name in ("float32", "float64") else []
# (torch pools 1-d as 2-d, then squeezes)
max_pool_nd.grad_name_of = lambda input, kernel_size, *_: "SqueezeBackward1" if len(
    kernel_size) == 1 else f"MaxPool{len(kernel_size)}DWithIndicesBackward0"
adaptive_max_pool_nd.samples = lambda dev, dt: [
    Sample(_distinct((2, 3, 7, 6), dt), (3, 4)), Sample(_distinct((3, 5, 5), dt), (5, 2)),
    Sample(_distinct((1, 2, 4, 9), dt), (1, 1))] if dt.name in ("float32", "float64") else []
adaptive_max_pool_nd.grad_name_of = lambda input, output_size: "SqueezeBackward1" if len(
    output_size) == 1 else f"AdaptiveMaxPool{len(output_size)}DBackward0"


# ---- average pooling -----------------------------------------------------------------------

def _avg_geometry(size, kernel_size, stride, padding, ceil_mode):
    """Output size and the high padding that makes every window fit (ceil_mode's last one)."""
    osize = tuple(pool_output_size(n, k, s, p, 1, ceil_mode) for n, k, s, p in zip(
        size, kernel_size, stride, padding))
    hi = tuple(max(p, (o - 1) * s + k - n - p) for o, s, k, n, p in zip(
        osize, stride, kernel_size, size, padding))
    return osize, hi


@functools.lru_cache(maxsize=256)
def _avg_divisor_np(size, kernel_size, stride, padding, osize, count_include_pad, dtype):
    div = np.ones(())
    for n, k, s, p, o in zip(size, kernel_size, stride, padding, osize):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        d = end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0)
        div = np.multiply.outer(div, d)
    return div.astype(dtype)


def _avg_divisor(xp, size, kernel_size, stride, padding, osize, count_include_pad,
                 divisor_override, dtype):
    """torch's divisor of each window (*osize): the window clipped to the padded input, or to
    the input itself when padding does not count; or ``divisor_override``."""
    if divisor_override:
        return dtype.type(divisor_override)
    return xp.asarray(_avg_divisor_np(tuple(size), kernel_size, stride, padding, osize,
                                      count_include_pad, dtype))


def _tiles(size, kernel_size, stride, padding, osize):
    """Whether the windows tile the input exactly (stride = kernel, no padding, nothing left
    over): the gradient is then a broadcast."""
    return stride == kernel_size and not any(padding) and all(
        o * k == n for o, k, n in zip(osize, kernel_size, size))


def _opmath(x):
    return np.int64 if x.dtype.kind in "iub" else np.float32 if x.dtype.itemsize == 2 else \
        x.dtype


@op("_avg_pool_nd", method=False, function=False)
def avg_pool_nd(xp, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                divisor_override):
    """Average pooling over the trailing ``len(kernel_size)`` dims, as
    ``nn.functional.avg_pool*d``: a sum of the windows' taps (strided views), then divided."""
    nd = len(kernel_size)
    if input.dtype.kind in "iub" and input.dtype != np.int64:
        raise NotImplementedError(f"\"avg_pool{nd}d\" not implemented for "
                                  f"'{type_name(input.dtype)}'")
    size = input.shape[input.ndim - nd:]
    osize, hi = _avg_geometry(size, kernel_size, stride, padding, ceil_mode)
    # (a reshape and a multi-axis sum, where windows tile the input, is several times slower)
    win = _windows(xp, _pad(xp, input, padding, hi, 0), kernel_size, stride, (1,) * nd, osize)
    taps = _taps(kernel_size)
    at = (slice(None),) * (win.ndim - nd)
    acc = win[at + taps[0]].astype(_opmath(input))
    for tap in taps[1:]:
        acc += win[at + tap]
    div = _avg_divisor(xp, size, kernel_size, stride, padding, osize, count_include_pad,
                       divisor_override, acc.dtype)
    if acc.dtype.kind == "i":       # NOTE: torch divides integers as C does, toward zero
        return (xp.sign(acc) * (xp.abs(acc) // div)).astype(input.dtype)
    acc /= div
    return acc.astype(input.dtype, copy=False)


@op("_avg_pool_nd_backward", method=False, function=False)
def avg_pool_nd_backward(xp, grad, input_size, kernel_size, stride, padding, ceil_mode,
                         count_include_pad, divisor_override):
    """The gradient of average pooling: each window's gradient over its divisor, added to
    every tap of the window (torch's avg_pool*d_backward)."""
    nd = len(kernel_size)
    size = tuple(input_size[len(input_size) - nd:])
    osize, hi = _avg_geometry(size, kernel_size, stride, padding, ceil_mode)
    g = grad / _avg_divisor(xp, size, kernel_size, stride, padding, osize, count_include_pad,
                            divisor_override, np.dtype(_opmath(grad)))
    if _tiles(size, kernel_size, stride, padding, osize):
        lead = g.shape[:g.ndim - nd]
        g = g.reshape(lead + sum(((o, 1) for o in osize), ()))
        return xp.broadcast_to(g, lead + sum(zip(osize, kernel_size), ())).reshape(
            tuple(input_size)).astype(grad.dtype)
    out = xp.zeros(tuple(input_size[:len(input_size) - nd]) + tuple(
        n + p + h for n, p, h in zip(size, padding, hi)), g.dtype)
    win = _windows(xp, out, kernel_size, stride, (1,) * nd, osize)
    lead = (slice(None),) * (win.ndim - nd)
    for tap in _taps(kernel_size):
        win[lead + tap] += g            # (one tap's cells are distinct: no two windows share)
    crop = tuple(slice(p, p + n) for p, n in zip(padding, size))
    return out[(Ellipsis,) + crop].astype(grad.dtype)


avg_pool_nd.vjp()(lambda g, input, *args: avg_pool_nd_backward(g, tuple(input.shape), *args))
avg_pool_nd_backward.vjp()(lambda g, grad, input_size, *args: avg_pool_nd(g, *args))


def _avg_meta(x, kernel_size, stride, padding, ceil_mode, *_):
    nd = len(kernel_size)
    osize, _ = _avg_geometry(x.shape[x.ndim - nd:], kernel_size, stride, padding, ceil_mode)
    return empty(x.shape[:x.ndim - nd] + osize, x.dtype)


avg_pool_nd.meta = _avg_meta
avg_pool_nd_backward.meta = lambda g, input_size, *_: empty(tuple(input_size), g.dtype)
avg_pool_nd.torch_fn = "nn.functional.avg_pool2d"
avg_pool_nd_backward.torch_ref = lambda lib, g, input_size, *args: \
    lib.ops.aten.avg_pool2d_backward(g, lib.zeros(input_size, dtype=g.dtype), *args)
avg_pool_nd.grad_name_of = lambda input, kernel_size, *_: \
    f"AvgPool{len(kernel_size)}DBackward0"
avg_pool_nd_backward.grad_name_of = lambda g, input_size, kernel_size, *_: \
    f"AvgPool{len(kernel_size)}DBackwardBackward0"
# (input shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
_AVG_CASES = [((2, 3, 7, 6), (3, 2), (2, 1), (1, 0), False, True, None),
              ((3, 5, 5), (2, 2), (2, 2), (1, 1), True, False, None),
              ((1, 2, 8, 7), (3, 3), (3, 2), (1, 1), True, True, 5),
              ((2, 2, 6, 6), (2, 2), (2, 2), (0, 0), False, True, None)]
avg_pool_nd.samples = lambda dev, dt: [Sample(make(c[0], dt), *c[1:]) for c in _AVG_CASES] \
    if dt.category == 2 else [Sample(make((2, 3, 7, 6), dt), *_AVG_CASES[0][1:])] \
    if dt.name == "int64" else []
avg_pool_nd.errors = [ErrorSample(Sample(make((1, 4, 4), ember.int32), (2, 2), (2, 2), (0, 0),
                                         False, True, None), NotImplementedError,
                                  "\"avg_pool2d\" not implemented for 'Int'")]
avg_pool_nd_backward.samples = lambda dev, dt: [Sample(make(c[0][:-2] + _avg_geometry(
    c[0][-2:], *c[1:5])[0], dt), c[0], *c[1:]) for c in _AVG_CASES] if dt.category == 2 else []


def _distinct(shape, dt):
    n = math.prod(shape)
    return (np.random.default_rng(len(shape)).permutation(n).reshape(shape) / n).astype(dt.np)

max_pool_nd.jvp = adaptive_max_pool_nd.jvp = gathered(lambda a: "pool")   # (forward mode)
constant_pad_nd.jvp = linear_with("value")
avg_pool_nd.jvp = avg_pool_nd_backward.jvp = linear_with()          # (both linear)
