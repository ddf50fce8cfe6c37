"""Shared-memory transport for batches going from DataLoader workers to the main process.

A worker writes every array of a batch into POSIX shared-memory blocks and sends only a small
pickle in which each tensor or array is replaced by (block name, offset, shape, strides,
dtype). The main process maps the blocks, unlinks their names at once (the mapping outlives
the name, so nothing is left in /dev/shm however long the batch lives) and wraps the memory
without copying.

NOTE: we call ``_posixshmem`` (the module behind ``multiprocessing.shared_memory``) instead of
``SharedMemory``: a SharedMemory cannot hand its mapping to NumPy for good (its ``close()``
raises BufferError while an array still points into it), and its resource tracker would
unlink, and warn about, blocks that the main process already owns.
"""
import io
import mmap
import os
import pickle

import numpy as np

try:
    import _posixshmem
except ImportError:                     # no POSIX shared memory: batches are pickled instead
    _posixshmem = None

_ALIGN = 64                             # each packed array starts on a cache line


def available():
    return _posixshmem is not None


def _create(name, nbytes):
    fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    try:
        os.ftruncate(fd, nbytes)
        return mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)


def _attach(name):
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, 0)
    finally:
        os.close(fd)
        unlink(name)


def unlink(name):
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass


def unlink_prefix(prefix):
    """Unlink the blocks named ``prefix...`` that nobody received (a worker stopped or died
    with batches in flight). Needs /dev/shm to list them; elsewhere such blocks leak."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            unlink(name)


def _array_of(value):
    """The NumPy array to send through shared memory for ``value``, else None."""
    from ..._tensor import Tensor
    if type(value) is Tensor:
        arr = value._data if value.device.type == "cpu" else None
    else:
        arr = value if type(value) is np.ndarray else None
    if type(arr) is not np.ndarray or arr.dtype.hasobject or arr.nbytes == 0:
        return None
    return arr


def _ptr(arr):
    return arr.__array_interface__["data"][0]


class Writer:
    """A worker's side: makes blocks named ``prefix + n`` and encodes batches."""

    def __init__(self, prefix):
        self.prefix, self.count, self.blocks = prefix, 0, []    # blocks: (name, start, size)

    def _new_block(self, nbytes):
        name = f"{self.prefix}{self.count}"
        self.count += 1
        mm = _create(name, nbytes)
        arr = np.frombuffer(mm, np.uint8)
        self.blocks.append((name, _ptr(arr), nbytes))
        return arr

    def empty(self, shape, dtype):
        """An uninitialized array in a new block (collate stacks into it)."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes == 0:
            return np.empty(shape, dtype)
        return self._new_block(nbytes).view(dtype).reshape(shape)

    def _locate(self, arr):
        """(name, offset) if ``arr`` lies inside one of this batch's blocks."""
        if min(arr.strides, default=0) < 0:
            return None
        lo = _ptr(arr)
        hi = lo + sum((n - 1) * s for n, s in zip(arr.shape, arr.strides)) + arr.itemsize
        for name, start, size in self.blocks:
            if start <= lo and hi <= start + size:
                return name, lo - start
        return None

    def encode(self, obj):
        """A message holding ``obj``, its arrays moved to shared memory."""
        packed, used = [], set()

        def persistent_id(value):
            arr = _array_of(value)
            if arr is None:
                return None
            where = self._locate(arr)
            if where is None:                      # not ours yet: copy it into the pack
                packed.append(arr)
                where = (None, len(packed) - 1)
                shape, strides = arr.shape, None
            else:
                used.add(where[0])
                shape, strides = arr.shape, arr.strides
            grad = type(value) is not np.ndarray and value.requires_grad
            return (type(value) is np.ndarray, where, shape, strides, arr.dtype, grad)

        buf = io.BytesIO()
        pickler = pickle.Pickler(buf, pickle.HIGHEST_PROTOCOL)
        pickler.persistent_id = persistent_id
        pickler.dump(obj)
        names, offsets = sorted(used), []
        if packed:
            offsets, total = [], 0
            for arr in packed:
                offsets.append(total)
                total += -(-arr.nbytes // _ALIGN) * _ALIGN
            block = self._new_block(total)
            for arr, off in zip(packed, offsets):
                dst = block[off:off + arr.nbytes].view(arr.dtype).reshape(arr.shape)
                np.copyto(dst, arr)
            names.append(self.blocks[-1][0])
        self.discard(keep=names)
        return _Message(buf.getvalue(), names, offsets)

    def discard(self, keep=()):
        """Unlink this batch's blocks not in ``keep`` (made by collate, then not sent)."""
        for name, _, _ in self.blocks:
            if name not in keep:
                unlink(name)
        self.blocks = []


class _Message:
    """What crosses the pipe: the pickle, the blocks it uses (the pack last), pack offsets."""

    __slots__ = ("payload", "names", "offsets")

    def __init__(self, payload, names, offsets):
        self.payload, self.names, self.offsets = payload, names, offsets

    def __reduce__(self):
        return _Message, (self.payload, self.names, self.offsets)

    def release(self):
        """Unlink the blocks without reading them (a batch nobody will take)."""
        for name in self.names:
            unlink(name)

    def decode(self):
        """The batch, its arrays wrapping the shared blocks; unlinks every block first."""
        from ..._tensor import Tensor
        maps, failed = {}, None
        for name in self.names:                  # attach (and unlink) all, even on error
            try:
                maps[name] = _attach(name)
            except OSError as e:
                failed = failed or e
        if failed is not None:
            raise RuntimeError(f"DataLoader: lost a shared-memory block of a batch: {failed}")
        pack = self.names[-1] if self.offsets else None
        msg = self

        class _Unpickler(pickle.Unpickler):
            def persistent_load(self, pid):
                is_array, (name, off), shape, strides, dtype, grad = pid
                if name is None:
                    name, off = pack, msg.offsets[off]
                arr = np.ndarray(shape, dtype, buffer=maps[name], offset=off, strides=strides)
                if is_array:
                    return arr
                t = Tensor._wrap(arr)
                return t.requires_grad_() if grad else t

        return _Unpickler(io.BytesIO(self.payload)).load()
