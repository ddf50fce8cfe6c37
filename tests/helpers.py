"""Helpers shared by several test files (no torch here: oracle.py runs code in both libraries)."""
import types

import pytest


def function(lib, name, forward, backward):
    """A ``lib.autograd.Function`` subclass named ``name`` (so its nodes are ``<name>Backward``)
    with ``forward(ctx, *inputs)`` and ``backward(ctx, *grads)``: the one-line custom Functions
    of the autograd tests, in either library."""
    body = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return types.new_class(name, (lib.autograd.Function,), exec_body=lambda ns: ns.update(body))


def skip_if_cupy(reason="CuPy is installed"):
    """Skip a test of the no-GPU error path when CuPy can be imported."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        return
    pytest.skip(reason)


def sample_tensors(a):
    """A sample's arguments with its NumPy arrays made ember tensors (copies), lists and tuples
    walked: the graph and ONNX registry tests feed the same calls to their recorders."""
    import numpy as np

    import ember
    if isinstance(a, np.ndarray):
        return ember.from_numpy(a.copy())
    if type(a) in (list, tuple):
        return type(a)(sample_tensors(x) for x in a)
    return a
