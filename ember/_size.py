"""``Size``: a tensor's shape. Its own module so autograd's graph can use it without importing
``_tensor`` (which imports autograd)."""


class Size(tuple):
    """A tensor's shape: a tuple that prints as ``torch.Size([...])``."""

    def __repr__(self):
        return f"torch.Size({list(self)})"

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, i):
        r = tuple.__getitem__(self, i)
        return Size(r) if isinstance(i, slice) else r

    def __reduce__(self):
        return (Size, (tuple(self),))
