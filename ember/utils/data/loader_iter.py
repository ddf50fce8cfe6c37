"""The iterators a DataLoader hands out: one loads in the main process, the other drives
worker processes (tasks out through one queue per worker, batches back through one pipe per
worker, and their arrays through shared memory)."""
import atexit
import collections.abc
import itertools
import multiprocessing
import multiprocessing.util
import os
import secrets
import signal
import time
import warnings
import weakref
from multiprocessing.connection import wait

from . import _shm
from .collate import _rebuild_mapping, _rebuild_sequence
from .fetch import create_fetcher
from .graph_settings import _is_datapipe
from .worker import (ExceptionWrapper, _IterableDatasetStopIteration, _ResumeIteration,
                     _worker_loop)

# Seconds a stopping worker gets to finish its current batch before it is terminated.
_SHUTDOWN_TIMEOUT = 5.0

_live_iterators = weakref.WeakSet()


@atexit.register
def _shutdown_live_iterators():
    # NOTE: atexit runs hooks last-in first-out, and multiprocessing.util (imported above)
    # registered its own first, so this runs before it kills daemonic workers outright:
    # iterators still alive at exit stop their workers properly and unlink their blocks.
    for it in list(_live_iterators):
        it._shutdown_workers()


def _world():
    """(world size, rank) of the default process group, (1, 0) without one."""
    import sys
    dist = sys.modules.get("ember.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class _BaseIter:
    def __init__(self, loader):
        from ..._dtype import int64
        from ..._ops.creation import empty
        self._dataset, self._iterable = loader.dataset, loader._iterable
        self._auto_collation, self._drop_last = loader._auto_collation, loader.drop_last
        self._index_sampler, self._collate_fn = loader._index_sampler, loader.collate_fn
        self._num_workers, self._timeout = loader.num_workers, loader.timeout
        self._persistent_workers = loader.persistent_workers
        from ... import cuda
        self._pin = loader.pin_memory and cuda.is_available()
        if loader.pin_memory and not self._pin:
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, "
                          "then device pinned memory won't be used.", stacklevel=3)
        self._sampler_iter = iter(self._index_sampler)
        # Drawn every epoch, also without workers, so a loader generator gives the same
        # stream of seeds (and shuffles) whatever num_workers is.
        self._base_seed = int(empty((), dtype=int64).random_(generator=loader.generator))
        if _is_datapipe(self._dataset):     # its random DataPipes get this epoch's seeds
            from ..._ops.random import Generator
            from .graph_settings import apply_random_seed
            apply_random_seed(self._dataset, Generator().manual_seed(self._base_seed))
        self._num_yielded = 0
        self._len_called = loader._IterableDataset_len_called

    def __iter__(self):
        return self

    def _reset(self, loader, first_iter=False):
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._len_called = loader._IterableDataset_len_called

    def _next_index(self):
        return next(self._sampler_iter)

    def __next__(self):
        data = self._next_data()
        if self._pin:
            data = pin_memory(data)
        self._num_yielded += 1
        if self._iterable and self._len_called is not None and self._num_yielded > self._len_called:
            msg = (f"Length of IterableDataset {self._dataset} was reported to be "
                   f"{self._len_called}(when accessing len(dataloader)), but "
                   f"{self._num_yielded} samples have been fetched. ")
            if self._num_workers > 0:
                msg += ("For multiprocessing data-loading, this could be caused by not "
                        "properly configuring the IterableDataset replica at each worker.")
            warnings.warn(msg, stacklevel=2)
        return data

    def __len__(self):
        return len(self._index_sampler)

    def __getstate__(self):
        raise NotImplementedError(f"{self.__class__.__name__} cannot be pickled")


def pin_memory(data):
    """``data`` (a batch) with its tensors pinned, through mappings and sequences, as torch's
    pin-memory thread does."""
    if hasattr(data, "pin_memory"):         # (tensors, and any object that pins itself)
        return data.pin_memory()
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, {k: pin_memory(v) for k, v in data.items()})
    if isinstance(data, tuple):
        items = [pin_memory(v) for v in data]
        return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)
    if isinstance(data, collections.abc.Sequence):
        return _rebuild_sequence(data, [pin_memory(v) for v in data])
    return data


class SingleProcessIter(_BaseIter):
    """Loads every batch in the calling process."""

    def __init__(self, loader):
        super().__init__(loader)
        if self._timeout != 0:
            # NOTE: torch raises AssertionError for timeout without workers; so do we.
            raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
        if _is_datapipe(self._dataset):     # each rank its share
            from .graph_settings import apply_sharding
            apply_sharding(self._dataset, *_world())
        self._fetcher = create_fetcher(self._iterable, self._dataset, self._auto_collation,
                                       self._collate_fn, self._drop_last)

    def _next_data(self):
        return self._fetcher.fetch(self._next_index())


def _default_context():
    # NOTE: torch takes Python's default start method, fork on Linux; we ask for fork by name
    # wherever it exists so workers start fast and datasets need not pickle.
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _death_note(worker_id, proc):
    code = proc.exitcode
    if code is not None and code < 0:
        sig = signal.Signals(-code)
        return f"worker {worker_id} (pid {proc.pid}) was killed by signal {sig.name} " \
               f"({signal.strsignal(sig)})"
    return f"worker {worker_id} (pid {proc.pid}) exited with code {code}"


class MultiProcessIter(_BaseIter):
    """Hands sampler indices to ``num_workers`` processes and yields their batches in order
    (or as they come, with ``in_order=False``)."""

    def __init__(self, loader):
        super().__init__(loader)
        self._prefetch_factor, self._in_order = loader.prefetch_factor, loader.in_order
        self._workers, self._index_queues, self._conns = [], [], []
        self._shutdown = False
        self._shm_prefix = (f"ember_{os.getpid()}_{secrets.token_hex(4)}_"
                            if _shm.available() else None)
        self._reader = _shm.Reader(self._num_workers)
        ctx = loader.multiprocessing_context or _default_context()
        _live_iterators.add(self)
        try:
            for wid in range(self._num_workers):
                self._start_worker(ctx, loader, wid)
            self._reset(loader, first_iter=True)
        except BaseException:
            self._shutdown_workers()
            raise

    def _start_worker(self, ctx, loader, wid):
        q = ctx.Queue()
        # NOTE: a dead worker leaves its queue unread; never let our feeder thread, blocked on
        # that pipe, hold up interpreter exit.
        q.cancel_join_thread()
        reader, writer = ctx.Pipe(duplex=False)
        self._index_queues.append(q)
        self._conns.append(reader)
        init_fn = loader.worker_init_fn
        if _is_datapipe(self._dataset):     # each worker (of each rank) its share
            import functools

            from .graph_settings import _sharding_worker_init_fn
            init_fn = functools.partial(_sharding_worker_init_fn, init_fn, *_world())
        w = ctx.Process(target=_worker_loop, daemon=True, args=(
            self._iterable, self._dataset, q, writer, list(self._conns), self._auto_collation,
            self._collate_fn, self._drop_last, self._base_seed, init_fn, wid,
            self._num_workers, self._shm_prefix, os.getpid()))
        w.start()
        self._workers.append(w)
        writer.close()        # the worker holds the only write end: EOF when it dies

    def _reset(self, loader, first_iter=False):
        super()._reset(loader, first_iter)
        self._send_idx = self._rcvd_idx = self._tasks_outstanding = 0
        self._task_info = {}              # task idx -> (worker id,) or (worker id, batch)
        self._workers_status = [True] * self._num_workers
        self._worker_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:
            # Persistent workers: restart each fetcher, drop batches of an unfinished epoch.
            for q in self._index_queues:
                q.put(_ResumeIteration())
            acks = 0
            while acks < self._num_workers:
                acks += isinstance(self._get_data()[1], _ResumeIteration)
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _try_put_index(self):
        if self._tasks_outstanding >= self._prefetch_factor * self._num_workers:
            return
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):
            wid = next(self._worker_cycle)
            if self._workers_status[wid]:
                break
        else:
            return                         # every worker's IterableDataset has ended
        self._index_queues[wid].put((self._send_idx, index, self._reader.take_freed(wid)))
        self._task_info[self._send_idx] = (wid,)
        self._tasks_outstanding += 1
        self._send_idx += 1

    def __next__(self):
        try:
            return super().__next__()
        except KeyboardInterrupt:
            # (it may have landed inside a pipe read: that pipe is out of step, and a read
            # of a garbled length could wait forever, so the workers are stopped unread)
            self._shutdown_workers(drain=False)
            raise

    def _next_data(self):
        while not self._shutdown:
            # Skip tasks owned by workers whose IterableDataset ended (they never answer).
            while self._rcvd_idx < self._send_idx:
                info = self._task_info.get(self._rcvd_idx)
                if info is not None and (len(info) == 2 or self._workers_status[info[0]]):
                    break
                self._task_info.pop(self._rcvd_idx, None)
                self._rcvd_idx += 1
            else:
                break
            if len(self._task_info[self._rcvd_idx]) == 2:
                data = self._task_info.pop(self._rcvd_idx)[1]
                self._rcvd_idx += 1
                return self._process_data(data)
            idx, data, wid = self._get_data()
            self._tasks_outstanding -= 1
            if isinstance(data, _IterableDatasetStopIteration):
                self._workers_status[wid] = False
                if not self._persistent_workers:
                    self._index_queues[wid].put(None)
                self._try_put_index()
            elif idx == self._rcvd_idx or not self._in_order:
                del self._task_info[idx]
                self._rcvd_idx += idx == self._rcvd_idx
                return self._process_data(data)
            else:
                self._task_info[idx] += (data,)
        if not self._persistent_workers:
            self._shutdown_workers()
        raise StopIteration

    def _process_data(self, data):
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            data.reraise()
        return data

    def _get_data(self):
        """(task idx, batch, worker id) of the next message from an active worker; raises if
        a worker died or ``timeout`` passed first."""
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        while True:
            active = [w for w in range(self._num_workers) if self._workers_status[w]]
            conns = {self._conns[w]: w for w in active}
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            sentinels = {self._workers[w].sentinel: w for w in active}
            ready = wait(list(conns) + list(sentinels), left)
            dead = [sentinels[r] for r in ready if r in sentinels]
            for conn in ready:
                if conn in conns:
                    try:
                        idx, data = conn.recv()
                    except (EOFError, OSError):      # died while (or before) writing
                        dead.append(conns[conn])
                        continue
                    if isinstance(data, _shm._Message):
                        data = data.decode(self._reader, conns[conn])
                    return idx, data, conns[conn]
            if dead:                                 # exited with nothing left to read
                self._raise_dead(sorted(set(dead)))
            elif deadline is not None and time.monotonic() >= deadline:
                self._shutdown_workers()
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")

    def _raise_dead(self, dead):
        for w in dead:
            self._workers[w].join(timeout=1.0)      # let the exit status arrive
        pids = ", ".join(str(self._workers[w].pid) for w in dead)
        notes = "; ".join(_death_note(w, self._workers[w]) for w in dead)
        self._shutdown_workers()
        raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly: {notes}")

    def _shutdown_workers(self, drain=True):
        """Stop every worker (asking first, terminating after a grace period), close the
        channels and unlink shared memory that no batch took. Safe to call twice."""
        if getattr(self, "_shutdown", True):
            return
        self._shutdown = True
        try:
            for q in self._index_queues:
                q.put(None)
            if drain:
                self._drain_until_exit(time.monotonic() + _SHUTDOWN_TIMEOUT)
            for w in self._workers:
                if w.exitcode is None:
                    w.terminate()
                w.join(timeout=1.0)
                if w.exitcode is None:
                    w.kill()
                    w.join()
        finally:
            for c in self._conns:
                c.close()
            for q in self._index_queues:
                q.close()
            self._reader.maps.clear()       # batches still alive keep their own mappings
            if self._shm_prefix:
                _shm.unlink_prefix(self._shm_prefix)

    def _drain_until_exit(self, deadline):
        """Read and drop what workers still send (a worker blocked writing to a full pipe
        could not see its stop signal) until they all exit or ``deadline`` passes."""
        alive = list(zip(self._conns, self._workers))
        while alive and time.monotonic() < deadline:
            wait([c for c, _ in alive] + [w.sentinel for _, w in alive],
                 deadline - time.monotonic())
            for conn, _ in alive:
                try:
                    while conn.poll():
                        _, data = conn.recv()
                        if isinstance(data, _shm._Message):
                            data.release()
                except (EOFError, OSError):
                    pass
            alive = [(c, w) for c, w in alive if w.exitcode is None]

    def __del__(self):
        self._shutdown_workers()
