"""Layouts, and what a sparse tensor (COO or compressed) holds in place of an array.

A sparse tensor is an ordinary ``Tensor`` whose ``_data`` is a :class:`SparseCOO`: its
``indices`` (int64, ``sparse_dim x nnz``) and ``values`` (``nnz x *dense_shape``) tensors plus
the full shape and dtype. The shape, dtype and device metadata of ``Tensor`` then work as they
are; any attempt to use it as an array raises :class:`SparseOperand`, which dispatch catches to
run the op's sparse rule (``OpDef.sparse``) or to raise torch's missing-kernel error. So the
dense fast path pays nothing for sparse support. The rules live in ``_ops/sparse.py``.

A compressed tensor (CSR, CSC, BSR, BSC) holds a :class:`SparseCompressed` the same way: its
compressed and plain index tensors, values, shape and layout (``_ops/sparse_compressed.py``).
"""
import math


class layout:
    """How a tensor's elements are stored, like ``torch.layout``.

    Example:
        >>> import ember
        >>> ember.ones(2).layout
        torch.strided
    """

    __slots__ = ("name",)

    def __init__(self, name):
        object.__setattr__(self, "name", name)

    def __repr__(self):
        return f"torch.{self.name}"

    def __reduce__(self):
        return (_layout_by_name, (self.name,))


strided, sparse_coo = layout("strided"), layout("sparse_coo")
sparse_csr, sparse_csc, sparse_bsr, sparse_bsc = (layout(f"sparse_{n}") for n in
                                                  ("csr", "csc", "bsr", "bsc"))
LAYOUTS = {x.name: x for x in (strided, sparse_coo, sparse_csr, sparse_csc, sparse_bsr, sparse_bsc)}


def _layout_by_name(name):
    return LAYOUTS[name]


class SparseOperand(NotImplementedError):
    """A sparse tensor reached code that needs an array (caught by dispatch)."""

    def __init__(self, what="this operation"):
        super().__init__(f"{what} is not supported for sparse tensors")


def _refuse(self, *args, **kwargs):
    raise SparseOperand()


class SparseData:
    """What a sparse tensor's ``_data`` has in common, COO or compressed: shape and dtype, and
    a refusal (:class:`SparseOperand`) of everything an array would do."""

    __slots__ = ()
    base = None                     # storages look for the array owning the memory
    __array_priority__ = 2000       # NumPy defers its operators to ours, which refuse

    ndim = property(lambda self: len(self.shape))

    size = property(lambda self: math.prod(self.shape))

    itemsize = property(lambda self: self.dtype.itemsize)

    @property
    def strides(self):
        raise SparseOperand("strides")

    def __getattr__(self, name):        # any other array attribute or method
        raise SparseOperand(f"'{name}'")

    __array__ = __array_function__ = __array_ufunc__ = _refuse
    __hash__ = object.__hash__


class SparseCOO(SparseData):
    """The ``_data`` of a sparse COO tensor: its parts, shape and dtype; not an array.

    ``indices`` and ``values`` are tensors without autograd history (the sparse tensor's own
    ``grad_fn`` carries it); ``coalesced`` says the indices are sorted and unique.
    """

    __slots__ = ("indices", "values", "shape", "dtype", "coalesced")
    layout = sparse_coo

    def __init__(self, indices, values, shape, coalesced):
        self.indices, self.values, self.coalesced = indices, values, bool(coalesced)
        self.shape, self.dtype = tuple(shape), values._data.dtype


class SparseCompressed(SparseData):
    """The ``_data`` of a CSR/CSC/BSR/BSC tensor: ``compressed`` (``crow_indices`` or
    ``ccol_indices``, ``*batch x (n + 1)``), ``plain`` (``col_indices`` or ``row_indices``,
    ``*batch x nnz``) and ``values`` (``*batch x nnz x *block x *dense``), tensors without
    autograd history, with the full shape and the layout."""

    __slots__ = ("compressed", "plain", "values", "shape", "dtype", "layout")

    def __init__(self, compressed, plain, values, shape, layout):
        self.compressed, self.plain, self.values, self.layout = compressed, plain, values, layout
        self.shape, self.dtype = tuple(shape), values._data.dtype


for _name in ("add sub mul matmul truediv floordiv mod pow and or xor lshift rshift "
              "lt le gt ge eq ne").split():
    for _form in ("__{}__", "__r{}__", "__i{}__"):
        setattr(SparseData, _form.format(_name), _refuse)
for _name in ("neg pos abs invert getitem setitem len iter float int complex bool index "
              "contains").split():
    setattr(SparseData, f"__{_name}__", _refuse)
SparseData.__eq__ = SparseData.__ne__ = _refuse   # (not inherited object identity: x == y)
del _name, _form
