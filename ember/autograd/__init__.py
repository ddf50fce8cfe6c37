"""Automatic differentiation: ``backward``, ``grad``, ``Function``, grad modes, anomaly
detection, ``gradcheck``; ``functional`` loads on first use."""
import numpy as np

from .._device import CPU
from . import graph  # noqa: F401
from .anomaly_mode import detect_anomaly, set_detect_anomaly  # noqa: F401
from .engine import run_backward
# NOTE: imported eagerly (it is light): the function shadows its module's name, as in torch,
# which a lazy import would undo once someone imports ember.autograd.gradcheck directly.
from .gradcheck import GradcheckError, gradcheck, gradgradcheck  # noqa: F401
from .grad_mode import (enable_grad, enforce_grad_layout_policy, inference_mode,  # noqa: F401
                        is_grad_enabled, is_multithreading_enabled, no_grad, set_grad_enabled,
                        set_multithreading_enabled)
from .graph import GradientEdge, Node, _edge_meta, edge_of  # noqa: F401


_FUNCTION_NAMES = ("Function", "FunctionCtx", "once_differentiable", "NestedIOFunction")


def is_view_replay_enabled():
    """Whether autograd rebuilds a view's history by replaying its view op rather than by
    ``as_strided``. NOTE: True, unlike torch's default: ember always replays (each view keeps
    its view function), it has no ``as_strided`` fallback to switch to.

    Example:
        >>> import ember
        >>> ember.autograd.is_view_replay_enabled()
        True
    """
    return True


def kineto_available():
    """Whether the Kineto profiling library is present: never in ember, whose profiler
    (``ember.profiler``) records ops itself.

    Example:
        >>> import ember
        >>> ember.autograd.kineto_available()
        False
    """
    return False


def has_torch_function(relevant_args):
    """Whether any of ``relevant_args`` overrides ``__torch_function__`` (see
    ``ember.overrides.has_torch_function``).

    Example:
        >>> import ember
        >>> ember.autograd.has_torch_function((ember.ones(1),))
        False
    """
    from ..overrides import has_torch_function as has
    return has(relevant_args)


def __getattr__(name):
    # functional and profiler are analysis tools, and custom Functions are defined by few
    # programs: keep them off ``import ember``'s path
    import importlib
    if name in _FUNCTION_NAMES:
        value = getattr(importlib.import_module(".function", __name__), name)
        globals()[name] = value
        return value
    if name in ("Variable", "variable"):
        # NOTE: as in torch, ember.autograd.variable is the (removed) function, though the
        # module that defines Variable has that name too: the import binds the module first
        mod = importlib.import_module(".variable", __name__)
        globals().update(Variable=mod.Variable, variable=mod.variable)
        return globals()[name]
    if name not in ("functional", "profiler", "function", "forward_ad"):
        raise AttributeError(f"module 'ember.autograd' has no attribute '{name}'")
    return importlib.import_module(f".{name}", __name__)


def __dir__():
    return sorted(set(globals()) | set(_FUNCTION_NAMES) | {"Variable"})


_mods = None


def _lazy():
    """``(ember._tensor, ember._ops.creation)``, imported on first use (they import this
    package). Kept here: ``from package import module`` inside a function runs importlib's
    Python ``_handle_fromlist`` on every call (once per backward)."""
    global _mods
    if _mods is None:
        from .. import _tensor
        from .._ops import creation
        _mods = _tensor, creation
    return _mods


def _tensors(x):
    if x is None:
        return None
    if type(x) in (list, tuple):
        return list(x)
    return [x] if isinstance(x, (_lazy()[0].Tensor, GradientEdge)) else list(x)


def _seed_grads(outputs, grad_outputs, create_graph):
    tensor_mod, creation = _lazy()
    grads = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        edge = type(out) is GradientEdge
        if edge:        # its shape and dtype: what the node receives
            out = _edge_meta(out)
        if g is None:
            if (out.numel() if edge else out._data.size) != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if not out.dtype.is_floating_point:
                raise RuntimeError(f"grad can be implicitly created only for real scalar "
                                   f"outputs but got {out.dtype}")
            # new and history-less: no detach needed
            if not edge and out.device is CPU and type(out._data) is np.ndarray:
                # ones_like's cpu array, without its options' handling (once per backward)
                seed = np.empty(out._data.shape, out._data.dtype)
                seed.fill(1)
                grads.append(tensor_mod.Tensor._wrap(seed))
            else:
                grads.append(creation.ones(out.shape, dtype=out.dtype, device=out.device) if edge
                             else creation.ones_like(out))
            continue
        elif not isinstance(g, tensor_mod.Tensor):
            from .._ops.creation import tensor
            g = tensor(g, dtype=out.dtype, device=out.device)
        elif tuple(g.shape) != tuple(out.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                               f"{g.shape} and output[{i}] has a shape of {out.shape}.")
        grads.append(g if create_graph else g.detach())
    return grads


def _roots(outputs):
    roots = []
    for i, out in enumerate(outputs):
        if type(out) is GradientEdge:
            roots.append(out[:2])
            continue
        if not out._requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have "
                               "a grad_fn")
        roots.append(edge_of(out))
    return roots


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the graph's leaves.

    Example:
        >>> import ember
        >>> x = ember.tensor([1.0, 2.0], requires_grad=True)
        >>> ember.autograd.backward((x ** 2).sum())
        >>> x.grad
        tensor([2., 4.])
    """
    outputs = _tensors(tensors)
    grads = _tensors(grad_tensors) or [None] * len(outputs)
    if retain_graph is None:
        retain_graph = create_graph
    inputs = _tensors(inputs)
    if inputs is not None and not inputs:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    run_backward(_roots(outputs), _seed_grads(outputs, grads, create_graph), retain_graph,
                 create_graph, inputs=inputs, accumulate=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of ``outputs`` w.r.t. ``inputs``, returned (not accumulated in .grad).

    Example:
        >>> import ember
        >>> x = ember.tensor(3.0, requires_grad=True)
        >>> (g,) = ember.autograd.grad(x ** 3, x, create_graph=True)
        >>> g, ember.autograd.grad(g, x)[0]
        (tensor(27., grad_fn=<MulBackward0>), tensor(18.))
    """
    outs, ins = _tensors(outputs), _tensors(inputs)
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads="
                         "True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    for t in ins:
        if type(t) is not GradientEdge and not t._requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    grads = _tensors(grad_outputs) or [None] * len(outs)
    if retain_graph is None:
        retain_graph = create_graph
    if is_grads_batched:
        return _batched_grad(outs, ins, grads, retain_graph, create_graph, allow_unused,
                             materialize_grads)
    res = run_backward(_roots(outs), _seed_grads(outs, grads, create_graph), retain_graph,
                       create_graph, inputs=ins, allow_unused=allow_unused, accumulate=False)
    if materialize_grads:
        from .._ops.creation import zeros
        metas = [_edge_meta(t) if type(t) is GradientEdge else t for t in ins]
        res = [g if g is not None else zeros(m.shape, dtype=m.dtype, device=m.device)
               for g, m in zip(res, metas)]
    return tuple(res)


def _batched_grad(outs, ins, grads, retain_graph, create_graph, allow_unused, materialize_grads):
    """``grad(is_grads_batched=True)``: the vjp vmapped over the grad_outputs' first dim, as
    torch: one backward pass, its ops batched by vmap's rules (not one pass per slice)."""
    from ..func import vmap
    from .._ops.creation import zeros_like
    unused = []

    def one(*gs):
        res = grad(outs, ins, list(gs), retain_graph=retain_graph, create_graph=create_graph,
                   allow_unused=allow_unused, materialize_grads=materialize_grads)
        unused[:] = [r is None for r in res]
        return tuple(zeros_like(t) if r is None else r for r, t in zip(res, ins))
    res = vmap(one)(*grads)
    return tuple(None if u else r for u, r in zip(unused, res))
