"""The MPI engine: collectives on host arrays through mpi4py's non-blocking calls (large
all-reduces on one node through ``_mpi.NodeShm``)."""
import numpy as np

from .._backends import backend
from .._device import CPU as _CPU, device as _device
from . import _mpi
from ._work import _check_failed, _peer_lost
from ._state import RedOpType

_MPI_OPS = {RedOpType.SUM: "SUM", RedOpType.AVG: "SUM", RedOpType.PRODUCT: "PROD",
            RedOpType.MIN: "MIN", RedOpType.MAX: "MAX", RedOpType.BAND: "BAND",
            RedOpType.BOR: "BOR", RedOpType.BXOR: "BXOR"}


class _MpiEngine:
    """Collectives on host arrays through mpi4py's non-blocking calls."""
    device_type = "cpu"

    def __init__(self, comm):
        self.comm, self.MPI = comm, _mpi.mpi()
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._shm = None        # _mpi.NodeShm; False: the ranks span nodes; None: not asked
        for c in (self.MPI.COMM_WORLD, self.MPI.COMM_SELF):
            c.Set_errhandler(self.MPI.ERRORS_RETURN)    # a dead peer raises, not aborts

    def stage(self, arr):
        return np.ascontiguousarray(backend_of(arr).to_host(arr))

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def _test(self, reqs, statuses=None):
        if self._shm:       # shared-memory all-reduces move only in this rank's calls
            self._shm.poll()
        if reqs and isinstance(reqs[0], _mpi.ShmJob):
            return reqs[0].done
        return self.MPI.Request.Testall(reqs, statuses)

    def test(self, reqs, statuses=None):
        try:
            return self._test(reqs, statuses)
        except self.MPI.Exception as e:
            _peer_lost("a collective", e)

    def wait(self, reqs, timeout, what, statuses=None):
        try:
            _mpi.wait_all(reqs, timeout, what, statuses, lambda: _check_failed(what),
                          lambda: self._test(reqs, statuses))
        except self.MPI.Exception as e:
            _peer_lost(what, e)

    def _b(self, a):
        return [a.reshape(-1).view(np.uint8), self.MPI.BYTE]

    def _op(self, op):
        return getattr(self.MPI, _MPI_OPS[op])

    def allreduce(self, buf, op):
        if buf.nbytes >= _mpi.NodeShm.MIN and self.size > 1:
            if self._shm is None:           # every rank asks at the same collective
                self._shm = _mpi.NodeShm.of(self.comm) or False
            if self._shm:
                return [self._shm.start(buf, _MPI_OPS[op])]
        return [self.comm.Iallreduce(self.MPI.IN_PLACE, buf, self._op(op))]

    def reduce(self, buf, op, root):
        send = self.MPI.IN_PLACE if self.rank == root else buf
        return [self.comm.Ireduce(send, buf if self.rank == root else None, self._op(op), root)]

    def broadcast(self, buf, root):
        return [self.comm.Ibcast(self._b(buf), root)]

    def allgather(self, send, recv):
        return [self.comm.Iallgather(self._b(send), self._b(recv))]

    def reduce_scatter(self, send, recv, op):
        return [self.comm.Ireduce_scatter_block(send, recv, self._op(op))]

    def gather(self, send, recv, root):
        return [self.comm.Igather(self._b(send), self._b(recv) if recv is not None else None,
                                  root)]

    def scatter(self, send, recv, root):
        return [self.comm.Iscatter(self._b(send) if send is not None else None, self._b(recv),
                                   root)]

    def alltoallv(self, send, scounts, recv, rcounts):
        d = lambda c: np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int).tolist()
        return [self.comm.Ialltoallv([send.reshape(-1).view(np.uint8), (scounts, d(scounts)),
                                      self.MPI.BYTE],
                                     [recv.reshape(-1).view(np.uint8), (rcounts, d(rcounts)),
                                      self.MPI.BYTE])]

    def send(self, buf, dst, tag):
        return [self.comm.Isend(self._b(buf), dst, tag)]

    def recv(self, buf, src, tag):
        return [self.comm.Irecv(self._b(buf), self.MPI.ANY_SOURCE if src is None else src, tag)]

    def barrier(self):
        return [self.comm.Ibarrier()]

    def progress(self):
        self.comm.Iprobe(self.MPI.ANY_SOURCE, self.MPI.ANY_TAG)
        if self._shm:
            self._shm.poll()

    def subgroup(self, ranks, collective=True):
        """The members ``ranks`` (of this communicator) as an engine; every rank calls it
        (``MPI_Comm_create``), or with ``collective=False`` only the members do
        (``MPI_Comm_create_group``)."""
        g = self.comm.Get_group().Incl(ranks)
        comm = self.comm.Create(g) if collective else self.comm.Create_group(g)
        return None if comm == self.MPI.COMM_NULL else _MpiEngine(comm)

    def split(self, color, key):
        """``MPI_Comm_split``: one engine per color (None: this rank in none)."""
        comm = self.comm.Split(self.MPI.UNDEFINED if color is None else color, key)
        return None if comm == self.MPI.COMM_NULL else _MpiEngine(comm)

    def source(self, status):
        return status.Get_source()

    def close(self):
        if self._shm:
            self._shm.close()
        if self.comm not in (self.MPI.COMM_NULL, self.MPI.COMM_WORLD):
            self.comm.Free()


def backend_of(arr):
    return backend(_CUDA if type(arr).__module__.split(".")[0] == "cupy" else _CPU)


_CUDA = _device("cuda")
