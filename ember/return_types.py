"""The named tuples that ops with several results return, as ``torch.return_types``:
``ember.max(x, 0)`` is an ``ember.return_types.max`` with fields ``values`` and ``indices``.

Every type is made here, once, on first use (``collections.namedtuple`` is slow and there are
dozens), so a function and its Tensor method return the same class. An OpDef's field names
are on the OpDef (``returns=``); those of the functions that compose OpDefs are in ``FIELDS``.
See https://pytorch.org/docs/stable/torch.html (e.g. torch.max).

Example:
    >>> r = ember.sort(ember.tensor([2., 1.]))
    >>> r.indices
    tensor([1, 0])
    >>> type(r) is ember.return_types.sort
    True
"""
import collections

# the results of functions written as compositions of OpDefs (linalg_functions.py, linalg.py,
# _numerics.py), named as torch names their types
FIELDS = {
    "svd": ("U", "S", "V"), "qr": ("Q", "R"), "lu_unpack": ("P", "L", "U"),
    "triangular_solve": ("solution", "cloned_coefficient"),
    "linalg_slogdet": ("sign", "logabsdet"), "linalg_lu": ("P", "L", "U"),
    "linalg_lu_factor": ("LU", "pivots"), "linalg_ldl_factor": ("LD", "pivots"), "linalg_inv_ex": ("inverse", "info"),
    "linalg_solve_ex": ("result", "info"), "histogramdd": ("hist", "bin_edges"),
}
_TYPES = {}


def _repr(self):
    # torch prints a field a line: torch.return_types.max(\nvalues=tensor(...),\nindices=...)
    body = ",\n".join(f"{f}={v!r}" for f, v in zip(self._fields, self))
    return f"{__name__}.{type(self).__name__}(\n{body})"


def make(name, fields):
    """The named tuple type ``name`` with ``fields``, made on the first call and kept."""
    t = _TYPES.get(name)
    if t is None:
        t = collections.namedtuple(name, fields, module=__name__)
        t.__repr__ = _repr
        _TYPES[name] = t
    return t


def __getattr__(name):
    if name in FIELDS:
        return make(name, FIELDS[name])
    from ._ops import lazy, registry
    d = registry._REGISTRY.get(name) or (registry.get(name) if name in lazy.OPS else None)
    if d is not None and d.returns:
        return d.return_type
    raise AttributeError(f"module '{__name__}' has no attribute '{name}'")


def __dir__():
    from ._ops import registry
    return sorted(set(globals()) | set(FIELDS) | {d.name for d in registry.all_ops() if d.returns})
