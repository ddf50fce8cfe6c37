"""Telling the ranks of a job that one of them died, whatever the way it died.

A rank that raises reports itself (``distributed_c10d.report_failure``: ``failed_rank`` and
its error in the store) from spawn's and emberrun's wrappers, from ``atexit`` after an
uncaught exception, and from multiprocessing's exit hook. A rank killed by a signal cannot
report anything, so at ``init_process_group`` each rank also opens a second connection to
the TCPStore and leaves the same two keys with the server, to be set if that connection
drops (``TCPStore._on_close``). The kernel closes a dead process's sockets, so the server
learns of a SIGKILL at once; ``destroy_process_group`` and a clean exit withdraw the keys
first. Ranks waiting in a collective read ``failed_rank`` about once a second and raise a
``DistBackendError`` naming the rank (``distributed_c10d._check_failed``); when the store
itself stops answering (its host, rank 0, died) they raise after ``STORE_LOST_GRACE``
seconds, naming rank 0.
"""
import atexit
import os
import socket
import sys

STORE_LOST_GRACE = 3.0
_hooked = False


def _base(store):
    """The store under any PrefixStores, and the prefix to put before a key."""
    from .store import PrefixStore
    prefix = ""
    while isinstance(store, PrefixStore):
        prefix, store = store.prefix + "/" + prefix, store.underlying_store
    return store, prefix


def start(world, store, rank):
    """Leave ``rank``'s failure keys with the store's server, to be set if this process
    dies (nothing to leave for stores without a server: FileStore, HashStore); hook the
    process's exit."""
    from .store import TCPStore
    _hook()
    base, prefix = _base(store) if store is not None else (None, "")
    if not isinstance(base, TCPStore):
        return
    watch = TCPStore(base.host, base.port, timeout=base.timeout)
    msg = (f"its process (pid {os.getpid()} on {socket.gethostname()}) ended without "
           "reporting an error: killed by a signal, or exited while the group was in use")
    watch._on_close([(prefix + "failed_rank", str(rank)),
                     (prefix + f"failed_error_{rank}", msg)])
    world.watch = watch


def _hook():
    global _hooked
    if not _hooked:
        _hooked = True
        atexit.register(lambda: on_exit(getattr(sys, "last_value", None)))
        import multiprocessing.util
        # a multiprocessing child skips atexit; its exit hook runs inside the ``finally``
        # around the target, where sys.exc_info() is the error escaping it (if any)
        multiprocessing.util.Finalize(None, lambda: on_exit(sys.exc_info()[1]),
                                      exitpriority=100)


def stop(world):
    """Withdraw the keys (a clean exit or ``destroy_process_group``) and disconnect."""
    watch, world.watch = getattr(world, "watch", None), None
    if watch is not None:
        try:
            watch._on_close([])
            watch.close()
        except OSError:
            pass                    # the store is gone already


def linger(world, seconds=5.0):
    """In the process that serves the store, after reporting a failure: keep serving until
    the other ranks have read it and gone (or ``seconds``), so that they name the rank that
    failed first rather than a store that vanished."""
    import time
    from .store import TCPStore
    base, _ = _base(world.store)
    if not isinstance(base, TCPStore) or base._server is None:
        return
    own = 1 + (getattr(world, "watch", None) is not None)
    deadline = time.monotonic() + seconds
    while base._clients() > own and time.monotonic() < deadline:
        time.sleep(0.05)


def on_exit(exc):
    """At process exit: a failure is reported (and the watch left to fire); a clean exit
    withdraws it."""
    from . import _mpi, distributed_c10d as c10d
    failed = exc is not None and not (isinstance(exc, SystemExit) and exc.code in (0, None))
    if failed and c10d._world.pg is not None and c10d._world.store is None:
        # NOTE: under mpiexec there is no store to report to, and a rank that just exits
        # leaves the others waiting (and itself stuck in MPI_Finalize): abort the job, as
        # ``python -m mpi4py`` does; MPI's process manager then stops every rank
        sys.stderr.flush()
        # mpiexec forwards the ranks' output asynchronously: an Abort at once may drop its tail
        __import__("time").sleep(0.2)
        _mpi.mpi().COMM_WORLD.Abort(1)
    if getattr(c10d._world, "watch", None) is None:
        return
    if failed:
        c10d.report_failure(exc)
    else:
        stop(c10d._world)
