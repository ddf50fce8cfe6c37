"""The DataLoader worker process: its loop, its seeding, ``get_worker_info`` and the wrapper
that carries an exception (with its traceback text) back to the main process."""
import os
import queue
import random
import signal
import sys
import traceback

from . import _shm
from .fetch import create_fetcher

# How often an idle worker checks that the main process is still alive: after the main
# process is killed nothing else would ever wake it.
_PARENT_CHECK_INTERVAL = 1.0


class WorkerInfo:
    """What :func:`get_worker_info` returns inside a worker: ``id``, ``num_workers``, ``seed``
    and ``dataset`` (this worker's copy). Read-only."""

    __initialized = False

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)
        self.__keys = tuple(kwargs)
        self.__initialized = True

    def __setattr__(self, key, val):
        if self.__initialized:
            raise RuntimeError(f"Cannot assign attributes to {self.__class__.__name__} objects")
        super().__setattr__(key, val)

    def __repr__(self):
        items = ", ".join(f"{k}={getattr(self, k)}" for k in self.__keys)
        return f"{self.__class__.__name__}({items})"


_worker_info = None
_writer = None          # this worker's shared-memory writer (None in the main process)


def get_worker_info():
    """This worker's :class:`WorkerInfo` inside a DataLoader worker, ``None`` elsewhere.

    Example:
        >>> from ember.utils.data import get_worker_info
        >>> get_worker_info() is None       # the main process
        True
    """
    return _worker_info


def _shared_empty(shape, dtype):
    """An array in shared memory when called in a worker that has it, else None."""
    return None if _writer is None else _writer.empty(shape, dtype)


class _IterableDatasetStopIteration:
    """Sent by a worker whose IterableDataset iterator ran out."""

    def __init__(self, worker_id):
        self.worker_id = worker_id


class _ResumeIteration:
    """Sent to persistent workers at a new epoch: rebuild the fetcher, then acknowledge."""


class ExceptionWrapper:
    """An exception caught in a worker, kept as its type and traceback text (tracebacks don't
    pickle), re-raised in the main process by :meth:`reraise`."""

    def __init__(self, exc_info=None, where="in background"):
        exc_info = exc_info or sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self):
        # NOTE: raised straight from the call, never kept in a local: a local would tie the
        # exception to its own traceback's frames, and that cycle would keep the DataLoader
        # iterator (and its worker processes) alive until the garbage collector runs.
        raise self._rebuild()

    def _rebuild(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            # NOTE: KeyError's str() is the repr of its argument, which would print the
            # traceback as one line with '\n' escapes; torch uses a str subclass, so do we.
            msg = _KeyErrorMessage(msg)
        elif getattr(self.exc_type, "message", None):
            return self.exc_type(message=msg)
        try:
            return self.exc_type(msg)
        except Exception:                    # an exception type that wants other arguments
            return RuntimeError(msg)


class _KeyErrorMessage(str):
    def __repr__(self):
        return self


def _seed_everything(base_seed, worker_id):
    """Seed Python, ember and NumPy in a worker as torch does, so workers differ and a loader
    generator seed fixes them all."""
    import numpy as np

    from ..._ops.random import manual_seed
    seed = base_seed + worker_id
    random.seed(seed)
    manual_seed(seed)
    # NOTE: torch seeds NumPy's global generator too (since 1.9), from a SeedSequence of
    # (worker_id, base_seed); without it every forked worker would repeat the same NumPy
    # random numbers. This gives the very state torch's _generate_state gives.
    np.random.seed(np.random.SeedSequence([worker_id, base_seed]).generate_state(4))
    return seed


def _worker_loop(iterable, dataset, index_queue, conn, readers, auto_collation, collate_fn,
                 drop_last, base_seed, init_fn, worker_id, num_workers, shm_prefix, parent_pid):
    """Serve (task index, sampler index, freed blocks) tasks from ``index_queue`` until
    ``None`` arrives, sending (task index, batch) pairs on ``conn``."""
    global _worker_info, _writer
    # Ctrl-C reaches the whole process group; the main process handles it and stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # NOTE: a forked worker inherits the main process's read ends of the result pipes, its
    # own included; holding them, a send to a dead main process would block forever on a
    # full pipe instead of failing.
    for r in readers:
        r.close()
    seed = _seed_everything(base_seed, worker_id)
    _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
    _writer = _shm.Writer(f"{shm_prefix}w{worker_id}_") if shm_prefix else None
    where = f"in DataLoader worker process {worker_id}"

    def new_fetcher():
        return create_fetcher(iterable, dataset, auto_collation, collate_fn, drop_last)
    init_error = fetcher = None
    try:
        if init_fn is not None:
            init_fn(worker_id)
        fetcher = new_fetcher()
    except Exception:
        init_error = ExceptionWrapper(where=where)
    ended = False
    while True:
        try:
            r = index_queue.get(timeout=_PARENT_CHECK_INTERVAL)
        except queue.Empty:
            if os.getppid() == parent_pid:
                continue
            break
        if r is None:
            break
        if isinstance(r, _ResumeIteration):
            fetcher, ended, idx, data = new_fetcher(), False, None, r
        elif ended:
            continue
        else:
            idx, index, freed = r
            if freed and _writer is not None:
                _writer.give_back(freed)
            data = init_error or _fetch(fetcher, index, iterable, worker_id, where)
            init_error = None
            ended = isinstance(data, _IterableDatasetStopIteration)
        try:
            _send(conn, idx, data, where)
        except (OSError, EOFError):        # the main process is gone or stopped listening
            break
        del data, r
    if _writer is not None and os.getppid() != parent_pid:
        _shm.unlink_prefix(_writer.prefix)  # orphaned: nobody will read what we sent


def _send(conn, idx, data, where):
    try:
        conn.send((idx, data))
    except (OSError, EOFError):
        raise
    except Exception:
        if isinstance(data, ExceptionWrapper):
            data.exc_type = RuntimeError   # its own type doesn't pickle; the text names it
        else:                              # the batch doesn't pickle
            data = ExceptionWrapper(where=f"{where} while sending a batch")
        conn.send((idx, data))


def _fetch(fetcher, index, iterable, worker_id, where):
    try:
        batch = fetcher.fetch(index)
        return batch if _writer is None else _writer.encode(batch)
    except Exception as e:
        if _writer is not None:
            _writer.discard()
        if iterable and isinstance(e, StopIteration):
            return _IterableDatasetStopIteration(worker_id)
        if not iterable:          # name the samples (an iterable dataset's index is empty)
            where += f" ({'indices' if isinstance(index, list) else 'index'} {index})"
        return ExceptionWrapper(where=where)
