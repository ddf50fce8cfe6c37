"""Bringing MPI up under each launch style, and waiting on its requests.

* ``mpiexec -n N python train.py``: MPI's process manager started the ranks; ``COMM_WORLD``
  already holds all of them.
* Processes started by anything else (``ember.multiprocessing.spawn``, ``mp.Process``,
  ``emberrun``, a cluster scheduler), on their first ``init_process_group``: rank 0 starts a
  PMI server (``_pmi.py``, the protocol ``mpiexec`` speaks to its ranks) and posts its address
  in the rendezvous store; every rank points MPICH's PMI client at it (``PMI_PORT``,
  ``PMI_ID``) before ``MPI_Init``, so the ranks start as one MPI job, as under ``mpiexec``:
  ranks on one host talk through MPICH's shared memory, other hosts through its network
  module. The store and the PMI server carry addresses only; every byte of every collective
  goes through MPI.
* A later group of another size in a process whose MPI is already up: the processes join as
  *singletons* through MPI's dynamic-process calls: rank 0 opens a port (``MPI_Open_port``)
  and posts its name in the store; rank k connects while ranks 0..k-1 accept, and the
  intercommunicator is merged into one intracommunicator of k+1 ranks (over the network
  module: TCP).

Large all-reduces among the ranks of one node go through an MPI shared-memory window
(``NodeShm``) rather than MPICH's all-reduce.

NOTE: MPICH 5.0.x refuses connect/accept between singletons ("Local and remote groups ...
must not contain the same processes", pmodels/mpich#7805); 4.3.x works, so the extra pins
``mpich<5``.
"""
import os
import socket
import sys
import time

import numpy as np

_MPI = None
_SHM_CELLS = {"MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE": str(256 << 10),
              "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS": "64",
              "MPIR_CVAR_CH4_PACK_BUFFER_SIZE": str(256 << 10)}   # must hold a cell


def mpi():
    """mpi4py's ``MPI`` module, importing (and so initialising) MPI on first use."""
    global _MPI
    if _MPI is None:
        # NOTE: libfabric (ofi), not UCX: UCX's shared-memory transport maps a peer's segment
        # through /proc/PID/fd, which containers refuse; with named segments
        # (UCX_POSIX_USE_PROC_LINK=n) 2 joined singletons ran faster, but 4 hung in the
        # collectives test. Set MPIR_CVAR_CH4_NETMOD=ucx to try it.
        os.environ.setdefault("MPIR_CVAR_CH4_NETMOD", "ofi")
        # larger shared-memory cells: a large message needs fewer hand-offs between the two
        # ranks' polls, which on a loaded machine each wait for a time slice
        for k, v in _SHM_CELLS.items():
            os.environ.setdefault(k, v)
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
    one_job = ("mpi4py.MPI" not in sys.modules and world_size > 1 and store is not None
               and launched_rank_size() is None
               and os.environ.get("EMBER_MPI_JOIN") != "connect")
    if one_job:
        _start_as_one_job(store, rank, world_size, timeout)
    MPI = mpi()
    world = MPI.COMM_WORLD
    if one_job:             # MPI ranks are the caller's: no Split (a blocking collective)
        comm = world
    elif world.Get_size() == world_size:        # started by mpiexec, or a later group
        comm = world.Split(0, rank)             # the caller's rank order, if it differs
    elif launched_rank_size() is not None:
        raise ValueError(f"MPI's COMM_WORLD has {world.Get_size()} processes but "
                         f"init_process_group was given world_size={world_size}")
    elif world_size == 1:
        comm = MPI.COMM_SELF.Dup()
    else:
        comm = _join_singletons(MPI, store, rank, world_size, timeout)
    comm.Set_errhandler(MPI.ERRORS_RETURN)      # MPI errors raise instead of aborting the job
    return comm


_PMI_VARS = ("PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE")


def _start_as_one_job(store, rank, world_size, timeout):
    """Start MPI in this process as rank ``rank`` of a job of ``world_size``, through a PMI
    server that rank 0 starts (``_pmi.py``); the hosts of all ranks give MPICH its node map."""
    store.set(f"pmi_host_{rank}", socket.gethostname())
    if rank == 0:
        keys = [f"pmi_host_{r}" for r in range(world_size)]
        store.wait(keys, timeout)
        from . import _pmi
        port = _pmi.start(world_size, timeout,
                          _pmi.process_mapping([store.get(k).decode() for k in keys]))
        base = store
        while hasattr(base, "underlying_store"):
            base = base.underlying_store
        host = getattr(base, "host", None) or socket.gethostname()
        store.set("pmi_addr", f"{host}:{port}")
    store.wait(["pmi_addr"], timeout)
    os.environ.update(PMI_PORT=store.get("pmi_addr").decode(), PMI_ID=str(rank),
                      PMI_RANK=str(rank), PMI_SIZE=str(world_size))
    # NOTE: mpi4py runs MPI_Init holding the GIL, and MPI_Init waits for every rank: rank 0
    # (whose threads may serve the TCPStore) starts it only when no rank needs the store
    store.set(f"pmi_got_{rank}", b"1")
    if rank == 0:
        store.wait([f"pmi_got_{r}" for r in range(world_size)], timeout)
    try:
        mpi()
    finally:                # child processes (DataLoader workers...) must not join the job
        for k in _PMI_VARS:
            os.environ.pop(k, None)


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


def wait_all(reqs, timeout, what, statuses=None, check=None, test=None):
    """Poll ``reqs`` to completion (or until ``test()``, when given, is true): a few polls
    back to back, then a poll per shortest sleep for the first second, then one per
    millisecond. ``check()`` runs about once a second while waiting (it raises when a peer
    reported a failure).

    NOTE: not MPI's own blocking wait, which spins: with more ranks than cores, or other
    work on the machine, spinning ranks starve the ones they wait for (figures in
    docs/distributed.md), and a rank that sleeps gets the CPU back first when it wakes. But the
    sleeps stay short while a transfer may be running: MPI moves a large message through
    shared memory in chunks, each needing both ranks to poll.
    """
    MPI = mpi()
    test = test or (lambda: MPI.Request.Testall(reqs, statuses))
    for _ in range(16):
        if test():
            return
    start = time.monotonic()
    next_check = start + 1.0
    while not test():
        now = time.monotonic()
        if now > start + timeout:
            raise TimeoutError(f"{what} timed out after {timeout:.0f}s")
        if check is not None and now > next_check:
            check()
            next_check = now + 1.0
        time.sleep(1e-6 if now < start + 1.0 else 1e-3)


class NodeShm:
    """All-reduce of large arrays among ranks that share one node, in an MPI-3 shared-memory
    window (``MPI_Win_allocate_shared`` on the group's node communicator): each rank copies
    the parts of its array that others reduce into the input area of its segment, and after a
    barrier reduces its part (chunk ``rank`` of n) reading the others' segments in place and
    writing the result into the result area of its segment; after a second barrier every rank
    copies the n results out. Arrays larger than the window go in rounds. Ops run strictly in
    launch order (every rank launches them in the same order), one at a time, advanced by
    ``poll()``. The two areas are apart so that a rank may copy in the next op's data while a
    slower one still copies out the last results: the barriers alone then order every access.

    NOTE: MPICH's own all-reduce moves a large message through its shared-memory queue in
    cells, each a hand-off that needs both ranks polling (64 MiB at 256 KiB cells: hundreds),
    and copies every byte twice more; here a round costs two barriers. Figures in
    docs/distributed.md.
    """
    MIN = 64 << 10          # bytes: smaller arrays take MPI's all-reduce (fewer barriers)
    CAP = 32 << 20          # window bytes per rank: a larger array goes in rounds
    UFUNCS = {"SUM": np.add, "PROD": np.multiply, "MIN": np.minimum, "MAX": np.maximum,
              "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}

    def __init__(self, node):
        MPI = mpi()
        self.comm, self.queue = node, []
        self.n, self.rank = node.Get_size(), node.Get_rank()
        # NOTE: the largest window at once (tmpfs commits only the pages touched): growing it
        # later would take more blocking collectives, which do not notice a dead peer
        self.cap = self.CAP
        self.win = MPI.Win.Allocate_shared(self.cap + self.cap // self.n + 64, 1, comm=node)
        self.win.Set_errhandler(MPI.ERRORS_RETURN)
        self.win.Lock_all(MPI.MODE_NOCHECK)     # a passive epoch: Sync orders the copies
        self.segs = [np.frombuffer(self.win.Shared_query(j)[0], np.uint8) for j in range(self.n)]

    @classmethod
    def of(cls, comm):
        """The node-local reducer of ``comm`` (collective over it), or None when its ranks are
        not all on one node (as ``MPI_Comm_split_type`` sees it: joined singletons on one
        host are on one node too, and get a shared window)."""
        MPI = mpi()
        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        if node.Get_size() == comm.Get_size() > 1:
            node.Set_errhandler(MPI.ERRORS_RETURN)
            return cls(node)
        node.Free()
        return None

    def start(self, buf, op, src=None, scale=None):
        """Queue the in-place all-reduce of contiguous ``buf`` with MPI op name ``op``; with
        ``src`` (``(offset, flat array)`` pairs covering ``buf``) the input is read from
        those arrays instead (DDP reads the gradients); ``scale`` multiplies the results on
        their way out (DDP's average: one pass fewer than scaling the inputs)."""
        job = ShmJob(self, buf.reshape(-1), self.UFUNCS[op], src, scale)
        self.queue.append(job)
        self.poll()
        return job

    def poll(self):
        while self.queue and self.queue[0].advance():
            self.queue.pop(0)

    def close(self):
        """Forget the window. NOTE: not ``MPI_Win_free``, a collective that would hang the
        ``destroy_process_group`` of a rank whose peer died; the memory goes at exit."""
        self.queue, self.segs, self.win = [], [], None


def _parts(pieces, lo, hi):
    """``(view, index of its first element)`` of each part of ``pieces`` (``(offset, flat
    array)`` pairs) that lies in the elements ``[lo, hi)``."""
    for at, a in pieces:
        i, j = max(lo, at), min(hi, at + a.size)
        if i < j:
            yield a[i - at:j - at], i


class ShmJob:
    """One all-reduce on a ``NodeShm``: what the engine hands ``Work`` in place of a request."""

    def __init__(self, shm, flat, ufunc, src=None, scale=None):
        self.shm, self.flat, self.ufunc, self.done = shm, flat, ufunc, False
        self.step = max(1, min(flat.size, shm.cap // flat.itemsize))    # elements per round
        self.pos, self.stage, self.req = 0, 0, None
        # (offset, flat array) pairs: where the input comes from and the results go
        self.src, self.scale, self.out = src or [(0, flat)], scale, [(0, flat)]

    def redirect(self, out):
        """Write the results into the arrays ``out`` (``(offset, flat array)`` pairs covering
        the array) instead of the array itself, if none is written yet; True if so. DDP
        writes the reduced bucket straight into the gradients this way (one copy less)."""
        free = not (self.pos or self.stage == 2 or self.done)
        self.out = out if free else self.out
        return free

    def _load(self, x, dst):        # x (times scale) -> dst
        return np.copyto(dst, x) if self.scale is None else np.multiply(x, self.scale, out=dst)

    def advance(self):
        """Run the stages whose barrier has passed; True once the array is reduced."""
        shm, flat = self.shm, self.flat
        while not self.done:
            if self.req is not None:
                if not self.req.Test():
                    return False
                self.req = None
                shm.win.Sync()
            lo, hi = self.pos, min(self.pos + self.step, flat.size)
            n, r = shm.n, shm.rank
            cut = [lo + (hi - lo) * j // n for j in range(n + 1)]
            # chunk j of this round: elements [cut[j], cut[j+1]), at [cut[j] - lo, ...) in
            # every input area seg, its result in res[j]
            seg = [s[:(hi - lo) * flat.itemsize].view(flat.dtype) for s in shm.segs]
            res = [s[shm.cap:shm.cap + (b - a) * flat.itemsize].view(flat.dtype)
                   for s, a, b in zip(shm.segs, cut, cut[1:])]
            if self.stage == 0:             # my data of the others' chunks -> my segment
                for j in range(n):
                    for x, i in _parts(self.src, cut[j], cut[j + 1]) if j != r else ():
                        np.copyto(seg[r][i - lo:i - lo + x.size], x)
            elif self.stage == 1:           # my chunk, reduced from every rank's data
                for x, i in _parts(self.src, cut[r], cut[r + 1]):
                    mine = res[r][i - cut[r]:i - cut[r] + x.size]
                    for k, j in enumerate(j for j in range(n) if j != r):
                        self.ufunc(mine if k else x, seg[j][i - lo:i - lo + x.size], out=mine)
            else:                           # every chunk's result -> self.out
                for j in range(n):
                    for x, i in _parts(self.out, cut[j], cut[j + 1]):
                        self._load(res[j][i - cut[j]:i - cut[j] + x.size], x)
                self.pos, self.stage, self.done = hi, 0, hi == flat.size
                continue
            shm.win.Sync()
            self.req, self.stage = shm.comm.Ibarrier(), self.stage + 1
        return True
