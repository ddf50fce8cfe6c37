"""Saving and loading: PyTorch's ``.pt`` formats (zip and pre-1.6 legacy) and safetensors.

``ember.save`` writes the zip archive ``torch.save`` writes, so PyTorch reads ember's files with
``torch.load(f, weights_only=True)``; ``ember.load`` reads files ``torch.save`` wrote. ember never
imports torch: torch's global names (``torch._utils._rebuild_tensor_v2``, ``torch.FloatStorage``,
``torch.float16``...) are written and read as plain names and mapped to ember's own objects.

A zip archive holds (records stored uncompressed, data 64-byte aligned so it can be mapped)::

    archive/data.pkl              the object, pickle protocol 2; each tensor is a rebuild call
                                  whose storage is the persistent id
                                  ('storage', storage_type, key, location, numel)
    archive/.format_version  archive/.storage_alignment  archive/byteorder
    archive/data/<key>            one storage's raw bytes, little-endian, written once however
                                  many views share it
    archive/version               "3"
    archive/.data/serialization_id

See https://pytorch.org/docs/stable/notes/serialization.html for PyTorch's side.
"""
import _codecs
import _compat_pickle
import collections
import contextlib
import contextvars
import functools
import io
import json
import mmap as _mmap
import os
import pickle
import struct
import sys
import threading
import uuid
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import _dtype
from ._backends import backend
from ._device import CPU, device as _device, to_device
from ._ops.sparse import sparse_coo_tensor
from ._sparse import layout as _layout, sparse_coo, strided
from ._storage import UntypedStorage
from ._tensor import Size, Tensor

__all__ = ["save", "load", "add_safe_globals", "clear_safe_globals", "get_safe_globals",
           "safe_globals", "save_safetensors", "load_safetensors"]

_ALIGN = 64
_LEGACY_MAGIC, _LEGACY_PROTOCOL = 0x1950A86A20F9469CFC6C, 1001
# torch's typed-storage class per dtype. A dtype without one (float8) is saved, as torch does,
# as an UntypedStorage rebuilt by ``_rebuild_tensor_v3``, which also names the dtype.
_STORAGE_NAMES = {"float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
                  "bfloat16": "BFloat16Storage", "int64": "LongStorage", "int32": "IntStorage",
                  "int16": "ShortStorage", "int8": "CharStorage", "uint8": "ByteStorage",
                  "bool": "BoolStorage", "complex64": "ComplexFloatStorage",
                  "complex128": "ComplexDoubleStorage"}


# ---- writing ----------------------------------------------------------------------------------
class _Global:
    """A torch global, written into the pickle by name only (ember never resolves it)."""

    __slots__ = ("module", "name")

    def __call__(self, *args):      # pickle insists that a reduce function be callable
        raise TypeError(f"{self.module}.{self.name} only names a torch function in a pickle")


@functools.lru_cache(maxsize=None)
def _g(module, name):
    g = _Global()
    g.module, g.name = module, name
    return g


class _StorageRef:
    """Stands for a storage in the pickle; the pickler writes its persistent id."""

    __slots__ = ("pid",)

    def __init__(self, pid):
        self.pid = pid


def _is_parameter(t):
    # NOTE: duck-typed so this works before ember.nn exists and without importing it.
    return type(t) is not Tensor and (hasattr(type(t), "_is_param") or
                                      type(t).__name__ == "Parameter")


class _Storages:
    """The storages met while pickling: one key each, so views are written once and load
    back sharing."""

    def __init__(self, legacy=False):
        self.records = {}       # key -> (host array holding the storage's bytes, numel)
        self._seen = {}         # id(UntypedStorage) -> (ref, dtype, storage)
        self._legacy = legacy   # legacy ids end with a (always empty) storage view

    def reduce(self, t):
        """torch's reduction of tensor ``t``: (rebuild function, args)."""
        hooks = collections.OrderedDict()    # torch always writes empty backward hooks
        if _is_parameter(t):
            return _g("torch._utils", "_rebuild_parameter"), (t.detach(), t.requires_grad, hooks)
        if t.is_sparse:
            parts = (t._indices(), t._values(), Size(t.shape), t.is_coalesced())
            return _g("torch._utils", "_rebuild_sparse_tensor"), (t.layout, parts)
        if t.device.type == "meta":
            return (_g("torch._utils", "_rebuild_meta_tensor_no_storage"),
                    (t.dtype, tuple(t.shape), t.stride(), t.requires_grad))
        ref, offset, stride = self._place(t)
        args = (ref, offset, tuple(t.shape), stride, t.requires_grad, hooks)
        if t.dtype.name in _STORAGE_NAMES:
            return _g("torch._utils", "_rebuild_tensor_v2"), args
        return _g("torch._utils", "_rebuild_tensor_v3"), args + (t.dtype,)

    def _place(self, t):
        """(storage ref, offset, strides) of ``t`` within its storage, adding the storage."""
        st, item = t._get_storage(), t.dtype.itemsize
        offset, rem = divmod(t.data_ptr() - st.data_ptr(), item)
        stride, root = t.stride(), st._array
        if rem or min(stride, default=0) < 0 or not root.flags.c_contiguous or root.nbytes % item:
            # NOTE: what torch cannot express as (storage, offset, strides) over one flat block
            # (a numpy root that is itself strided, negative strides) is written as a
            # contiguous copy of this tensor alone.
            host = np.ascontiguousarray(backend(t.device).to_host(t._data))
            return self._add(host, t), 0, _contiguous_strides(t.shape)
        seen = self._seen.get(id(st))
        if seen is None:            # keeping ``st`` alive keeps its id unique until we finish
            seen = self._seen[id(st)] = (self._add(backend(t.device).to_host(root), t),
                                         t.dtype, st)
        elif seen[1] is not t.dtype:
            raise RuntimeError("Cannot save multiple tensors or storages that view the same "
                               "data as different types")
        return seen[0], offset, stride

    def _add(self, host, t):
        key = str(len(self.records))
        name = _STORAGE_NAMES.get(t.dtype.name)
        stype = _g("torch", name) if name else _g("torch.storage", "UntypedStorage")
        numel = host.nbytes // (t.dtype.itemsize if name else 1)
        self.records[key] = (np.ascontiguousarray(host).reshape(-1).view(np.uint8), numel)
        pid = ("storage", stype, key, str(t.device), numel)
        return _StorageRef(pid + (None,) if self._legacy else pid)


def _contiguous_strides(shape):
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(out))


class _Pickler(pickle._Pickler):
    """Protocol-2 pickler writing tensors, dtypes, devices and sizes under torch's names.

    NOTE: the pure-Python pickler, because the C one only writes a global it can import, and
    writing ``torch._utils._rebuild_tensor_v2`` must not import torch. Only metadata passes
    through it; storage bytes go straight into the archive.
    """

    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, file, storages, protocol):
        super().__init__(file, protocol=protocol)
        self.storages = storages

    def persistent_id(self, obj):
        return obj.pid if type(obj) is _StorageRef else None

    def reducer_override(self, obj):
        if isinstance(obj, Tensor):
            return self.storages.reduce(obj)
        if type(obj) is _device:
            return _g("torch", "device"), (str(obj),)
        if type(obj) is Size:
            return _g("torch", "Size"), (tuple(obj),)
        if type(obj) is _layout:        # as torch writes it: _get_layout("torch.sparse_coo")
            return _g("torch.serialization", "_get_layout"), (repr(obj),)
        return NotImplemented

    def _save_torch_name(self, obj):
        g = obj if type(obj) is _Global else _g("torch", obj.name)
        self.write(pickle.GLOBAL + f"{g.module}\n{g.name}\n".encode())
        self.memoize(obj)

    dispatch[_Global] = dispatch[_dtype.dtype] = _save_torch_name


def _write_record(zf, name, data, crc=None):
    """Add one uncompressed record whose data starts on a 64-byte boundary of the file.

    NOTE: the header is written with the CRC and sizes already known, then the data with one
    ``write``, and the record is entered into ``zf``'s directory by hand (what zipfile's own
    writer does on close). ``zf.open(info, "w")`` would compute the CRC in the writing thread,
    chunk by chunk, and seek back to rewrite the header; this lets ``_write_archive`` compute
    the next record's CRC in another thread while this one is written. Returns the record's
    ZipInfo and whether its header is zip64, for ``_write_archive`` to rewrite the header
    when the CRC comes later.
    """
    buf = memoryview(data).cast("B")
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.file_size = info.compress_size = n = buf.nbytes
    info.CRC = zlib.crc32(buf) if crc is None else crc
    zip64 = n * 1.05 > zipfile.ZIP64_LIMIT          # zipfile's own rule for a zip64 header
    # NOTE: the local header (30 bytes, the name, our extra field, zip64's 20 bytes) is padded
    # through an extra field, as torch pads with its 'FB' field, so load(mmap=True) can map the
    # data with aligned arrays.
    info.header_offset = zf.fp.tell()
    start = info.header_offset + 30 + len(name.encode()) + 4 + (20 if zip64 else 0)
    pad = -start % _ALIGN
    info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
    zf.fp.write(info.FileHeader(zip64))
    zf.fp.write(buf)
    zf.filelist.append(info)
    zf.NameToInfo[name] = info
    zf.start_dir = zf.fp.tell()
    return info, zip64


def _crcs(arrays):
    """Futures (or values) of the CRC-32 of each array, computed in order in a helper thread
    (zlib releases the GIL) when there is enough data to be worth it."""
    views = [memoryview(a).cast("B") for a in arrays]
    if sum(v.nbytes for v in views) < (4 << 20):
        return [_Done(zlib.crc32(v)) for v in views], None
    pool = ThreadPoolExecutor(1, thread_name_prefix="ember-save-crc")
    return [pool.submit(zlib.crc32, v) for v in views], pool


class _Done:
    def __init__(self, value):
        self.value = value

    def done(self):
        return True

    def result(self):
        return self.value


def _write_archive(fileobj, pkl, records, byteorder=True):
    head = [("data.pkl", pkl), (".format_version", b"1"), (".storage_alignment", b"64")]
    head += [("byteorder", sys.byteorder.encode())] if byteorder else []
    tail = [("version", b"3\n"), (".data/serialization_id", f"{uuid.uuid4().int:040d}".encode())]
    data = [(f"data/{k}", a) for k, (a, _) in records.items()]
    crcs, pool = _crcs([a for _, a in data])
    seekable = callable(getattr(fileobj, "seekable", None)) and fileobj.seekable()
    try:
        with zipfile.ZipFile(fileobj, "w", zipfile.ZIP_STORED) as zf:
            for name, payload in head:
                _write_record(zf, "archive/" + name, payload)
            # A record whose CRC isn't ready yet is written at once with a placeholder and
            # its header rewritten at the end, so writing never waits on the CRC thread.
            later = []
            for (name, payload), crc in zip(data, crcs):
                wait = not (seekable and not crc.done())
                info, zip64 = _write_record(zf, "archive/" + name, payload,
                                            crc.result() if wait else 0)
                if not wait:
                    later.append((info, zip64, crc))
            for info, zip64, crc in later:
                info.CRC = crc.result()
                zf.fp.seek(info.header_offset)
                zf.fp.write(info.FileHeader(zip64))
            if later:
                zf.fp.seek(zf.start_dir)
            for name, payload in tail:
                _write_record(zf, "archive/" + name, payload)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def _write_legacy(fh, pkl, records):
    """The pre-1.6 stream (see ``_LegacyLoader``): header pickles, the object, the storage
    keys, then each storage as its int64 element count and bytes."""
    info = {"protocol_version": _LEGACY_PROTOCOL, "little_endian": sys.byteorder == "little",
            "type_sizes": {"short": 2, "int": 4, "long": 4}}
    for header in (_LEGACY_MAGIC, _LEGACY_PROTOCOL, info):
        pickle.dump(header, fh, protocol=2)
    fh.write(pkl)
    keys = sorted(records)
    pickle.dump(keys, fh, protocol=2)
    for key in keys:
        data, numel = records[key]
        fh.write(struct.pack("<q", numel))
        fh.write(memoryview(data))


def _atomic_write(path, write):
    """Run ``write(file)`` on a temporary file next to ``path``, then rename it over ``path``:
    a save that fails part-way leaves any existing file untouched."""
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise RuntimeError(f"Parent directory {parent} does not exist.")
    tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        with open(tmp, "xb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        _replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _replace(tmp, path):
    """``os.replace(tmp, path)``, leaving the old file's pages to be freed in the background.

    NOTE: renaming over a large file frees its page cache inside the rename (~30 ms per 100 MB
    here), as ``torch.save``'s truncating open does. Holding the old file open across the
    rename and closing it in a thread moves that work off the caller's path.
    """
    old = None
    if os.name == "posix":
        with contextlib.suppress(OSError):
            old = os.open(path, os.O_RDONLY)
    try:
        os.replace(tmp, path)
    finally:
        if old is not None:
            threading.Thread(target=os.close, args=(old,), name="ember-save-release",
                             daemon=True).start()


def _is_path(f):
    return isinstance(f, (str, os.PathLike))


def save(obj, f, pickle_module=None, pickle_protocol=2, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):
    """Save ``obj`` (tensors, Parameters, state dicts, nested containers) to ``f`` in PyTorch's
    zip format; ``torch.load(f, weights_only=True)`` reads it back.

    Args:
        obj: what to save. Tensors that view one storage write it once and load back sharing.
        f: a path (``str`` or ``os.PathLike``) or a writable binary file object. A path is
            written atomically: through a temporary file renamed into place at the end.
        pickle_module: only ``None`` or the standard ``pickle`` module.
        pickle_protocol (int, optional): default 2, as torch.
        _use_new_zipfile_serialization (bool): False writes torch's pre-1.6 format instead.
        _disable_byteorder_record (bool): leave out the byteorder record, as torch does.

    Example:
        >>> import io, ember
        >>> buf = io.BytesIO()
        >>> x = ember.arange(6.0).reshape(2, 3)
        >>> ember.save({"x": x, "col": x[:, 1]}, buf)
        >>> _ = buf.seek(0)
        >>> d = ember.load(buf)
        >>> d["col"], d["col"].untyped_storage() is d["x"].untyped_storage()
        (tensor([1., 4.]), True)
    """
    if pickle_module not in (None, pickle):
        raise TypeError("ember.save: only the standard pickle module is supported")
    storages, buf = _Storages(legacy=not _use_new_zipfile_serialization), io.BytesIO()
    # Pickling first, in memory, means an unpicklable object fails before a file is touched.
    _Pickler(buf, storages, pickle_protocol).dump(obj)

    def write(fh):
        if _use_new_zipfile_serialization:
            _write_archive(fh, buf.getbuffer(), storages.records, not _disable_byteorder_record)
        else:
            _write_legacy(fh, buf.getbuffer(), storages.records)
    if _is_path(f):
        _atomic_write(f, write)
    else:
        write(f)


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
        from .nn import Parameter
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
    layouts = {repr(x): x for x in (sparse_coo, strided)}
    if name not in layouts:
        raise NotImplementedError(f"layout {name} is not supported")
    return layouts[name]


def _rebuild_sparse_tensor(layout, data):
    if layout is not sparse_coo:
        raise NotImplementedError(f"rebuilding sparse tensor for layout {layout}")
    indices, values, size = data[:3]
    return sparse_coo_tensor(indices, values, size,
                             is_coalesced=data[3] if len(data) > 3 else None)


def _rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad):
    from ._ops.creation import empty
    return empty(size, dtype=dtype, device="meta", requires_grad=requires_grad)


def _strided(root, dtype, offset, size, stride):
    """A view of the flat array ``root`` as a (size, stride, offset) tensor of ``dtype``."""
    item = dtype.itemsize
    try:
        arr = root if root.dtype == dtype.np else root.view(dtype.np)
        return np.ndarray(tuple(size), dtype.np, buffer=arr, offset=offset * item,
                          strides=tuple(s * item for s in stride))
    except (TypeError, ValueError):         # numpy's "buffer is too small" and friends
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage "
                           f"offset {offset}, and itemsize {item} are out of bounds for storage "
                           f"of size {root.nbytes}") from None


class _SavedStorage:
    """One storage of the file, read on first use and shared by every tensor viewing it."""

    def __init__(self, loader, key, dtype, location, numel):
        self.loader, self.key, self.dtype, self.location = loader, key, dtype, location
        self.numel, self.nbytes = numel, numel * (dtype.itemsize if dtype is not None else 1)
        self.root = self.storage = self.target = None

    def _materialize(self, dtype):
        if self.root is None:
            self.root = self.loader.read(self, (self.dtype or dtype).np)
            self.storage = UntypedStorage(self.root, CPU)
        return self.storage

    def _target(self, dtype):
        if self.target is None:
            r = self.loader.place(self.location, lambda: self._materialize(dtype))
            if isinstance(r, UntypedStorage):       # a map_location callable's own storage
                if r.device.type == "cpu" and r is not self.storage:
                    self.root, self.storage = r._array, r
                r = r.device
            self.target = to_device(r)
        return self.target

    def _tensor(self, dtype, offset, size, stride):
        target = self._target(dtype)
        if target.type == "meta":
            # Nothing is read for the meta device; like torch, views do not share there.
            return _rebuild_meta_tensor_no_storage(dtype, size, stride, False)
        self._materialize(dtype)
        t = Tensor._wrap(_strided(self.root, dtype, offset, size, stride))
        t._storage = self.storage
        return self.loader.moved(t, target)


def _move(t, target):
    try:
        return t.to(target)
    except Exception as e:
        if target.type != "cuda":
            raise
        raise RuntimeError("Attempting to deserialize object on a CUDA device but ember's cuda "
                           f"device is not usable ({e}). If you are running on a CPU-only "
                           "machine, please use ember.load with map_location='cpu' to map your "
                           "storages to the CPU.") from e


# ---- reading: the unpickler ---------------------------------------------------------------------
def _torch_names():
    """torch's global names and the ember objects they load as, weights-only or not."""
    ut = _StorageType(None)
    names = {("collections", "OrderedDict"): collections.OrderedDict,
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
        if self.weights_only and (isinstance(inst, type) or
                                  not isinstance(inst, (dict, *allowed))):
            raise _refused("Can only build dict, OrderedDict or types allowlisted via "
                           f"`add_safe_globals`, but got {type(inst)}")
        pickle._Unpickler.load_build(self)

    dispatch[pickle.BUILD[0]] = _load_build


def _placement(map_location):
    """map_location as a function ``(saved location, get_cpu_storage) -> device or storage``."""
    if map_location is None:
        return lambda loc, get: loc
    if isinstance(map_location, dict):
        return lambda loc, get: map_location.get(loc, loc)
    if isinstance(map_location, (str, bytes, _device)):
        dev = to_device(map_location.decode() if isinstance(map_location, bytes) else
                        map_location)
        return lambda loc, get: dev
    if callable(map_location):
        def place(loc, get):
            r = map_location(get(), loc)
            return loc if r is None else r
        return place
    raise TypeError(f"map_location should be a str, device, dict or callable, got "
                    f"{type(map_location).__name__}")


def _read_into(fh, arr, what):
    view = memoryview(arr.reshape(-1).view(np.uint8))
    got = fh.readinto(view) if hasattr(fh, "readinto") else None
    if got is None:                                 # a file object without readinto
        data = fh.read(view.nbytes)
        view[:len(data)] = data
        got = len(data)
    if got != view.nbytes:
        raise RuntimeError(f"{what}: file ended after {got} of {view.nbytes} bytes")


def _pread_into(fd, arr, offset, what, swap):
    view, got = memoryview(arr.reshape(-1).view(np.uint8)), 0
    while got < view.nbytes:
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            raise RuntimeError(f"{what}: file ended after {got} of {view.nbytes} bytes")
        got += n
    if swap:
        arr.byteswap(inplace=True)


class _Loader:
    """State of one load: the file, where storages go, storages read so far."""

    def __init__(self, fh, map_location, weights_only, pickle_load_args):
        self.fh, self.place = fh, _placement(map_location)
        self.weights_only, self.kwargs = weights_only, pickle_load_args
        self.storages = {}

    def persistent_load(self, pid):
        kind, stype, key, location, numel, *view = pid
        kind, location = _ascii(kind), _ascii(location)
        if kind != "storage":
            raise RuntimeError(f"Unknown saved id type: {kind}")
        if view and view[0] is not None:
            raise RuntimeError("ember.load: legacy storage views (files from torch < 0.4) are "
                               "not supported")
        if not isinstance(stype, _StorageType):
            raise pickle.UnpicklingError(f"ember.load: bad storage type {stype!r}")
        s = self.storages.get(key)
        if s is None:
            s = self.storages[key] = _SavedStorage(self, key, stype.dtype, location, numel)
        return s

    def unpickle(self, fh):
        token = _loader.set(self)
        try:
            return _Unpickler(fh, self.persistent_load, self.weights_only, **self.kwargs).load()
        finally:
            _loader.reset(token)

    def moved(self, t, target):
        return t if target == CPU else _move(t, target)

    def replaced(self, old, new):
        pass


def _ascii(s):
    return s.decode("ascii") if isinstance(s, bytes) else s


class _ZipLoader(_Loader):
    def __init__(self, fh, map_location, weights_only, mmap, pickle_load_args):
        super().__init__(fh, map_location, weights_only, pickle_load_args)
        self.zf = zipfile.ZipFile(fh)
        pkl = [n for n in self.zf.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if not pkl:
            raise RuntimeError("ember.load: the zip archive has no data.pkl record; is it a "
                               "file torch.save or ember.save wrote?")
        self.prefix = pkl[0][:-len("data.pkl")]
        order = self._record("byteorder")
        self.swap = order is not None and order.decode() != sys.byteorder
        self.mm = None
        if mmap:
            try:
                fileno = fh.fileno()
            except (AttributeError, OSError) as e:
                raise ValueError("f must be a file path or a real file to use mmap=True") from e
            # NOTE: a private (copy-on-write) map, torch's default: writing to a loaded tensor
            # changes memory, never the file.
            self.mm = _mmap.mmap(fileno, 0, access=_mmap.ACCESS_COPY)
        self.fd = self.pool = None
        if not mmap and map_location is None and hasattr(os, "preadv"):
            with contextlib.suppress(AttributeError, OSError, io.UnsupportedOperation):
                self.fd = fh.fileno()
        self.pending = []

    def _record(self, name):
        try:
            return self.zf.read(self.prefix + name)
        except KeyError:
            return None

    def load(self):
        with self.zf.open(self.prefix + "data.pkl") as fh:
            pkl = fh.read()
        try:
            obj = self.unpickle(io.BytesIO(pkl))
            for f in self.pending:      # every storage read aside is in place before return
                f.result()
            return obj
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)

    def read(self, storage, np_dtype):
        """The bytes of ``storage`` as a flat array that owns (or maps) them."""
        info = self.zf.getinfo(f"{self.prefix}data/{storage.key}")
        if info.file_size != storage.nbytes:
            raise RuntimeError(f"ember.load: storage {storage.key} holds {info.file_size} bytes, "
                               f"the pickle said {storage.nbytes}")
        count = info.file_size // np_dtype.itemsize
        if info.compress_type != zipfile.ZIP_STORED:
            arr = np.frombuffer(self.zf.read(info), np_dtype, count).copy()
        else:
            self.fh.seek(info.header_offset)
            name_len, extra_len = struct.unpack("<HH", self.fh.read(30)[26:30])
            start = info.header_offset + 30 + name_len + extra_len
            if self.mm is not None:
                arr = np.ndarray((count,), np_dtype, buffer=self.mm, offset=start)
            else:
                arr = np.empty(count, np_dtype)
                what = f"ember.load: storage {storage.key}"
                if self.fd is not None and storage.location == "cpu" and \
                        info.file_size >= (1 << 20):
                    # NOTE: big storages are read by two threads with pread (which releases
                    # the GIL) while unpickling goes on: copying from the page cache into
                    # fresh memory is most of a load, and it runs ~2x faster split in two.
                    # load() waits for them all; only cpu storages with no map_location
                    # (nothing looks at the bytes before then) go this way.
                    if self.pool is None:
                        self.pool = ThreadPoolExecutor(2, thread_name_prefix="ember-load")
                    self.pending.append(self.pool.submit(
                        _pread_into, self.fd, arr, start, what, self.swap))
                    return arr
                self.fh.seek(start)
                _read_into(self.fh, arr, what)
        return arr.byteswap(inplace=True) if self.swap else arr


class _LegacyLoader(_Loader):
    """A pre-1.6 file: pickles for a magic number, the protocol version and system info, the
    object, the list of storage keys, then each storage as an int64 element count and its
    bytes. The bytes follow the whole object, so storages are allocated on the cpu while
    unpickling and filled afterwards; tensors bound for another device move after that."""

    def __init__(self, *args):
        super().__init__(*args)
        self.pending = {}          # id(tensor) -> (tensor, device) to move once data is read

    def moved(self, t, target):
        if target != CPU:
            self.pending[id(t)] = (t, target)
        return t

    def replaced(self, old, new):
        if id(old) in self.pending:
            self.pending[id(new)] = (new, self.pending.pop(id(old))[1])

    def read(self, storage, np_dtype):
        return np.empty(storage.nbytes // np_dtype.itemsize, np_dtype)

    def load(self):
        def header():
            return _Unpickler(self.fh, None, True, **self.kwargs).load()
        if header() != _LEGACY_MAGIC:
            raise RuntimeError("Invalid magic number; corrupt file?")
        version = header()
        if version != _LEGACY_PROTOCOL:
            raise RuntimeError(f"Invalid protocol version: {version}")
        if not header().get("little_endian", True):
            raise RuntimeError("ember.load: big-endian legacy files are not supported")
        result = self.unpickle(self.fh)
        for key in header():
            s = self.storages[key]
            s._materialize(_dtype.uint8)           # a storage no tensor used
            (numel,) = struct.unpack("<q", self.fh.read(8))
            if numel != s.numel:
                raise RuntimeError(f"ember.load: storage {key} has {numel} elements in the file, "
                                   f"the pickle said {s.numel}")
            _read_into(self.fh, s.root, f"ember.load: storage {key}")
        for t, target in self.pending.values():
            t.data = _move(t.detach(), target)
        return result


@contextlib.contextmanager
def _open_for_read(f):
    if _is_path(f):
        with open(f, "rb") as fh:
            yield fh
    else:
        yield f


def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=False,
         **pickle_load_args):
    """Load what :func:`save` or ``torch.save`` wrote (zip or the pre-1.6 legacy format).

    Args:
        f: a path or a readable, seekable binary file object.
        map_location: where storages go: a device or its name (``"cpu"``, ``"meta"``...), a
            dict from saved locations to new ones (``{"cuda:0": "cpu"}``), or a callable
            ``(storage, location)`` returning a storage or None (keep ``location``). Default:
            the device each tensor was saved from.
        weights_only (bool, default True): load only tensors, containers, primitives, torch
            dtypes/devices/sizes and :func:`add_safe_globals`; anything else raises
            ``pickle.UnpicklingError`` without running it. ``False`` unpickles anything:
            only for files you trust.
        mmap (bool, default False): map storages from the file instead of reading them (zip
            files only); writes to the tensors stay in memory.
        pickle_load_args: passed to the unpickler (``encoding``...).

    Example:
        >>> import io, ember
        >>> buf = io.BytesIO()
        >>> ember.save([ember.ones(2), ember.float16], buf)
        >>> _ = buf.seek(0)
        >>> ember.load(buf, map_location="meta")
        [tensor(..., device='meta', size=(2,)), torch.float16]
    """
    if pickle_module is not None and weights_only:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is "
                           "specified")
    with _open_for_read(f) as fh:
        start = fh.tell()
        is_zip = fh.read(4) == b"PK\x03\x04"
        fh.seek(start)
        if is_zip:
            return _ZipLoader(fh, map_location, weights_only, mmap, pickle_load_args).load()
        if mmap:
            raise RuntimeError("mmap can only be used with files saved with "
                               "`torch.save(_use_new_zipfile_serialization=True)`, please "
                               "torch.save your checkpoint with this option in order to use "
                               "mmap.")
        return _LegacyLoader(fh, map_location, weights_only, pickle_load_args).load()


# ---- safetensors --------------------------------------------------------------------------------
_ST_NAMES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "int32": "I32",
             "int64": "I64", "float16": "F16", "bfloat16": "BF16", "float32": "F32",
             "float64": "F64", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
             "complex64": "C64"}
_ST_DTYPES = {v: _dtype._BY_NAME[k] for k, v in _ST_NAMES.items()}
_ST_MAX_HEADER = 100_000_000      # the safetensors package's own limit


def save_safetensors(tensors, path, metadata=None):
    """Write a dict of tensors to ``path`` in the safetensors format (atomically).

    The file is an 8-byte little-endian header length, a JSON header mapping each name to its
    ``dtype``, ``shape`` and ``data_offsets``, then the raw bytes. Views are written as copies.

    Args:
        tensors (dict[str, Tensor]): what to save; dtypes as in ``_ST_NAMES`` (no complex128).
        path: file path.
        metadata (dict[str, str], optional): stored under ``__metadata__``.

    Example:
        >>> import os, tempfile, ember
        >>> from ember.serialization import load_safetensors, save_safetensors
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_safetensors({"w": ember.ones(2, 2)}, os.path.join(d, "m.safetensors"))
        ...     load_safetensors(os.path.join(d, "m.safetensors"))["w"].shape
        torch.Size([2, 2])
    """
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str)
                                        for k, v in metadata.items()):
        raise TypeError("save_safetensors: metadata must be a dict of str to str")
    header, arrays, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    # Biggest elements first keeps every tensor aligned to its element size, as safetensors does.
    for name, t in sorted(tensors.items(), key=lambda kv: (-kv[1].dtype.itemsize, kv[0])):
        if not isinstance(t, Tensor):
            raise TypeError(f"save_safetensors: {name!r} is a {type(t).__name__}, not a Tensor")
        if t.dtype.name not in _ST_NAMES:
            raise TypeError(f"save_safetensors: {name!r} has dtype {t.dtype}, which the "
                            "safetensors format cannot store")
        a = np.ascontiguousarray(backend(t.device).to_host(t._data)).reshape(-1)
        header[name] = {"dtype": _ST_NAMES[t.dtype.name], "shape": list(t.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        arrays.append(a.view(np.uint8))
        offset += a.nbytes
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)        # the data then starts 8-byte aligned

    def write(fh):
        fh.write(struct.pack("<Q", len(js)) + js)
        for a in arrays:
            fh.write(memoryview(a))
    _atomic_write(path, write)


def load_safetensors(path, device="cpu"):
    """Read a safetensors file (ember's or the ``safetensors`` package's) into a dict of
    tensors.

    Args:
        path: file path.
        device (default ``"cpu"``): where the tensors go; ``"meta"`` gives shapes and dtypes.

    Example: see :func:`save_safetensors`.
    """
    dev = to_device(device)
    out = {}
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > min(_ST_MAX_HEADER, size - 8):
            raise ValueError(f"load_safetensors: {path}: header of {n} bytes is too large")
        header = json.loads(fh.read(n))
        header.pop("__metadata__", None)
        base, data_size = 8 + n, size - 8 - n
        for name, info in header.items():
            dt = _ST_DTYPES.get(info["dtype"])
            if dt is None:
                raise TypeError(f"load_safetensors: {name!r} has dtype {info['dtype']}, which "
                                "ember does not support")
            begin, end = info["data_offsets"]
            shape = tuple(info["shape"])
            if not 0 <= begin <= end <= data_size or \
                    end - begin != int(np.prod(shape)) * dt.itemsize:
                raise ValueError(f"load_safetensors: {name!r}: data_offsets {[begin, end]} do "
                                 f"not fit shape {list(shape)} of {info['dtype']} in "
                                 f"{data_size} bytes of data")
            if dev.type == "meta":                  # shapes and dtypes only: read nothing
                out[name] = _rebuild_meta_tensor_no_storage(dt, shape, None, False)
                continue
            arr = np.empty(shape, dt.np)
            fh.seek(base + begin)
            _read_into(fh, arr, f"load_safetensors: {name!r}")
            t = Tensor._wrap(arr)
            out[name] = t if dev == CPU else _move(t, dev)
    return out
