"""Constant padding, max pooling (plain and adaptive) and average pooling, with the
windowed-view helpers of conv.py. Adaptive averaging, fold/unfold and the other padding modes
are compositions in ember/nn/_conv_functional.py.
"""
import functools
import math

import numpy as np

import ember

from .._C import kernels
from ..autograd.grad_mode import state as _grad_state
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
    return tuple(pad[2 * (n - 1 - i)] for i in range(n)), tuple(pad[2 * (n - i) - 1]
                                                              for i in range(n))


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


@functools.lru_cache(maxsize=256)         # (a small call's geometry: its Python cost)
def _max_osize(shape, kernel_size, stride, padding, dilation, ceil_mode):
    nd = len(kernel_size)
    osize = tuple(pool_output_size(*a, ceil_mode) for a in zip(
        shape[len(shape) - nd:], kernel_size, stride, padding, dilation))
    check_pool_output(f"max_pool{nd}d", shape, osize)
    return osize


# input elements up to which pool.h beats NumPy's passes over the taps (4x at 1k; 2x slower
# than them at 16k for a 3x2 average)
_POOL_C = 1 << 13


@functools.lru_cache(maxsize=256)
def _pool_plan(shape, osize, kernel_size=None, stride=None, padding=None, dilation=None):
    """pool.h's geometry of a pooling of ``shape`` over its trailing ``len(osize)`` dims
    (adaptive without ``kernel_size``), as three dims (leading ones of size 1): (the array, its
    address, rows, the output's shape, whether pool.h is the faster path)."""
    nd = len(osize)
    lead, size, one = shape[:len(shape) - nd], shape[len(shape) - nd:], (1,) * (3 - nd)
    dil = dilation or (1,) * nd
    g = one + size + one + osize + one + dil + (0, 0, 1) * len(one)
    for i, (n, o, d) in enumerate(zip(size, osize, dil)):
        first = [j * stride[i] - padding[i] if stride else (j * n) // o for j in range(o)]
        count = [kernel_size[i] if stride else -((-(j + 1) * n) // o) - f
                 for j, f in enumerate(first)]
        # each window's taps inside the input, [lo, hi) (padding skipped)
        g += (*first, *((-f + d - 1) // d if f < 0 else 0 for f in first), *(
            c if f + (c - 1) * d < n else (n - f + d - 1) // d for f, c in zip(first, count)))
    g, n = np.array(g, np.int64), math.prod(shape)
    return g, g.ctypes.data, math.prod(lead), lead + osize, n <= _POOL_C or n >= 16 * math.prod(
        osize) * math.prod(lead)


@functools.lru_cache(maxsize=256)
def _small(shape, char, osize, *geometry):
    """(pool.h's kernel, plan address, rows, output shape, the plan: kept alive) of a pooling
    of a float ``shape`` small enough for pool.h on one thread, else None."""
    if (fn := kernels.kernel("pool", np.dtype(char))) is None or math.prod(shape) > _POOL_C:
        return None
    g, plan, rows, oshape, _ = _pool_plan(shape, osize, *geometry)
    return fn, plan, rows, oshape, g


def _pool_c(input, osize, div, *geometry, grad=None):
    """Max (values, flat indices; ``div`` None) or average (over ``div``, the divisors of the
    output plane) pooling by pool.h over the trailing ``len(osize)`` dims; with ``grad``, the
    average's gradient (``input`` then the input's shape); None where it does not apply (the
    caller runs its NumPy code)."""
    a = input if grad is None else grad
    if grad is None and type(a) is np.ndarray and a.dtype.char in "fd" and not kernels._off \
            and (c := _small(a.shape, a.dtype.char, osize, *geometry)):
        fn, plan, rows, oshape, _ = c
        x, y = np.ascontiguousarray(a), np.empty(oshape, a.dtype)
        idx = np.empty(oshape, np.int64) if div is None else None
        fn(kernels.ptr(x), kernels.ptr(y), kernels.ptr(idx), rows, plan, kernels.ptr(div), 0, 1)
        return y if idx is None else (y, idx)
    if type(a) is np.ndarray and (fn := kernels.kernel("pool", a.dtype)) is not None:
        _, plan, rows, oshape, fits = _pool_plan(a.shape if grad is None else input, osize,
                                                 *geometry)
        # (from 2^17 elements split over threads, where pool.h beats NumPy's passes on one)
        nt = kernels.num_threads() if a.size >= 1 << 17 else 1
        if not (fits or nt > 1) or grad is not None and a.shape != oshape:
            return None
        a = np.ascontiguousarray(a)
        x, y = (a, np.empty(oshape, a.dtype)) if grad is None else (np.zeros(input, a.dtype), a)
        idx = np.empty(oshape, np.int64) if div is None else None
        fn(kernels.ptr(x), kernels.ptr(y), kernels.ptr(idx), rows, plan, kernels.ptr(div),
           grad is not None, nt)
        return x if grad is not None else y if idx is None else (y, idx)


@op("_max_pool_nd", method=False, function=False, nondiff_outputs=(1,))
def max_pool_nd(xp, input, kernel_size, stride, padding, dilation, ceil_mode):
    """Max pooling over the trailing ``len(kernel_size)`` dims: (values, flat indices into the
    pooled dims of the input), as ``nn.functional.max_pool*d(..., return_indices=True)``."""
    nd, size = len(kernel_size), input.shape[input.ndim - len(kernel_size):]
    osize = _max_osize(input.shape, kernel_size, stride, padding, dilation, ceil_mode)
    if out := _pool_c(input, osize, None, kernel_size, stride, padding, dilation):
        return out      # (a tuple of arrays)
    hi = tuple(max(p, (o - 1) * s + d * (k - 1) + 1 - n - p) for o, s, d, k, n, p in zip(
        osize, stride, dilation, kernel_size, size, padding))
    x = _pad(xp, input, padding, hi, _lowest(input))
    win = _windows(xp, x, kernel_size, stride, dilation, osize)       # (*lead, *osize, *k)
    strides = _flat_strides(size)
    offsets = xp.asarray([sum(t * d * st for t, d, st in zip(tap, dilation, strides))
                          for tap in _taps(kernel_size)])
    base = sum(xp.arange(o).reshape((o,) + (1,) * (nd - 1 - i)) * (s * st) - p * st
               for i, (o, s, p, st) in enumerate(zip(osize, stride, padding, strides)))
    lead = (slice(None),) * (win.ndim - nd)
    # NOTE: branch-free passes over the output (a masked copy per tap is several times slower):
    # the max first, then the tap index by torch's rule, a later value wins if greater or NaN,
    # so the first maximum, or the last NaN
    views = [win[lead + tap] for tap in _taps(kernel_size)]
    best = functools.reduce(xp.maximum, views)
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
    if out := _pool_c(input, tuple(output_size), None):
        return out
    size = input.shape[input.ndim - nd:]
    idx = [_adaptive_windows(s, o) for s, o in zip(size, output_size)]
    # input[..., i0[:, :, None, None], i1[None, None]] is (*lead, o0, k0, o1, k1)
    g = input[(Ellipsis,) + tuple(xp.asarray(a.reshape((1, 1) * i + a.shape + (1, 1) * (
        nd - 1 - i))) for i, a in enumerate(idx))]
    lead = input.ndim - nd
    g = g.transpose(tuple(range(lead)) + tuple(range(lead, lead + 2 * nd, 2)) +
                    tuple(range(lead + 1, lead + 2 * nd, 2)))
    flat = g.reshape(g.shape[:lead + nd] + (-1,))
    # NOTE: argmax picks the first maximum, as torch does, but the first NaN where torch's
    # kernels (and pool.h) keep the last one (only the index differs)
    arg = flat.argmax(-1)
    taps = xp.unravel_index(arg, tuple(a.shape[1] for a in idx))
    coords = [xp.asarray(a)[xp.arange(a.shape[0]).reshape((-1,) + (1,) * (nd - 1 - i)), t]
              for i, (a, t) in enumerate(zip(idx, taps))]
    return xp.take_along_axis(flat, arg[..., None], -1)[..., 0], functools.reduce(
        lambda i, cs: i * cs[1] + cs[0], zip(coords, size), 0).astype(np.int64)


def max_unpool_grad(g, indices, in_shape, nd, accumulate=True):
    """Scatter ``g`` (*lead, *out) into zeros of ``in_shape`` at the flat ``indices`` of the
    trailing ``nd`` dims (adding where windows overlap); the backward of max pooling and the
    forward of max unpooling."""
    lead = tuple(in_shape[:len(in_shape) - nd])
    m = math.prod(lead)
    # NumPy's scatter where nothing differentiates it (grad mode off: not ``create_graph``),
    # for small gradients (np.add.at is slower than scatter_add's kernel on large ones)
    if not _grad_state.grad_enabled and type(g) is type(indices) is ember.Tensor and type(
            a := g._data) is np.ndarray and type(i := indices._data) is np.ndarray and \
            a.size <= _POOL_C:
        out = np.zeros((m, math.prod(in_shape[len(lead):])), a.dtype)
        if accumulate:
            np.add.at(out, (np.arange(m)[:, None], i.reshape(m, -1)), a.reshape(m, -1))
        else:
            np.put_along_axis(out, i.reshape(m, -1), a.reshape(m, -1), 1)
        return ember.Tensor._wrap(out.reshape(tuple(in_shape)))
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
    shape = x.shape[:x.ndim - len(kernel_size)] + _max_osize(
        x.shape, kernel_size, stride, padding, dilation, ceil_mode)
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

@functools.lru_cache(maxsize=256)
def _avg_geometry(size, kernel_size, stride, padding, ceil_mode):
    """Output size and the high padding that makes every window fit (ceil_mode's last one)."""
    osize = tuple(pool_output_size(n, k, s, p, 1, ceil_mode) for n, k, s, p in zip(
        size, kernel_size, stride, padding))
    hi = tuple(max(p, (o - 1) * s + k - n - p) for o, s, k, n, p in zip(
        osize, stride, kernel_size, size, padding))
    return osize, hi


@functools.lru_cache(maxsize=256)
def _avg_divisor(xp, size, kernel_size, stride, padding, osize, count_include_pad,
                 divisor_override, dtype):
    """torch's divisor of each window (*osize): the window clipped to the padded input, or to
    the input itself when padding does not count; or ``divisor_override``."""
    if divisor_override:
        return xp.asarray(np.full(osize, divisor_override, dtype))
    div = np.ones(())
    for n, k, s, p, o in zip(size, kernel_size, stride, padding, osize):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        div = np.multiply.outer(div, end - start if count_include_pad else np.minimum(
            end, n) - np.maximum(start, 0))
    return xp.asarray(div.astype(dtype))


_I64, _F32 = np.dtype(np.int64), np.dtype(np.float32)


def _opmath(x):
    return _I64 if x.dtype.kind in "iub" else _F32 if x.dtype.itemsize == 2 else x.dtype


@functools.lru_cache(maxsize=256)
def _avg_small(shape, char, kernel_size, stride, padding, ceil_mode, count_include_pad,
               divisor_override):
    """(pool.h's kernel, plan address, rows, output shape, divisors, the plan: kept alive) of an
    average pooling of a float ``shape`` small enough for pool.h on one thread, else None."""
    size = shape[len(shape) - len(kernel_size):]
    osize, _ = _avg_geometry(size, kernel_size, stride, padding, ceil_mode)
    c = _small(shape, char, osize, kernel_size, stride, padding)
    return c and c[:4] + (_avg_divisor(np, size, kernel_size, stride, padding, osize,
                                       count_include_pad, divisor_override, char), c[4])


@op("_avg_pool_nd", method=False, function=False)
def avg_pool_nd(xp, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                divisor_override):
    """Average pooling over the trailing ``len(kernel_size)`` dims, as
    ``nn.functional.avg_pool*d``: a sum of the windows' taps (strided views), then divided."""
    # a small float input: pool.h's call, all but the arrays, cached by the call's geometry
    if type(input) is np.ndarray and input.dtype.char in "fd" and not kernels._off and (
            c := _avg_small(
                input.shape, input.dtype.char, kernel_size, stride, padding, ceil_mode,
                count_include_pad, divisor_override)):
        fn, plan, rows, oshape, div, _ = c
        x, y = np.ascontiguousarray(input), np.empty(oshape, input.dtype)
        fn(kernels.ptr(x), kernels.ptr(y), None, rows, plan, kernels.ptr(div), False, 1)
        return y
    nd = len(kernel_size)
    if input.dtype.kind in "iub" and input.dtype != np.int64:
        raise NotImplementedError(f"\"avg_pool{nd}d\" not implemented for "
                                  f"'{type_name(input.dtype)}'")
    size = input.shape[input.ndim - nd:]
    osize, hi = _avg_geometry(size, kernel_size, stride, padding, ceil_mode)
    div = _avg_divisor(xp, size, kernel_size, stride, padding, osize, count_include_pad,
                       divisor_override, _opmath(input).char)
    if (out := _pool_c(input, osize, div, kernel_size, stride, padding)) is not None:
        return out
    # (a reshape and a multi-axis sum, where windows tile the input, is several times slower)
    win = _windows(xp, _pad(xp, input, padding, hi, 0), kernel_size, stride, (1,) * nd, osize)
    at, taps = (slice(None),) * (win.ndim - nd), _taps(kernel_size)
    acc = sum((win[at + t] for t in taps[1:]), win[at + taps[0]].astype(_opmath(input)))
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
    div = _avg_divisor(xp, size, kernel_size, stride, padding, osize, count_include_pad,
                       divisor_override, _opmath(grad).char)
    if (out := _pool_c(tuple(input_size), osize, div, kernel_size, stride, padding,
                       grad=grad)) is not None:
        return out
    g = grad / div
    # windows that tile the input exactly (stride = kernel, no padding, nothing left over):
    # the gradient is a broadcast
    if stride == kernel_size and not any(padding) and all(
            o * k == n for o, k, n in zip(osize, kernel_size, size)):
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
