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
    walked."""
    import numpy as np

    import ember
    if isinstance(a, np.ndarray):
        return ember.from_numpy(a.copy())
    if type(a) in (list, tuple):
        return type(a)(sample_tensors(x) for x in a)
    return a


def accepted_samples(opdef, dtype, requires_grad=False):
    """``(sample, args, kwargs, result)`` for each sample of ``opdef`` (cpu, ``dtype``) the op
    runs eagerly (warnings off), as ember tensors, float ones requiring grad if asked; the
    samples it refuses are left out. The graph, ONNX and compile registry tests feed the same
    calls to their recorders."""
    import warnings

    import ember
    from ember._graph.record import flatten_tensors
    for s in opdef.samples("cpu", dtype) or []:
        args = sample_tensors(tuple(s.args))
        kwargs = {k: sample_tensors(v) for k, v in s.kwargs.items()}
        if requires_grad:
            for t in flatten_tensors((args, kwargs)):
                if isinstance(t, ember.Tensor) and t.dtype.is_floating_point:
                    t.requires_grad_(True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = opdef(*args, **kwargs)
        except Exception:       # noqa: BLE001 (a sample the op refuses: nothing to record)
            continue
        yield s, args, kwargs, result
