"""Turning lists of samples into batches: ``default_collate`` stacks, ``default_convert``
turns NumPy data into tensors, as ``torch.utils.data.default_collate``/``default_convert``
do (same output types and dtypes). ``collate`` with a type -> function map is the extension
point, as in torch."""
import collections.abc
import copy
import re

import numpy as np

from ..._dtype import float64
from ..._ops.creation import as_tensor, from_numpy, tensor
from ..._tensor import Tensor

# NumPy dtypes with strings or objects: not convertible to tensors.
_NP_STR_OBJ = re.compile(r"[SaUO]")

default_collate_err_msg_format = ("default_collate: batch must contain tensors, numpy arrays, "
                                  "numbers, dicts or lists; found {}")


def _rebuild_mapping(elem, items):
    """A mapping like ``elem`` holding ``items`` (a dict), keeping the user's mapping type."""
    try:
        if isinstance(elem, collections.abc.MutableMapping):
            clone = copy.copy(elem)
            clone.update(items)
            return clone
        return type(elem)(items)
    except TypeError:                  # a mapping type that can't be rebuilt from a dict
        return items


def _rebuild_sequence(elem, items):
    """A sequence like ``elem`` holding ``items`` (a list), keeping the user's sequence type."""
    try:
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            for i, x in enumerate(items):
                clone[i] = x
            return clone
        return type(elem)(items)
    except TypeError:
        return items


def default_convert(data):
    """Convert NumPy arrays and scalars (also inside mappings and sequences) to tensors;
    leave everything else as it is. The DataLoader's collate_fn when batching is off.

    Example:
        >>> import numpy as np
        >>> from ember.utils.data import default_convert
        >>> default_convert({"x": np.array([1, 2]), "name": "a", "n": (np.float32(1.5), 3)})
        {'x': tensor([1, 2]), 'name': 'a', 'n': [tensor(1.5000), 3]}
    """
    t = type(data)
    if isinstance(data, Tensor):
        return data
    if t.__module__ == "numpy" and t.__name__ not in ("str_", "string_", "bytes_"):
        if t is np.ndarray and _NP_STR_OBJ.search(data.dtype.str):
            return data
        # np.asarray keeps a NumPy scalar's own dtype (int16 stays int16)
        return as_tensor(np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, {k: default_convert(data[k]) for k in data})
    if isinstance(data, tuple) and hasattr(data, "_fields"):          # namedtuple
        return t(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]     # NOTE: torch returns a list here too
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild_sequence(data, [default_convert(d) for d in data])
    return data


def collate(batch, *, collate_fn_map=None):
    """Collate ``batch`` (a list of samples) by the type of its first element: the function
    ``collate_fn_map`` gives for that type (or a base class), else recursively through
    mappings, namedtuples and sequences.

    Example:
        >>> from ember.utils.data.collate import collate
        >>> collate([(1, "a"), (2, "b")], collate_fn_map={int: lambda b, **kw: sum(b),
        ...                                               str: lambda b, **kw: "".join(b)})
        [3, 'ab']
    """
    elem = batch[0]
    t = type(elem)
    if collate_fn_map is not None:
        fn = collate_fn_map.get(t)
        if fn is None:
            fn = next((f for k, f in collate_fn_map.items() if isinstance(elem, k)), None)
        if fn is not None:
            return fn(batch, collate_fn_map=collate_fn_map)

    def sub(samples):
        return collate(samples, collate_fn_map=collate_fn_map)

    if isinstance(elem, collections.abc.Mapping):
        return _rebuild_mapping(elem, {k: sub([d[k] for d in batch]) for k in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return t(*(sub(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        # NOTE: columns are tuples, as in torch, so a column of strings stays a tuple.
        columns = [sub(s) for s in zip(*batch)]
        return columns if isinstance(elem, tuple) else _rebuild_sequence(elem, columns)
    raise TypeError(default_collate_err_msg_format.format(t))


def _stack_fast(batch):
    """Stack CPU tensors of one shape and dtype that need no gradient with NumPy alone, into
    shared memory when running in a DataLoader worker (so the batch reaches the main process
    without another copy); None where the ``stack`` op must do it.

    NOTE: checks read the arrays, not ``Tensor.shape`` (which builds a Size per call), and the
    copy is a loop of slice assignments: ``np.stack`` makes a view per sample first, which for
    a batch of small samples costs more than the copy.
    """
    from .worker import _shared_empty
    elem = batch[0]
    if elem.device.type != "cpu":
        return None
    arrays = [t._data for t in batch]
    shape, dtype = arrays[0].shape, arrays[0].dtype
    for t, a in zip(batch, arrays):
        if t._requires_grad or a.shape != shape or a.dtype != dtype:
            return None
    out = _shared_empty((len(arrays),) + shape, dtype)
    if out is None:
        out = np.empty((len(arrays),) + shape, dtype)
    for i, a in enumerate(arrays):
        out[i] = a
    return from_numpy(out)


def collate_tensor_fn(batch, *, collate_fn_map=None):
    from ..._ops.joining import stack
    out = _stack_fast(batch)
    return out if out is not None else stack(batch, 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    if _NP_STR_OBJ.search(batch[0].dtype.str):
        raise TypeError(default_collate_err_msg_format.format(batch[0].dtype))
    return collate([as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    return as_tensor(np.array(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    return tensor(batch, dtype=float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    return tensor(batch)


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


default_collate_fn_map = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch):
    """Stack a list of samples into a batch: tensors and NumPy arrays gain a leading batch
    dimension, ints become an int64 tensor, floats a float64 tensor, strings stay a list, and
    mappings, namedtuples and sequences are collated field by field. The DataLoader's default
    collate_fn.

    Example:
        >>> from ember.utils.data import default_collate
        >>> default_collate([{"x": 1, "y": 0.5}, {"x": 2, "y": 1.5}])
        {'x': tensor([1, 2]), 'y': tensor([0.5000, 1.5000], dtype=torch.float64)}
        >>> default_collate([(1, "a"), (2, "b")])
        [tensor([1, 2]), ('a', 'b')]
    """
    return collate(batch, collate_fn_map=default_collate_fn_map)
