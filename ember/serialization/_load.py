"""Reading, the file part: torch's zip archive (read, pread in threads, or mapped) and its
pre-1.6 stream; storages shared by views, placed by ``map_location``."""
import contextlib
import io
import mmap as _mmap
import os
import pickle
import struct
import sys
import warnings
import zipfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import _registry
from .. import _dtype
from .._device import CPU, device as _device, to_device
from .._storage import UntypedStorage
from .._tensor import Tensor
from ._save import _LEGACY_MAGIC, _LEGACY_PROTOCOL, _is_path
from ._unpickler import _loader, _rebuild_meta_tensor_no_storage, _StorageType, _Unpickler

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
            np_dtype = (self.dtype or dtype).np
            self.root = np.empty(self.nbytes // np.dtype(np_dtype).itemsize, np_dtype) if \
                _registry._config["skip_data"] else self.loader.read(self, np_dtype)
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


def _placement(map_location):
    """map_location as a function ``(saved location, get_cpu_storage) -> device or storage``."""
    if map_location is None:
        if _registry._package_registry == _registry._DEFAULTS:
            return lambda loc, get: loc
        return lambda loc, get: _registry.default_restore_location(get(), loc)
    if isinstance(map_location, dict):
        return lambda loc, get: map_location.get(loc, loc)
    if isinstance(map_location, (str, bytes, _device)):
        dev = to_device(map_location.decode() if isinstance(map_location, bytes) else map_location)
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
        """(A hook for loaders that track replaced tensors; this one does not.)"""


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
        if order is None:       # (files from before torch 2.1): the default, else native
            from ._api import LoadEndianness, get_default_load_endianness
            default = get_default_load_endianness()
            order = {LoadEndianness.LITTLE: b"little", LoadEndianness.BIG: b"big"}.get(default)
        self.swap = order is not None and order.decode() != sys.byteorder
        self.mm = None
        if mmap:
            try:
                fileno = fh.fileno()
            except (AttributeError, OSError) as e:
                raise ValueError("f must be a file path or a real file to use mmap=True") from e
            # NOTE: a private (copy-on-write) map, torch's default: writing to a loaded tensor
            # changes memory, never the file; under set_default_mmap_options(MAP_SHARED)
            # writes go to the file, through a descriptor opened for writing.
            from ._api import get_default_mmap_options
            if get_default_mmap_options() == _mmap.MAP_SHARED:
                fd = os.open(fh.name, os.O_RDWR)
                try:
                    self.mm = _mmap.mmap(fd, 0, access=_mmap.ACCESS_WRITE)
                finally:
                    os.close(fd)
            else:
                self.mm = _mmap.mmap(fileno, 0, access=_mmap.ACCESS_COPY)
        self.fd = self.pool = None
        if not mmap and map_location is None and hasattr(os, "preadv"):
            with contextlib.suppress(AttributeError, OSError, io.UnsupportedOperation):
                self.fd = fh.fileno()
        self.pending = []

    def _read(self, name):
        """Record ``name``'s bytes. NOTE: as torch's reader, CRCs are not checked: a file
        saved with ``set_crc32_options(False)`` has 0 for each."""
        with self.zf.open(name) as fh:
            fh._expected_crc = None
            return fh.read()

    def _record(self, name):
        try:
            return self._read(self.prefix + name)
        except KeyError:
            return None

    def load(self):
        pkl = self._read(self.prefix + "data.pkl")
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
            arr = np.frombuffer(self._read(info), np_dtype, count).copy()
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
                    # fresh memory is most of a load, and it runs faster split in two.
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
        try:
            magic = header()
        except Exception:           # bytes that are no pickle at all: not a checkpoint
            magic = None
        if magic != _LEGACY_MAGIC:
            raise _NotACheckpoint("neither a zip archive (torch.save's format) nor torch's "
                                  "legacy format")
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


class _NotACheckpoint(Exception):
    """The file is neither of the formats ``torch.save`` writes."""


# what a file cut short or not written by torch.save raises part-way through reading it
_DAMAGED = (_NotACheckpoint, zipfile.BadZipFile, EOFError, IndexError, struct.error)
_TRUE = ("1", "y", "yes", "true")


def _weights_only(weights_only, pickle_module):
    """torch's rule: weights-only unless a pickle module is given, and its documented switches
    TORCH_FORCE_WEIGHTS_ONLY_LOAD (always) and TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (only where the
    caller left ``weights_only`` unset)."""
    force = os.getenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE
    force_no = os.getenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE
    if force and force_no:
        raise RuntimeError("Only one of `TORCH_FORCE_WEIGHTS_ONLY_LOAD` or "
                           "`TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD` should be set, but both were set.")
    if force:
        return True
    if weights_only is None and force_no:
        warnings.warn("Environment variable TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD detected, since the "
                      "`weights_only` argument was not explicitly passed to `torch.load`, forcing "
                      "weights_only=False.", UserWarning, stacklevel=3)
        return False
    return pickle_module is None if weights_only is None else weights_only


@contextlib.contextmanager
def _open_for_read(f):
    if _is_path(f):
        with open(f, "rb") as fh:
            yield fh
    else:
        yield f


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=False,
         **pickle_load_args):
    """Load what :func:`save` or ``torch.save`` wrote (zip or the pre-1.6 legacy format).

    Args:
        f: a path or a readable, seekable binary file object.
        map_location: where storages go: a device or its name (``"cpu"``, ``"meta"``...), a
            dict from saved locations to new ones (``{"cuda:0": "cpu"}``), or a callable
            ``(storage, location)`` returning a storage or None (keep ``location``). Default:
            the device each tensor was saved from.
        weights_only (bool, default True; False when ``pickle_module`` is given): load only
            tensors, containers, primitives, torch dtypes/devices/sizes and
            :func:`add_safe_globals`; anything else raises ``pickle.UnpicklingError`` without
            running it. ``False`` unpickles anything: only for files you trust. As torch,
            ``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1`` in the environment forces True and
            ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` forces False where it is left unset.
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
    weights_only = _weights_only(weights_only, pickle_module)
    if pickle_module is not None and weights_only:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    try:
        return _load(f, map_location, weights_only, mmap, pickle_load_args)
    except _DAMAGED as e:
        name = os.fspath(f) if _is_path(f) else getattr(f, "name", "the file object")
        what = f"is not a checkpoint: {e}" if isinstance(e, _NotACheckpoint) else \
            f"is truncated or damaged: reading it failed with {type(e).__name__}: {e}"
        raise RuntimeError(f"ember.load: {name!r} {what}") from None


def _load(f, map_location, weights_only, mmap, pickle_load_args):
    with _open_for_read(f) as fh:
        start = fh.tell()
        is_zip = fh.read(4) == b"PK\x03\x04"
        fh.seek(start)
        if is_zip:
            return _ZipLoader(fh, map_location, weights_only, mmap, pickle_load_args).load()
        if mmap:
            raise RuntimeError("mmap can only be used with files saved with "
                               "`torch.save(_use_new_zipfile_serialization=True)`, please "
                               "torch.save your checkpoint with this option in order to use mmap.")
        return _LegacyLoader(fh, map_location, weights_only, pickle_load_args).load()
