"""Tensors in shared memory, and how they cross process boundaries.

``share_memory_()`` moves a CPU tensor's storage into a POSIX shared-memory block (the
blocks DataLoader workers use, ``utils/data/_shm.py``). Pickled by ``multiprocessing``
(queues, pipes, ``spawn``'s arguments), such a storage travels as a reference to the block
and the receiver maps the same memory: writes on either side are seen by the other. Other
storages travel as a copy of their bytes. How the block is referred to is torch's sharing
strategy, chosen when the tensor is shared:

- ``file_descriptor`` (the default, as torch on Linux): the block's name is unlinked at once
  and the storage keeps an open file descriptor, which travels to the receiver
  (``multiprocessing.reduction.DupFd``); nothing is left in /dev/shm, but each shared storage
  holds a descriptor, and the sender must be alive when the receiver unpickles.
- ``file_system``: the storage travels as the block's name, which stays in /dev/shm until the
  process that shared it exits (a receiver must have mapped it by then).
"""
import atexit
import mmap
import os
import uuid
import weakref
from multiprocessing.reduction import DupFd, ForkingPickler

import numpy as np

from .._storage import UntypedStorage, _ptr
from ..utils.data import _shm

_SHARED = weakref.WeakKeyDictionary()       # storage -> block name, or its open descriptor
_OWNED = []                                 # names this process created
_all_sharing_strategies = {"file_descriptor", "file_system"}
_sharing_strategy = "file_descriptor"


def set_sharing_strategy(new_strategy):
    """How tensors shared from now on are referred to ('file_descriptor' or 'file_system';
    see the module docstring).

    Example:
        >>> import ember.multiprocessing as mp
        >>> mp.set_sharing_strategy("file_system"); mp.get_sharing_strategy()
        'file_system'
        >>> mp.set_sharing_strategy("file_descriptor")
    """
    global _sharing_strategy
    if new_strategy not in _all_sharing_strategies:
        raise AssertionError(f"invalid sharing strategy {new_strategy!r}, expected one of "
                             f"{_all_sharing_strategies}")
    _sharing_strategy = new_strategy


def get_sharing_strategy():
    """The current sharing strategy ('file_descriptor' unless set)."""
    return _sharing_strategy


def get_all_sharing_strategies():
    """The strategies this system supports.

    Example:
        >>> import ember.multiprocessing as mp
        >>> sorted(mp.get_all_sharing_strategies())
        ['file_descriptor', 'file_system']
    """
    return _all_sharing_strategies


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
    if _sharing_strategy == "file_descriptor":
        ref = _shm._posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        _shm.unlink(name)
        weakref.finalize(st, os.close, ref)
    else:
        ref = name
        _OWNED.append(name)
    mem[:] = flat.reshape(-1)
    off = _ptr(t._data) - _ptr(owner) if b is not None else 0
    strides = t._data.strides if b is not None else None
    t._data = np.ndarray(t._data.shape, t._data.dtype, buffer=mem, offset=off, strides=strides)
    st._array = mem
    _SHARED[st] = ref
    return t


def _rebuild_shared(name, nbytes):
    from .._device import CPU
    st = UntypedStorage(np.frombuffer(_shm._attach(name, True), np.uint8)[:nbytes], CPU, root=False)
    _SHARED[st] = name
    return st


def _rebuild_fd(dup, nbytes):
    from .._device import CPU
    fd = dup.detach()
    st = UntypedStorage(np.frombuffer(mmap.mmap(fd, max(nbytes, 1)), np.uint8)[:nbytes], CPU,
                       root=False)
    _SHARED[st] = fd                        # kept open: the receiver may share it onwards
    weakref.finalize(st, os.close, fd)
    return st


def _reduce_storage(st):
    ref = _SHARED.get(st)
    if ref is None:
        return st.__reduce__()
    if isinstance(ref, int):
        return _rebuild_fd, (DupFd(ref), st.nbytes())
    return _rebuild_shared, (ref, st.nbytes())


def init_reductions():
    """Register how storages pickle in ``multiprocessing`` (done when ember.multiprocessing
    is imported; calling it again is harmless).

    Example:
        >>> import ember.multiprocessing as mp
        >>> mp.init_reductions()
    """
    ForkingPickler.register(UntypedStorage, _reduce_storage)


init_reductions()
