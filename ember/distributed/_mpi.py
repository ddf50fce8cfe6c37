"""Bringing MPI up under each launch style, and waiting on its requests.

* ``mpiexec -n N python train.py``: MPI's process manager started the ranks; ``COMM_WORLD``
  already holds all of them.
* Processes started by anything else (``ember.multiprocessing.spawn``, ``mp.Process``,
  ``emberrun``, a cluster scheduler): each process is an MPI *singleton* (``COMM_WORLD`` of
  size 1). They are joined into one communicator through MPI's own dynamic-process calls:
  rank 0 opens a port (``MPI_Open_port``) and posts its name in the rendezvous store; rank
  k connects (``MPI_Comm_connect``) while ranks 0..k-1 accept (``MPI_Comm_accept``), and the
  intercommunicator is merged into one intracommunicator of k+1 ranks. The store only carries
  the port name and the turn; every byte of every collective goes through MPI.

NOTE: MPICH 5.0.x refuses connect/accept between singletons ("Local and remote groups ...
must not contain the same processes", pmodels/mpich#7805); 4.3.x works, so the extra pins
``mpich<5``.
"""
import os
import time

_MPI = None


def mpi():
    """mpi4py's ``MPI`` module, importing (and so initialising) MPI on first use."""
    global _MPI
    if _MPI is None:
        # NOTE: libfabric (ofi), not UCX: UCX's shared-memory transport maps a peer's segment
        # through /proc/PID/fd, which containers refuse; with named segments
        # (UCX_POSIX_USE_PROC_LINK=n) 2 joined singletons ran faster, but 4 hung in the
        # collectives test. Set MPIR_CVAR_CH4_NETMOD=ucx to try it.
        os.environ.setdefault("MPIR_CVAR_CH4_NETMOD", "ofi")
        for k in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
            os.environ.setdefault(k, "1")      # Open MPI refuses root without these
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise RuntimeError("ember.distributed's CPU backend needs mpi4py and an MPI "
                               "library: pip install 'ember[distributed]' (mpi4py, mpich)"
                               ) from e
        _MPI = MPI
    return _MPI


def available():
    """True when mpi4py can be imported (without initialising MPI)."""
    if _MPI is not None:
        return True
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def launched_rank_size():
    """``(rank, size)`` from the environment an MPI launcher sets, or None."""
    for r, s in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                 ("PMIX_RANK", "PMIX_SIZE"), ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE")):
        if r in os.environ and s in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    return None


def world_comm(store, rank, world_size, timeout):
    """An intracommunicator of ``world_size`` processes in which this one has ``rank``."""
    MPI = mpi()
    world = MPI.COMM_WORLD
    if world.Get_size() == world_size:          # started by mpiexec
        comm = world.Split(0, rank)             # the caller's rank order, if it differs
    elif world.Get_size() != 1:
        raise ValueError(f"MPI's COMM_WORLD has {world.Get_size()} processes but "
                         f"init_process_group was given world_size={world_size}")
    elif world_size == 1:
        comm = MPI.COMM_SELF.Dup()
    else:
        comm = _join_singletons(MPI, store, rank, world_size, timeout)
    comm.Set_errhandler(MPI.ERRORS_RETURN)      # MPI errors raise instead of aborting the job
    return comm


def _join_singletons(MPI, store, rank, world_size, timeout):
    comm, port = MPI.COMM_SELF, None
    if rank == 0:
        port = MPI.Open_port()
        store.set("mpi_port", port)
    for k in range(1, world_size):
        if rank < k:
            if rank == 0:
                store.set(f"mpi_turn_{k}", b"1")   # rank k connects only once 0..k-1 accept
            inter = comm.Accept(port, root=0)
        elif rank == k:
            store.wait(["mpi_port", f"mpi_turn_{k}"], timeout)
            inter = MPI.COMM_SELF.Connect(store.get("mpi_port").decode(), root=0)
        else:
            continue
        merged = inter.Merge(high=rank == k)
        inter.Disconnect()
        if comm is not MPI.COMM_SELF:
            comm.Free()
        comm = merged
    if rank == 0:
        MPI.Close_port(port)
    out = comm.Split(0, rank)
    comm.Free()
    return out


def wait_all(reqs, timeout, what, statuses=None, check=None):
    """Poll ``reqs`` to completion, yielding the CPU between polls.

    NOTE: MPI's own blocking waits spin; with more ranks than cores (a laptop, CI) spinning
    ranks starve the ones they wait for (figures in docs/distributed.md). ``check()`` runs about once a second while
    waiting (it raises when a peer reported a failure).
    """
    MPI, i, deadline, next_check = mpi(), 0, None, time.monotonic() + 1.0
    while not MPI.Request.Testall(reqs, statuses):
        i += 1
        if i > 64:
            if deadline is None:
                deadline = time.monotonic() + timeout
            elif time.monotonic() > deadline:
                raise TimeoutError(f"{what} timed out after {timeout:.0f}s")
            if check is not None and time.monotonic() > next_check:
                check()
                next_check = time.monotonic() + 1.0
            time.sleep(min(1e-3, 1e-6 * (i - 64)))
        elif i > 8:
            os.sched_yield()
