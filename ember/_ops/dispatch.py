"""The one path every op call takes: normalize, promote, check devices, compute, record."""
import contextlib

import numpy as np

from .. import _dtype
from .._backends import NUMPY_ERRSTATE, backend
from .._device import CPU
from .._sparse import SparseOperand
from .._storage import UntypedStorage, _root
from .._tensor import Tensor, _cext
from ..autograd import grad_mode
from ..autograd.graph import (_NO_KWARGS, AT0, AT01, AT1, CopySlices, NotImplementedNode, OpNode,
                              edge_of, move_retain_grad, simple_node)
from .errors import _explain
from .promotion import _INT_BOUNDS, _int_keeps, _OPMATH, _promote, _round_opmath

_state = grad_mode.state


class hooks:
    """Extension points on the dispatch path (autocast, tracers, profiler). None means off."""
    autocast = None
    tracer = None
    profiler = None     # profiler(opdef, args, kwargs, run) times run(opdef, args, kwargs)
    # transform(opdef, args, kwargs, run): vmap's batching and forward AD's tangents (see
    # autograd/forward_ad.py), before the profiler; its ``inplace`` sees in-place calls
    transform = None
    # override(opdef, args, kwargs, run): __torch_function__ (overrides.py), before the others
    override = None


def _flatten(opdef, args, kwargs):
    """Arrays for the forward, and the tensors among the arguments (lists of tensors too)."""
    tensors, arrays = [], list(args)
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            tensors.append(a)
            arrays[i] = a._data
        elif type(a) in (list, tuple) and a and isinstance(a[0], Tensor):
            # (a list with other objects fails in the forward: a __torch_function__ may take it)
            for t in a:
                if isinstance(t, Tensor):
                    tensors.append(t)
                elif foreign_tensor(t):
                    _refuse(f"{opdef.name}(): argument {i + 1} must hold ember.Tensors, not", t)
            arrays[i] = [t._data if isinstance(t, Tensor) else t for t in a]
        elif type(a) not in _SCALARS and foreign_tensor(a):
            _refuse(f"{opdef.name}(): argument {i + 1} must be ember.Tensor, not", a)
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
            raise RuntimeError(f"{opdef.name}: Expected all tensors to be on the same device, "
                               f"but found at least two devices, {dev} and {d}!")
    return dev


# Float dtypes the fast path takes: a Python int/float operand never changes them and ops
# compute in them (float16/bfloat16 compute in float32, fp8 pins scalars: see _promote).
# float32 first: the C path scans this tuple.
_FAST_FLOATS = (_dtype.float32, _dtype.float64, _dtype.complex64, _dtype.complex128)
_SCALAR_KEEPS = frozenset(_FAST_FLOATS)
_SCALARS = (int, float)
# promote modes that leave an integer/bool operand's dtype alone when there are no scalars
# ("float" turns it into the default float; a callable mode may say either)
_INT_KEEPS = (None, "common")
_new = object.__new__
# NOTE: like torch, an operand that is no tensor, number or array makes a Python operator return
# NotImplemented, so Python raises its TypeError and `t == None` is False (_tensor_methods).
OPERANDS = (Tensor, int, float, complex, np.generic, np.ndarray)


def foreign_tensor(a):
    """Whether ``a`` is a tensor of another library speaking torch's ``__torch_function__``
    protocol (a ``torch.Tensor``). ember refuses one by name: NumPy would convert it through
    ``__array__`` where torch raises, and a Python operator's NotImplemented would hand the
    call to its ``__torch_function__``, which calls back into ember's."""
    t = type(a)
    return hasattr(t, "__torch_function__") and hasattr(t, "__dlpack__") and \
        not issubclass(t, Tensor)


def _refuse(what, a):
    raise TypeError(f"{what} {type(a).__module__}.{type(a).__qualname__}, a tensor of another "
                    f"library (convert it with ember.from_dlpack(x))")


def not_operand(self, other, op):
    """A Python operator's answer to an operand that is no tensor, number or array:
    NotImplemented (Python tries ``other``'s reflected operator, as torch does), except for
    a foreign tensor. ``op``: the OpDef or its name."""
    if foreign_tensor(other):
        _refuse(f"{getattr(op, 'name', op)}(): unsupported operands ember.Tensor and", other)
    return NotImplemented


def dispatch(opdef, args, kwargs):
    """Run ``opdef`` on ``args``/``kwargs`` (tensors, scalars, options); return Tensor(s).

    The common call (one or two cpu tensors of one dtype, a float tensor and a Python number,
    an integer tensor and a Python int in its range, or a float tensor and plain options such
    as a dim; no view, autocast or tracer) takes the fast path below, which needs no promotion
    or device resolution; options given by name are moved into their places first, and views
    take ``_view``; everything else goes through
    ``_dispatch``. When the C extension is built, ``dispatch`` is its copy of this fast path
    (``ember/_C/dispatch/_dispatch.c``), which hands every other call to this function.
    """
    if kwargs or opdef.view or hooks.autocast is not None or hooks.tracer is not None or \
            hooks.profiler is not None or hooks.transform is not None or \
            hooks.override is not None:
        if hooks.override is not None:
            return hooks.override(opdef, args, kwargs, _transformed)
        if hooks.transform is not None:
            return hooks.transform(opdef, args, kwargs, _profiled)
        if hooks.profiler is not None:
            return hooks.profiler(opdef, args, kwargs, _dispatch)
        if hooks.autocast is None and hooks.tracer is None:
            full = _positional(opdef, args, kwargs) if kwargs else args
            if opdef.view:
                out = _view(opdef, full)
                if out is not None:
                    return out
            elif full is not None:
                # options by name are options in their places: the fast path below (or
                # its C copy, the module's ``dispatch``) takes the call
                return dispatch(opdef, full, _NO_KWARGS)
            elif "out" not in kwargs and all(map(_option, kwargs.values())):
                out = _tensors(opdef, args, kwargs)     # (keyword-only options)
                if out is not None:
                    return out
        return _dispatch(opdef, args, kwargs)
    n = len(args)
    if n and type(args[0]) in (list, tuple):
        out = _tensor_list(opdef, args)
        return _dispatch(opdef, args, kwargs) if out is None else out
    if n > 1 and isinstance(args[0], Tensor) and not (
            n == 2 and (isinstance(args[1], Tensor) or type(args[1]) in _SCALARS)):
        # a tensor and options (a dim, keepdim, a dtype): the forward, as below
        a = args[0]
        if a.device is not CPU or a.dtype not in _SCALAR_KEEPS or not _plain(args):
            out = _tensors(opdef, args)
            return _dispatch(opdef, args, kwargs) if out is None else out
        dt, tensors, pos = a.dtype, (a,), AT0
        try:
            res = opdef.fwd(np, a._data, *args[1:])
        except (ValueError, IndexError, TypeError) as e:
            raise _explain(opdef, tensors, e) from None
        except SparseOperand:
            return sparse_dispatch(opdef, args, kwargs)
    elif n == 2:
        a, b = args
        if isinstance(a, Tensor):
            dt = a.dtype
            if isinstance(b, Tensor):
                if b.dtype is not dt or b.device is not CPU:
                    out = _tensors(opdef, args)     # (embedding(idx, weight)...)
                    return _dispatch(opdef, args, kwargs) if out is None else out
                tensors, pos, x, y = args, AT01, a._data, b._data
            elif type(b) in _SCALARS and (dt in _SCALAR_KEEPS or _int_keeps(dt, b)):
                tensors, pos, x, y = (a,), AT0, a._data, b
            else:
                return _dispatch(opdef, args, kwargs)
        elif type(a) in _SCALARS and isinstance(b, Tensor) and (
                b.dtype in _SCALAR_KEEPS or _int_keeps(b.dtype, a)):
            a, dt, tensors, pos, x, y = b, b.dtype, (b,), AT1, a, b._data
        else:
            return _dispatch(opdef, args, kwargs)
        if a.device is not CPU or dt in _OPMATH or (dt.category < _dtype._FLOAT and
                                                    opdef.promote not in _INT_KEEPS):
            return _dispatch(opdef, args, kwargs)
        try:
            res = opdef.fwd(np, x, y)        # the cpu backend's run(), without the hop
        except (ValueError, IndexError, TypeError) as e:
            raise _explain(opdef, tensors, e) from None
        except SparseOperand:
            return sparse_dispatch(opdef, args, kwargs)
    elif n == 1:
        a = args[0]
        if not isinstance(a, Tensor) or a.device is not CPU:
            return _dispatch(opdef, args, kwargs)
        dt, tensors, pos = a.dtype, args, AT0
        if dt in _OPMATH or dt.category < _dtype._FLOAT and opdef.promote not in _INT_KEEPS:
            return _dispatch(opdef, args, kwargs)
        try:
            res = opdef.fwd(np, a._data)
        except (ValueError, IndexError, TypeError) as e:
            raise _explain(opdef, tensors, e) from None
        except SparseOperand:
            return sparse_dispatch(opdef, args, kwargs)
    else:
        return _dispatch(opdef, args, kwargs)
    if type(res) is not np.ndarray:
        if not isinstance(res, np.generic):
            return _finish(opdef, args, kwargs, tensors, res, CPU, None)
        res = np.asarray(res)       # NumPy's 0-dim ufuncs and full reductions give scalars
    out = _new(Tensor)                   # Tensor._wrap, inlined
    out._data = res
    out.dtype = dt if res.dtype is dt.np else Tensor._dtype_of(res)
    return _graph_of_one(opdef, args, kwargs, tensors, pos, out, simple_node)


def _graph_of_one(opdef, args, kwargs, tensors, positions, out, node_of):
    """``out``, the one output of a fast or quick path's call, with its graph node where a
    tensor requires grad: ``node_of``'s (a SimpleNode: each tensor an argument of its own)
    where the op has a derivative and the output is float, else ``_record``'s."""
    if _state.grad_enabled and opdef.differentiable:
        for t in tensors:
            if t._requires_grad:
                if opdef.vjp_fn is None or opdef.nondiff_outputs or \
                        out.dtype.category < _dtype._FLOAT:
                    _record(opdef, args, kwargs, tensors, (out,))
                else:
                    out.grad_fn = node_of(opdef, args, tensors, positions, out)
                    out._requires_grad = True
                break
    return out


def _dispatch(opdef, args, kwargs, given=None):
    """The general path: keywords, lists of tensors, promotion, devices, views, hooks.
    ``given``: the result arrays, known already (selective checkpointing's cached outputs):
    the op is recorded as called, its forward not run."""
    out = kwargs.pop("out", None) if kwargs else None
    if kwargs:
        args, kwargs = _kwargs_to_positional(opdef, args, kwargs)
    tensors, arrays = _flatten(opdef, args, kwargs)
    if not tensors:
        res = _torch_function(opdef, args, kwargs)
        if res is not NotImplemented:
            return res
        if args and isinstance(args[0], (list, tuple)) and not args[0]:
            if opdef.name == "cat":
                raise ValueError("torch.cat(): expected a non-empty list of Tensors")
            if opdef.name == "stack":
                raise RuntimeError("stack expects a non-empty TensorList")
        raise TypeError(f"{opdef.name}(): expected at least one Tensor argument, got "
                        f"{', '.join(type(a).__name__ for a in args)}")
    if hooks.autocast is not None:
        args, tensors, arrays = hooks.autocast(opdef, args, tensors, arrays)
    dev = _device_of(opdef, tensors) if len(tensors) > 1 else tensors[0].device
    if dev.type != "cpu":
        for i, a in enumerate(arrays):      # cpu 0-dim tensors ride along as scalars
            if isinstance(a, np.ndarray) and a.ndim == 0 and dev.type != "meta":
                arrays[i] = a.item()
    try:
        low = None
        if given is not None:
            res = given
        else:
            if opdef.promote is not None:
                low = _promote(opdef, args, arrays, dev.type == "meta", kwargs)
            res = backend(dev).run(opdef, arrays, kwargs)
        if low is not None:
            res = _round_opmath(res, low)
    except (ValueError, IndexError, TypeError, AttributeError) as e:
        res = _torch_function(opdef, args, kwargs) if type(e) in (TypeError, AttributeError) \
            else NotImplemented
        if res is not NotImplemented:
            return res
        if type(e) is AttributeError:       # (an operand the op cannot read, no override)
            raise
        raise _explain(opdef, tensors, e) from None
    except SparseOperand:
        if out is not None:
            raise NotImplementedError(f"{opdef.name}(): out= is not supported for sparse "
                                      "tensors") from None
        return sparse_dispatch(opdef, args, kwargs)
    return _finish(opdef, args, kwargs, tensors, res, dev, out)


def _torch_function(opdef, args, kwargs):
    """A call dispatch cannot run: an operand overriding ``__torch_function__`` (not a
    tensor) may take it (ember/overrides.py); NotImplemented if none does."""
    def known(a):
        return type(a) in _SCALARS or isinstance(a, (Tensor, str)) or a is None
    if all(known(a) or isinstance(a, (list, tuple)) and all(map(known, a)) for a in args):
        return NotImplemented
    from ..overrides import _fallback
    return _fallback(opdef, args, kwargs)


def sparse_dispatch(opdef, args, kwargs):
    """A sparse tensor is among the operands (its ``_data`` refused to act as an array): run
    the op's sparse rule, or raise torch's error for an op without a sparse kernel."""
    from . import sparse    # noqa: F401  (attaches the rules; loaded with the first sparse tensor)
    dev, key, rule = None, "Sparse", opdef.sparse
    for a in _flat_tensors(args):
        if a.is_sparse and dev is None:
            dev = a.device
        elif a.layout.name != "strided" and not a.is_sparse:     # (CSR, CSC, BSR, BSC)
            dev, key, rule = a.device, "SparseCsr", sparse.sparse_compressed.rule(opdef)
            break
    if rule is None:
        raise NotImplementedError(
            f"Could not run 'aten::{opdef.name}' with arguments from the "
            f"'{key}{dev.type.upper() if dev.type != 'meta' else 'Meta'}' backend. This could "
            "be because the operator doesn't exist for this backend.") from None
    return rule(*args, **kwargs)


def _flat_tensors(args):
    for a in args:
        if isinstance(a, Tensor):
            yield a
        elif type(a) in (list, tuple):
            yield from (t for t in a if isinstance(t, Tensor))


def _finish(opdef, args, kwargs, tensors, res, dev, out):
    """Wrap the result array(s), link views to their base, record autograd, call the tracer."""
    multi = type(res) is tuple
    outs = [Tensor._wrap(r, dev) for r in res] if multi else [Tensor._wrap(res, dev)]
    if opdef.view:
        src = tensors[0]
        storage, base, view_fn = view_links(opdef, src, args[1:], kwargs)
        for i, o in enumerate(outs):
            # NOTE: reshape and flatten are views only where the strides allow, like torch's;
            # a copy gets a storage of its own.
            if opdef.view == "maybe" and dev.type != "meta" and \
                    _root(o._data) is not _root(src._data):
                continue
            o._storage, o._base = storage, base
            o._view_fn = _nth_view(view_fn, i) if multi else view_fn
            o._view_version = storage._version      # see graph.edge_of
    if _state.grad_enabled and opdef.differentiable:
        for t in tensors:
            if t._requires_grad:
                _record(opdef, args, kwargs, tensors, outs, multi)
                break
    if hooks.tracer is not None:    # (several outputs as a tuple: the op returned a tuple)
        hooks.tracer(opdef, args, kwargs, tuple(outs) if multi else outs)
    if out is not None:
        return _write_out(opdef, out, outs)
    return tuple(outs) if multi else outs[0]


def _tensors(opdef, args, kwargs=_NO_KWARGS):
    """Several cpu tensors among plain options (``linear(x, w, b)``, ``masked_fill(x, mask,
    v)``, ``where(c, x, y)``): the forward on their arrays and ``_finish``, without the general
    path's flattening and promotion. Taken where promotion has nothing to do: the tensors it
    would read (``opdef.promote_args``) share one float dtype, and the others it leaves
    alone. None for any other call."""
    promoted = opdef.promote_args if opdef.promote is not None else ()
    dt, tensors, arrays, positions, one = None, [], list(args), [], not kwargs
    for i, a in enumerate(args):
        if isinstance(a, Tensor):       # (Parameters too: linear's weight and bias)
            if a.device is not CPU or a.dtype in _OPMATH:
                return None
            if i in promoted:
                if dt is not None and a.dtype is not dt:
                    return None
                dt = a.dtype
            tensors.append(a)
            arrays[i] = a._data
            positions.append((i, None))
        elif type(a) in (list, tuple) and a and not promoted and all(
                isinstance(t, Tensor) and t.device is CPU for t in a):
            tensors += a        # (index_put's indices: recorded by _finish, as the general path)
            arrays[i], one = [t._data for t in a], False
        elif not _option(a) and not (type(a) is np.ndarray and not promoted):
            return None         # (an index array, as x[idx] passes it, where nothing promotes)
    if dt is not None and dt not in _SCALAR_KEEPS:
        return None
    return _run(opdef, args, arrays, tensors, tuple(positions) if one else None, kwargs)


def _run(opdef, args, arrays, tensors, positions=None, kwargs=_NO_KWARGS):
    """The forward on ``arrays`` (``args`` with the tensors' arrays in their places), its
    errors in torch's words, and ``_finish``: the quick paths' common tail. With the tensors'
    ``positions`` (each an argument of its own), one output gets the fast path's node."""
    try:
        res = opdef.fwd(np, *arrays, **kwargs)
    except (ValueError, IndexError, TypeError) as e:
        raise _explain(opdef, tensors, e) from None
    except SparseOperand:
        return sparse_dispatch(opdef, args, kwargs)
    if positions is not None and type(res) is np.ndarray:
        return _graph_of_one(opdef, args, _NO_KWARGS, tensors, positions, Tensor._wrap(res),
                             _quick_node)
    return _finish(opdef, args, kwargs, tensors, res, CPU, None)


def _tensor_list(opdef, args):
    """A list of cpu tensors of one float dtype first, plain options after it (``cat``,
    ``stack``): the forward on their arrays and ``_finish``, without the general path's
    flattening and promotion (nothing to promote). None for any other call."""
    ts = args[0]
    dt = ts[0].dtype if ts and isinstance(ts[0], Tensor) else None
    if dt not in _SCALAR_KEEPS or not _plain(args):
        return None
    for t in ts:
        if not isinstance(t, Tensor) or t.dtype is not dt or t.device is not CPU:
            return None
    return _run(opdef, args, ([t._data for t in ts], *args[1:]), list(ts))


def _positional(opdef, args, kwargs):
    """``args`` with the keyword arguments moved into their places (defaults filling the
    gaps), or None where that is not plain (``out=``, an unknown or keyword-only name, an op
    with ``*args`` or ``**kwargs``)."""
    places = _PLACES.get(opdef)
    if places is None:
        places = _PLACES[opdef] = _places(opdef)
    n, last = len(args), -1
    for name in kwargs:
        i = places.get(name, -1)
        if i < n:
            return None             # (unknown, or given twice: the general path raises)
        last = i if i > last else last
    full = list(args) + [_MISSING] * (last + 1 - n)
    for name, value in kwargs.items():
        full[places[name]] = value
    for i in range(n, last):
        if full[i] is _MISSING:
            name = opdef.params[i]
            if name not in opdef.defaults:
                return None
            full[i] = opdef.defaults[name]
    return tuple(full)


def _places(opdef):
    """``{name: index}`` of the parameters of ``opdef``'s forward that may come by position
    (after ``xp``); empty for a forward with ``*args`` or ``**kwargs``."""
    code = getattr(opdef.fwd, "__code__", None)
    if code is None or code.co_flags & 12:          # (CO_VARARGS | CO_VARKEYWORDS)
        return {}
    return {name: i for i, name in enumerate(opdef.params[:code.co_argcount - 1])}


_PLACES = {}


_MISSING = object()
_PLAIN = frozenset((type(None), bool, int, float, str, _dtype.dtype))


def _plain(args):
    """Whether ``args[1:]`` are all options the quick paths pass as they are."""
    for a in args[1:]:
        if not _option(a):
            return False
    return True


def _option(a):
    """Whether ``a`` is an option the quick paths pass as it is: None, a bool, a Python int or
    float, a string, an ember dtype, a tuple or list of ints (a complex or NumPy scalar, an
    array or a tensor takes the general path: promotion may read it)."""
    t = type(a)
    if t in _PLAIN:
        return True
    if t is not tuple and t is not list:
        return False
    for v in a:
        if type(v) is not int:
            return False
    return True


def _view(opdef, args):
    """A view op's common call (one plain cpu tensor first, options after it, no hooks): the
    view(s) and graph node ``_finish`` makes, without the general path's flattening and checks,
    which cost several times a view itself. None for any other call, or one the op refuses:
    the general path raises its error."""
    src = args[0] if args else None
    if not isinstance(src, Tensor) or src.device is not CPU:
        return None
    rest = arrays = args[1:]
    for a in rest:      # (a cpu tensor no gradient reaches is read as its array: slice_inverse)
        if isinstance(a, Tensor):
            if a.device is not CPU or a._requires_grad or opdef.promote is not None:
                return None
            arrays = [b._data if isinstance(b, Tensor) else b for b in rest]
    try:
        res = opdef.fwd(np, src._data, *arrays)
    except (ValueError, IndexError, TypeError, RuntimeError):
        return None
    return _view_outputs(opdef, args, src, rest, res)


def _view_outputs(opdef, args, src, rest, res):
    """The rest of ``_view`` once the forward gave ``res`` (where the C path hands over a
    call whose outputs are several)."""
    multi = type(res) is tuple
    if multi:
        outs = [Tensor._wrap(r) for r in res]
    elif type(res) is np.ndarray:
        outs = [_new(Tensor)]
        outs[0]._data, outs[0].dtype = res, src.dtype if res.dtype is src.dtype.np else \
            Tensor._dtype_of(res)
    else:
        return None
    if opdef.view != "maybe" or _root(res) is _root(src._data):   # (see _finish)
        storage, base, view_fn = view_links(opdef, src, rest, _NO_KWARGS)
        for i, o in enumerate(outs):
            o._storage, o._base, o._view_version = storage, base, storage._version
            o._view_fn = _nth_view(view_fn, i) if multi else view_fn
    if not (src._requires_grad and _state.grad_enabled and opdef.differentiable):
        return tuple(outs) if multi else outs[0]        # (most views: no call below)
    if not multi:
        return _graph_of_one(opdef, args, _NO_KWARGS, (src,), AT0, outs[0], _quick_node)
    _record(opdef, args, _NO_KWARGS, [src], outs, True)
    return tuple(outs)


def _transformed(opdef, args, kwargs):
    """The rest of the dispatch after the override hook: the transform's, then the profiler's."""
    if hooks.transform is not None:
        return hooks.transform(opdef, args, kwargs, _profiled)
    return _profiled(opdef, args, kwargs)


def _profiled(opdef, args, kwargs):
    """The rest of the dispatch after the transform hook: the profiler's, if one records."""
    if hooks.profiler is not None:
        return hooks.profiler(opdef, args, kwargs, _dispatch)
    return _dispatch(opdef, args, kwargs)


def quick_view(opdef, src, *rest):
    """``opdef(src, *rest)`` for a view op without the hop through the op's ``__call__``
    (each full sum's backward expands its gradient this way)."""
    if hooks.autocast is None and hooks.tracer is None and hooks.profiler is None and \
            hooks.transform is None and hooks.override is None:
        out = _view(opdef, (src,) + rest)
        if out is not None:
            return out
    return dispatch(opdef, (src,) + rest, {})


def view_links(opdef, src, rest, kwargs):
    """(storage, base, view_fn) for a view of ``src`` made by ``opdef(src, *rest, **kwargs)``:
    the view shares ``src``'s storage, and ``view_fn`` redoes it from the base."""
    storage, base = src._get_storage(), src._base if src._base is not None else src
    return storage, base, view_function(opdef, tuple(rest), kwargs, src._view_fn)


def view_function(opdef, rest, kwargs, parent_fn):
    """``b -> opdef(parent_fn(b), *rest, **kwargs)`` (``b`` itself where ``parent_fn`` is None),
    which inherits ``parent_fn``'s ``multi_output`` (a view of such a view). Its C copy (a
    callable object, ``_C.view_function``) replaces it when built."""
    view_fn = (lambda b: opdef(b, *rest, **kwargs)) if parent_fn is None else \
        (lambda b: opdef(parent_fn(b), *rest, **kwargs))
    if getattr(parent_fn, "multi_output", None) is not None:
        view_fn.multi_output = parent_fn.multi_output
    return view_fn


def _nth_view(view_fn, i):
    """The view function of output ``i`` of a view op with several (unbind, split): torch
    refuses in-place writes into those that need grad (see dispatch_inplace)."""
    def nth(b):
        return view_fn(b)[i]
    nth.multi_output = i
    return nth


def _record(opdef, args, kwargs, tensors, outs, multi=False):
    if len(outs) == 1:
        diff = () if outs[0].dtype.category < _dtype._FLOAT or 0 in opdef.nondiff_outputs else (0,)
    else:
        diff = [i for i, o in enumerate(outs) if o.dtype.category >= _dtype._FLOAT and
                i not in opdef.nondiff_outputs]
    if not diff:
        return
    if opdef.vjp_fn is None:
        node = NotImplementedNode(opdef, tensors, outs)
    else:
        node = OpNode(opdef, args, kwargs, tensors, outs)
        if multi:           # (the class default is False: no instance write on the common call)
            node.multi = True
    for i in diff:
        o = outs[i]
        o.grad_fn, o._output_nr, o._requires_grad = node, i, True


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


def dispatch_inplace(opdef, self, args, kwargs, self_at=0):
    """``self.<op>_(*args)``: compute ``op(self, *args)`` (``self`` inserted at ``self_at`` in
    ``args``: polygamma takes it second) and write it into ``self``.

    Checks dtype and shape before anything is written, so a failing call leaves ``self`` as it
    was; then bumps the version counter and rebases ``self``'s autograd history.
    """
    for hook in (hooks.override, hooks.transform):
        # __torch_function__ overrides (overrides.py); then vmap and forward AD
        # (autograd/forward_ad.py): BatchedTensor and dual operands
        if hook is not None and hasattr(hook, "inplace"):
            out = hook.inplace(opdef, self, args, kwargs, self_at)
            if out is not NotImplemented:
                return out
    if self._requires_grad and self.grad_fn is None and _state.grad_enabled:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    base = self._base
    if base is not None and base._requires_grad and base.grad_fn is None and _state.grad_enabled:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                           "in-place operation.")
    if base is not None and self._requires_grad and _state.grad_enabled and \
            getattr(self._view_fn, "multi_output", None) is not None:
        made_by = self.grad_fn.name().rsplit("Backward", 1)[0]
        raise RuntimeError(f"Output {self._output_nr} of {made_by} is a view and is "
                           f"being modified inplace. This view is the output of a function that "
                           f"returns multiple views. Such functions do not allow the output "
                           f"views to be modified inplace. You should replace the inplace "
                           f"operation by an out-of-place one.")
    if base is not None and 0 in self._data.strides and not opdef.writes_overlap and \
            self.device.type != "meta":
        check_no_overlap(opdef.name + "_", self._data)
    src = self
    if _state.grad_enabled and 0 in opdef.save and (self._requires_grad or any(
            isinstance(a, Tensor) and a._requires_grad for a in args)):
        edge_of(self)                   # refresh a stale view's history before copying it
        src = self._alias_copy()        # backward needs the value from before the write
    cast, hooks.autocast = hooks.autocast, None     # NOTE: autocast leaves in-place ops alone,
    try:                                            # as torch's does
        r = dispatch(opdef, (src,) + tuple(args) if not self_at else
                     tuple(args[:self_at]) + (src,) + tuple(args[self_at:]), kwargs)
    finally:
        hooks.autocast = cast
    if not can_cast(r.dtype, self.dtype):
        names = _dtype._SCALAR_NAMES
        raise RuntimeError(f"{opdef.name}_: result type {names[r.dtype.name]} can't be cast to "
                           f"the desired output type {names[self.dtype.name]}")
    if tuple(r.shape) != tuple(self.shape):
        raise RuntimeError(f"{opdef.name}_: output with shape {list(self.shape)} doesn't match "
                           f"the broadcast shape {list(r.shape)}")
    return self._assign(r, name=opdef.name)


def check_no_overlap(name, arr):
    """Refuse an in-place write into an array where elements share memory (an expand)."""
    if any(st == 0 and n > 1 for st, n in zip(arr.strides, arr.shape)):
        raise RuntimeError(f"{name}: unsupported operation: more than one element of the "
                           "written-to tensor refers to a single memory location. Please clone() "
                           "the tensor before performing the operation.")


def rebase_history(self, r):
    """After writing ``r`` into ``self`` in place, make ``self`` (and its base) take ``r``'s
    graph."""
    if r.grad_fn is None:
        return
    base = self._base
    if base is not None and self._view_fn is not None:
        node = CopySlices(base, self._view_fn, (r.grad_fn, r._output_nr), _meta_of(self))
        move_retain_grad(base, node, 0)
        base.grad_fn, base._output_nr, base._requires_grad = node, 0, True
        self._view_version = self._version
    move_retain_grad(self, r.grad_fn, r._output_nr)
    self.grad_fn, self._output_nr, self._requires_grad = r.grad_fn, r._output_nr, True


def _meta_of(t):
    from ..autograd.graph import TensorMeta
    return TensorMeta(t)


def _c_dispatch():
    """The C fast path (``ember/_C/dispatch/_dispatch.c``) set up with this module's objects, or None
    when it is not built or ``EMBER_NO_C=1`` is set (``_tensor._cext``: Tensor's fields are
    that module's TensorBase exactly when this path runs). Importing an extension module
    costs no more than this file's own import (no ctypes, no library search)."""
    c = _cext
    if c is None:
        return None
    from ..autograd import graph
    c.init({"Tensor": Tensor, "CPU": CPU, "np": np, "ndarray": np.ndarray,
            "generic": np.generic, "asarray": np.asarray, "scalar_keeps": _FAST_FLOATS,
            "grad_state": _state, "hooks": hooks, "dispatch": py_dispatch, "finish": _finish,
            "record": _record, "simple_node": simple_node, "explain": _explain,
            "SparseOperand": SparseOperand, "sparse_dispatch": sparse_dispatch, "AT0": AT0,
            "AT1": AT1, "AT01": AT01, "dtype_of": Tensor._dtype_of, "operands": OPERANDS,
            "not_operand": not_operand,
            "FLOAT": _dtype._FLOAT, "dtype": _dtype.dtype, "SimpleNode": graph.SimpleNode,
            "saved_hooks": graph._saved_hooks, "anomaly": graph.anomaly, "seq": graph._seq,
            "TensorMeta": graph.TensorMeta, "no_kwargs": graph._NO_KWARGS,
            "no_edge": graph._NO_EDGE, "edge_of": edge_of, "UntypedStorage": UntypedStorage,
            "view_outputs": _view_outputs, "root": _root, "float16": _dtype.float16,
            "bfloat16": _dtype.bfloat16, "dispatch_inplace": py_dispatch_inplace,
            "int_bounds": _INT_BOUNDS, "positional": _positional, "places": _PLACES,
            "tensor_list": _tensor_list,
            **NUMPY_ERRSTATE})
    from ..autograd import engine
    c.init_engine({"AccumulateGrad": graph.AccumulateGrad, "apply": engine._apply,
                   "run_tensor_hooks": engine._run_tensor_hooks, "accumulate": engine._accumulate,
                   "sum_to": engine._sum_to, "graph": graph})
    return c


py_dispatch = dispatch          # the reference, and where the C path sends what it declines
py_dispatch_inplace = dispatch_inplace          # likewise
_C = _c_dispatch()
_quick_node = simple_node       # the quick paths' node maker (below: its C copy, when built)
py_view_function = view_function
if _C is not None:
    dispatch = _C.dispatch
    dispatch_inplace = _C.dispatch_inplace
    _quick_node = _C.simple_node
    view_function = _C.view_function


@contextlib.contextmanager
def python_reference():
    """Inside the block dispatch, graph recording, view functions and the backward loop run
    their Python reference, as with ``EMBER_NO_C=1``, though the C extension is built (Tensor's
    fields stay its slots). One process can so run a call both ways:
    tests/test_dispatch_equivalence.py compares them on every registry sample.

    Example:
        >>> import ember
        >>> from ember._ops.dispatch import python_reference
        >>> x = ember.tensor([1.0, 2.0], requires_grad=True)
        >>> with python_reference():
        ...     (x * x).sum().backward()
        >>> x.grad
        tensor([2., 4.])
    """
    global _C, _quick_node, view_function
    c = _C
    if c is None:               # not built, EMBER_NO_C=1, or already inside such a block
        yield
        return
    saved, was = (_quick_node, view_function), c.fast_path(False)
    _C, _quick_node, view_function = None, simple_node, py_view_function
    try:
        yield
    finally:
        c.fast_path(was)
        _C, (_quick_node, view_function) = c, saved
