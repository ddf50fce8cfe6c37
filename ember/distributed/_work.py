"""``Work``: an operation in flight, and the helpers that finish a collective through one;
failure reporting between ranks, which the waits consult: a rank that raises leaves its error
in the store (``report_failure``), the others' waits find it there (``_check_failed``) and
raise naming it instead of running into the timeout (see ``_watchdog``).
"""
import datetime
import time

from .._ops.dispatch import hooks
from ..futures import Future
from . import _watchdog
from ._state import _world, get_rank
from .store import DistBackendError, DistNetworkError


class Work:
    """An operation in flight (``async_op=True``), as ``torch.distributed.Work``.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> t = ember.ones(3); w = dist.all_reduce(t, async_op=True)
        >>> w.wait(), w.is_completed(), t
        (True, True, tensor([1., 1., 1.]))
        >>> dist.destroy_process_group()
    """

    def __init__(self, pg, reqs, finish, outputs, what, statuses=None):
        self.pg, self._reqs, self._finish, self._outputs, self._what = pg, reqs, finish, \
            outputs, what
        self._statuses, self._done, self._exc = statuses, False, None
        # the profiler's "gloo:all_reduce" range runs from the launch to the completion, as
        # torch's trace shows the collective next to the ops it overlaps
        self._rec, self._timeout = hooks.profiler, None
        name = "nccl" if pg.engine.device_type == "cuda" else pg.name().split(":")[-1]
        self._ev = self._rec and self._rec.begin(_world.comm_name or f"{name}:{what}",
                                                 "communication", nest=False)

    def is_completed(self):
        if not self._done and self.pg.engine.test(self._reqs, self._statuses):
            self._complete()
        return self._done

    def is_success(self):
        return self._done and self._exc is None

    def exception(self):
        return self._exc

    def wait(self, timeout=None):
        if not self._done:
            t = timeout if timeout is not None else self._timeout or self.pg.timeout
            t = t.total_seconds() if isinstance(t, datetime.timedelta) else float(t)
            try:
                self.pg.engine.wait(self._reqs, t, self._what, self._statuses)
            except TimeoutError as e:
                self._exc = DistBackendError(f"[Rank {get_rank()}] {e} (group ranks "
                                             f"{self.pg.ranks}){_failed_note(self.pg)}")
                raise self._exc from None
            self._complete()
        return True

    synchronize = wait

    def _complete(self):
        self._done = True
        if self._ev is not None:
            self._rec.end(self._ev)
        if self._finish is not None:
            self._finish()

    def result(self):
        return self._outputs

    def source_rank(self):
        return self._statuses[0].Get_source() if self._statuses else -1

    def get_future(self):
        fut = Future()
        fut._waiter = lambda: (self.wait(), fut.done() or fut.set_result(self._outputs))
        if self._done:
            fut.set_result(self._outputs)
        return fut


def _finish(pg, reqs, finish, outputs, what, async_op, statuses=None):
    w = Work(pg, reqs, finish, outputs, what, statuses)
    if async_op:
        return w
    w.wait()
    return None


def _then(w, after):
    """Run ``after`` once ``w`` completes (its results written)."""
    first = w._finish
    w._finish = lambda: (first and first(), after())
    return w


def report_failure(exc):
    """Tell the other ranks (through the store) that this one failed with ``exc``: their
    waits then raise naming it instead of running into the timeout. ember's spawn and
    emberrun call this for an exception escaping a worker."""
    store = _world.store
    if store is None or _world.pg is None:
        return
    try:
        store.compare_set("failed_rank", "", str(get_rank()))
        store.compare_set(f"failed_error_{get_rank()}", "", f"{type(exc).__name__}: {exc}"[:500])
        _watchdog.linger(_world)
    except Exception:
        pass                            # the store may be gone with the master


def _check_failed(what):
    store = _world.store
    if store is None:
        return
    try:
        if not store.check(["failed_rank"]):
            _world.store_lost = None
            return
        r = store.get("failed_rank").decode()
        err = store.get(f"failed_error_{r}").decode()
    except (OSError, DistNetworkError):
        # NOTE: a grace period, because rank 0 closes the store at its destroy_process_group
        # while a peer may still be finishing the same last collective
        now = time.monotonic()
        _world.store_lost = _world.store_lost or now
        if now - _world.store_lost < _watchdog.STORE_LOST_GRACE:
            return
        if not _world.own_store:
            raise DistBackendError(f"[Rank {get_rank()}] {what} aborted: the store stopped "
                                   "answering") from None
        r, err = "0", "the store it hosts stopped answering (rank 0 died or exited)"
    except Exception:
        return
    e = DistBackendError(f"[Rank {get_rank()}] {what} aborted: rank {r} failed: {err}")
    e.failed_rank = int(r)
    raise e


def _peer_lost(what, exc):
    """MPI saw a connection to a peer break (it died): name the peer from the store, where
    the watchdog puts it a moment after the kernel closes the dead process's sockets."""
    deadline = time.monotonic() + _watchdog.STORE_LOST_GRACE + 2
    while time.monotonic() < deadline:
        _check_failed(what)
        time.sleep(0.1)
    raise DistBackendError(f"[Rank {get_rank()}] {what} failed in MPI: {exc}") from exc


def _failed_note(pg):
    """Which rank reported a failure in the store, if any did (see ``report_failure``)."""
    store = _world.store
    try:
        if store is not None and store.check(["failed_rank"]):
            return f"; rank {store.get('failed_rank').decode()} failed first"
    except Exception:
        pass
    return ""
