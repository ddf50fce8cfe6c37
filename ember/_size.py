"""``Size``: a tensor's shape. Its own module so autograd's graph can use it without importing
``_tensor`` (which imports autograd)."""
from ._C.dispatch import ext as _ext


# the C extension's SizeBase (indexing in C: ``x.shape[0]`` without a Python frame), or tuple
# without it, where the Size.__getitem__ below is the reference
_Base = _ext.SizeBase if _ext is not None else tuple


class Size(_Base):
    """A tensor's shape: a tuple that prints as ``torch.Size([...])``, whose slices are Sizes.

    Example:
        >>> ember.zeros(2, 3).shape[1:]
        torch.Size([3])
    """

    __slots__ = ()

    def __repr__(self):
        return f"torch.Size({list(self)})"

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    if _Base is tuple:
        def __getitem__(self, i):
            r = tuple.__getitem__(self, i)
            return Size(r) if isinstance(i, slice) else r

    # NOTE: as torch.Size, concatenating (on either side) or repeating gives a Size
    def __add__(self, other):
        if not isinstance(other, tuple):
            raise TypeError(f"can only concatenate tuple (not {type(other).__name__}) to "
                            "torch.Size")
        return Size(tuple(self) + other)

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(other + tuple(self))

    def __mul__(self, n):
        return Size(tuple(self) * n)

    __rmul__ = __mul__

    def __reduce__(self):
        return (Size, (tuple(self),))
