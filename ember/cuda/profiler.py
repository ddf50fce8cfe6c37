"""``torch.cuda.profiler``: start and stop the CUDA profiler's collection (Nsight Systems'
``--capture-range=cudaProfilerApi``, nvprof's ``--profile-from-start off``).

Example:
    >>> import ember
    >>> if ember.cuda.is_available():
    ...     with ember.cuda.profiler.profile():
    ...         y = ember.ones(4, device="cuda") * 2
"""
import contextlib

from ._runtime import check_error, cudart

__all__ = ["start", "stop", "profile"]


def start():
    """Start collecting (``cudaProfilerStart``); ``CudaError`` if the profiler refuses."""
    check_error(cudart().cudaProfilerStart())


def stop():
    """Stop collecting (``cudaProfilerStop``)."""
    check_error(cudart().cudaProfilerStop())


@contextlib.contextmanager
def profile():
    """Collect during the block."""
    try:
        start()
        yield
    finally:
        stop()
