"""Writing: tensors pickled under torch's global names, storages as the records of torch's zip
archive (or its pre-1.6 stream), the file replaced atomically. The format is described in
``ember/serialization/__init__.py``."""
import collections
import contextlib
import functools
import io
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

from .. import _dtype
from .._backends import backend
from .._device import device as _device
from .._memory_format import _packed
from .._sparse import layout as _layout
from .._tensor import Size, Tensor
from ._registry import _config, location_tag

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
        if t.layout.name != "strided":     # CSR, CSC, BSR, BSC: as torch, without requires_grad
            sp = t._data
            parts = (sp.compressed, sp.plain, sp.values, Size(t.shape))
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
            return self._add(host, t), 0, _packed(t.shape, range(len(t.shape) - 1, -1, -1))
        seen = self._seen.get(id(st))
        if seen is None:            # keeping ``st`` alive keeps its id unique until we finish
            seen = self._seen[id(st)] = (self._add(backend(t.device).to_host(root), t), t.dtype, st)
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
        pid = ("storage", stype, key, location_tag(t._get_storage()), numel)
        return _StorageRef(pid + (None,) if self._legacy else pid)


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


def _write_record(zf, name, data, crc=None, skip=False):
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
    info.CRC = crc if crc is not None else zlib.crc32(buf) if _config["crc32"] else 0
    zip64 = n * 1.05 > zipfile.ZIP64_LIMIT          # zipfile's own rule for a zip64 header
    # NOTE: the local header (30 bytes, the name, our extra field, zip64's 20 bytes) is padded
    # through an extra field, as torch pads with its 'FB' field, so load(mmap=True) can map the
    # data with aligned arrays.
    info.header_offset = zf.fp.tell()
    start = info.header_offset + 30 + len(name.encode()) + 4 + (20 if zip64 else 0)
    pad = -start % _ALIGN
    info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
    zf.fp.write(info.FileHeader(zip64))
    if skip and zf.fp.seekable():       # skip_data: the space, left empty
        zf.fp.seek(n, 1)
    else:
        zf.fp.write(bytes(n) if skip else buf)
    zf.filelist.append(info)
    zf.NameToInfo[name] = info
    zf.start_dir = zf.fp.tell()
    return info, zip64


def _crcs(arrays):
    """Futures (or values) of the CRC-32 of each array, computed in order in a helper thread
    (zlib releases the GIL) when there is enough data to be worth it; 0 without CRCs or data
    (``set_crc32_options``, ``skip_data``)."""
    views = [memoryview(a).cast("B") for a in arrays]
    if not _config["crc32"] or _config["skip_data"]:
        return [_Done(0) for _ in views], None
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
                                            crc.result() if wait else 0, _config["skip_data"])
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

    NOTE: renaming over a large file frees its page cache inside the rename, as
    ``torch.save``'s truncating open does. Holding the old file open across the
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
    if _config["skip_data"] and not _use_new_zipfile_serialization:
        raise RuntimeError("Cannot use skip_data=True with _use_new_zipfile_serialization=False")
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
