"""``torch.cuda.nccl``: which NCCL ember's CuPy carries (``cupy.cuda.nccl``), and whether
tensors can take part in its collectives.

Example:
    >>> import ember, warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     ember.cuda.nccl.is_available([ember.ones(2)])
    False
"""
import warnings

SUM = 0       # ncclRedOp_t's ncclSum


def _nccl():
    try:
        with warnings.catch_warnings():     # (CuPy warns when it cannot load libnccl)
            warnings.simplefilter("ignore")
            from cupy.cuda import nccl
    except ImportError:
        return None
    return nccl if nccl.available else None


def is_available(tensors):
    """Whether NCCL is there and ``tensors`` could take part in one collective: dense,
    contiguous, on GPUs, one per GPU."""
    if _nccl() is None:
        warnings.warn("ember's CuPy has no NCCL library (pip install nvidia-nccl-cu12)",
                      stacklevel=2)
        return False
    devices = set()
    for t in tensors:
        if t.is_sparse or not t.is_contiguous() or not t.is_cuda or t.get_device() in devices:
            return False
        devices.add(t.get_device())
    return True


def version():
    """NCCL's version as ``(major, minor, patch)``."""
    nccl = _nccl()
    if nccl is None:
        raise RuntimeError("NCCL is not available: ember's CuPy could not load libnccl "
                           "(pip install nvidia-nccl-cu12)")
    v = nccl.get_version()
    # NCCL's code: major*1000 + minor*100 + patch before 2.9, major*10000 + minor*100 + patch on
    return (v // 1000, v % 1000 // 100, v % 100) if v < 10000 else \
        (v // 10000, v % 10000 // 100, v % 100)


def unique_id():
    """A new NCCL unique id (bytes), for ``init_rank`` in every process of a clique."""
    nccl = _nccl()
    if nccl is None:
        raise RuntimeError("NCCL is not available: ember's CuPy could not load libnccl")
    return bytes(b & 0xFF for b in nccl.get_unique_id())


def init_rank(num_ranks, uid, rank):
    """This process's NCCL communicator in a clique of ``num_ranks`` (a CuPy
    ``NcclCommunicator``), over the id ``unique_id`` gave."""
    nccl = _nccl()
    if nccl is None:
        raise RuntimeError("NCCL is not available: ember's CuPy could not load libnccl")
    return nccl.NcclCommunicator(num_ranks, tuple(b if b < 128 else b - 256 for b in uid), rank)
