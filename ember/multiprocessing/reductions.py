"""Tensors in shared memory, and how they cross process boundaries.

``share_memory_()`` moves a CPU tensor's storage into a POSIX shared-memory block (the
blocks DataLoader workers use, ``utils/data/_shm.py``). Pickled by ``multiprocessing``
(queues, pipes, ``spawn``'s arguments), such a storage travels as the block's name and the
receiver maps the same memory: writes on either side are seen by the other. Other storages
travel as a copy of their bytes.

NOTE: the block is unlinked when the process that shared it exits; a receiver must have
mapped it by then (torch's default ``file_descriptor`` strategy has the same window).
"""
import atexit
import os
import uuid
import weakref
from multiprocessing.reduction import ForkingPickler

import numpy as np

from .._storage import UntypedStorage, _ptr
from ..utils.data import _shm

_SHARED = weakref.WeakKeyDictionary()       # storage -> block name
_OWNED = []                                 # names this process created


def _unlink_owned():
    for name in _OWNED:
        _shm.unlink(name)


atexit.register(_unlink_owned)


def is_shared(t):
    """Whether ``t``'s storage is in shared memory."""
    return t.device.type == "cuda" or (t._storage is not None and t._storage in _SHARED)


def share_memory_(t):
    """Move ``t``'s storage into shared memory (a no-op when already there); returns ``t``.

    NOTE: views of ``t`` made before the call keep the old memory (ember's views hold their
    own array); make views after sharing."""
    if t.device.type != "cpu" or is_shared(t) or not _shm.available():
        return t
    st = t._get_storage()
    b = st._bytes()
    owner, flat = b if b is not None else (t._data, np.ascontiguousarray(t._data).view(np.uint8))
    name = f"ember_mp_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    mem = np.frombuffer(_shm._create(name, max(flat.nbytes, 1)), np.uint8)[:flat.nbytes]
    _OWNED.append(name)
    mem[:] = flat.reshape(-1)
    off = _ptr(t._data) - _ptr(owner) if b is not None else 0
    strides = t._data.strides if b is not None else None
    t._data = np.ndarray(t._data.shape, t._data.dtype, buffer=mem, offset=off, strides=strides)
    st._array = mem
    _SHARED[st] = name
    return t


def _rebuild_shared(name, nbytes):
    from .._device import CPU
    st = UntypedStorage(np.frombuffer(_shm._attach(name, True), np.uint8)[:nbytes], CPU,
                        root=False)
    _SHARED[st] = name
    return st


def _reduce_storage(st):
    name = _SHARED.get(st)
    if name is None:
        return st.__reduce__()
    return _rebuild_shared, (name, st.nbytes())


ForkingPickler.register(UntypedStorage, _reduce_storage)
