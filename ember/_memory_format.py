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


def dense(shape, strides):
    """Whether a tensor of ``shape`` and ``strides`` (in elements) is dense and non-overlapping:
    its elements fill its memory, in some order of its dims (torch's
    ``is_non_overlapping_and_dense``; dims of size 1 take any stride)."""
    n = 1
    for s, t in sorted(((s, t) for s, t in zip(shape, strides) if s > 1), key=lambda st: st[1]):
        if t != n:
            return False
        n *= s
    return True


def strides_for(a, fmt=None):
    """The strides (in elements) torch gives a tensor made like array ``a`` in memory format
    ``fmt`` (None: ``preserve_format``), or None where that is row-major."""
    if fmt is not None and fmt is not preserve_format:
        order = _check(fmt, a.ndim)
        return None if order is None else _packed(a.shape, order[::-1])
    if a.flags.c_contiguous and 1 not in a.shape:     # (else a size-1 dim's stride may differ)
        return None
    shape, st = a.shape, tuple(s // a.itemsize for s in a.strides)
    if dense(shape, st):
        # NOTE: torch keeps a dense input's strides (a transposed gradient seed stays
        # transposed, so a transpose's backward hands the leaf its own layout, uncopied)
        return None if st == _packed(shape, range(a.ndim - 1, -1, -1)) else st
    # else infer_dense_strides: the dims sorted by stride, innermost first, by torch's
    # insertion sort (a stride-0 dim compares equal to all, so it stays where it is)
    perm = list(range(a.ndim - 1, -1, -1))
    for i in range(1, a.ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            s0, s1 = st[perm[d0]], st[perm[d1]]
            if s0 and s1 and s0 < s1:
                break
            if s0 and s1 and (s0 > s1 or shape[perm[d0]] > shape[perm[d1]]):
                perm[d0], perm[d1], d1 = perm[d1], perm[d0], d0
    return _packed(shape, perm)


def _packed(shape, inner_first):
    """Dense strides laying the dims out in this order, innermost first."""
    st, n = [0] * len(shape), 1
    for d in inner_first:
        st[d], n = n, n * max(shape[d], 1)
    return tuple(st)


def laid_out(xp, flat, shape, strides):
    """The 1-D array ``flat`` (the elements in memory order) as ``shape`` with ``strides``
    (None: row-major)."""
    if strides is None:
        return flat.reshape(shape)
    return xp.lib.stride_tricks.as_strided(flat, shape, tuple(s * flat.itemsize for s in strides))


def copy_in(xp, a, fmt):
    """A copy of array ``a`` laid out as ``fmt`` asks (None: ``preserve_format``)."""
    st = strides_for(a, fmt)
    if st is None:
        return xp.array(a, order="C", copy=True)
    out = laid_out(xp, xp.empty(a.size, a.dtype), a.shape, st)
    out[...] = a
    return out


def is_in(a, fmt):
    """Whether array ``a`` is laid out as ``fmt`` (contiguous by default)."""
    order = _ORDER.get(fmt)
    if order is None:
        return bool(a.flags.c_contiguous)
    return len(order) == a.ndim and bool(a.transpose(order).flags.c_contiguous)
