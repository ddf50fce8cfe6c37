"""Reorderings that copy: flip, fliplr/flipud, roll, rot90, tile, narrow_copy."""
import numpy as np

from .._C import kernels as _C
from .indexing import repeat
from .meta import same_meta, wrap_dim
from .pointwise import PAR_MIN, par_copy
from .tangents import LINEAR
from .registry import op
from .samples import ErrorSample, Sample, const, make
from .shape import narrow


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


@op("flip")
def flip(xp, input, dims):
    """Reverse the order along ``dims`` (a copy, as in torch)."""
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if input.ndim == 0:
        for d in dims:
            wrap_dim(d, 0)
        return input.copy()
    # NOTE: laid out as the input, as torch's: a dense one is flipped in its memory order (a
    # transposed gradient's flip is a plain copy, and rot90's backward hands the leaf its
    # layout, uncopied); others copied in NumPy's order K
    nd = input.ndim
    if not input.flags.c_contiguous and all(-nd <= d < nd for d in dims):
        order = sorted(range(nd), key=lambda i: -input.strides[i])
        c = input.transpose(order)
        if c.flags.c_contiguous:
            return flip.fwd(xp, c, tuple(order.index(d % nd) for d in dims)).transpose(
                tuple(order.index(i) for i in range(nd)))
    if len(dims) == 1 and -input.ndim <= dims[0] < input.ndim:
        out = _C.words("flip_rows", input) if dims[0] % input.ndim == input.ndim - 1 else None
        if out is not None:
            return out
        # one dim (an image's horizontal flip): a reversed slice, copied; np.flip's argument
        # checks cost more than the copy of a small array
        r = input[(slice(None),) * (dims[0] % input.ndim) + (slice(None, None, -1),)]
        return r.copy(order="K") if r.size < PAR_MIN or not input.flags.c_contiguous else \
            par_copy(np.empty(r.shape, r.dtype), r)
    return (xp.flip(input, dims) if dims else input).copy(order="K")


flip.vjp()(lambda g, input, dims: g.flip(dims))
flip.samples = lambda dev, dt: [Sample(make((3, 4), dt), (0,)), Sample(make((3, 4), dt), [0, 1])]


@op("roll")
def roll(xp, input, shifts, dims=None):
    """Rotate the elements by ``shifts`` along ``dims`` (the flattened tensor if None).

    Example:
        >>> ember.tensor([1, 2, 3, 4]).roll(1)
        tensor([4, 1, 2, 3])
    """
    sh, ds = _tuple(shifts), () if dims is None else _tuple(dims)
    if len(sh) != (len(ds) if dims is not None else 1):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(sh)}, "
                           f"dims:{len(ds)}")
    nd = max(input.ndim, 1)
    for d in ds:
        if not -nd <= d < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, "
                             f"{nd - 1}], but got {d})")
    if xp is not np or input.ndim == 0:
        return xp.roll(input, shifts, axis=dims)
    if dims is None and input.size >= PAR_MIN:      # (the loop's copies run over threads)
        return roll.fwd(xp, input.reshape(-1), sh[:1], (0,)).reshape(input.shape)
    if dims is None:        # (the flat rotation: one joined copy of its two parts)
        flat, n = input.reshape(-1), input.size
        s = sh[0] % n if n else 0
        return (np.concatenate((flat[n - s:], flat[:n - s])) if s else flat.copy()).reshape(
            input.shape)
    out = input     # (a dim at a time, two slice copies each: np.roll's Python costs ~10 us)
    copy = np.copyto if input.size < PAR_MIN else lambda dst, src: par_copy(dst, src, 4096)
    for s, d in zip(sh, ds):
        n, pre = out.shape[d], (slice(None),) * (d % nd)
        if n and s % n:
            s, prev, out = s % n, out, np.empty(out.shape, out.dtype)
            copy(out[pre + (slice(s, None),)], prev[pre + (slice(0, n - s),)])
            copy(out[pre + (slice(0, s),)], prev[pre + (slice(n - s, None),)])
    return input.copy() if out is input else out


roll.vjp()(lambda g, input, shifts, dims=None: g.roll(tuple(-s for s in shifts) if isinstance(
    shifts, (tuple, list)) else -shifts, dims))
roll.samples = lambda dev, dt: [Sample(make((3, 4), dt), 1), Sample(make((3, 4), dt), -2, 1),
                                Sample(make((3, 4), dt), (1, 5), (0, 1)),
                                Sample(make((3, 4), dt), (2,), (-1,))]
roll.errors = [
    ErrorSample(Sample(const(3, 4), (1, 2), (0,)), RuntimeError,
                "shifts and dimensions must align. shifts: 2, dims:1"),
    ErrorSample(Sample(const(3, 4), 1, 3), IndexError, "Dimension out of range"),
    ErrorSample(Sample(const(3, 4), (1, 2)), RuntimeError,
                "shifts and dimensions must align. shifts: 2, dims:0")]


def _flip_op(name, axis, least):
    @op(name)
    def f(xp, input):
        if input.ndim < least:
            raise RuntimeError(f"Input must be >= {least}-d.")
        return flip.fwd(xp, input, (axis,))
    f.fwd.__doc__ = f"Reverse the order along dimension {axis} (a copy)."
    f.__doc__ = f.fwd.__doc__
    f.vjp()(lambda g, input: getattr(g, name)())
    f.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((2, 3, 4), dt))]
    f.errors = [ErrorSample(Sample(const(*(3,) * (least - 1))), RuntimeError,
                            f"Input must be >= {least}-d")]
    return f


fliplr = _flip_op("fliplr", 1, 2)
fliplr.grad_name = "FlipBackward0"
flipud = _flip_op("flipud", 0, 1)
flipud.grad_name = "FlipBackward0"


@op("rot90")
def rot90(xp, input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees ``k`` times, from the first of ``dims`` towards the second.

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).rot90()
        tensor([[2, 4],
                [1, 3]])
    """
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.ndim}")
    for d in dims:
        if not -input.ndim <= d < input.ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-input.ndim}, {input.ndim - 1}], but got {d})")
    if dims[0] % input.ndim == dims[1] % input.ndim:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {dims[0]} "
                           f"and dim1 = {dims[1]}")
    # NOTE: as torch, one flip copied, and a transposed view of it for an odd k
    d0, d1, k = dims[0] % input.ndim, dims[1] % input.ndim, k % 4
    out = flip.fwd(xp, input, ((), (d1,), dims, (d0,))[k])
    return out.swapaxes(d0, d1) if k % 2 else out


rot90.vjp()(lambda g, input, k=1, dims=(0, 1): g.rot90(-k, dims))
rot90.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((3, 4), dt), 2),
                                 Sample(make((2, 3, 4), dt), -1, (2, 0)),
                                 Sample(make((2, 3, 4), dt), 7, [1, 2])]
rot90.errors = [
    ErrorSample(Sample(const(3, 4), 1, [0]), RuntimeError,
                "expected total rotation dims == 2, but got dims = 1"),
    ErrorSample(Sample(const(3, 4), 1, [0, 0]), RuntimeError,
                "expected rotation dims to be different, but got dim0 = 0 and dim1 = 0"),
    ErrorSample(Sample(const(3), 1, [0, 1]), RuntimeError,
                "expected total dims >= 2, but got total dims = 1"),
    ErrorSample(Sample(const(3, 4), 1, [0, 2]), IndexError, r"Dimension out of range \(expected "
                r"to be in range of \[-2, 1\], but got 2\)")]


def _tile_sizes(input, dims):
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
    return (1,) * (len(input.shape) - len(dims)) + dims


@op("tile")
def tile(xp, input, *dims):
    """Repeat ``input`` ``dims[i]`` times along each dimension; missing leading ``dims`` count
    as 1 (unlike :meth:`Tensor.repeat`).

    Example:
        >>> ember.tensor([1, 2]).tile((2,))
        tensor([1, 2, 1, 2])
    """
    return repeat.fwd(xp, input, _tile_sizes(input, dims))


tile.vjp()(lambda g, input, *dims: repeat.vjp_fn(g, input, _tile_sizes(input, dims)))
tile.samples = lambda dev, dt: [Sample(make((2, 3), dt), (2,)), Sample(make((2, 3), dt), (2, 1)),
                                Sample(make((2, 3), dt), [1, 2, 2]),
                                Sample(make((3,), dt), (2, 1, 2)), Sample(make((), dt), (3,))]
tile.grad_name = "RepeatBackward0"


@op("narrow_copy")
def narrow_copy(xp, input, dim, start, length):
    """The slice ``start:start+length`` of dimension ``dim``, as a new tensor."""
    return narrow.fwd(xp, input, dim, start, length).copy()


narrow_copy.vjp()(narrow.vjp_fn)
narrow_copy.samples = narrow.samples
narrow_copy.errors = [ErrorSample(Sample(const(3, 4), 0, 2, 3), RuntimeError,
                                  r"start \(2\) \+ length \(3\) exceeds dimension size \(3\)")]


# NOTE: these forwards copy their input, which on the meta device would allocate the full size;
# their output is shaped like the input, so the meta rule says just that.
for _d in (roll, fliplr, flipud):
    _d.meta = same_meta
narrow_copy.meta = lambda input, *args: narrow.fwd(np, input, *args)
del _d

for _d in (flip, fliplr, flipud, narrow_copy, roll, rot90, tile):   # (forward mode: linear)
    _d.jvp = LINEAR
