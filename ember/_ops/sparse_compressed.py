"""Sparse compressed tensors: CSR, CSC and their blocked forms BSR, BSC (``torch.sparse_csr``...).

A compressed tensor's ``_data`` is a :class:`~ember._sparse.SparseCompressed`: ``compressed``
indices (``crow_indices`` for CSR/BSR, ``ccol_indices`` for CSC/BSC; ``*batch x (n + 1)``),
``plain`` indices (``col_indices`` / ``row_indices``; ``*batch x nnz``) and ``values``
(``*batch x nnz x *blocksize x *dense``). The index work is NumPy on the host; the values move
with ember ops, so gradients reach them.

Everything but the parts is a composition through COO (``_ops/sparse.py``): :func:`_expand`
turns a compressed tensor into the coalesced COO tensor of its elements (a block's every
element, zeros included), :func:`_compress` turns a COO tensor back into a layout. Both carry
autograd through the values, so a gradient reaching a compressed tensor from a composition is
compressed with its pattern, as torch's; ``mm``/``addmm`` record their own node, whose gradient
for the sparse operand is dense, as torch's.
"""
import math

import numpy as np

from .. import _dtype
from .._backends import backend
from .._sparse import (LAYOUTS, SparseCompressed, sparse_bsc, sparse_bsr, sparse_coo,
                       sparse_csc, sparse_csr, strided)
from .._tensor import Tensor
from ..autograd import grad_mode
from . import creation, dispatch, linalg, pointwise, reduction, shape, sparse_rules
from .registry import OpDef, get
from .sparse import (FUNCTIONS, _gather, _is_sparse, _make, _parts, _record_as, coalesce, to_sparse)

_int64, no_grad = _dtype.int64, grad_mode.no_grad
_BLOCK = (sparse_bsr, sparse_bsc)
_ROW = (sparse_csr, sparse_bsr)
_FLIP = {sparse_csr: sparse_csc, sparse_csc: sparse_csr, sparse_bsr: sparse_bsc,
         sparse_bsc: sparse_bsr}
# torch's names of the layouts in its messages
KEY = {strided: "Strided", sparse_coo: "Sparse", sparse_csr: "SparseCsr", sparse_csc: "SparseCsc",
       sparse_bsr: "SparseBsr", sparse_bsc: "SparseBsc"}
_CHECK = [False]        # check_sparse_tensor_invariants' switch (off by default, as torch's)


def _is_compressed(x):
    return isinstance(x, Tensor) and type(x._data) is SparseCompressed


def _names(layout):
    """(compressed, plain) index names, and (compressed, plain) dimension words."""
    return (("crow_indices", "col_indices"), ("rows", "cols")) if layout in _ROW else \
        (("ccol_indices", "row_indices"), ("cols", "rows"))


def _host(t):
    return np.asarray(backend(t.device).to_host(t._data))


def _on(arr, device):
    return creation.tensor(np.ascontiguousarray(arr, np.int64), dtype=_int64, device=device)


def _blocksize_of(values, nb, layout):
    """The block shape ``values`` (with ``nb`` batch dims) stores, (1, 1) for CSR and CSC."""
    return tuple(values.shape[nb + 1:nb + 3]) if layout in _BLOCK and values.dim() > nb + 2 \
        else (1, 1)


def _blocksize(sp):
    return _blocksize_of(sp.values, sp.compressed.dim() - 1, sp.layout)


def _wrap(ci, pi, values, size, layout):
    return Tensor._wrap(SparseCompressed(ci, pi, values, size, layout), values.device)


# ---- autograd between a compressed tensor and its values --------------------------------------

def _from_values_fwd(xp, compressed, plain, values, size, layout):
    """(graph node only: the compressed tensor with these parts)"""


_from_values = OpDef("sparse_compressed_tensor", _from_values_fwd)


@_from_values.vjp()
def _(g, ci, pi, values, size, layout):
    if _is_compressed(g) and g._data.compressed is ci and g._data.plain is pi:
        return None, None, g._data.values if g.grad_fn is None else _values(g), None, None
    if _is_compressed(g):
        g = _expand(g)
    nb = ci.dim() - 1
    idx = _elements(ci, pi, size, layout, _blocksize_of(values, nb, layout))
    return None, None, _gather(g, _on(idx, g.device), tuple(size)).reshape(values.shape), None, None


def _values_fwd(xp, input, compressed, plain, layout):
    """(graph node only: the values of compressed ``input``)"""


_values_op = OpDef("values", _values_fwd)


@_values_op.vjp()
def _(g, input, ci, pi, layout):
    return _make_c(ci, pi, g, input.shape, layout), None, None, None


def _make_c(ci, pi, values, size, layout):
    """A compressed tensor from its parts; differentiable in ``values``."""
    t = _wrap(ci, pi, values.detach(), size, layout)
    if values._requires_grad and grad_mode.state.grad_enabled:
        dispatch._record(_from_values, (ci, pi, values, tuple(size), layout), {}, [values], [t])
    return t


def _values(t):
    """The values of compressed ``t``, carrying its gradient (as torch's ``values()``)."""
    sp = t._data
    if not (t._requires_grad and grad_mode.state.grad_enabled):
        return sp.values
    v = sp.values._alias()
    dispatch._record(_values_op, (t, sp.compressed, sp.plain, sp.layout), {}, [t], [v])
    return v


def _like(t, values):
    """``t``'s pattern with other values (differentiable in them)."""
    sp = t._data
    return _make_c(sp.compressed, sp.plain, values, sp.shape, sp.layout)


# ---- kernels: compressed <-> COO ----------------------------------------------------------

def _elements(ci, pi, size, layout, blocksize):
    """The ``(*batch, row, col)`` index of every stored element (``(nb + 2) x N``), in the
    order of ``values`` flattened down to elements (batch, entry, then row and column in the
    block)."""
    ci, pi = _host(ci).astype(np.int64), _host(pi).astype(np.int64)
    nb = ci.ndim - 1
    batch = tuple(size[:nb])
    b_count = math.prod(batch)
    ci, pi = ci.reshape(b_count, -1), pi.reshape(b_count, -1)
    counts = np.diff(ci, axis=1).reshape(-1)
    comp = np.repeat(np.tile(np.arange(ci.shape[1] - 1), b_count), counts)
    b = np.repeat(np.arange(b_count), pi.shape[1])
    rows, cols = (comp, pi.reshape(-1)) if layout in _ROW else (pi.reshape(-1), comp)
    bh, bw = blocksize
    if (bh, bw) != (1, 1):
        i, j = np.divmod(np.arange(bh * bw), bw)
        rows, cols = (rows[:, None] * bh + i).ravel(), (cols[:, None] * bw + j).ravel()
        b = np.repeat(b, bh * bw)
    bidx = np.unravel_index(b, batch) if nb else ()
    return np.stack([*bidx, rows, cols]).reshape(nb + 2, -1).astype(np.int64)


def _expand(t):
    """The COO tensor of compressed ``t``'s elements (sparse dims: batch + 2) in storage order
    (coalesced only if that is row-major, as torch's), differentiable in ``t``."""
    sp = t._data
    nb = sp.compressed.dim() - 1
    idx = _elements(sp.compressed, sp.plain, sp.shape, sp.layout, _blocksize(sp))
    keys = np.ravel_multi_index(tuple(idx), sp.shape[:nb + 2]) if idx.size else idx[0]
    val = _values(t).reshape((-1,) + tuple(sp.shape[nb + 2:]))
    return _make(_on(idx, t.device), val, sp.shape, bool((keys[1:] > keys[:-1]).all()))


def _compress(coo, layout, blocksize=None):
    """COO ``coo`` (sparse dims: batch + 2) in ``layout``; a block is stored where any stored
    element falls in it. Differentiable in ``coo``'s values."""
    idx, val = _parts(coo)
    size, sd = tuple(coo.shape), idx.shape[0]
    nb, dense = sd - 2, tuple(val.shape[1:])
    bh, bw = blocksize if layout in _BLOCK else (1, 1)
    I = _host(idx)
    batch = size[:nb]
    b_count = math.prod(batch)
    b = np.ravel_multi_index(tuple(I[:nb]), batch) if nb else np.zeros(I.shape[1], np.int64)
    (rb, i), (cb, j) = np.divmod(I[nb], bh), np.divmod(I[nb + 1], bw)
    nrb, ncb = size[nb] // bh, size[nb + 1] // bw
    (comp, plain), (ncomp, nplain) = ((rb, cb), (nrb, ncb)) if layout in _ROW else \
        ((cb, rb), (ncb, nrb))
    key = (b * ncomp + comp) * nplain + plain
    ukey, inv = np.unique(key, return_inverse=True)
    ub = ukey // (ncomp * nplain)
    per_batch = np.bincount(ub, minlength=b_count)
    if b_count and (per_batch != per_batch[0]).any():
        raise RuntimeError("Expect the same number of specified elements per batch.")
    nnz = int(per_batch[0]) if b_count else 0
    counts = np.bincount(ukey // nplain, minlength=b_count * ncomp).reshape(b_count, ncomp)
    ci = np.concatenate([np.zeros((b_count, 1), np.int64), counts.cumsum(1)], 1)
    ci, pi = ci.reshape(batch + (ncomp + 1,)), (ukey % nplain).reshape(batch + (nnz,))
    if layout in _BLOCK:
        slot = _on((inv.reshape(-1) * bh + i) * bw + j, val.device)
        v = creation.zeros((ukey.size * bh * bw,) + dense, dtype=val.dtype, device=val.device)
        v = v.index_add(0, slot, val).reshape(batch + (nnz, bh, bw) + dense)
    else:
        order = np.argsort(inv.reshape(-1), kind="stable")
        v = val if (order == np.arange(order.size)).all() else \
            val.index_select(0, _on(order, val.device))
        v = v.reshape(batch + (nnz,) + dense)
    return _make_c(_on(ci, val.device), _on(pi, val.device), v, size, layout)


# ---- construction ---------------------------------------------------------------------------

def _as_index(x, device):
    return x.to(device) if isinstance(x, Tensor) and device is not None else x if \
        isinstance(x, Tensor) else creation.tensor(x, dtype=_int64, device=device)


def sparse_compressed_tensor(compressed_indices, plain_indices, values, size=None, *, dtype=None,
                             layout=None, device=None, pin_memory=False, requires_grad=False,
                             check_invariants=None):
    """A sparse tensor in a compressed layout (CSR, CSC, BSR or BSC, given by ``layout``).

    Args:
        compressed_indices: ``*batch x (n + 1)`` int32/int64 offsets: the entries of row (CSR,
            BSR) or column (CSC, BSC) block ``i`` are ``compressed_indices[..., i]`` to
            ``compressed_indices[..., i + 1]``.
        plain_indices: ``*batch x nnz``: the column (row) of each entry.
        values: ``*batch x nnz x *blocksize x *dense`` (blocksize only for BSR/BSC).
        size: the full shape; by default the smallest that holds every index.
        check_invariants: check the indices' values (default:
            :func:`ember.sparse.check_sparse_tensor_invariants.is_enabled`); shapes are
            always checked.

    Example:
        >>> import ember
        >>> ember.sparse_compressed_tensor([0, 1, 2], [1, 0], [5., 6.], (2, 2),
        ...                                layout=ember.sparse_csc).to_dense()
        tensor([[0., 6.],
                [5., 0.]])
    """
    if layout not in _FLIP:
        raise RuntimeError(f"sparse_compressed_tensor expected sparse compressed tensor layout "
                           f"but got {KEY.get(layout, 'none') if layout else 'none'}")
    ci, pi = _as_index(compressed_indices, device), _as_index(plain_indices, device)
    if not isinstance(values, Tensor):
        values = creation.tensor(values, dtype=dtype, device=device)
    values = values.to(device=device, dtype=dtype) if device or dtype else values
    size = _infer_size(ci, pi, values, layout) if size is None else tuple(
        creation._size((size,)) if not isinstance(size, int) else (size,))
    _check_args(ci, pi, values, size, layout)
    if _CHECK[0] if check_invariants is None else check_invariants:
        _check_invariants(ci, pi, values, size, layout)
    t = _make_c(ci, pi, values, size, layout)
    return t.requires_grad_(True) if requires_grad else t


def _infer_size(ci, pi, values, layout):
    nb, block = ci.dim() - 1, 2 if layout in _BLOCK else 0
    bh, bw = _blocksize_of(values, nb, layout)
    ncomp = ci.shape[-1] - 1 if ci.dim() else 0
    nplain = int(pi.max()) + 1 if pi.numel() else 0
    rc = (ncomp * bh, nplain * bw) if layout in _ROW else (nplain * bh, ncomp * bw)
    return tuple(ci.shape[:-1]) + rc + tuple(values.shape[nb + 1 + block:])


def _check_args(ci, pi, values, size, layout):
    """torch's ``_validate_sparse_compressed_tensor_args``: dtypes and shapes."""
    (cn, pn), (cw, _) = _names(layout)
    if ci.dtype not in (_dtype.int32, _int64) or pi.dtype not in (_dtype.int32, _int64):
        bad = ci.dtype if ci.dtype not in (_dtype.int32, _int64) else pi.dtype
        raise RuntimeError(f"{cn} and {pn} dtype must be Int or Long, but got "
                           f"{_dtype._SCALAR_NAMES[bad.name]}")
    if ci.dtype is not pi.dtype:
        raise RuntimeError(f"{cn} and {pn} must have the same dtype, bot got "
                           f"{_dtype._SCALAR_NAMES[ci.dtype.name]} and "
                           f"{_dtype._SCALAR_NAMES[pi.dtype.name]}, respectively")
    if ci.dim() != pi.dim():
        raise RuntimeError(f"{cn} and {pn} dimensionalities must be equal but got {ci.dim()} and "
                           f"{pi.dim()}, respectively")
    nb, block = ci.dim() - 1, 2 if layout in _BLOCK else 0
    if values.dim() <= nb + block:
        raise RuntimeError(f"values must have dimensionality > sum of batch and block "
                           f"dimensionalities (={nb} + {block}) but got {values.dim()}")
    dd = values.dim() - nb - 1 - block
    if len(size) != nb + 2 + dd:
        raise RuntimeError(f"tensor dimensionality must be sum of batch, base, and dense "
                           f"dimensionalities (={nb} + 2 + {dd}) but got {len(size)}")
    bs = _blocksize_of(values, nb, layout)
    for k in (0, 1):
        if size[nb + k] % bs[k]:
            raise RuntimeError(f"tensor shape[{nb + k}] (={size[nb + k]}) must be divisible with "
                               f"blocksize[{k}] (={bs[k]}) as defined by values shape")
    batch = list(size[:nb])
    if [list(x.shape[:nb]) for x in (ci, pi, values)] != [batch] * 3:
        raise RuntimeError(f"all batch dimensions of {cn} (={list(ci.shape[:nb])}), {pn} "
                           f"(={list(pi.shape[:nb])}), and values (={list(values.shape[:nb])}) "
                           f"must be equal to tensor batch dimensions (={batch})")
    k = nb + (0 if layout in _ROW else 1)
    ncomp = size[k] // bs[k - nb]
    if ci.shape[-1] != ncomp + 1:
        word = {"rows": "rows", "cols": "columns"}[cw]
        word = f"{word[:-1]} blocks" if block else word
        raise RuntimeError(f"{cn}.shape[-1] must be equal to the number of {word} + 1 "
                           f"(={ncomp + 1}), but got {ci.shape[-1]}")
    if pi.shape[-1] != values.shape[nb]:
        raise RuntimeError(f"{pn}.shape[-1] must be equal to nnz (={values.shape[nb]}) as "
                           f"defined by values.shape[{nb}], but got {pi.shape[-1]}")
    if tuple(values.shape[nb + 1 + block:]) != tuple(size[nb + 2:]):
        k = nb + 1 + block
        raise RuntimeError(f"values.shape[{k}:] (={list(values.shape)[k:]}) must be equal to "
                           f"the dense dimensions of the tensor shape (={list(size[nb + 2:])})")
    if ci.device != pi.device or ci.device != values.device:
        raise RuntimeError(f"device of {cn} ({ci.device}) must match device of {pn} "
                           f"({pi.device}) and values ({values.device})")


def _check_invariants(ci, pi, values, size, layout):
    """torch's ``_validate_compressed_sparse_indices``: the indices' values."""
    (cn, pn), (cw, pw) = _names(layout)
    nb = ci.dim() - 1
    c, p = _host(ci).astype(np.int64), _host(pi).astype(np.int64)
    nplain = size[nb + (1 if layout in _ROW else 0)] // _blocksize_of(values, nb, layout)[
        1 if layout in _ROW else 0]
    for at, want, what in ((0, 0, "0"), (-1, p.shape[-1], "nnz")):
        if c.size and (c[..., at] != want).any():
            raise RuntimeError(f"`{cn}[..., {at}] == {what}` is not satisfied.")
    d = np.diff(c, axis=-1)
    if ((d < 0) | (d > nplain)).any():
        raise RuntimeError(f"`0 <= {cn}[..., 1:] - {cn}[..., :-1] <= n{pw}` is not satisfied.")
    if ((p < 0) | (p >= nplain)).any():
        raise RuntimeError(f"`0 <= {pn} < n{pw}` is not satisfied.")
    # within each compressed slice the plain indices rise strictly
    slices = np.repeat(np.arange(c.size), np.diff(c.reshape(-1, c.shape[-1]), axis=-1,
                                                  append=0).reshape(-1).clip(0))
    p = p.reshape(-1)
    if ((slices[1:] == slices[:-1]) & (p[1:] <= p[:-1])).any():
        raise RuntimeError(f"`{pn}[..., {cn}[..., i - 1]:{cn}[..., i]] for all i = 1, ..., "
                           f"n{cw} are sorted and distinct along the last dimension values` is "
                           f"not satisfied.")


def _constructor(layout):
    name = f"sparse_{layout.name[7:]}_tensor"
    (cn, pn), _ = _names(layout)

    def make(compressed_indices, plain_indices, values, size=None, *, dtype=None, layout=None,
             device=None, pin_memory=False, requires_grad=False, check_invariants=None):
        if layout is not None and layout is not own:
            raise RuntimeError(f"{name}: layout must be {KEY[own]} but got {KEY[layout]}")
        return sparse_compressed_tensor(compressed_indices, plain_indices, values, size,
                                        dtype=dtype, layout=own, device=device,
                                        requires_grad=requires_grad,
                                        check_invariants=check_invariants)
    own = layout
    make.__name__ = make.__qualname__ = name
    blocked = layout in _BLOCK
    make.__doc__ = f"""A sparse {layout.name[7:].upper()} tensor from ``{cn}``, ``{pn}`` and
    ``values``, as :func:`sparse_compressed_tensor` with ``layout=ember.{layout.name}``.

    Example:
        >>> import ember
        >>> ember.{name}([0, 1, 2], [1, 0], {'[[[5.]], [[6.]]]' if blocked else '[5., 6.]'
                                             }, (2, 2)).to_dense()
        tensor([[0., {'5.' if layout in _ROW else '6.'}],
                [{'6.' if layout in _ROW else '5.'}, 0.]])
    """
    return make


sparse_csr_tensor, sparse_csc_tensor, sparse_bsr_tensor, sparse_bsc_tensor = (
    _constructor(x) for x in (sparse_csr, sparse_csc, sparse_bsr, sparse_bsc))


# ---- conversions ------------------------------------------------------------------------------

def convert(self, layout, blocksize=None, dense_dim=None):
    """``self`` (strided, COO or compressed) in compressed ``layout``."""
    lay = layout.name
    if layout in _BLOCK:
        if blocksize is None:
            raise RuntimeError(f"{'dense' if self.layout is strided else 'sparse'}_to_sparse: "
                               f"conversion from {KEY[self.layout]} to {KEY[layout]} without "
                               f"blocksize argument given is not supported")
        blocksize = (blocksize, blocksize) if isinstance(blocksize, int) else tuple(blocksize)
        if len(blocksize) != 2:
            raise RuntimeError(f"dense_to_{lay}: blocksize needs to be a tuple of size 2, but "
                               f"got {len(blocksize)}")
    src = self.layout
    if src is strided:
        n, dd = self.dim(), dense_dim or 0
        if n < 2:
            raise RuntimeError(f"dense_to_{lay}: expected a tensor with at least 2 dimensions, "
                               f"got {n}")
        if not 0 <= dd <= n - 2:
            raise RuntimeError(f"dense_to_{lay}: dense_dim argument must be in [0,{n - 2}] range,"
                               f" but {dd} is given")
        r, c = self.shape[n - dd - 2:n - dd]
        if layout in _BLOCK and (r % blocksize[0] or c % blocksize[1]):
            raise RuntimeError(f"dense_to_{lay}: tensor sparse size ({r},{c}) must be divisible "
                               f"by given blocksize ({blocksize[0]},{blocksize[1]})")
        return _compress(to_sparse(self, n - dd), layout, blocksize)
    if dense_dim is not None:
        raise RuntimeError(f"sparse_compressed_to_{lay}: conversion from {KEY[src]} to "
                           f"{KEY[layout]} with dense_dim argument given is not supported")
    if src is sparse_coo:
        if self.sparse_dim() != 2:
            raise RuntimeError(f"coo_to_{lay}: conversion from Sparse to {KEY[layout]} for input "
                               f"tensors with sparse_dim()!=2 is not supported")
        return _compress(coalesce(self), layout, blocksize)
    if layout not in _BLOCK and src in _BLOCK:
        raise RuntimeError(f"sparse_compressed_to_{lay}: expected SparseCsr or SparseCsc layout "
                           f"but got {KEY[src]}")
    if layout in _BLOCK and src in _BLOCK and blocksize != _blocksize(self._data):
        raise RuntimeError(f"{'to' if src is layout else 'sparse_compressed_to'}_{lay}: conversion "
                           f"from {KEY[src]} to {KEY[layout]} with blocksize changed from "
                           f"{list(_blocksize(self._data))} to {list(blocksize)} is not supported")
    return self if src is layout else _compress(_expand(self), layout, blocksize)


def to_sparse_csr(self, dense_dim=None):
    """This tensor in CSR layout (``dense_dim`` trailing dimensions kept dense).

    Example:
        >>> import ember
        >>> ember.tensor([[0., 1.], [2., 0.]]).to_sparse_csr().col_indices()
        tensor([1, 0])
    """
    return convert(self, sparse_csr, None, dense_dim)


def to_sparse_csc(self, dense_dim=None):
    """This tensor in CSC layout.

    Example:
        >>> import ember
        >>> ember.tensor([[0., 1.], [2., 0.]]).to_sparse_csc().row_indices()
        tensor([1, 0])
    """
    return convert(self, sparse_csc, None, dense_dim)


def to_sparse_bsr(self, blocksize, dense_dim=None):
    """This tensor in BSR layout with ``blocksize`` blocks (kept where any element is stored).

    Example:
        >>> import ember
        >>> ember.eye(4).to_sparse_bsr((2, 2)).crow_indices()
        tensor([0, 1, 2])
    """
    return convert(self, sparse_bsr, blocksize, dense_dim)


def to_sparse_bsc(self, blocksize, dense_dim=None):
    """This tensor in BSC layout with ``blocksize`` blocks.

    Example:
        >>> import ember
        >>> ember.eye(4).to_sparse_bsc((2, 2)).values().shape
        torch.Size([2, 2, 2])
    """
    return convert(self, sparse_bsc, blocksize, dense_dim)


def to_sparse_coo(self):
    """This tensor in COO layout (a compressed tensor's every stored element, blocks expanded).

    Example:
        >>> import ember
        >>> ember.tensor([[0., 1.], [2., 0.]]).to_sparse_csr().to_sparse_coo().indices()
        tensor([[0, 1],
                [1, 0]])
    """
    return to_sparse(self)


# ---- Tensor methods -------------------------------------------------------------------------

def _index(which, layouts, what):
    def get_index(self):
        if self.layout not in layouts:
            raise RuntimeError(f"{get_index.__name__} expected sparse {what} compressed tensor "
                               f"layout but got {KEY[self.layout]}")
        return getattr(self._data, which)._alias()
    return get_index


crow_indices = _index("compressed", _ROW, "row")
col_indices = _index("plain", _ROW, "row")
ccol_indices = _index("compressed", (sparse_csc, sparse_bsc), "column")
row_indices = _index("plain", (sparse_csc, sparse_bsc), "column")
for _f, _n in ((crow_indices, "crow_indices"), (col_indices, "col_indices"),
               (ccol_indices, "ccol_indices"), (row_indices, "row_indices")):
    _f.__name__ = _f.__qualname__ = _n
    _f.__doc__ = f"""The ``{_n}`` of a compressed tensor (shares its memory; no autograd).

    Example:
        >>> import ember
        >>> ember.eye(2).to_sparse_{'csr' if _n in ('crow_indices', 'col_indices') else 'csc'
                                    }().{_n}()
        tensor({'[0, 1, 2]' if _n[0] == 'c' and _n[1] != 'o' else '[0, 1]'})
    """


def _copy_fn(method):
    def fn(input):
        return method(input).clone()
    fn.__name__ = fn.__qualname__ = f"{method.__name__}_copy"
    fn.__doc__ = f"""A copy of ``input.{method.__name__}()``.

    Example:
        >>> import ember
        >>> ember.{fn.__name__}(ember.eye(2).to_sparse_{'csr' if method in (crow_indices,
                                                                                col_indices)
                                                          else 'csc'}())
        tensor({'[0, 1, 2]' if method in (crow_indices, ccol_indices) else '[0, 1]'})
    """
    return fn


def values(self):
    return _values(self) if self._requires_grad else self._data.values._alias()


def dense_dim(self):
    sp = self._data
    return sp.values.dim() - sp.compressed.dim() - (2 if sp.layout in _BLOCK else 0)


def to_dense(self, dtype=None, *, masked_grad=None):
    if dtype is not None:
        raise RuntimeError("dtype argument is not supported by sparse_csr_to_dense")
    return _expand(self).to_dense()


# ---- op rules (dispatch.sparse_dispatch runs these for compressed operands) ------------------

def _transpose_rule(input, dim0, dim1):
    sp, n = input._data, input.dim()
    nb = sp.compressed.dim() - 1
    d0, d1 = sorted((dim0 % n, dim1 % n))
    if d0 == d1:
        return input
    if (d0, d1) != (nb, nb + 1):
        raise RuntimeError(f"transpose(): only the two sparse dimensions ({nb}, {nb + 1}) of a "
                           f"{KEY[sp.layout]} tensor can be swapped, got {dim0} and {dim1}")
    v = sp.values.transpose(nb + 1, nb + 2) if sp.layout in _BLOCK else sp.values
    size = list(sp.shape)
    size[d0], size[d1] = size[d1], size[d0]
    out = _wrap(sp.compressed, sp.plain, v, size, _FLIP[sp.layout])
    return _record_as(shape.transpose, (input, dim0, dim1), out)


def _t_rule(input):
    if input.dim() != 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.dim()}D")
    return _record_as(shape.t, (input,), _transpose_rule(input.detach(), 0, 1))


def _relayout(fn):
    """A composition through COO whose sparse result goes back to the operand's layout."""
    def rule(*args, **kwargs):
        first = next(a for a in args if _is_compressed(a))
        out = fn(*(_expand(a) if _is_compressed(a) else a for a in args), **kwargs)
        return _compress(out, first.layout, _blocksize(first._data)) if _is_sparse(out) else out
    return rule


def _map(opdef):
    """A function with f(0) == 0 (or a scaling by a number) applied to the values, the
    pattern kept."""
    def rule(input, *args, **kwargs):
        if not _is_compressed(input) or any(isinstance(a, Tensor) for a in args):
            return _relayout(opdef.sparse)(input, *args, **kwargs)
        return _like(input, opdef(_values(input), *args, **kwargs))
    return rule


def _sum_rule(input, dim=None, keepdim=False, *, dtype=None):
    if dim is not None or keepdim:
        raise NotImplementedError(f"sum: a {KEY[input.layout]} tensor is summed over all its "
                                  f"elements only")
    return _values(input).sum(dtype=dtype)


def _move(t, dev):
    sp = t._data
    out = _wrap(sp.compressed._move(dev), sp.plain._move(dev), sp.values._move(dev), sp.shape,
                sp.layout)
    return _record_as(pointwise._to_device, (t, str(t.device)), out)


RULES = {}


def rule(opdef):
    """The rule of ``opdef`` for compressed operands, or None (the table is made on first use:
    it reads COO's rules, which sparse_rules attaches when its import ends)."""
    if not RULES:
        RULES.update({get(n): _map(get(n)) for n in sparse_rules.ZERO_PRESERVING + (
            "neg", "clone", "_to_dtype", "pow")})
        RULES.update({
            pointwise.mul: _map(pointwise.mul), pointwise.div: _map(pointwise.div),
            pointwise.add: _relayout(pointwise.add.sparse),
            pointwise.sub: _relayout(pointwise.sub.sparse),
            linalg.mm: sparse_rules._mm_rule, linalg.matmul: sparse_rules._mm_rule,
            get("mv"): sparse_rules._mm_rule, linalg.addmm: sparse_rules._addmm_rule,
            shape.transpose: _transpose_rule, shape.t: _t_rule,
            reduction.sum_: _sum_rule, reduction.norm: lambda input, *a, **k:
            reduction.norm.sparse(_expand(input), *a, **k)})
    return RULES.get(opdef)


# ---- torch.sparse functions on compressed operands --------------------------------------------

def sparse_mm(mat1, mat2):
    """``torch.sparse.mm`` of a compressed ``mat1`` and a dense ``mat2``: the gradient of
    ``mat1`` is compressed with its pattern."""
    sparse_rules._check_mm("sparse.mm", mat1, mat2)
    return sparse_rules._spmm(_expand(mat1), mat2, True)


def sampled_addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0, out=None):
    """``beta * input + alpha * (mat1 @ mat2)`` at the stored entries of CSR ``input`` (a CSR
    tensor with its pattern).

    Example:
        >>> import ember
        >>> s = ember.eye(2).to_sparse_csr()
        >>> ember.sparse.sampled_addmm(s, ember.ones(2, 3), ember.ones(3, 2)).values()
        tensor([4., 4.])
    """
    if input.layout is not sparse_csr:
        key = {strided: "", sparse_coo: "Sparse"}.get(input.layout, "SparseCsr")
        raise NotImplementedError(f"Could not run 'aten::sparse_sampled_addmm' with arguments "
                                  f"from the '{key}{input.device.type.upper()}' backend.")
    if mat1.layout is not strided or mat2.layout is not strided:
        raise RuntimeError("sampled_addmm: Expected mat1 and mat2 to be strided tensors")
    if input.dim() != 2 or mat1.dim() != 2 or mat2.dim() != 2:
        raise RuntimeError("sampled_addmm: expected 2-D input, mat1 and mat2 (batches are not "
                           "supported)")
    if mat1.shape[1] != mat2.shape[0] or (mat1.shape[0], mat2.shape[1]) != tuple(input.shape):
        raise RuntimeError(f"sampled_addmm: input of shape {list(input.shape)} cannot be added to "
                           f"the product of mat1 {list(mat1.shape)} and mat2 {list(mat2.shape)}")
    sp = input._data
    rows, cols = (_on(x, mat1.device) for x in _elements(sp.compressed, sp.plain, sp.shape,
                                                          sp.layout, (1, 1)))
    prod = (mat1.index_select(0, rows) * mat2.t().index_select(0, cols)).sum(1)
    res = _like(input, _values(input) * beta + prod * alpha if beta else prod * alpha)
    return sparse_rules._into(out, res)


def spsolve(input, other, *, left=True):
    """The solution ``x`` of ``input @ x = other`` for a square CSR ``input`` (solved densely:
    ember has no sparse factorization).

    Example:
        >>> import ember
        >>> ember.sparse.spsolve((2 * ember.eye(2)).to_sparse_csr(), ember.tensor([2., 4.]))
        tensor([1., 2.])
    """
    if input.layout is not sparse_csr:
        raise RuntimeError(f"spsolve: expected a sparse CSR input, got {KEY[input.layout]}")
    if not left:
        raise RuntimeError("spsolve: only left=True is supported")
    from .. import linalg as _linalg
    return _linalg.solve(to_dense(input), other)


def spdiags(diagonals, offsets, shape, layout=None):
    """A sparse 2-D tensor with the rows of ``diagonals`` on the diagonals ``offsets`` (the
    value at column ``j`` of a diagonal is ``diagonals[i, j]``, as SciPy's).

    Example:
        >>> import ember
        >>> ember.sparse.spdiags(ember.tensor([[1., 2.], [3., 4.]]), ember.tensor([0, 1]),
        ...                      (2, 2)).to_dense()
        tensor([[1., 4.],
                [0., 2.]])
    """
    layout = sparse_coo if layout is None else layout
    if layout not in (sparse_coo, sparse_csr, sparse_csc):
        raise RuntimeError(f"Only output layouts (Sparse, SparseCsc, SparseCsr) are supported, "
                           f"got {KEY[layout]}")
    if diagonals.dim() != 2 or offsets.dim() != 1:
        raise RuntimeError(f"Diagonals must be 2-D and offsets 1-D, got {diagonals.dim()}-D and "
                           f"{offsets.dim()}-D")
    if diagonals.shape[0] != offsets.shape[0]:
        raise RuntimeError(f"Number of diagonals ({diagonals.shape[0]}) does not match the "
                           f"number of offsets ({offsets.shape[0]})")
    offs = _host(offsets).astype(np.int64)
    if np.unique(offs).size != offs.size:
        raise RuntimeError("Offset tensor contains duplicate values")
    m, n = shape
    rows, cols, which = [], [], []
    for i, o in enumerate(offs.tolist()):
        c = np.arange(max(0, o), min(n, m + o, diagonals.shape[1]))
        rows.append(c - o), cols.append(c), which.append(i * diagonals.shape[1] + c)
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
    val = diagonals.reshape(-1).index_select(0, _on(cat(which), diagonals.device))
    coo = _make(_on(np.stack([cat(rows), cat(cols)]), diagonals.device), val, (m, n))
    return coo if layout is sparse_coo else convert(coo, layout)


def as_sparse_gradcheck(gradcheck):
    """``gradcheck`` extended to functions of (and returning) sparse tensors: a sparse input's
    gradient is checked with respect to its stored values, a sparse output is compared
    densely.

    Example:
        >>> import ember
        >>> check = ember.sparse.as_sparse_gradcheck(ember.autograd.gradcheck)
        >>> x = ember.tensor([[0., 1.], [2., 3.]], dtype=ember.float64)
        >>> check(lambda x: x.to_sparse_csr(), x.to_sparse_coo().requires_grad_())
        True
    """
    def rebuild(x):
        """An input as (what gradcheck varies, the map from it back to the input or None)."""
        if not (isinstance(x, Tensor) and x.layout is not strided and x.requires_grad):
            return x, None
        x = coalesce(x.detach()) if x.is_sparse else x.detach()
        v = x._data.values.clone().requires_grad_(True)
        return v, (lambda v: _make(x._data.indices, v, x.shape, True)) if x.is_sparse else \
            (lambda v: _like(x, v))

    def dense(o):
        return o.to_dense() if isinstance(o, Tensor) and o.layout is not strided else o

    def check(func, inputs, **kwargs):
        flat, makers = zip(*map(rebuild, (inputs,) if isinstance(inputs, Tensor) else inputs))

        def dense_func(*args):
            out = func(*(m(a) if m else a for m, a in zip(makers, args)))
            return type(out)(map(dense, out)) if isinstance(out, (tuple, list)) else dense(out)
        return gradcheck(dense_func, flat, **kwargs)
    return check


class check_sparse_tensor_invariants:
    """Whether sparse constructors check the indices' values, like
    ``torch.sparse.check_sparse_tensor_invariants``: a context manager, a decorator, or the
    static ``enable()``/``disable()``/``is_enabled()`` switch (off by default; a constructor's
    ``check_invariants`` argument overrides it).

    Example:
        >>> import ember
        >>> with ember.sparse.check_sparse_tensor_invariants():
        ...     ember.sparse.check_sparse_tensor_invariants.is_enabled()
        True
        >>> ember.sparse.check_sparse_tensor_invariants.is_enabled()
        False
    """

    @staticmethod
    def is_enabled():
        return _CHECK[0]

    @staticmethod
    def enable():
        _CHECK[0] = True

    @staticmethod
    def disable():
        _CHECK[0] = False

    def __init__(self, enable=True):
        self.state, self.saved_state = enable, None

    def __enter__(self):
        if self.saved_state is not None:
            raise RuntimeError("This context manager instance is already activated. Use a "
                               "different context manager instance for context nesting.")
        self.saved_state, _CHECK[0] = _CHECK[0], self.state

    def __exit__(self, *exc):
        _CHECK[0], self.saved_state = self.saved_state, None

    def __call__(self, mth):
        def test_mth(*args, **kwargs):
            with type(self)(self.state):
                return mth(*args, **kwargs)
        return test_mth


def _reduce(t):
    """``pickle`` / ``deepcopy`` recipe: the parts."""
    sp = t._data
    return _rebuild, (sp.compressed, sp.plain, sp.values, sp.shape, sp.layout.name,
                      t._requires_grad)


def _rebuild(ci, pi, values, size, layout, requires_grad):
    return _wrap(ci, pi, values, size, LAYOUTS[layout]).requires_grad_(requires_grad)


METHODS = (crow_indices, col_indices, ccol_indices, row_indices, to_sparse_csr, to_sparse_csc,
           to_sparse_bsr, to_sparse_bsc, to_sparse_coo)
for _f in METHODS:
    setattr(Tensor, _f.__name__, _f)
FUNCTIONS.update({f.__name__: f for f in (sparse_compressed_tensor, sparse_csr_tensor,
                                         sparse_csc_tensor, sparse_bsr_tensor, sparse_bsc_tensor)})
crow_indices_copy, col_indices_copy, ccol_indices_copy, row_indices_copy = map(
    _copy_fn, (crow_indices, col_indices, ccol_indices, row_indices))
FUNCTIONS.update({f.__name__: f for f in (crow_indices_copy, col_indices_copy, ccol_indices_copy,
                                          row_indices_copy)})
del _f, _n
