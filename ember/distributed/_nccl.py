"""The 'nccl' backend: collectives on CUDA tensors through NCCL, via ``cupy.cuda.nccl``.

Rank 0 makes the NCCL unique id and posts it in the rendezvous store; every rank builds its
``NcclCommunicator`` from it on its current CUDA device. Each collective is enqueued on
CuPy's current stream (so it is ordered after the kernels that produced its input) and a
CUDA event recorded after it is the Work's request: ``wait`` polls the event.

NCCL has no bitwise reductions (as torch's nccl backend); gather, scatter and all-to-all are
grouped sends and receives.
"""
import time

_DTYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
           "bfloat16": "NCCL_BFLOAT16", "int8": "NCCL_INT8", "uint8": "NCCL_UINT8",
           "int32": "NCCL_INT32", "int64": "NCCL_INT64", "bool": "NCCL_UINT8"}
_OPS = {0: "NCCL_SUM", 1: "NCCL_AVG", 2: "NCCL_PROD", 3: "NCCL_MIN", 4: "NCCL_MAX"}


def available():
    try:
        from cupy.cuda import nccl
        return nccl.available if hasattr(nccl, "available") else True
    except Exception:
        return False


class _Event:
    """Completion of the work enqueued on ``stream`` so far."""

    def __init__(self, cupy, stream):
        self.ev = cupy.cuda.Event(block=False, disable_timing=True)
        self.ev.record(stream)

    def done(self):
        return self.ev.done


class NcclEngine:
    """Collectives on device arrays through one NCCL communicator.

    ``nccl``/``xp``/``event`` stand in for ``cupy.cuda.nccl``, ``cupy`` and ``_Event``
    in tests without a GPU."""
    device_type = "cuda"

    def __init__(self, store, rank, world_size, device_id=None, nccl=None,
                 xp=None, event=None, comm=None):
        if xp is None:
            import cupy as xp
            from cupy.cuda import nccl
            if device_id is not None:
                xp.cuda.Device(getattr(device_id, "index", device_id) or 0).use()
        self.xp, self.nccl, self.rank, self.size = xp, nccl, rank, world_size
        self.event = event or (lambda: _Event(xp, xp.cuda.get_current_stream()))
        if comm is None:
            import pickle
            if rank == 0:
                store.set("nccl_id", pickle.dumps(nccl.get_unique_id()))
            uid = pickle.loads(store.get("nccl_id"))
            comm = nccl.NcclCommunicator(world_size, uid, rank)
        self.comm, self.store = comm, store

    # -------------------------------------------------------------- arrays and requests
    def stage(self, arr):
        return self.xp.ascontiguousarray(self.xp.asarray(arr))

    def empty(self, shape, dtype):
        return self.xp.empty(shape, dtype)

    def concat(self, arrs):
        return self.xp.concatenate([self.stage(a).reshape(-1) for a in arrs])

    def _stream(self):
        s = getattr(getattr(self.xp, "cuda", None), "get_current_stream", None)
        return s().ptr if s is not None else 0

    def _args(self, a):
        from .._storage import _ptr
        name = "bool" if a.dtype.kind == "b" else str(a.dtype)
        if name not in _DTYPES:
            raise RuntimeError(f"NCCL has no type for {a.dtype}")
        return _ptr(a), a.size, getattr(self.nccl, _DTYPES[name])

    def _op(self, op):
        if int(op) not in _OPS:
            raise RuntimeError(f"NCCL has no ReduceOp.{op.name} (only SUM, AVG, PRODUCT, MIN, "
                               "MAX)")
        return getattr(self.nccl, _OPS[int(op)])

    def test(self, reqs, statuses=None):
        return all(r.done() for r in reqs)

    def wait(self, reqs, timeout, what, statuses=None):
        deadline = time.monotonic() + timeout
        while not self.test(reqs):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} timed out after {timeout:.0f}s")
            time.sleep(1e-5)

    def progress(self):
        pass

    def _done(self):
        return [self.event()]

    # -------------------------------------------------------------- collectives
    def allreduce(self, buf, op):
        p, n, dt = self._args(buf)
        self.comm.allReduce(p, p, n, dt, self._op(op), self._stream())
        return self._done()

    def reduce(self, buf, op, root):
        p, n, dt = self._args(buf)
        self.comm.reduce(p, p, n, dt, self._op(op), root, self._stream())
        return self._done()

    def broadcast(self, buf, root):
        p, n, dt = self._args(buf.reshape(-1).view(self.xp.uint8))
        self.comm.broadcast(p, p, n, dt, root, self._stream())
        return self._done()

    def allgather(self, send, recv):
        s, n, dt = self._args(send.reshape(-1).view(self.xp.uint8))
        self.comm.allGather(s, self._args(recv)[0], n, dt, self._stream())
        return self._done()

    def reduce_scatter(self, send, recv, op):
        r, n, dt = self._args(recv)
        self.comm.reduceScatter(self._args(send)[0], r, n, dt, self._op(op), self._stream())
        return self._done()

    def _grouped(self, sends, recvs):
        """Point-to-point transfers ``[(array, peer)]`` in one NCCL group."""
        st = self._stream()
        self.nccl.groupStart()
        for a, peer in sends:
            p, n, dt = self._args(a.reshape(-1).view(self.xp.uint8))
            self.comm.send(p, n, dt, peer, st)
        for a, peer in recvs:
            p, n, dt = self._args(a.reshape(-1).view(self.xp.uint8))
            self.comm.recv(p, n, dt, peer, st)
        self.nccl.groupEnd()
        return self._done()

    def gather(self, send, recv, root):
        if self.rank != root:
            return self._grouped([(send, root)], [])
        recv[self.rank] = send
        return self._grouped([], [(recv[r], r) for r in range(self.size) if r != root])

    def scatter(self, send, recv, root):
        if self.rank != root:
            return self._grouped([], [(recv, root)])
        n = recv.size
        pieces = send.reshape(self.size, -1) if n else send
        recv[...] = pieces[self.rank].reshape(recv.shape)
        return self._grouped([(pieces[r], r) for r in range(self.size) if r != root], [])

    def alltoallv(self, send, scounts, recv, rcounts):
        s8, r8 = send.reshape(-1).view(self.xp.uint8), recv.reshape(-1).view(self.xp.uint8)
        so = [sum(scounts[:i]) for i in range(self.size)]
        ro = [sum(rcounts[:i]) for i in range(self.size)]
        me = self.rank
        r8[ro[me]:ro[me] + rcounts[me]] = s8[so[me]:so[me] + scounts[me]]
        others = [r for r in range(self.size) if r != me]
        return self._grouped([(s8[so[r]:so[r] + scounts[r]], r) for r in others],
                             [(r8[ro[r]:ro[r] + rcounts[r]], r) for r in others])

    def send(self, buf, dst, tag):
        return self._grouped([(buf, dst)], [])

    def recv(self, buf, src, tag):
        if src is None:
            raise RuntimeError("NCCL cannot receive from any source: give src")
        return self._grouped([], [(buf, src)])

    def barrier(self):
        return self.allreduce(self.xp.zeros(1, self.xp.float32), 0)

    def subgroup(self, ranks):
        raise NotImplementedError("new_group on the nccl backend is not implemented in ember "
                                  "yet")

    def close(self):
        destroy = getattr(self.comm, "destroy", None)
        if destroy is not None:
            destroy()
