"""Spatial sampling (affine_grid, grid_sample) and channel_shuffle: compositions of ember ops,
so gradients reach the input and the sampling grid."""
import itertools

import ember

__all__ = ["affine_grid", "channel_shuffle", "grid_sample"]


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
    return input.reshape((n, groups, c // groups) + rest).transpose(1, 2).reshape(
        (n, c) + rest)


def _base_coords(size, align_corners, like):
    if align_corners:
        return ember.linspace(-1, 1, size, dtype=like.dtype, device=like.device) if size > 1 \
            else ember.zeros(size, dtype=like.dtype, device=like.device)
    return (ember.arange(size, dtype=like.dtype, device=like.device) * 2 + 1) / size - 1


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
