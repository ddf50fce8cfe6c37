"""Reading, the pickle part: the weights-only allowlist, torch's rebuild functions as ember's,
and the unpickler mapping torch's global names to them."""
import _codecs
import _compat_pickle
import collections
import contextlib
import contextvars
import pickle

from .. import _dtype
from .._device import device as _device
from .._ops.sparse import sparse_coo_tensor
from .._ops.sparse_compressed import sparse_compressed_tensor
from .._sparse import LAYOUTS, sparse_bsc, sparse_bsr, sparse_coo, sparse_csc, sparse_csr
from .._tensor import Size, Tensor
from ._save import _STORAGE_NAMES

# ---- the weights-only allowlist -----------------------------------------------------------------
_user_globals = {}


def _qualname(obj):
    return f"{obj.__module__}.{obj.__qualname__}"


def add_safe_globals(safe_globals):
    """Allow ``ember.load(weights_only=True)`` to load these classes and functions.

    Args:
        safe_globals (list): objects, or ``(object, "module.name")`` pairs to allow them under
            the name the pickle uses.

    Example:
        >>> import collections, ember
        >>> Point = collections.namedtuple("Point", "x y")
        >>> ember.serialization.add_safe_globals([Point])
        >>> Point in ember.serialization.get_safe_globals()
        True
        >>> ember.serialization.clear_safe_globals()
    """
    for g in safe_globals:
        obj, name = g if isinstance(g, tuple) else (g, _qualname(g))
        _user_globals[name] = obj


def get_safe_globals():
    """The objects added with :func:`add_safe_globals`."""
    return list(_user_globals.values())


def clear_safe_globals():
    """Forget every object added with :func:`add_safe_globals`."""
    _user_globals.clear()


@contextlib.contextmanager
def safe_globals(safe_globals):
    """Context manager: :func:`add_safe_globals` for the ``with`` block only.

    Example:
        >>> import collections, ember
        >>> Point = collections.namedtuple("Point", "x y")
        >>> with ember.serialization.safe_globals([Point]):
        ...     len(ember.serialization.get_safe_globals())
        1
        >>> len(ember.serialization.get_safe_globals())
        0
    """
    saved = dict(_user_globals)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _user_globals.clear()
        _user_globals.update(saved)


def _refused(what):
    return pickle.UnpicklingError(
        "Weights only load failed. Re-running `ember.load` with `weights_only` set to `False` "
        "will likely succeed, but it can result in arbitrary code execution. Do it only if you "
        f"got the file from a trusted source.\n\n{what}\n\nCheck the documentation of torch.load"
        " to learn more about types accepted by default with weights_only "
        "https://pytorch.org/docs/stable/generated/torch.load.html.")


# ---- reading: rebuilding tensors ----------------------------------------------------------------
class _StorageType:
    """What ``torch.FloatStorage`` and friends unpickle to: the dtype of a saved storage
    (None for an UntypedStorage)."""

    def __init__(self, dtype):
        self.dtype = dtype


_loader = contextvars.ContextVar("ember_serialization_loader", default=None)


def _parameter_class():
    try:
        from ..nn import Parameter
    except ImportError:
        return None
    return Parameter


def _rebuild_tensor(storage, storage_offset, size, stride):
    return storage._tensor(storage.dtype, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       metadata=None):
    t = _rebuild_tensor(storage, storage_offset, size, stride)
    return t.requires_grad_(True) if requires_grad else t


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       dtype, metadata=None):
    t = storage._tensor(dtype, storage_offset, size, stride)
    return t.requires_grad_(True) if requires_grad else t


def _rebuild_parameter(data, requires_grad, backward_hooks):
    cls = _parameter_class()
    p = cls(data, requires_grad) if cls is not None else data.requires_grad_(requires_grad)
    loader = _loader.get()
    if loader is not None:
        loader.replaced(data, p)
    return p


def _set_state(obj, state):
    # torch's state is a dict of attributes, or (dict, slots); ember keeps its own internals.
    for part in state if isinstance(state, tuple) else (state,):
        for k, v in (part or {}).items():
            if not hasattr(Tensor, k) and k not in ("_data", "dtype"):
                setattr(obj, k, v)
    return obj


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    return _set_state(_rebuild_parameter(data, requires_grad, backward_hooks), state)


def _rebuild_from_type_v2(func, new_type, args, state):
    t = func(*args)
    if hasattr(new_type, "_is_param") and not isinstance(t, new_type):
        t = new_type(t, t.requires_grad)
    return _set_state(t, state)


def _get_layout(name):
    layouts = {repr(x): x for x in LAYOUTS.values()}
    if name not in layouts:
        raise NotImplementedError(f"layout {name} is not supported")
    return layouts[name]


def _rebuild_sparse_tensor(layout, data):
    if layout in (sparse_csr, sparse_csc, sparse_bsr, sparse_bsc):
        # NOTE: torch defers the checks of a loaded tensor's indices; ember checks them at once
        # (a file's bad indices would otherwise fail far from the load)
        return sparse_compressed_tensor(*data, layout=layout, check_invariants=True)
    if layout is not sparse_coo:
        raise NotImplementedError(f"rebuilding sparse tensor for layout {layout}")
    indices, values, size = data[:3]
    return sparse_coo_tensor(indices, values, size, is_coalesced=data[3] if len(data) > 3 else None)


def _rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad):
    from .._ops.creation import empty
    return empty(size, dtype=dtype, device="meta", requires_grad=requires_grad)


# ---- reading: the unpickler ---------------------------------------------------------------------
def _torch_names():
    """torch's global names and the ember objects they load as, weights-only or not."""
    ut = _StorageType(None)
    names = {("collections", "OrderedDict"): collections.OrderedDict,
             ("collections", "Counter"): collections.Counter,
             ("torch", "device"): _device, ("torch", "Size"): Size, ("torch", "Tensor"): Tensor,
             ("torch.storage", "UntypedStorage"): ut, ("torch", "UntypedStorage"): ut,
             ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
             ("builtins", "set"): set, ("builtins", "frozenset"): frozenset,
             ("builtins", "bytearray"): bytearray, ("builtins", "complex"): complex,
             ("builtins", "slice"): slice, ("_codecs", "encode"): _codecs.encode}
    for fn in (_rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3, _rebuild_parameter,
               _rebuild_parameter_with_state, _rebuild_meta_tensor_no_storage,
               _rebuild_sparse_tensor):
        names["torch._utils", fn.__name__] = fn
    names["torch.serialization", "_get_layout"] = _get_layout
    for dt in _dtype.ALL:
        names["torch", dt.name] = dt
        if dt.name in _STORAGE_NAMES:
            names["torch", _STORAGE_NAMES[dt.name]] = _StorageType(dt)
    names.update({("torch", alias): dt for alias, dt in _dtype.ALIASES.items()})
    return names


_TORCH_NAMES = _torch_names()


class _Unpickler(pickle._Unpickler):
    """Unpickler mapping torch's names to ember; with ``weights_only`` it loads nothing but
    tensors, containers, primitives and the allowlist.

    NOTE: the pure-Python unpickler, so BUILD (which sets attributes on an object) can be
    limited to containers and allowlisted types; otherwise a pickle could rewrite attributes
    of ember's own classes and dtypes. Only metadata goes through it.
    """

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, persistent_load, weights_only, **kwargs):
        kwargs.setdefault("encoding", "utf-8")
        super().__init__(file, **kwargs)
        self._persistent_load, self.weights_only = persistent_load, weights_only

    def persistent_load(self, pid):
        if self._persistent_load is None:        # the header pickles of a legacy file
            raise pickle.UnpicklingError("unsupported persistent id encountered")
        return self._persistent_load(pid)

    def find_class(self, module, name):
        if self.proto < 3 and self.fix_imports:     # protocol 2 spells builtins __builtin__
            module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        obj = _TORCH_NAMES.get((module, name))
        if obj is not None:
            return obj
        if (module, name) == ("torch.nn.parameter", "Parameter"):
            return _parameter_class() or Tensor
        full = f"{module}.{name}"
        if full in _user_globals:
            return _user_globals[full]
        if self.weights_only:
            raise _refused(f"Unsupported global: GLOBAL {full} was not an allowed global by "
                           f"default. Please use `ember.serialization.add_safe_globals([{name}])`"
                           f" or the `ember.serialization.safe_globals([{name}])` context "
                           "manager to allowlist this global if you trust this class/function.")
        if module == "torch" or module.startswith("torch."):
            module = "ember" + module[5:]         # torch.nn.modules.linear -> ember.nn....
        return super().find_class(module, name)

    def _load_build(self):
        inst = self.stack[-1]
        allowed = tuple(g for g in _user_globals.values() if isinstance(g, type))
        if self.weights_only and (isinstance(inst, type) or not isinstance(inst, (dict, *allowed))):
            raise _refused("Can only build dict, OrderedDict or types allowlisted via "
                           f"`add_safe_globals`, but got {type(inst)}")
        pickle._Unpickler.load_build(self)

    dispatch[pickle.BUILD[0]] = _load_build
