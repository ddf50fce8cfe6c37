"""Memory formats (``ember.contiguous_format``, ``channels_last``, ``channels_last_3d``,
``preserve_format``): the order in which a dense tensor lays its elements out."""


class memory_format:
    """A memory layout a copy can be asked for (``clone``, ``contiguous``, ``to``, ``*_like``)."""

    __slots__ = ("name",)

    def __init__(self, name):
        object.__setattr__(self, "name", name)

    def __repr__(self):
        return f"torch.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


contiguous_format, preserve_format = memory_format("contiguous_format"), \
    memory_format("preserve_format")
channels_last, channels_last_3d = memory_format("channels_last"), memory_format("channels_last_3d")
_FORMATS = {f.name: f for f in (contiguous_format, preserve_format, channels_last,
                                channels_last_3d)}
# the dims in memory order, outermost first, of a channels-last 4-D / 5-D tensor (N, H, W, C)
_ORDER = {channels_last: (0, 2, 3, 1), channels_last_3d: (0, 2, 3, 4, 1)}


def _by_name(name):
    return _FORMATS[name]


def _check(fmt, ndim):
    order = _ORDER.get(fmt)
    if order is not None and len(order) != ndim:
        raise RuntimeError(f"required rank {len(order)} tensor to use {fmt.name} format")
    return order


def copy_in(xp, a, fmt):
    """A copy of array ``a`` laid out as ``fmt`` asks (None: ``preserve_format``)."""
    if fmt is None or fmt is preserve_format:
        # NOTE: torch keeps the strides of a dense input (a transposed one stays transposed)
        # and orders the others' dims as theirs: NumPy's order "K" is that rule
        return a.copy(order="K")
    order = _check(fmt, a.ndim)
    if order is None:
        return xp.array(a, order="C", copy=True)
    back = tuple(order.index(d) for d in range(a.ndim))
    return xp.ascontiguousarray(a.transpose(order)).transpose(back)


def is_in(a, fmt):
    """Whether array ``a`` is laid out as ``fmt`` (contiguous by default)."""
    order = _ORDER.get(fmt)
    if order is None:
        return bool(a.flags.c_contiguous)
    return len(order) == a.ndim and bool(a.transpose(order).flags.c_contiguous)
