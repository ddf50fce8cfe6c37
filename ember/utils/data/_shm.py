"""Shared-memory transport for batches going from DataLoader workers to the main process.

A worker writes every array of a batch into POSIX shared-memory blocks and sends only a small
pickle in which each tensor or array is replaced by (block name, offset, shape, strides,
dtype). The main process maps the blocks and wraps the memory without copying.

Blocks are recycled: when the last array of a batch dies in the main process, its blocks go
back to the worker (named in its next task), which writes a later batch into them. Fresh
shared pages cost a page fault each, several times what stacking the batch costs, so a
warm pool is what makes large batches cheap. A worker keeps a few free blocks and unlinks
the rest; the main process unlinks whatever is left when the iterator shuts down.

NOTE: we call ``_posixshmem`` (the module behind ``multiprocessing.shared_memory``) instead of
``SharedMemory``: a SharedMemory cannot hand its mapping to NumPy for good (its ``close()``
raises BufferError while an array still points into it), and its resource tracker would
unlink, and warn about, blocks that the main process already owns.
"""
import errno
import io
import mmap
import os
import pickle
import sys
import weakref

import numpy as np

from ..._tensor import Tensor

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
        _reserve(fd, nbytes)
        return mmap.mmap(fd, nbytes)
    except BaseException:
        unlink(name)
        raise
    finally:
        os.close(fd)


def _reserve(fd, nbytes):
    # NOTE: ftruncate alone makes a sparse block: with /dev/shm too small (64 MB in a default
    # docker container) the first write past its end would kill the worker with SIGBUS.
    # Reserving the pages now turns that into an error that says what to change.
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise OSError(e.errno, f"{e.strerror}: shared memory (/dev/shm) has no room for "
                          f"a {nbytes}-byte batch block; enlarge it (docker: --shm-size) or "
                          "lower batch_size or num_workers") from None
        # any other error (no fallocate on this filesystem): keep the sparse block


def _attach(name, keep_name):
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, 0)
    finally:
        os.close(fd)
        if not keep_name:          # the mapping outlives the name
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
    if type(value) is Tensor:
        arr = value._data if value.device.type == "cpu" else None
    else:
        arr = value if type(value) is np.ndarray else None
    return None if type(arr) is not np.ndarray or arr.dtype.hasobject or arr.nbytes == 0 else arr


def _ptr(arr):
    return arr.__array_interface__["data"][0]


class Writer:
    """A worker's side: keeps its blocks (named ``prefix + n``) and encodes batches."""

    def __init__(self, prefix, keep=8):
        self.prefix, self.count, self.keep = prefix, 0, keep
        self.pool = {}          # name -> uint8 array over the block, for every block we own
        self.free = []          # names given back by the main process, ready for reuse
        self.blocks = []        # (name, start, size) of the blocks of the batch being built
        self.dropped = []       # names unlinked since the last message: the main forgets them

    def _new_block(self, nbytes):
        name = self._reusable(nbytes)
        if name is None:
            name = f"{self.prefix}{self.count}"
            self.count += 1
            self.pool[name] = np.frombuffer(_create(name, nbytes), np.uint8)
        block = self.pool[name]
        self.blocks.append((name, _ptr(block), block.nbytes))
        return block[:nbytes]

    def _reusable(self, nbytes):
        # NOTE: a block that worker code still references (refcount above the pool's own and
        # getrefcount's) could be read after we overwrite it; skip it.
        fits = [n for n in self.free if nbytes <= self.pool[n].nbytes <= 2 * nbytes and
                sys.getrefcount(self.pool[n]) <= 2]
        if not fits:
            return None
        name = min(fits, key=lambda n: self.pool[n].nbytes)
        self.free.remove(name)
        return name

    def give_back(self, names):
        """Blocks no longer in use: keep ``keep`` of them for reuse, unlink the rest."""
        self.free.extend(n for n in names if n in self.pool)
        while len(self.free) > self.keep:
            name = self.free.pop(0)
            unlink(name)
            del self.pool[name]
            self.dropped.append(name)

    def empty(self, shape, dtype):
        """An uninitialized array in a block of its own (collate stacks into it)."""
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
        msg = _Message(buf.getvalue(), names, offsets, self.dropped)
        self.dropped = []
        return msg

    def discard(self, keep=()):
        """End the batch: its blocks not in ``keep`` (made, then not sent) are free again."""
        self.give_back([name for name, _, _ in self.blocks if name not in keep])
        self.blocks = []


class Reader:
    """The main process's side for one iterator: the blocks it has mapped, and the blocks
    whose batches died, per worker, waiting to be given back."""

    def __init__(self, num_workers):
        self.maps, self.freed = {}, [[] for _ in range(num_workers)]

    def take_freed(self, worker_id):
        names = self.freed[worker_id]
        out = names[:]
        del names[:len(out)]           # a finalizer may append meanwhile; keep those
        return out

    def mapping(self, name, worker_id, roots):
        """A fresh root array over block ``name``; when it (and so every array of this batch
        in the block) dies, the block is queued to go back to ``worker_id``."""
        mm = self.maps.get(name)
        if mm is None:
            mm = self.maps[name] = _attach(name, keep_name=True)
        root = roots[name] = np.frombuffer(mm, np.uint8)
        weakref.finalize(root, self.freed[worker_id].append, name).atexit = False
        return root


class _Message:
    """What crosses the pipe: the pickle, the blocks it uses (the pack last), pack offsets,
    and the blocks the worker unlinked since its last message."""

    __slots__ = ("payload", "names", "offsets", "dropped")

    def __init__(self, payload, names, offsets, dropped=()):
        self.payload, self.names, self.offsets, self.dropped = payload, names, offsets, dropped

    def __reduce__(self):
        return _Message, (self.payload, self.names, self.offsets, self.dropped)

    def release(self):
        """Unlink the blocks without reading them (a batch nobody will take)."""
        for name in self.names:
            unlink(name)

    def decode(self, reader=None, worker_id=None):
        """The batch, its arrays wrapping the shared blocks. Without a ``reader`` the blocks
        are mapped once and unlinked; with one they stay for the worker to reuse."""
        roots = {}
        if reader is not None:
            for name in self.dropped:
                reader.maps.pop(name, None)
        try:
            for name in self.names:
                if reader is None:
                    roots[name] = np.frombuffer(_attach(name, keep_name=False), np.uint8)
                else:
                    reader.mapping(name, worker_id, roots)
        except OSError as e:
            self.release()
            raise RuntimeError(f"DataLoader: lost a shared-memory block of a batch: {e}") from None
        pack = self.names[-1] if self.offsets else None
        return _Unpickler(self.payload, roots, pack, self.offsets).load()


class _Unpickler(pickle.Unpickler):
    """Unpickles a batch, wrapping each array's place in a block as a NumPy array (or a
    tensor) over that memory."""

    # NOTE: a class at module level, not one made per call: a class defined inside decode()
    # would sit in a reference cycle holding the roots, so blocks would wait for the garbage
    # collector instead of going back to their worker as soon as the batch dies.

    def __init__(self, payload, roots, pack, offsets):
        super().__init__(io.BytesIO(payload))
        self.roots, self.pack, self.offsets = roots, pack, offsets

    def persistent_load(self, pid):
        is_array, (name, off), shape, strides, dtype, grad = pid
        if name is None:
            name, off = self.pack, self.offsets[off]
        arr = np.ndarray(shape, dtype, buffer=self.roots[name], offset=off, strides=strides)
        if is_array:
            return arr
        t = Tensor._wrap(arr)
        return t.requires_grad_() if grad else t
