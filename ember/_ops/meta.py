"""Shape and dtype rules for the meta device (and tracing): no data is computed."""
import numpy as np

from .._backends import MetaBackend

empty = MetaBackend.empty


def broadcast_meta(*args, **kwargs):
    """Pointwise ops: broadcast the shapes, promote with NumPy's rule (operands arrive already
    cast to the common dtype, so this is that dtype)."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return empty(shape, np.result_type(*arrays))


def same_meta(x, *args, **kwargs):
    """Output like the first input."""
    return empty(x.shape, x.dtype)


def bool_meta(*args, **kwargs):
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    return empty(np.broadcast_shapes(*(a.shape for a in arrays)), np.bool_)


def reduce_dims(dim, nd):
    """The sorted tuple of axes a reduction over ``dim`` (int, sequence, None or ``()`` for all)
    removes from an ``nd``-dim shape, with torch's errors for bad dims."""
    if type(dim) is int and -nd <= dim < nd:
        return (dim % nd,)
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(nd))
    out = []
    for d in (dim if isinstance(dim, (tuple, list)) else (dim,)):
        d = wrap_dim(d, nd)
        if d in out:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        out.append(d)
    return tuple(sorted(out)) if nd else ()


def wrap_dim(dim, nd):
    """``dim`` as an axis of an ``nd``-dim shape (a 0-dim one takes 0 and -1), with torch's
    range error."""
    n = max(nd, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return dim % n


def moveaxis(xp, a, source, destination):
    """``xp.moveaxis(a, source, destination)`` (ints, or sequences of them) by one transpose:
    NumPy's argument normalization costs several times the view on small arrays. Bad axes go
    to ``xp.moveaxis`` for its errors."""
    n = a.ndim
    if type(source) is int and type(destination) is int and -n <= source < n and \
            -n <= destination < n:          # (the common call)
        order = list(range(n))
        del order[source]
        order.insert(destination % n, source % n)
        return a.transpose(order)
    one = isinstance(source, (int, np.integer))
    src, dst = ((source,), (destination,)) if one else (tuple(source), tuple(destination))
    if len(src) != len(dst) or not all(-n <= i < n for i in src + dst):
        return xp.moveaxis(a, source, destination)
    src, dst = [int(i) % n for i in src], [int(i) % n for i in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        return xp.moveaxis(a, source, destination)
    order = [i for i in range(n) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return a.transpose(order)


def reduce_shape(shape, dim, keepdim):
    dims = reduce_dims(dim, len(shape))
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)
