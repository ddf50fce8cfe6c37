"""Spatial sampling (affine_grid, grid_sample), fractional max pooling and channel_shuffle:
compositions of ember ops, so gradients reach the input and the sampling grid."""
import itertools

import numpy as np

import ember

from ..autograd.composite import recorded_as

__all__ = ["affine_grid", "channel_shuffle", "native_channel_shuffle", "grid_sample",
           "fractional_max_pool2d", "fractional_max_pool3d", "fractional_max_pool2d_with_indices",
           "fractional_max_pool3d_with_indices"]


@recorded_as("ChannelShuffleBackward0")
def channel_shuffle(input, groups):
    """Interleave the channels of ``groups`` groups: (N, g*k, ...) -> channel ``i*g + j`` is
    old channel ``j*k + i``.

    Example:
        >>> ember.nn.functional.channel_shuffle(ember.arange(4.).reshape(1, 4, 1), 2).flatten()
        tensor([0., 2., 1., 3.])
    """
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of "
                           f"groups:{groups}")
    c = input.shape[1]
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels "
                           f"and {groups} groups.")
    n, rest = input.shape[0], tuple(input.shape[2:])
    return input.reshape((n, groups, c // groups) + rest).transpose(1, 2).reshape((n, c) + rest)


native_channel_shuffle = channel_shuffle    # (torch's aten spelling; the same function)


def _base_coords(size, align_corners, like):
    if align_corners:
        return ember.linspace(-1, 1, size, dtype=like.dtype, device=like.device) if size > 1 \
            else ember.zeros(size, dtype=like.dtype, device=like.device)
    return (ember.arange(size, dtype=like.dtype, device=like.device) * 2 + 1) / size - 1


@recorded_as("AffineGridGeneratorBackward0")
def affine_grid(theta, size, align_corners=None):
    """The sampling grid of an affine map: for output size (N, C, H, W) and ``theta`` (N, 2, 3),
    an (N, H, W, 2) grid of (x, y) in [-1, 1]; (N, 3, 4) and (N, C, D, H, W) for volumes.

    Example:
        >>> eye = ember.tensor([[[1., 0., 0.], [0., 1., 0.]]])
        >>> ember.nn.functional.affine_grid(eye, (1, 1, 2, 2), align_corners=True)[0, 1]
        tensor([[-1.,  1.],
                [ 1.,  1.]])
    """
    align_corners = bool(align_corners)
    spatial = tuple(size[2:])
    d = len(spatial)
    if d not in (2, 3) or theta.dim() != 3 or tuple(theta.shape[1:]) != (d, d + 1):
        raise ValueError(f"Expected a batch of {d}D affine matrices of shape Nx{d}x{d + 1} for "
                         f"size {list(size)}. Got {list(theta.shape)}.")
    # coordinates (x, y[, z], 1) of each output point, x along the last dim
    axes = [_base_coords(s, align_corners, theta) for s in reversed(spatial)]
    mesh = ember.meshgrid(*reversed(axes), indexing="ij")          # each of shape spatial
    base = ember.stack(list(reversed(mesh)) + [ember.ones_like(mesh[0])], -1)
    grid = base.reshape(1, -1, d + 1) @ theta.transpose(1, 2)      # (N, points, d)
    return grid.reshape((theta.shape[0],) + spatial + (d,))


def _unnormalize(coord, size, align_corners):
    return (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2


def _reflect(x, lo, hi):
    """Reflect ``x`` into [lo, hi] as many times as needed."""
    span = hi - lo
    if span <= 0:
        return ember.zeros_like(x)
    x = (x - lo).abs()
    flips = (x / span).floor()
    extra = x - flips * span
    return ember.where(flips.remainder(2) == 0, extra + lo, span - extra + lo)


def _clip(c, size):
    # NOTE: torch's gradient of the clip is 0 on the edges themselves, not only outside
    inside = (c > 0) & (c < size - 1)
    return ember.where(inside, c, c.clamp(0, size - 1).detach())


def _source_coords(grid, sizes, padding_mode, align_corners):
    coords = []
    for k, size in enumerate(sizes):               # grid's last dim is (x, y[, z])
        c = _unnormalize(grid[..., k], size, align_corners)
        if padding_mode == "border":
            c = _clip(c, size)
        elif padding_mode == "reflection":
            c = _reflect(c, 0, size - 1) if align_corners else _reflect(c, -0.5, size - 0.5)
            c = _clip(c, size)
        coords.append(c)
    return coords


def _gather(input, idx, sizes):
    """``input[n, :, idx...]`` for integer coordinate tensors ``idx`` (x first), and a mask of
    those inside the input."""
    n, ch = input.shape[0], input.shape[1]
    inside, flat, stride = None, None, 1
    for i, size in zip(idx, sizes):
        ok = (i >= 0) & (i < size)
        inside = ok if inside is None else inside & ok
        term = i.clamp(0, size - 1) * stride
        flat = term if flat is None else flat + term
        stride *= size
    out_shape = tuple(flat.shape[1:])
    flat = flat.reshape(n, 1, -1).expand(n, ch, -1)
    vals = input.reshape(n, ch, -1).gather(2, flat).reshape((n, ch) + out_shape)
    return vals, inside.unsqueeze(1)


@recorded_as(lambda input, *_: f"GridSampler{input.dim() - 2}DBackward0")
def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Sample ``input`` (N, C, H, W) at the points of ``grid`` (N, H', W', 2) in [-1, 1] (x,
    y), with bilinear or nearest interpolation and zeros, border or reflection padding;
    (N, C, D, H, W) inputs take (N, D', H', W', 3) grids.

    Example:
        >>> img = ember.arange(4.).reshape(1, 1, 2, 2)
        >>> ember.nn.functional.grid_sample(img, ember.zeros(1, 1, 1, 2), align_corners=True)
        tensor([[[[1.5000]]]])
    """
    if mode not in ("bilinear", "nearest"):
        raise NotImplementedError(f"grid_sample: mode '{mode}' is not implemented in ember "
                                  f"(bilinear and nearest are)")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    d = input.dim() - 2
    if d not in (2, 3) or grid.dim() != input.dim() or grid.shape[-1] != d or \
            grid.shape[0] != input.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid of shape (N, ..., {d}) matching "
                           f"input {list(input.shape)}, but got grid {list(grid.shape)}")
    sizes = tuple(reversed(input.shape[2:]))         # (W, H[, D]) to match (x, y[, z])
    coords = _source_coords(grid, sizes, padding_mode, bool(align_corners))
    if mode == "nearest":
        vals, inside = _gather(input, [c.round().long() for c in coords], sizes)
        return vals * inside.to(vals.dtype)
    lows = [c.floor() for c in coords]
    out = None
    for corner in itertools.product((0, 1), repeat=d):
        w, idx = None, []
        for c, lo, bit in zip(coords, lows, corner):
            f = (c - lo) if bit else (lo + 1 - c)
            w = f if w is None else w * f
            idx.append(lo.long() + bit)
        vals, inside = _gather(input, idx, sizes)
        term = vals * (w.unsqueeze(1) * inside.to(w.dtype))
        out = term if out is None else out + term
    return out


def _intervals(u, size, out, pool, dt):
    """Start of each of ``out`` pooling windows of width ``pool`` over ``size`` for random
    samples ``u`` (..., ) in [0, 1), in the input's float type as torch computes them."""
    starts = np.empty(u.shape + (out,), np.int64)
    if out > 1:
        alpha = dt(size - pool) / dt(out - 1)
        i = np.arange(out - 1, dtype=dt)
        starts[..., :-1] = ((i + u[..., None]) * alpha).astype(np.int64) - \
            (u[..., None] * alpha).astype(np.int64)
    starts[..., -1] = size - pool
    return starts


def _fractional_max_pool(input, n, kernel_size, output_size, output_ratio, return_indices,
                         _random_samples):
    name = f"fractional_max_pool{n}d"
    tup = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * n  # noqa: E731
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    unbatched = input.dim() == n + 1
    x = input.unsqueeze(0) if unbatched else input
    spatial, pool = tuple(x.shape[2:]), tup(kernel_size)
    out = tup(output_size) if output_size is not None else tuple(
        int(s * r) for s, r in zip(spatial, tup(output_ratio)))
    for s, o, k in zip(spatial, out, pool):
        if o + k - 1 > s:
            raise RuntimeError(f"{name}(): pool size {k} too large relative to input size {s} "
                               f"for output size {o}")
    nb, ch = x.shape[0], x.shape[1]
    u = _random_samples if _random_samples is not None else ember.rand(nb, ch, n, dtype=x.dtype)
    dt = np.float64 if x.dtype is ember.float64 else np.float32
    u = u.detach().cpu().numpy().astype(dt)
    # NOTE: torch's 2-d kernel draws the width's windows from sample 0 and the height's from 1
    order = (1, 0) if n == 2 else (0, 1, 2)
    flat = np.zeros((nb, ch) + out + pool, np.int64)
    stride = 1
    for k in reversed(range(n)):
        st = _intervals(u[..., order[k]], spatial[k], out[k], pool[k], dt)
        pos = st.reshape((nb, ch) + (1,) * k + (out[k],) + (1,) * (n - 1 - k) + (1,) * n) + \
            np.arange(pool[k]).reshape((1,) * (2 + n + k) + (pool[k],) + (1,) * (n - 1 - k))
        flat = flat + pos * stride
        stride *= spatial[k]
    idx = ember.tensor(flat.reshape(nb, ch, -1), device=x.device)
    vals = x.reshape(nb, ch, -1).gather(2, idx).reshape((nb, ch) + out + (-1,))
    result, arg = vals.max(-1)
    if unbatched:
        result = result.squeeze(0)
    if not return_indices:
        return result
    indices = idx.reshape((nb, ch) + out + (-1,)).gather(-1, arg.unsqueeze(-1)).squeeze(-1)
    return result, indices.squeeze(0) if unbatched else indices


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None):
    """Max pooling over pseudo-random windows (Graham, 2014) to ``output_size`` or
    ``output_ratio`` of the input size; ``_random_samples`` (N, C, 2) in [0, 1) fixes them.

    Example:
        >>> x = ember.arange(16.).reshape(1, 1, 4, 4)
        >>> ember.nn.functional.fractional_max_pool2d(x, 2, output_size=2,
        ...     _random_samples=ember.zeros(1, 1, 2))
        tensor([[[[ 5.,  7.],
                  [13., 15.]]]])
    """
    return _fractional_max_pool(input, 2, kernel_size, output_size, output_ratio,
                                return_indices, _random_samples)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None):
    """3-D :func:`fractional_max_pool2d`: samples (N, C, 3) for depth, height and width."""
    return _fractional_max_pool(input, 3, kernel_size, output_size, output_ratio,
                                return_indices, _random_samples)


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    return fractional_max_pool2d(input, kernel_size, output_size, output_ratio, True,
                                 _random_samples)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    return fractional_max_pool3d(input, kernel_size, output_size, output_ratio, True,
                                 _random_samples)
