"""``torch.sparse``: products and reductions of sparse tensors whose gradients stay sparse.

The sparse tensors themselves and the rules of the ops that take them live in
``ember/_ops/sparse.py`` (COO) and ``ember/_ops/sparse_compressed.py`` (CSR, CSC, BSR, BSC).
See https://pytorch.org/docs/stable/sparse.html.
"""
from .._ops import sparse_compressed as _sc
from .._ops import sparse_rules as _sp
from .._ops.sparse_compressed import (  # noqa: F401
    as_sparse_gradcheck, check_sparse_tensor_invariants, sampled_addmm, spdiags, spsolve)
from .._ops.sparse_rules import sparse_sum as sum  # noqa: F401,A001

__all__ = ["mm", "addmm", "sum", "softmax", "log_softmax", "sampled_addmm", "spdiags", "spsolve",
           "as_sparse_gradcheck", "check_sparse_tensor_invariants"]


def _check_sparse(name, x):
    if x.layout.name == "strided":
        raise RuntimeError(f"{name}: expected a sparse tensor as mat1, got layout {x.layout}")


def mm(mat1, mat2, reduce="sum"):
    """``mat1 @ mat2`` for a sparse (COO or compressed) ``mat1`` and a dense ``mat2``; the
    gradient of ``mat1`` is sparse with ``mat1``'s (coalesced) pattern and layout, unlike
    ``torch.mm``'s dense one. With a sparse ``mat2`` too, the sparse product (as ``@``).

    Example:
        >>> import ember
        >>> s = ember.sparse_coo_tensor([[0, 1], [1, 0]], [2., 3.], (2, 2))
        >>> ember.sparse.mm(s, ember.ones(2, 1))
        tensor([[2.],
                [3.]])
    """
    if reduce != "sum":
        raise NotImplementedError(f"sparse.mm: reduce={reduce!r} is not supported")
    _check_sparse("sparse.mm", mat1)
    if _sc._is_compressed(mat1) and mat2.layout.name == "strided":
        return _sc.sparse_mm(mat1, mat2)
    _sp._check_mm("sparse.mm", mat1, mat2)
    if mat2.layout.name != "strided":
        return _sp._sparse_product(mat1, mat2)
    return _sp._spmm(mat1, mat2, True)


def addmm(mat, mat1, mat2, *, beta=1.0, alpha=1.0):
    """``beta * mat + alpha * (mat1 @ mat2)`` for sparse ``mat1``, with sparse gradients for
    ``mat1`` as :func:`mm`."""
    p = mm(mat1, mat2)
    p = p * alpha if alpha != 1 else p
    return p if beta == 0 else p + (mat * beta if beta != 1 else mat)


def softmax(input, dim, *, dtype=None):
    """Softmax over ``dim`` of the stored entries only (absent entries count as -inf), a sparse
    tensor with ``input``'s coalesced pattern."""
    return _sp.sparse_softmax(input, dim, dtype, log=False)


def log_softmax(input, dim, *, dtype=None):
    """Log-softmax over ``dim`` of the stored entries (see :func:`softmax`)."""
    return _sp.sparse_softmax(input, dim, dtype, log=True)


def __getattr__(name):
    # torch.sparse.FloatTensor & co., the legacy sparse constructors, made on first use
    from .._tensor_types import SPARSE_TYPES
    if name in SPARSE_TYPES:
        globals().update(SPARSE_TYPES)
        return SPARSE_TYPES[name]
    raise AttributeError(f"module 'ember.sparse' has no attribute '{name}'")
