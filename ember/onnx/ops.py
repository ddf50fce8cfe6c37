"""``torch.onnx.ops``: operators that stand for an ONNX node in the exported graph.

``symbolic("domain::Op", inputs, attrs, dtype=, shape=)`` computes nothing in eager mode (it
returns zeros of the declared shape and dtype, as torch's does); ``ember.onnx.export`` writes
it as one node ``Op`` of ``domain`` with those attributes, the domain added to the model's
opset imports (at ``version``). ``symbolic_multi_out`` is the same with several outputs.
"""
import numpy as np

from .._ops.registry import OpDef

__all__ = ["symbolic", "symbolic_multi_out"]


def _np(dtype):
    if isinstance(dtype, int):
        from ._custom import JitScalarType
        dtype = JitScalarType.from_onnx_type(dtype).dtype()
    return dtype.np


def _fwd(xp, domain_op, inputs, attrs=None, dtype=None, shape=(), version=None,
         metadata_props=None):
    return xp.zeros(tuple(shape), dtype=_np(dtype))


def _fwd_multi(xp, domain_op, inputs, attrs=None, dtypes=(), shapes=(), version=None,
               metadata_props=None):
    return tuple(xp.zeros(tuple(s), dtype=_np(d)) for s, d in zip(shapes, dtypes))


def _lower(g, domain_op, inputs, attrs, version, n):
    from ._custom import GraphContext
    domain = domain_op.rpartition("::")[0]
    if domain and version is not None:
        g.domains[domain] = version
    out = GraphContext(g).op(domain_op, *inputs, outputs=n, **dict(attrs or {}))
    return out.name if n == 1 else tuple(v.name for v in out)


_symbolic = OpDef("onnx_symbolic", _fwd, differentiable=False, method=False, function=False)
_symbolic_multi = OpDef("onnx_symbolic_multi_out", _fwd_multi, differentiable=False,
                        method=False, function=False)
_symbolic.onnx = lambda g, d, ins, attrs=None, dtype=None, shape=(), version=None, \
    metadata_props=None: _lower(g, d, ins, attrs, version, 1)
_symbolic_multi.onnx = lambda g, d, ins, attrs=None, dtypes=(), shapes=(), version=None, \
    metadata_props=None: _lower(g, d, ins, attrs, version, len(shapes))


def _check(domain_op):
    if "::" not in domain_op:
        raise ValueError(f"domain_op must be in the format 'domain::op', got {domain_op!r}")


def symbolic(domain_op, /, inputs, attrs=None, *, dtype, shape, version=None,
             metadata_props=None):
    """One ONNX node ``domain::Op`` on ``inputs`` with ``attrs`` in the exported graph; in
    eager mode, zeros of ``shape`` and ``dtype``.

    Example:
        >>> import ember
        >>> ember.onnx.ops.symbolic("custom::Foo", (ember.ones(2),), {"alpha": 1.0},
        ...                         dtype=ember.float32, shape=(2,))
        tensor([0., 0.])
    """
    _check(domain_op)
    return _symbolic(domain_op, list(inputs), dict(attrs or {}), dtype=dtype,
                     shape=[int(s) for s in shape], version=version,
                     metadata_props=metadata_props)


def symbolic_multi_out(domain_op, /, inputs, attrs=None, *, dtypes, shapes, version=None,
                       metadata_props=None):
    """``symbolic`` with several outputs (one per dtype and shape).

    Example:
        >>> import ember
        >>> a, b = ember.onnx.ops.symbolic_multi_out(
        ...     "custom::Split2", (ember.ones(4),), dtypes=(ember.float32, ember.int64),
        ...     shapes=((2,), (2,)))
        >>> b
        tensor([0, 0])
    """
    _check(domain_op)
    if len(dtypes) != len(shapes):
        raise ValueError(f"Number of dtypes ({len(dtypes)}) must match number of shapes "
                         f"({len(shapes)})")
    return list(_symbolic_multi(domain_op, list(inputs), dict(attrs or {}), dtypes=list(dtypes),
                                shapes=[[int(s) for s in sh] for sh in shapes], version=version,
                                metadata_props=metadata_props))
