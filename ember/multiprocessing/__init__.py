"""``ember.multiprocessing``: Python's ``multiprocessing`` plus tensors in shared memory and
``spawn``, as ``torch.multiprocessing``.

Tensors moved to shared memory (``share_memory_()``) cross queues and pipes as a reference
to the same memory; others are copied. ``spawn(fn, args, nprocs)`` runs ``fn(i, *args)`` in
``nprocs`` fresh processes and, on ``join``, raises ``ProcessRaisedException`` (with the
child's traceback) or ``ProcessExitedException`` for the first that failed.
"""
import multiprocessing
import multiprocessing.connection
import multiprocessing.spawn
import signal
import sys
import traceback
from multiprocessing import *  # noqa: F401,F403

from . import reductions  # noqa: F401  (registers the shared-memory pickling)
from .reductions import (  # noqa: F401
    get_all_sharing_strategies, get_sharing_strategy, init_reductions, set_sharing_strategy)

__all__ = ["spawn", "start_processes", "ProcessContext", "ProcessRaisedException",
           "ProcessExitedException", "get_context", "set_start_method",
           "get_all_sharing_strategies", "get_sharing_strategy", "init_reductions",
           "set_sharing_strategy"]


class _InstallTorchAlias:
    """Unpickled by a spawned child before it imports the parent's main script: installs the
    ``import torch`` -> ember hook there first, so a script run with ``ember run`` that
    spawns processes runs on ember in them too."""

    def __reduce__(self):
        from ..runner import install
        return install, ()


def _preparation_data(name, _original=multiprocessing.spawn.get_preparation_data):
    data = _original(name)
    from ..runner import TorchAlias
    if any(isinstance(f, TorchAlias) for f in sys.meta_path):
        data["ember_torch_alias"] = _InstallTorchAlias()   # prepare() ignores unknown keys
    return data


multiprocessing.spawn.get_preparation_data = _preparation_data


class ProcessException(Exception):
    def __init__(self, msg, error_index, pid):
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A spawned process raised; the message holds its traceback."""


class ProcessExitedException(ProcessException):
    """A spawned process exited with a non-zero code or was killed by a signal."""

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code, self.signal_name)


def _wrap(fn, i, args, error_queue):
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception as e:
        error_queue.put(traceback.format_exc())
        _report_failure(e)
        sys.exit(1)


def _report_failure(exc):
    dist = sys.modules.get("ember.distributed.distributed_c10d")
    if dist is not None:
        dist.report_failure(exc)


class ProcessContext:
    """The processes ``start_processes`` started; ``join`` waits for them."""

    def __init__(self, processes, error_queues):
        self.processes, self.error_queues = processes, error_queues
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self):
        return [p.pid for p in self.processes]

    def join(self, timeout=None, grace_period=None):
        """Wait up to ``timeout`` for the processes; True once all exited cleanly. When one
        fails, terminate the others and raise for it."""
        if not self.sentinels:
            return True
        ready = multiprocessing.connection.wait(self.sentinels.keys(), timeout=timeout)
        failed = None
        for s in ready:
            i = self.sentinels.pop(s)
            self.processes[i].join()
            if self.processes[i].exitcode != 0 and failed is None:
                failed = i
        if failed is None:
            return not self.sentinels
        for p in self.processes:
            if p.is_alive():
                p.terminate()
            p.join(grace_period)
        p, code = self.processes[failed], self.processes[failed].exitcode
        if self.error_queues[failed].empty():
            if code < 0:
                name = signal.Signals(-code).name
                raise ProcessExitedException(f"process {failed} terminated with signal {name}",
                                             failed, p.pid, code, name)
            raise ProcessExitedException(f"process {failed} terminated with exit code {code}",
                                         failed, p.pid, code)
        tb = self.error_queues[failed].get()
        raise ProcessRaisedException(
            f"\n\n-- Process {failed} terminated with the following error:\n{tb}", failed, p.pid)


class SpawnContext(ProcessContext):
    """The ``ProcessContext`` of ``spawn(join=False)``, under torch's older name."""


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Run ``fn(i, *args)`` for i in ``range(nprocs)``, each in a new process.

    Returns a ProcessContext when ``join`` is False, else joins it (raising for a failure).

    Example:
        >>> import ember.multiprocessing as mp
        >>> mp.start_processes(print, args=("started",), nprocs=1, start_method="fork")
    """
    ctx = multiprocessing.get_context(start_method)
    error_queues, processes = [], []
    for i in range(nprocs):
        q = ctx.SimpleQueue()
        p = ctx.Process(target=_wrap, args=(fn, i, args, q), daemon=daemon)
        p.start()
        error_queues.append(q)
        processes.append(p)
    context = ProcessContext(processes, error_queues)
    if not join:
        return context
    while not context.join():
        pass


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """``start_processes`` with the 'spawn' start method, as ``torch.multiprocessing.spawn``
    (``fn`` must be importable: defined at a module's top level)."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
