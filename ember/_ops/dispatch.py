"""The one path every op call takes: normalize, promote, check devices, compute, record."""
import numpy as np

from .. import _dtype
from .._backends import backend
from .._device import CPU
from .._tensor import Tensor
from ..autograd import grad_mode
from ..autograd.graph import CopySlices, NotImplementedNode, OpNode

_state = grad_mode.state


class hooks:
    """Extension points on the dispatch path (autocast, tracers). None means off."""
    autocast = None
    tracer = None


def _describe(tensors):
    return ", ".join(f"{tuple(t.shape)} {t.dtype.name} {t.device}" for t in tensors)


def _flatten(opdef, args, kwargs):
    """Arrays for the forward, and the tensors among the arguments (lists of tensors too)."""
    tensors, arrays = [], list(args)
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            tensors.append(a)
            arrays[i] = a._data
        elif type(a) in (list, tuple) and a and isinstance(a[0], Tensor):
            tensors.extend(a)
            arrays[i] = [t._data for t in a]
    return tensors, arrays


def _kwargs_to_positional(opdef, args, kwargs):
    """Move tensor keyword arguments into their positions so all tensors are positional."""
    if not any(isinstance(v, (Tensor, list, tuple)) for v in kwargs.values()):
        return args, kwargs
    args, kwargs, params = list(args), dict(kwargs), opdef.params
    for name in [k for k in kwargs if k in params]:
        i = params.index(name)
        while len(args) < i:
            p = params[len(args)]
            if p in kwargs:
                args.append(kwargs.pop(p))
            elif p in opdef.defaults:
                args.append(opdef.defaults[p])
            else:
                raise TypeError(f"{opdef.name}() missing required argument '{p}'")
        if len(args) == i:
            args.append(kwargs.pop(name))
        else:
            raise TypeError(f"{opdef.name}() got multiple values for argument '{name}'")
    return tuple(args), kwargs


_WEAK_SCALAR_BROKEN = {_dtype.bfloat16.np.type, _dtype.float8_e4m3fn.np.type,
                       _dtype.float8_e5m2.np.type}


def _promote(opdef, args, arrays):
    """Cast the operands to torch's promoted dtype (scalars stay Python numbers: NumPy treats
    them as weak, as torch does)."""
    idx = opdef.promote_args
    ops = []
    for i in idx:
        if i < len(args):
            a = args[i]
            ops.extend(a) if type(a) in (list, tuple) else ops.append(a)
    ts = [a for a in ops if isinstance(a, Tensor)]
    if not ts:
        return None
    dt0 = ts[0].dtype
    same = all(t.dtype is dt0 for t in ts)
    scalars = [a for a in ops if type(a) in (int, float, bool, complex)]
    if same and not scalars:
        dt = dt0
    else:
        dims = [t.dtype for t in ts if t._data.ndim]
        zeros = [t.dtype for t in ts if not t._data.ndim]
        dt = _dtype.result_type_of(dims, zeros, [_dtype._scalar_dtype(s) for s in scalars])
    if opdef.promote == "float" and dt.category < _dtype._FLOAT:
        dt = _dtype.get_default_dtype()
    if scalars and dt.np.type in _WEAK_SCALAR_BROKEN:
        for i in idx:      # ml_dtypes' ufuncs let Python floats upcast bf16/fp8: pin them
            if i < len(args) and type(args[i]) in (int, float, bool):
                arrays[i] = dt.np.type(args[i])
    if not same or dt is not dt0:
        npdt = dt.np
        for i in idx:
            a = arrays[i] if i < len(arrays) else None
            if hasattr(a, "astype") and a.dtype != npdt:
                arrays[i] = a.astype(npdt)
            elif type(a) is list:
                arrays[i] = [x.astype(npdt) if x.dtype != npdt else x for x in a]
    return dt


def _device_of(opdef, tensors):
    dev = tensors[0].device
    for t in tensors:
        d = t.device
        if d is not dev and d != dev:
            # NOTE: like torch, a 0-dim cpu tensor may join a cuda op as a scalar
            if d.type == "cpu" and t._data.ndim == 0:
                continue
            if dev.type == "cpu" and tensors[0]._data.ndim == 0:
                dev = d
                continue
            raise RuntimeError(f"{opdef.name}: expected all tensors to be on the same device, "
                               f"but found at least two devices, {dev} and {d}!")
    return dev


# Tensor dtypes a Python int/float operand never changes (bfloat16/fp8 are out: see _promote)
_SCALAR_KEEPS = frozenset((_dtype.float16, _dtype.float32, _dtype.float64, _dtype.complex64,
                           _dtype.complex128))
_SCALARS = (int, float)
_new = object.__new__


def dispatch(opdef, args, kwargs):
    """Run ``opdef`` on ``args``/``kwargs`` (tensors, scalars, options); return Tensor(s).

    The common call (one or two cpu tensors of one dtype, or a float tensor and a Python
    number; no keywords, view, autocast or tracer) takes the fast path below, which needs no
    promotion or device resolution; everything else goes through ``_dispatch``.
    """
    if kwargs or opdef.view or hooks.autocast is not None or hooks.tracer is not None:
        return _dispatch(opdef, args, kwargs)
    n = len(args)
    if n == 2:
        a, b = args
        if isinstance(a, Tensor):
            dt = a.dtype
            if isinstance(b, Tensor):
                if b.dtype is not dt or b.device is not CPU:
                    return _dispatch(opdef, args, kwargs)
                tensors, x, y = args, a._data, b._data
            elif type(b) in _SCALARS and dt in _SCALAR_KEEPS:
                tensors, x, y = (a,), a._data, b
            else:
                return _dispatch(opdef, args, kwargs)
        elif type(a) in _SCALARS and isinstance(b, Tensor) and b.dtype in _SCALAR_KEEPS:
            a, dt, tensors, x, y = b, b.dtype, (b,), a, b._data
        else:
            return _dispatch(opdef, args, kwargs)
        if a.device is not CPU or (opdef.promote == "float" and dt.category < _dtype._FLOAT):
            return _dispatch(opdef, args, kwargs)
        try:
            res = opdef.fwd(np, x, y)        # the cpu backend's run(), without the hop
        except (ValueError, IndexError, TypeError) as e:
            raise _explain(opdef, tensors, e) from None
    elif n == 1:
        a = args[0]
        if not isinstance(a, Tensor) or a.device is not CPU:
            return _dispatch(opdef, args, kwargs)
        dt, tensors = a.dtype, args
        if opdef.promote == "float" and dt.category < _dtype._FLOAT:
            return _dispatch(opdef, args, kwargs)
        try:
            res = opdef.fwd(np, a._data)
        except (ValueError, IndexError, TypeError) as e:
            raise _explain(opdef, tensors, e) from None
    else:
        return _dispatch(opdef, args, kwargs)
    if type(res) is not np.ndarray:
        return _finish(opdef, args, kwargs, tensors, res, CPU, None)
    out = _new(Tensor)                   # Tensor._wrap, inlined
    out._data = res
    out.dtype = dt if res.dtype is dt.np else Tensor._dtype_of(res)
    if _state.grad_enabled and opdef.differentiable:
        for t in tensors:
            if t._requires_grad:
                _record(opdef, args, kwargs, tensors, (out,))
                break
    return out


def _dispatch(opdef, args, kwargs):
    """The general path: keywords, lists of tensors, promotion, devices, views, hooks."""
    out = kwargs.pop("out", None) if kwargs else None
    if kwargs:
        args, kwargs = _kwargs_to_positional(opdef, args, kwargs)
    tensors, arrays = _flatten(opdef, args, kwargs)
    if not tensors:
        raise TypeError(f"{opdef.name}(): expected at least one Tensor argument, got "
                        f"{', '.join(type(a).__name__ for a in args)}")
    if hooks.autocast is not None:
        args, tensors, arrays = hooks.autocast(opdef, args, tensors, arrays)
    dev = _device_of(opdef, tensors) if len(tensors) > 1 else tensors[0].device
    if dev.type != "cpu":
        for i, a in enumerate(arrays):      # cpu 0-dim tensors ride along as scalars
            if isinstance(a, np.ndarray) and a.ndim == 0 and dev.type != "meta":
                arrays[i] = a.item()
    if opdef.promote is not None:
        _promote(opdef, args, arrays)
    try:
        res = backend(dev).run(opdef, arrays, kwargs)
    except (ValueError, IndexError, TypeError) as e:
        raise _explain(opdef, tensors, e) from None
    return _finish(opdef, args, kwargs, tensors, res, dev, out)


def _finish(opdef, args, kwargs, tensors, res, dev, out):
    """Wrap the result array(s), link views to their base, record autograd, call the tracer."""
    multi = type(res) is tuple
    outs = [Tensor._wrap(r, dev) for r in res] if multi else [Tensor._wrap(res, dev)]
    if opdef.view:
        src = tensors[0]
        storage, base = src._get_storage(), src._base if src._base is not None else src
        parent_fn, rest = src._view_fn, (args[1:], kwargs)
        view_fn = (lambda b: opdef(b, *rest[0], **rest[1])) if parent_fn is None else \
            (lambda b: opdef(parent_fn(b), *rest[0], **rest[1]))
        for o in outs:
            o._storage, o._base, o._view_fn = storage, base, view_fn
    if _state.grad_enabled and opdef.differentiable:
        for t in tensors:
            if t._requires_grad:
                _record(opdef, args, kwargs, tensors, outs)
                break
    if hooks.tracer is not None:
        hooks.tracer(opdef, args, kwargs, outs)
    if out is not None:
        return _write_out(opdef, out, outs)
    return tuple(outs) if multi else outs[0]


def _record(opdef, args, kwargs, tensors, outs):
    if len(outs) == 1:
        diff = () if outs[0].dtype.category < _dtype._FLOAT or 0 in opdef.nondiff_outputs \
            else (0,)
    else:
        diff = [i for i, o in enumerate(outs) if o.dtype.category >= _dtype._FLOAT and
                i not in opdef.nondiff_outputs]
    if not diff:
        return
    if opdef.vjp_fn is None:
        node = NotImplementedNode(opdef, tensors, outs)
    else:
        node = OpNode(opdef, args, kwargs, tensors, outs)
    for i in diff:
        o = outs[i]
        o.grad_fn, o._output_nr, o._requires_grad = node, i, True


def _explain(opdef, tensors, e):
    """Turn an array-library error into torch's RuntimeError naming the op and operands."""
    msg = str(e)
    if isinstance(e, TypeError) and "argument" in msg:
        return TypeError(f"{opdef.name}(): {msg}")
    kind = IndexError if isinstance(e, IndexError) else RuntimeError
    return kind(f"{opdef.name}: {msg} (got {_describe(tensors)})")


def _write_out(opdef, out, outs):
    if isinstance(out, (tuple, list)):
        for o, r in zip(out, outs):
            _write_out(opdef, o, [r])
        return type(out)(out)
    r = outs[0]
    if (_state.grad_enabled and (out._requires_grad or r._requires_grad)):
        raise RuntimeError(f"{opdef.name}(): functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires grad.")
    if tuple(out.shape) != tuple(r.shape):
        out.resize_(r.shape)
    out._assign(r)
    return out


def can_cast(src, dst):
    """torch.can_cast: no cast down a category (complex->float->int->bool)."""
    if src.category > dst.category:
        return False
    return not (dst is _dtype.bool_ and src is not _dtype.bool_)


def dispatch_inplace(opdef, self, args, kwargs):
    """``self.<op>_(*args)``: compute ``op(self, *args)`` and write it into ``self``.

    Checks dtype and shape before anything is written, so a failing call leaves ``self`` as it
    was; then bumps the version counter and rebases ``self``'s autograd history.
    """
    if self._requires_grad and self.grad_fn is None and _state.grad_enabled:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    base = self._base
    if base is not None and base._requires_grad and base.grad_fn is None and \
            _state.grad_enabled:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                           "in-place operation.")
    src = self
    if _state.grad_enabled and 0 in opdef.save and (self._requires_grad or any(
            isinstance(a, Tensor) and a._requires_grad for a in args)):
        src = self._alias_copy()        # backward needs the value from before the write
    r = dispatch(opdef, (src,) + tuple(args), kwargs)
    if not can_cast(r.dtype, self.dtype):
        raise RuntimeError(f"{opdef.name}_: result type {r.dtype.name} can't be cast to the "
                           f"desired output type {self.dtype.name}")
    if tuple(r.shape) != tuple(self.shape):
        raise RuntimeError(f"{opdef.name}_: output with shape {list(self.shape)} doesn't match "
                           f"the broadcast shape {list(r.shape)}")
    return self._assign(r, name=opdef.name)


def rebase_history(self, r):
    """After writing ``r`` into ``self`` in place, make ``self`` (and its base) take ``r``'s
    graph."""
    if r.grad_fn is None:
        return
    base = self._base
    if base is not None and self._view_fn is not None:
        base.grad_fn = CopySlices(base, self._view_fn, (r.grad_fn, r._output_nr),
                                  _meta_of(self))
        base._output_nr, base._requires_grad = 0, True
    self.grad_fn, self._output_nr, self._requires_grad = r.grad_fn, r._output_nr, True


def _meta_of(t):
    from ..autograd.graph import TensorMeta
    return TensorMeta(t)
