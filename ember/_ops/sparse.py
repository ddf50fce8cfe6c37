"""Sparse COO tensors: construction, coalescing, conversion, the Tensor methods, and the
autograd link between a sparse tensor and its values. The rules of the ops that take sparse
operands (``OpDef.sparse``, run by ``dispatch.sparse_dispatch``) are in ``sparse_rules.py``.

A sparse tensor's ``_data`` is a :class:`~ember._sparse.SparseCOO` holding an ``indices``
tensor (int64, ``sparse_dim x nnz``) and a ``values`` tensor (``nnz x *dense_shape``); see
``_sparse.py``. Rules come in two kinds:

- *pattern rules* (neg, mul by a scalar, clone, transpose, add of two sparse tensors, mm...)
  build the result from the parts without autograd, then record the op's own node, whose vjp
  (written in ember ops) handles sparse gradients through these same rules;
- *compositions* (to_dense, coalesce, sparse.mm, sparse.sum, sparse * dense) are written in
  ember ops on the coalesced parts from :func:`_parts`, whose values are linked to the sparse
  tensor by a ``ValuesBackward0`` node: the gradient reaching the sparse tensor is then sparse
  and coalesced, masked to its pattern, as torch's is.

A sparse tensor built from values that require grad has a
``SparseCooTensorWithDimsAndTensorsBackward0`` node mapping its (sparse or dense) gradient
back onto the values, one entry per stored index, duplicates included.
"""
import math

import numpy as np

from .. import _dtype
from .._backends import MetaBackend, add_at
from .._sparse import SparseCOO, SparseCompressed
from .._tensor import Tensor
from ..autograd import grad_mode
from . import creation, dispatch, joining
from .registry import OpDef, op

_int64 = _dtype.int64


def _is_sparse(x):
    return isinstance(x, Tensor) and type(x._data) is SparseCOO


def _compressed(x):
    return type(x._data) is SparseCompressed


def _wrap(indices, values, size, coalesced):
    """A sparse tensor from its parts, without autograd history."""
    return Tensor._wrap(SparseCOO(indices, values, size, coalesced), values.device)


# ---- kernels ------------------------------------------------------------------------------------

def _keys(xp, indices, sparse_shape):
    """Row-major linear position of each index column (int64)."""
    if indices.shape[0] == 0:
        return xp.zeros(indices.shape[1], np.int64)
    return xp.ravel_multi_index(tuple(indices), sparse_shape)


@op("_sparse_coo_coalesce", function=False, method=False, differentiable=False)
def _coalesce(xp, indices, values, size):
    """Indices sorted row-major without repeats, and the values of repeated indices summed."""
    sparse_shape = tuple(size[:indices.shape[0]])
    uniq, inv = xp.unique(_keys(xp, indices, sparse_shape), return_inverse=True)
    out = xp.zeros((uniq.size,) + values.shape[1:], values.dtype)
    add_at(xp, out, inv.reshape(-1), values)
    idx = xp.stack(xp.unravel_index(uniq, sparse_shape)) if sparse_shape else \
        xp.zeros((0, uniq.size), np.int64)
    return idx.astype(np.int64).reshape(len(sparse_shape), -1), out


# NOTE: the number of distinct indices depends on the values; on the meta device the result
# keeps nnz (an upper bound) rather than failing.
_coalesce.meta = lambda indices, values, size: (indices, values)


@op("_sparse_coo_find", function=False, method=False, differentiable=False)
def _find(xp, indices, query, size):
    """Position of each column of ``query`` among the coalesced ``indices`` (``nnz`` where it
    is absent)."""
    sparse_shape = tuple(size[:indices.shape[0]])
    keys, q = _keys(xp, indices, sparse_shape), _keys(xp, query, sparse_shape)
    pos = xp.searchsorted(keys, q)
    hit = pos < keys.size
    hit[hit] = keys[pos[hit]] == q[hit]
    return xp.where(hit, pos, keys.size).astype(np.int64)


_find.meta = lambda indices, query, size: MetaBackend.empty((query.shape[1],), np.int64)


# ---- autograd between a sparse tensor and its values ----------------------------------------

def _sparse_from_values(xp, indices, values, size):
    """(graph node only: the sparse tensor with these parts)"""


_from_values = OpDef("sparse_coo_tensor_with_dims_and_tensors", _sparse_from_values)


@_from_values.vjp()
def _(g, indices, values, size):
    return None, _gather(g, indices, size), None


def _values_fwd(xp, input, indices):
    """(graph node only: the coalesced values of ``input``)"""


_values_op = OpDef("values", _values_fwd)


@_values_op.vjp()
def _(g, input, indices):
    return _make(indices, g, input.shape, True), None


def _make(indices, values, size, coalesced=False):
    """A sparse tensor from its parts; differentiable in ``values``."""
    t = _wrap(indices, values.detach(), size, coalesced)
    if values._requires_grad and grad_mode.state.grad_enabled:
        dispatch._record(_from_values, (indices, values, tuple(size)), {}, [values], [t])
    return t


def _raw(t):
    sp = t._data
    return sp.indices, sp.values


def _parts(t, coalesced=True):
    """``(indices, values)`` of sparse ``t`` (coalesced unless ``coalesced=False`` and ``t``
    needs no gradient); the values carry ``t``'s gradient, as torch's ``values()`` does."""
    sp = t._data
    idx, val = sp.indices, sp.values
    grad = t._requires_grad and grad_mode.state.grad_enabled
    if not sp.coalesced and (coalesced or grad):
        idx, val = _coalesce(idx, val, sp.shape)
    if grad:
        val = val._alias()
        dispatch._record(_values_op, (t, idx), {}, [t], [val])
    return idx, val


def _linear(indices, size):
    """The row-major position of each index column, as an ember tensor (for index_select)."""
    sd = indices.shape[0]
    strides = [math.prod(size[i + 1:sd]) for i in range(sd)]
    w = creation.tensor(strides, dtype=_int64, device=indices.device)
    return (indices * w.unsqueeze(1)).sum(0)


def _gather(g, indices, size):
    """The entries of ``g`` (dense or sparse, shaped ``size``) at each index column."""
    sd = indices.shape[0]
    if _is_sparse(g):
        if g._data.indices is indices and g.grad_fn is None:
            return g._data.values
        gi, gv = _parts(g)
        pad = joining.cat([gv, creation.zeros((1,) + tuple(gv.shape[1:]), dtype=gv.dtype,
                                            device=gv.device)])
        return pad.index_select(0, _find(gi, indices, tuple(size)))
    flat = g.reshape((math.prod(size[:sd]),) + tuple(size[sd:]))
    return flat.index_select(0, _linear(indices, size))


def _record_as(opdef, args, out, kwargs=None):
    """Give ``out`` (computed without autograd) the history of ``opdef(*args)``."""
    if not grad_mode.state.grad_enabled:
        return out
    tensors = list(dispatch._flat_tensors(args))
    if any(t._requires_grad for t in tensors):
        dispatch._record(opdef, args, kwargs or {}, tensors, [out])
    return out


# ---- construction ---------------------------------------------------------------------------

def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, pin_memory=False,
                      requires_grad=False, check_invariants=None, is_coalesced=None):
    """A sparse tensor in COO format: ``values[k]`` sits at ``indices[:, k]``.

    Args:
        indices: int tensor (or nested list) of shape ``(sparse_dim, nnz)``.
        values: tensor of shape ``(nnz, *dense_shape)``.
        size: the full shape; by default the smallest that holds every index.
        dtype, device, requires_grad: as for :func:`ember.tensor`.
        is_coalesced: promise the indices are sorted and unique (not checked).

    Example:
        >>> import ember
        >>> s = ember.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3., 4., 5.], (2, 3))
        >>> s.to_dense()
        tensor([[0., 0., 3.],
                [4., 0., 5.]])
    """
    if not isinstance(indices, Tensor):
        indices = creation.tensor(indices, dtype=_int64, device=device)
    if not isinstance(values, Tensor):
        values = creation.tensor(values, dtype=dtype, device=device)
    if device is not None:
        indices, values = indices.to(device), values.to(device)
    if dtype is not None:
        values = values.to(dtype)
    indices = indices.to(_int64)
    if indices.dim() != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(indices.shape)}")
    sd, nnz = indices.shape
    if values.dim() == 0 or values.shape[0] != nnz:
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from indices: "
                           f"{nnz}, nnz from values: {values.shape[0] if values.dim() else 0}")
    dense = tuple(values.shape[1:])
    if size is None:
        top = indices.amax(1) + 1 if nnz and indices.device.type != "meta" else None
        size = (tuple(top.tolist()) if top is not None else (0,) * sd) + dense
    size = tuple(creation._size((size,)) if not isinstance(size, int) else (size,))
    _check_size(indices, values, size)
    if indices.device != values.device:
        raise RuntimeError(f"sparse_coo_tensor: expected indices and values on one device, got "
                           f"{indices.device} and {values.device}")
    t = _make(indices, values, size, bool(is_coalesced) or nnz <= 1)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _check_size(indices, values, size):
    sd, dd = indices.shape[0], values.dim() - 1
    if len(size) != sd + dd:
        raise RuntimeError(f"'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) = "
                           f"{len(size)}, sparse_dim = {sd}, dense_dim = {dd}")
    if tuple(values.shape[1:]) != tuple(size[sd:]):
        want = [values.shape[0]] + list(size[sd:])
        raise RuntimeError(f"values has incorrect size, expected {want}, got {list(values.shape)}")
    if indices.shape[1] and indices.device.type != "meta":
        lo, hi = indices.amin(1).tolist(), indices.amax(1).tolist()
        for d in range(sd):
            if lo[d] < 0:
                raise RuntimeError(f"found negative index {lo[d]} for dim {d}")
            if hi[d] >= size[d]:
                raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is "
                                   f"{size[d]} but found index {hi[d]}")


# ---- Tensor methods ---------------------------------------------------------------------------

def _expect_sparse(t, name, what="sparse coordinate tensor"):
    if not _is_sparse(t):
        raise RuntimeError(f"{name} expected {what} layout but got "
                           f"{sparse_compressed.KEY[t.layout]}")


def _no_kernel(t, name):
    if not _is_sparse(t):
        key = "SparseCsr" if t.layout.name != "strided" else ""
        raise NotImplementedError(f"Could not run 'aten::{name}' with arguments from the "
                                  f"'{key}{t.device.type.upper()}' backend.")


def coalesce(self):
    """This sparse tensor with indices sorted and unique (repeats summed); itself if already
    coalesced."""
    _expect_sparse(self, "coalesce")
    if self._data.coalesced:
        return self
    idx, val = _parts(self)
    return _make(idx, val, self.shape, True)


def is_coalesced(self):
    """Whether the indices are known to be sorted and unique."""
    _expect_sparse(self, "is_coalesced")
    return self._data.coalesced


def indices(self):
    """The indices of a coalesced sparse tensor (``sparse_dim x nnz``)."""
    _expect_sparse(self, "indices")
    if not self._data.coalesced:
        raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call .coalesce() "
                           "first")
    return self._data.indices._alias()


def values(self):
    """The values of a coalesced sparse tensor (``nnz x *dense_shape``), differentiable; of a
    compressed tensor, ``*batch x nnz x *blocksize x *dense_shape``."""
    if _compressed(self):
        return sparse_compressed.values(self)
    _expect_sparse(self, "values", "sparse tensor")
    if not self._data.coalesced:
        raise RuntimeError("Cannot get values on an uncoalesced tensor, please call .coalesce() "
                           "first")
    return _parts(self)[1] if self._requires_grad else self._data.values._alias()


def _indices(self):
    """The stored indices, coalesced or not (shares memory with the sparse tensor)."""
    _no_kernel(self, "_indices")
    return self._data.indices


def _values(self):
    """The stored values, coalesced or not (shares memory; no autograd)."""
    _no_kernel(self, "_values")
    return self._data.values


def _nnz(self):
    """The number of stored entries (repeats counted; blocks of a BSR/BSC tensor, per batch)."""
    if _compressed(self):
        return self._data.plain.shape[-1]
    _no_kernel(self, "_nnz")
    return self._data.indices.shape[1]


def sparse_dim(self):
    return self._data.indices.shape[0] if _is_sparse(self) else 2 if _compressed(self) else 0


def dense_dim(self):
    return self._data.values.dim() - 1 if _is_sparse(self) else \
        sparse_compressed.dense_dim(self) if _compressed(self) else self.dim()


def to_dense(self, dtype=None, *, masked_grad=None):
    """A strided tensor with the same elements (repeated indices summed).

    Example:
        >>> import ember
        >>> ember.sparse_coo_tensor([[0, 0]], [1., 2.], (3,)).to_dense()
        tensor([3., 0., 0.])
    """
    if _compressed(self):
        return sparse_compressed.to_dense(self, dtype)
    if not _is_sparse(self):
        return self if dtype is None else self.to(dtype)
    idx, val = _parts(self, coalesced=False)
    size, sd = tuple(self.shape), idx.shape[0]
    flat = creation.zeros((math.prod(size[:sd]),) + size[sd:], dtype=val.dtype, device=val.device)
    out = flat.index_add(0, _linear(idx, size), val).reshape(size)
    return out if dtype is None else out.to(dtype)


def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
    """This tensor in sparse COO layout; the first ``sparse_dim`` dimensions (default all)
    become sparse, a block of the rest is stored when any of its elements is non-zero. With a
    compressed ``layout``, as ``to_sparse_csr`` & co. (``blocksize`` for BSR/BSC)."""
    if layout is not None and layout.name != "sparse_coo":
        return sparse_compressed.convert(self, layout, blocksize, dense_dim)
    if _compressed(self):
        if sparse_dim not in (None, 2):
            raise RuntimeError(f"sparse_compressed_to_sparse: conversion from "
                               f"{sparse_compressed.KEY[self.layout]} to Sparse with sparse_dim "
                               f"argument !=2 is not supported")
        return sparse_compressed._expand(self)
    if _is_sparse(self):
        if sparse_dim is not None and sparse_dim != self.sparse_dim():
            raise RuntimeError(f"to_sparse: conversion from Sparse to Sparse with sparse_dim "
                               f"argument !=self.sparse_dim() is not supported")
        return self
    sd = self.dim() if sparse_dim is None else sparse_dim
    if not 0 <= sd <= self.dim():
        raise RuntimeError(f"sparse_dim must be in [0, {self.dim()}], got {sd}")
    nz = self.detach() != 0
    if sd < self.dim():
        nz = nz.reshape(tuple(self.shape[:sd]) + (-1,)).any(-1)
    idx = nz.nonzero().t().contiguous() if sd else creation.zeros((0, 1), dtype=_int64)
    if not sd and not bool(nz):
        idx = creation.zeros((0, 0), dtype=_int64)
    val = _gather(self, idx, tuple(self.shape))
    return _make(idx, val, self.shape, True)


def sparse_mask(self, mask):
    """The entries of this dense tensor at the (coalesced) indices of sparse ``mask``."""
    _expect_sparse(mask, "sparse_mask")
    idx = _parts(mask.detach())[0]
    return _make(idx, _gather(self, idx, tuple(self.shape)), self.shape, True)


_RESIZE_HINT = (
    "\nYou could try the following options:\n1. If you need an empty sparse tensor of this size, "
    "call `x = torch.sparse_coo_tensor(size)`.\n2. If you need to resize this tensor, you have the "
    "following options:\n    1. For both sparse and dense dimensions, keep the number of them "
    "constant and the size of them non-shrinking, and then try the same call again.\n    2. Or, "
    "create a new sparse tensor with the correct indices and values from this sparse tensor.")


def sparse_resize_(self, size, sparse_dim, dense_dim):
    """Give this sparse COO tensor shape ``size`` in place; with stored entries, only growing
    the dims is allowed (the entries are kept), an empty one takes any shape.

    Example:
        >>> import ember
        >>> ember.sparse_coo_tensor([[0], [1]], [1.], (2, 2)).sparse_resize_((3, 4), 2, 0).shape
        torch.Size([3, 4])
    """
    _no_kernel(self, "sparse_resize_")
    size = tuple(size)
    if len(size) != sparse_dim + dense_dim:
        raise RuntimeError(f"'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) = "
                           f"{len(size)}, sparse_dim = {sparse_dim}, dense_dim = {dense_dim}")
    idx, val = _raw(self)
    old, sd, dd = tuple(self.shape), idx.shape[0], val.dim() - 1
    if idx.shape[1]:
        for what, a, b in (("sparse", sd, sparse_dim), ("dense", dd, dense_dim)):
            if a != b:
                raise RuntimeError(f"changing the number of {what} dimensions (from {a} to {b}) on"
                                   f" a non-empty sparse tensor is not supported." + _RESIZE_HINT)
        for what, a, b in (("sparse", old[:sd], size[:sd]), ("dense", old[sd:], size[sd:])):
            if any(y < x for x, y in zip(a, b)):
                raise RuntimeError(f"shrinking the size of {what} dimensions (from {list(a)} to "
                                   f"{list(b)}) on a non-empty sparse tensor is not supported."
                                   + _RESIZE_HINT)
        if size[sd:] != old[sd:]:       # grown dense dims: the new elements are zeros
            grown = creation.zeros((val.shape[0],) + size[sd:], dtype=val.dtype, device=val.device)
            grown[(slice(None),) + tuple(slice(0, n) for n in old[sd:])] = val
            val = grown
    else:
        idx = creation.zeros((sparse_dim, 0), dtype=_int64, device=idx.device)
        val = creation.zeros((0,) + size[sparse_dim:], dtype=val.dtype, device=val.device)
    self._data = SparseCOO(idx, val, size, self._data.coalesced)
    self._bump_version()
    return self


def sparse_resize_and_clear_(self, size, sparse_dim, dense_dim):
    """Make this sparse COO tensor an empty one of shape ``size`` in place.

    Example:
        >>> import ember
        >>> s = ember.sparse_coo_tensor([[0], [1]], [1.], (2, 2))
        >>> s.sparse_resize_and_clear_((3, 3), 1, 1)._nnz()
        0
    """
    _no_kernel(self, "sparse_resize_and_clear_")
    idx, val = _raw(self)
    self._data = SparseCOO(idx[:, :0], val[:0], self.shape, True)
    return sparse_resize_(self, size, sparse_dim, dense_dim)


def resize_as_sparse_(self, the_template):
    """``self.sparse_resize_`` to the shape and dims of sparse ``the_template``.

    Example:
        >>> import ember
        >>> s = ember.sparse_coo_tensor([[0], [1]], [1.], (2, 2))
        >>> s.resize_as_sparse_(ember.zeros(4, 4).to_sparse()).shape
        torch.Size([4, 4])
    """
    return sparse_resize_(self, the_template.shape, the_template.sparse_dim(),
                          the_template.dense_dim())


def _reduce_sparse(t):
    """``pickle`` / ``deepcopy`` recipe of a sparse tensor: its parts."""
    if _compressed(t):
        return sparse_compressed._reduce(t)
    i, v = _raw(t)
    return _rebuild_sparse, (i, v, tuple(t.shape), t._data.coalesced, t._requires_grad)


def _rebuild_sparse(indices, values, size, coalesced, requires_grad):
    return _wrap(indices, values, size, coalesced).requires_grad_(requires_grad)


def layout_of(r, like):
    """``r`` in the layout of sparse ``like`` (``copy_`` into a sparse tensor)."""
    if _is_sparse(like):
        return r if r.is_sparse else to_sparse(r, like.sparse_dim())
    dense_dim = like.dense_dim() if r.layout.name == "strided" else None
    return sparse_compressed.convert(r, like.layout, sparse_compressed._blocksize(like._data),
                                     dense_dim)


METHODS = (coalesce, is_coalesced, indices, values, _indices, _values, _nnz, sparse_dim,
           dense_dim, to_dense, to_sparse, sparse_mask, sparse_resize_, sparse_resize_and_clear_,
           resize_as_sparse_)
for _f in METHODS:
    setattr(Tensor, _f.__name__, _f)
del _f
# ember.<name> (see lazy.py); sparse_rules and sparse_compressed add theirs
FUNCTIONS = {"sparse_coo_tensor": sparse_coo_tensor, "resize_as_sparse_": resize_as_sparse_}

# the rules of the ops that take sparse operands attach themselves to their OpDefs
from . import sparse_rules  # noqa: E402,F401
from . import sparse_compressed  # noqa: E402
