"""``torch.nn.functional``: resampling (interpolate, upsample, pixel_shuffle,
pixel_unshuffle), compositions of ember ops (gathers and weighted sums), so autograd needs no
new rules.
"""
import math
import numbers
import warnings

import numpy as np

import ember

from ..amp.autocast_mode import autocast_policy
from ..autograd.composite import one_node
from ._conv_functional import _ntuple, adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "pixel_shuffle",
           "pixel_unshuffle"]


# ---- resampling -------------------------------------------------------------------------------

def _source(mode, n, o, scale, align_corners):
    """Source coordinate of each of ``o`` output cells along a dim of ``n`` (torch's
    area_pixel_compute_source_index / nearest index rules)."""
    i = np.arange(o, dtype=np.float64)
    if mode == "nearest":
        # NOTE: torch computes nearest indices in float32 (matching it matters at x.5 edges)
        s = np.float32(scale if scale else n / o)
        return np.minimum(np.floor(i.astype(np.float32) * s), n - 1).astype(np.int64)
    if mode == "nearest-exact":
        s = np.float32(scale if scale else n / o)
        return np.minimum(np.floor(((i + 0.5) * s).astype(np.float32)), n - 1).astype(np.int64)
    if align_corners:
        return i * ((n - 1) / (o - 1) if o > 1 else 0.0)
    src = (i + 0.5) * (scale if scale else n / o) - 0.5
    return src if mode == "bicubic" else np.maximum(src, 0.0)


def _cubic_weights(t, a=-0.75):
    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _resample_dim(x, d, mode, o, scale, align_corners):
    """Interpolate ``x`` along dim ``d`` to ``o`` cells: a weighted sum of gathered taps."""
    n = x.shape[d]
    src = _source(mode, n, o, scale, align_corners)

    def take(idx):
        return x.index_select(d, ember.tensor(np.clip(idx, 0, n - 1), device=x.device))

    def weight(w):
        return ember.tensor(w.reshape((-1,) + (1,) * (x.dim() - 1 - d)), dtype=x.dtype,
                            device=x.device)
    if mode in ("nearest", "nearest-exact"):
        return take(src)
    i0 = np.floor(src).astype(np.int64)
    t = src - i0
    if mode == "bicubic":
        return sum(take(i0 - 1 + j) * weight(w) for j, w in enumerate(_cubic_weights(t)))
    return take(i0) * weight(1 - t) + take(i0 + 1) * weight(t)


_MODE_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


@autocast_policy("autocast_keep_cpu", "autocast_fp32_cuda")
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize the spatial dims of (N, C, *spatial) ``input`` to ``size`` or by
    ``scale_factor``; modes nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area.

    Example:
        >>> import ember
        >>> x = ember.tensor([[[0., 1.]]])
        >>> ember.nn.functional.interpolate(x, scale_factor=2, mode="linear")
        tensor([[[0.0000, 0.2500, 0.7500, 1.0000]]])
        >>> ember.nn.functional.interpolate(x, size=3)
        tensor([[[0., 0., 1.]]])
    """
    nd = input.dim() - 2
    if nd < 1:
        raise ValueError(f"interpolate: expected a batched input with spatial dims, got input "
                         f"of size {list(input.shape)}")
    want = _MODE_DIMS.get(mode)
    if want is not None and want != nd:
        raise NotImplementedError(f"Got {input.dim()}D input, but {mode} mode needs "
                                  f"{want + 2}D input")
    if mode not in ("nearest", "nearest-exact", "area") and want is None:
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                                  f"{input.dim()}D) for the modes: nearest | linear | bilinear | "
                                  f"bicubic | trilinear | area | nearest-exact (got {mode})")
    if align_corners is not None and want is None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined")
    in_size = tuple(input.shape[2:])
    if size is not None:
        osize, scales = _ntuple(size, nd), (None,) * nd
    else:
        sf = (float(scale_factor),) * nd if isinstance(scale_factor, numbers.Number) else \
            tuple(float(f) for f in scale_factor)
        osize = tuple(int(math.floor(n * f)) for n, f in zip(in_size, sf))
        scales = (None,) * nd if recompute_scale_factor else tuple(1.0 / f for f in sf)
    if mode == "area":
        return {1: adaptive_avg_pool1d, 2: adaptive_avg_pool2d,
                3: adaptive_avg_pool3d}[nd](input, osize)
    kind = {"nearest-exact": "NearestExact", "linear": "Linear", "bilinear": "Bilinear",
            "bicubic": "Bicubic", "trilinear": "Trilinear"}.get(mode, "Nearest")
    return one_node(f"Upsample{kind}{nd}DBackward0", _resample, input, mode, in_size, osize,
                    scales, align_corners)


def _resample(input, mode, in_size, osize, scales, align_corners):
    nd, x = len(in_size), input
    for i in range(nd):
        n, o = in_size[i], osize[i]
        # NOTE: torch's CPU kernels ignore the scale factor in a few cases: the linear modes
        # copy a dim whose size does not change, 2-d nearest also repeats each cell when the
        # size doubles. We match them.
        if o == n and (mode in ("linear", "bilinear", "trilinear") or
                       mode == "nearest" and nd == 2):
            continue
        if o == 2 * n and mode == "nearest" and nd == 2:
            x = x.index_select(2 + i, ember.tensor(np.arange(o) // 2, device=x.device))
            continue
        x = _resample_dim(x, 2 + i, mode, o, scales[i], bool(align_corners))
    return x if x is not input else x.clone()


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of :func:`interpolate`.

    Example:
        >>> import ember
        >>> ember.nn.functional.upsample(ember.ones(1, 1, 2), scale_factor=2).shape
        torch.Size([1, 1, 4])
    """
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(input, size, scale_factor, mode="nearest")``, with torch's
    warning."""
    warnings.warn("`nn.functional.upsample_nearest` is deprecated. Use "
                  "`nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode="bilinear", align_corners=True)``, with torch's
    warning."""
    warnings.warn("`nn.functional.upsample_bilinear` is deprecated. Use "
                  "`nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def pixel_shuffle(input, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r).

    Example:
        >>> import ember
        >>> ember.nn.functional.pixel_shuffle(ember.ones(1, 8, 2, 3), 2).shape
        torch.Size([1, 2, 4, 6])
    """
    r = upscale_factor
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c} "
                           f"is not divisible by {r * r}")
    n = len(lead)

    def shuffle(input):
        x = input.reshape(tuple(lead) + (c // (r * r), r, r, h, w))
        x = x.permute(tuple(range(n)) + tuple(n + a for a in (0, 3, 1, 4, 2)))
        return x.reshape(tuple(lead) + (c // (r * r), h * r, w * r))
    return one_node("PixelShuffleBackward0", shuffle, input)


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H r, W r) -> (*, C r^2, H, W), the inverse of :func:`pixel_shuffle`.

    Example:
        >>> import ember
        >>> ember.nn.functional.pixel_unshuffle(ember.ones(1, 2, 4, 6), 2).shape
        torch.Size([1, 8, 2, 3])
    """
    r = downscale_factor
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError(f"pixel_unshuffle expects height and width to be divisible by "
                           f"downscale_factor, but got {h}x{w} and factor {r}")
    n = len(lead)

    def unshuffle(input):
        x = input.reshape(tuple(lead) + (c, h // r, r, w // r, r))
        x = x.permute(tuple(range(n)) + tuple(n + a for a in (0, 2, 4, 1, 3)))
        return x.reshape(tuple(lead) + (c * r * r, h // r, w // r))
    return one_node("PixelUnshuffleBackward0", unshuffle, input)
