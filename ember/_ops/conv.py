"""Convolution, the op with a windowed NumPy forward (as max pooling, in pooling.py).

``convolution`` is torch's N-d primitive (plain and transposed, with groups). Its forward is
im2col on a strided window view plus one batched matmul over the groups; its backward is
``convolution`` again (the input gradient of a convolution is a transposed convolution and the
other way round, the weight gradient is a convolution of the input with the output gradient),
so gradients of any order come from this one op. On NumPy arrays the 1-D and 2-D passes
run in C where they can: Winograd for 3x3 unit-stride layers with enough input channels
(conv_winograd.py), im2col + GEMM per sample for the rest (conv_cols.py); the NumPy code here
is their reference and the path for CuPy, 3-D and other dtypes. Pooling by averaging,
fold/unfold and padding modes are compositions in ember/nn/_conv_functional.py, interpolation
in ember/nn/_resample_functional.py.
"""
import itertools
import math
import operator

import numpy as np

from .._backends import blas
from .._tensor import Tensor
from ..autograd.graph import needs_input_grad
from . import conv_cols, conv_winograd
from .meta import empty
from .pointwise import PAR_MIN, par_copy
from .nn import kernel_grads
from .tangents import multilinear
from .registry import op
from .samples import Sample, make


def _windows(xp, x, ksize, stride, dilation, osize):
    """A view ``(*lead, *osize, *ksize)`` of the trailing ``len(ksize)`` dims of ``x``: window
    ``o``, tap ``k`` reads ``x[..., o * stride + k * dilation]`` (sliding_window_view with the
    stride and dilation folded into the view, so nothing is copied)."""
    nd = len(ksize)
    st = x.strides[-nd:]
    shape = x.shape[:-nd] + tuple(osize) + tuple(ksize)
    strides = x.strides[:-nd] + tuple(a * s for a, s in zip(st, stride)) + tuple(
        a * d for a, d in zip(st, dilation))
    return _as_strided(xp, x, shape, strides)


def _as_strided(xp, x, shape, strides):
    """``as_strided`` (byte strides); of a C-contiguous NumPy array made directly (NumPy's
    builds a helper object in Python each call: ~2 us, most of a small pool's view)."""
    if type(x) is np.ndarray and x.flags.c_contiguous:
        return np.ndarray(shape, x.dtype, x, 0, strides)
    return xp.lib.stride_tricks.as_strided(x, shape, strides)


def _pad(xp, x, lo, hi, value=0):
    """``x`` with its trailing ``len(lo)`` dims grown by ``lo``/``hi`` cells of ``value``
    (cropped where negative); ``x`` itself when there is nothing to pad."""
    if not any(lo) and not any(hi):
        return x
    shape, lead = x.shape, x.ndim - len(lo)
    if min(lo) >= 0 <= min(hi):     # (no crop: C-level maps; a loop was most of a small pad)
        ends = tuple(map(operator.add, lo, shape[lead:]))
        new = shape[:lead] + tuple(map(operator.add, ends, hi))
        dst = (slice(None),) * lead + tuple(map(slice, lo, ends))
    else:
        new, src, dst = list(shape), [slice(None)] * x.ndim, [slice(None)] * x.ndim
        for i in range(lead, x.ndim):
            s, a, b = shape[i], lo[i - lead], hi[i - lead]
            m = new[i] = s + a + b
            src[i], dst[i] = slice(max(-a, 0), s - max(-b, 0)), slice(max(a, 0), m - max(b, 0))
        x, new, dst = x[tuple(src)], tuple(new), tuple(dst)
    # a small output zeroed at once (each write's call costs more than its bytes); a large one
    # gets only its border filled, so the interior is written once
    zeroed = value == 0 and math.prod(new) <= 1 << 16
    out = (xp.zeros if zeroed else xp.empty)(new, x.dtype)
    for i in range(lead, x.ndim * (not zeroed)):
        edge = list(dst[:i]) + [None] + [slice(None)] * (x.ndim - 1 - i)
        for edge[i] in (slice(0, dst[i].start), slice(dst[i].stop, new[i])):
            if edge[i].start != edge[i].stop:
                out[tuple(edge)] = value
    if xp is np and out.size >= PAR_MIN:     # (the copy split over threads, as torch's)
        par_copy(out[dst], x)
    else:
        out[dst] = x
    return out


def _compute_dtype(x):
    # NOTE: NumPy has no BLAS for bfloat16/float16: accumulate in float32 as torch's CPU does.
    return np.float32 if x.dtype.itemsize < 4 and x.dtype.kind not in "iub" else x.dtype


def _taps(ksize):
    return list(itertools.product(*map(range, ksize)))


def _flat_strides(size):
    """Element strides of a C-contiguous array of ``size``."""
    out, s = [], 1
    for n in reversed(size):
        out.append(s)
        s *= n
    return tuple(reversed(out))


def _span(size, strides):
    """How many flat elements a block of ``size`` covers in an array with ``strides``: the
    length of its "wide" run, garbage cells between its rows included."""
    return sum((n - 1) * s for n, s in zip(size, strides)) + 1


def _strided(xp, a, shape, strides):
    """``as_strided`` on the leading dims of ``a`` kept, with element ``strides`` after them."""
    lead = len(shape) - len(strides)
    return _as_strided(xp, a, shape, a.strides[:lead] + tuple(s * a.itemsize for s in strides))


def _conv_taps(x, w, dilation, groups, osize):
    """A stride-1 convolution of the padded ``x`` as one GEMM per kernel tap, accumulated by
    BLAS: with the input channel-major and the samples laid end to end ("wide" rows that keep
    the padding cells), each tap reads one shifted view of it and nothing is copied per tap.
    None where BLAS cannot be called directly."""
    (n, c), size, k, o = x.shape[:2], x.shape[2:], w.shape[2:], w.shape[0]
    cg, og, S, P = c // groups, o // groups, _flat_strides(size), math.prod(size)
    offs = [sum(t * d * s for t, d, s in zip(tap, dilation, S)) for tap in _taps(k)]
    cols = np.empty((c, n * P + offs[-1]), x.dtype)
    cols[:, :n * P].reshape(c, n, P)[...] = x.reshape(n, c, P).transpose(1, 0, 2)
    cols[:, n * P:] = 0
    wt = np.ascontiguousarray(w.reshape(groups, og, cg, len(offs)).transpose(0, 3, 1, 2))
    out = np.empty((o, n * P), x.dtype)
    for g in range(groups):
        dst, src = out[g * og:(g + 1) * og], cols[g * cg:(g + 1) * cg]
        for j, off in enumerate(offs):
            if not blas.gemm(wt[g, j], src[:, off:off + n * P], dst, beta=float(j > 0)):
                return None
    return np.ascontiguousarray(_strided(np, out, (n, o) + osize, (P, n * P) + S))


def _use_taps(xp, x, cg, og, stride, k):
    # per-tap GEMMs are (og x cg) @ (cg x windows): with fewer than ~16 channels per group on
    # either side they are too thin and the im2col paths win; a weight gradient's many taps
    # over few windows are one big GEMM there too
    return (xp is np and min(cg, og) >= 16 and all(s == 1 for s in stride)
            and math.prod(k) * 16 <= math.prod(x.shape[2:])
            and x.dtype in (np.float32, np.float64) and blas.available())


def _conv_forward(xp, x, w, stride, padding, dilation, groups):
    nd, (n, c), o = w.ndim - 2, x.shape[:2], w.shape[0]
    for fast in (conv_cols.forward, conv_winograd.forward) if xp is np else ():
        out = fast(x, w, stride, padding, dilation, groups)
        if out is not None:
            return out
    x = xp.ascontiguousarray(_pad(xp, x, padding, padding))
    k, size = w.shape[2:], x.shape[2:]
    osize = tuple((size[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd))
    cg, og = c // groups, o // groups
    if _use_taps(xp, x, cg, og, stride, k):
        out = _conv_taps(x, w, dilation, groups, osize)
        if out is not None:
            return out
    if cg == 1:
        # NOTE: depthwise convolutions (and average pooling) would be a matmul with an inner
        # dim of 1 per group; summing the shifted views is several times faster.
        win = _windows(xp, x, k, stride, dilation, osize)        # (n, c, *osize, *k)
        wk = w.reshape(groups, og, -1)
        out = xp.zeros((n, groups, og) + osize, x.dtype)
        for j, tap in enumerate(_taps(k)):
            xs = win[(slice(None),) * (2 + nd) + tap]            # (n, c, *osize)
            out += xs[:, :, None] * wk[:, :, j].reshape((groups, og) + (1,) * nd)
        return out.reshape((n, o) + osize)
    # NOTE: im2col copies are slow when their contiguous runs are short (a row of the output).
    # With unit strides, each tap's inputs for all outputs lie in one flat run of the padded
    # input ("wide" rows that include the padding columns, dropped after the matmul); with unit
    # dilations, each output's taps do. Pick the layout whose runs waste least. Where the
    # windows are few (a weight gradient's), the batch goes inside the matmul: one large GEMM
    # per group is then much faster than n thin ones.
    S, K, L = _flat_strides(size), math.prod(k), math.prod(osize)
    span_o, span_k = _span(osize, S), _span(k, S)
    sp = tuple(range(3, 3 + nd))
    if all(s == 1 for s in stride) and span_o <= 2 * L and (
            span_o * K <= span_k * L or any(d != 1 for d in dilation)):
        # (a GEMM per sample here: the batch-major copies cost less than a bigger GEMM gains)
        cols = _strided(xp, x, (n, c) + k + (span_o,), tuple(d * s for d, s in zip(
            dilation, S)) + (1,)).reshape(n, groups, cg * K, span_o)
        out = xp.matmul(w.reshape(groups, og, cg * K), cols)          # (n, groups, og, span)
        return xp.ascontiguousarray(_strided(xp, out.reshape(n, o, span_o), (n, o) + osize, S))
    if all(d == 1 for d in dilation) and span_k <= 2 * K:
        view = _strided(xp, x, (n, c) + osize + (span_k,), tuple(
            st * s for st, s in zip(stride, S)) + (1,)).reshape((n, groups, cg) + osize +
                                                                (span_k,))
        cols = view.transpose((1, 0) + sp + (2, 3 + nd)).reshape(groups, n * L, cg * span_k)
        ww = xp.zeros((o, cg, span_k), w.dtype)
        _strided(xp, ww, (o, cg) + k, S)[...] = w
        out = xp.matmul(cols, ww.reshape(groups, og, -1).transpose(0, 2, 1))  # (G, n L, og)
        return out.reshape(groups, n, L, og).transpose(1, 0, 3, 2).reshape((n, o) + osize)
    win = _windows(xp, x, k, stride, dilation, osize).reshape((n, groups, cg) + osize + k)
    cols = win.transpose((1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + (0,) + sp).reshape(
        groups, cg * K, n * L)                                        # the im2col copy
    out = xp.matmul(w.reshape(groups, og, -1), cols)                  # (groups, og, n * L)
    return xp.ascontiguousarray(out.reshape(o, n, L).transpose(1, 0, 2)).reshape((n, o) + osize)


def _conv_transpose_forward(xp, x, w, stride, padding, dilation, output_padding, groups):
    nd, (n, c), size = w.ndim - 2, x.shape[:2], x.shape[2:]
    k, cg, og = w.shape[2:], c // groups, w.shape[1]
    o, K, L = groups * og, math.prod(k), math.prod(size)
    full = tuple((size[i] - 1) * stride[i] + dilation[i] * (k[i] - 1) + 1 + output_padding[i]
                 for i in range(nd))
    out = conv_cols.transpose(x, w, stride, padding, dilation, output_padding, groups) \
        if xp is np else None
    if out is not None:
        return out
    if (1 < cg <= og or _use_taps(xp, x, cg, og, stride, k)) and all(
            s == 1 for s in stride) and all(p <= d * (kk - 1)
                                            for p, d, kk in zip(padding, dilation, k)):
        # NOTE: with unit strides the transposed convolution is a plain one with the kernel
        # flipped and its channel axes swapped, over the input padded by the kernel's reach.
        # Its im2col copies grow with the input channels, col2im's adds with the output ones:
        # with no more inputs than outputs per group this is faster, and with the per-tap
        # GEMMs (no copies at all) it always is.
        wf = w.reshape((groups, cg, og) + k).swapaxes(1, 2).reshape((o, cg) + k)
        wf = wf[(slice(None), slice(None)) + (slice(None, None, -1),) * nd]
        lo = tuple(d * (kk - 1) - p for p, d, kk in zip(padding, dilation, k))
        if not any(output_padding):      # (the forward pads: no copy of its own here)
            return _conv_forward(xp, x, wf, stride, lo, dilation, groups)
        return _conv_forward(xp, _pad(xp, x, lo, tuple(a + b for a, b in zip(
            lo, output_padding))), wf, stride, (0,) * nd, dilation, groups)
    if cg == 1:
        out = xp.zeros((n, o) + full, x.dtype)
        wk = w.reshape(groups, og, -1)
        xg = x.reshape((n, groups, 1) + size)
        for j, tap in enumerate(_taps(k)):
            dst = tuple(slice(t * d, t * d + (s_ - 1) * st + 1, st)
                        for t, d, s_, st in zip(tap, dilation, size, stride))
            out[(slice(None), slice(None)) + dst] += (xg * wk[:, :, j].reshape(
                (groups, og) + (1,) * nd)).reshape((n, o) + size)
    else:
        # col2im: one matmul per group gives every tap's contribution (the batch inside the
        # GEMM), then each tap is added in place
        wt = w.reshape(groups, cg, -1).transpose(0, 2, 1)                # (groups, og K, cg)
        if all(s == 1 for s in stride):
            # the adjoint of the wide im2col: the input laid out in the output's wide rows,
            # so each tap adds one contiguous run
            S = _flat_strides(full)
            span = _span(size, S)
            xw = xp.zeros((c, n, span), x.dtype)
            _strided(xp, xw, (n, c) + size, (span, n * span) + S)[...] = x
            cols = xp.matmul(wt, xw.reshape(groups, cg, n * span)).reshape(groups, og, K, n, span)
            out = xp.zeros((n, o, math.prod(full)), x.dtype)
            for j, tap in enumerate(_taps(k)):
                off = sum(t * d * s for t, d, s in zip(tap, dilation, S))
                out[:, :, off:off + span] += cols[:, :, j].reshape(o, n, span).transpose(1, 0, 2)
            out = out.reshape((n, o) + full)
        else:
            xg = x.reshape(n, groups, cg, L).transpose(1, 2, 0, 3).reshape(groups, cg, n * L)
            cols = xp.matmul(wt, xg).reshape((groups, og, K, n) + size)
            out = xp.zeros((n, o) + full, x.dtype)
            for j, tap in enumerate(_taps(k)):
                dst = tuple(slice(t * d, t * d + (s_ - 1) * st + 1, st)
                            for t, d, s_, st in zip(tap, dilation, size, stride))
                out[(slice(None), slice(None)) + dst] += cols[:, :, j].reshape(
                    (o, n) + size).swapaxes(0, 1)
    if any(padding):
        out = xp.ascontiguousarray(out[(Ellipsis,) + tuple(
            slice(p, f - p) for p, f in zip(padding, full))])
    return out


def _check_conv(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    """torch's argument checks, with its messages."""
    nd = w.ndim - 2
    if x.ndim != w.ndim:
        raise RuntimeError(f"Expected {w.ndim}-dimensional input for {w.ndim}-dimensional "
                           f"weight {list(w.shape)}, but got {x.ndim}-dimensional input of "
                           f"size {list(x.shape)} instead")
    if x.dtype != w.dtype or (bias is not None and bias.dtype != x.dtype):
        other = w if x.dtype != w.dtype else bias
        raise RuntimeError(f"convolution: input type ({x.dtype}) and "
                           f"{'weight' if other is w else 'bias'} type ({other.dtype}) should "
                           "be the same")
    if groups <= 0 or any(s <= 0 for s in stride) or any(d <= 0 for d in dilation) or \
            any(p < 0 for p in padding):
        raise RuntimeError(f"convolution: expected positive groups, stride and dilation and "
                           f"non-negative padding, got groups={groups}, stride={list(stride)}, "
                           f"dilation={list(dilation)}, padding={list(padding)}")
    chan = w.shape[0] if transposed else w.shape[1] * groups
    if x.shape[1] != chan or w.shape[0] % groups:
        what = "transposed=1" if transposed else f"groups={groups}"
        raise RuntimeError(f"Given {what}, weight of size {list(w.shape)}, expected "
                           f"input{list(x.shape)} to have {chan} channels, but got "
                           f"{x.shape[1]} channels instead")
    if transposed:
        out = [conv_output_size(x.shape[2 + i], w.shape[2 + i], stride[i], padding[i],
                                dilation[i], True, output_padding[i]) for i in range(nd)]
        if min(out) <= 0:
            raise RuntimeError(f"Given input size per channel: "
                               f"({' x '.join(map(str, x.shape[2:]))}). Calculated output size per "
                               f"channel: ({' x '.join(map(str, out))}). Output size is too small")
    else:
        padded = [x.shape[2 + i] + 2 * padding[i] for i in range(nd)]
        ext = [dilation[i] * (w.shape[2 + i] - 1) + 1 for i in range(nd)]
        if any(p < e for p, e in zip(padded, ext)):
            raise RuntimeError(f"Calculated padded input size per channel: "
                               f"({' x '.join(map(str, padded))}). Kernel size: "
                               f"({' x '.join(map(str, ext))}). Kernel size can't be greater "
                               "than actual input size")


@op("convolution", tags=("autocast_lower",), method=False)
def convolution(xp, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                groups):
    """N-d convolution (or transposed convolution) of batched ``input`` (N, C, *spatial) with
    ``weight`` ((out, in/groups, *k), or (in, out/groups, *k) when transposed); every
    per-dim option is a tuple of ints. The public entry points are ``nn.functional.conv*``.

    Example:
        >>> import ember
        >>> ember.convolution(ember.ones(1, 1, 4), ember.ones(1, 1, 3), None, (1,), (0,), (1,),
        ...                   False, (0,), 1)
        tensor([[[3., 3.]]])
    """
    _check_conv(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    dt = input.dtype
    cd = _compute_dtype(input)
    x, w = input.astype(cd, copy=False), weight.astype(cd, copy=False)
    if transposed:
        out = _conv_transpose_forward(xp, x, w, stride, padding, dilation, output_padding, groups)
    else:
        out = _conv_forward(xp, x, w, stride, padding, dilation, groups)
    if bias is not None:
        out += bias.astype(out.dtype).reshape((-1,) + (1,) * (out.ndim - 2))
    return out.astype(dt, copy=False)


def _weight_grad(x, g, k, stride, padding, dilation, groups):
    """``dL/dweight`` of ``y = conv(x, weight)`` given ``g = dL/dy``, as a convolution of the
    input (channels as batch) with the output gradient (batch as channels):
    ``gw[go, c, k] = sum_{n,l} x_pad[n, gc, l * stride + k * dilation] * g[n, go, l]``."""
    arrays = kernel_grads(x, g)             # (the kernel's result is not differentiable)
    gw = None
    for fast in (conv_cols.weight_grad, conv_winograd.weight_grad) if arrays else ():
        gw = fast(*arrays, k, stride, padding, dilation, groups)
        if gw is not None:
            break
    if gw is not None:
        return Tensor._wrap(gw)
    nd, n = len(k), x.shape[0]
    cg, og = x.shape[1] // groups, g.shape[1] // groups
    sp = tuple(range(3, 3 + nd))
    xb = x.reshape((n, groups, cg) + tuple(x.shape[2:])).permute((2, 1, 0) + sp)
    gk = g.reshape((n, groups, og) + tuple(g.shape[2:])).permute((1, 2, 0) + sp)
    r = convolution(xb.reshape((cg, groups * n) + tuple(x.shape[2:])),
                    gk.reshape((groups * og, n) + tuple(g.shape[2:])), None, dilation, padding,
                    stride, False, (0,) * nd, groups)        # (cg, groups * og, *k')
    # the last windows may reach past the kernel when stride does not divide the input
    if tuple(r.shape[2:]) != tuple(k):
        r = r[(slice(None), slice(None)) + tuple(slice(0, s) for s in k)]
    return r.transpose(0, 1)


def input_grad(g, shape, weight, stride, padding, dilation, groups):
    """``dL/dinput`` (of ``shape``) of ``y = conv(input, weight)`` given ``g = dL/dy``: the
    transposed convolution of ``g``."""
    k = weight.shape[2:]
    # output_padding recovers the input rows the forward's last window skipped
    fit = tuple(shape[2 + i] - ((g.shape[2 + i] - 1) * stride[i] - 2 * padding[i] +
                                dilation[i] * (k[i] - 1) + 1) for i in range(len(k)))
    return convolution(g, weight, None, stride, padding, dilation, True, fit, groups)


@convolution.vjp(save=("input", "weight"))
def _(g, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    # which gradients to compute is the graph's call (needs_input_grad), not the saved tensors'
    # requires_grad: a saved_tensors_hooks pair may hand them back detached
    nd, k = weight.dim() - 2, tuple(weight.shape[2:])
    gi = gw = None
    if transposed:       # y = conv^T(x): dx = conv(g), dweight from (g, x) with roles swapped
        if needs_input_grad(0):
            gi = convolution(g, weight, None, stride, padding, dilation, False, (0,) * nd, groups)
            # an output_padding of at least the stride (allowed below the dilation) adds
            # windows past the input's last cell
            if tuple(gi.shape) != tuple(input.shape):
                gi = gi[(slice(None), slice(None)) + tuple(slice(0, s) for s in input.shape[2:])]
        if needs_input_grad(1):
            gw = _weight_grad(g, input, k, stride, padding, dilation, groups)
    else:
        if needs_input_grad(0):
            gi = input_grad(g, input.shape, weight, stride, padding, dilation, groups)
        if needs_input_grad(1):
            gw = _weight_grad(input, g, k, stride, padding, dilation, groups)
    gb = g.sum((0,) + tuple(range(2, 2 + nd))) if bias is not None and needs_input_grad(2) else None
    return gi, gw, gb


def conv_output_size(size, k, stride, padding, dilation, transposed=False, output_padding=0):
    """Length of one spatial dim of a (transposed) convolution's output."""
    if transposed:
        return (size - 1) * stride - 2 * padding + dilation * (k - 1) + 1 + output_padding
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def _convolution_meta(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    _check_conv(x, w, b, stride, padding, dilation, transposed, output_padding, groups)
    c = w.shape[1] * groups if transposed else w.shape[0]
    size = tuple(conv_output_size(x.shape[2 + i], w.shape[2 + i], stride[i], padding[i],
                                  dilation[i], transposed, output_padding[i])
                 for i in range(w.ndim - 2))
    return empty((x.shape[0], c) + size, x.dtype)


convolution.meta = _convolution_meta


def _conv_samples(dev, dt):
    if dt.category != 2:
        return []

    def s(x, w, b, *opts):
        return Sample(make(x, dt), make(w, dt, seed=1), make(b, dt, seed=2) if b else None, *opts)
    # (a plain and a transposed one first: tests/test_vmap.py runs the first two)
    return [
        s((1, 4, 6, 5), (6, 2, 3, 2), (6,), (1, 2), (1, 0), (2, 1), False, (0, 0), 2),
        s((2, 4, 5), (4, 3, 3), (6,), (2,), (1,), (1,), True, (1,), 2),
        s((2, 3, 7), (4, 3, 3), (4,), (2,), (1,), (1,), False, (0,), 1),
        s((1, 2, 4, 4), (2, 1, 3, 3), None, (1, 1), (1, 1), (1, 1), False, (0, 0), 2),
        s((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), (2,), (1, 1, 1), (0, 1, 0), (1, 1, 1), False,
          (0, 0, 0), 1),
        s((1, 2, 3, 3), (2, 3, 2, 3), None, (2, 1), (0, 1), (1, 2), True, (1, 0), 1),
        s((1, 2, 3, 3), (2, 1, 2, 2), None, (2, 2), (0, 0), (1, 1), True, (0, 0), 2),
    ]


convolution.samples = _conv_samples
convolution.tol = {"bfloat16": (2e-2, 5e-2)}

convolution.jvp = multilinear("bias")      # (forward mode: tangents.py)
