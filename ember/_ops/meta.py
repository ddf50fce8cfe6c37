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


def reduce_shape(shape, dim, keepdim):
    nd = len(shape)
    if dim is None or dim == ():
        dims = set(range(nd))
    else:
        dims = {d % max(nd, 1) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)
