"""``torch.utils.checkpoint``: trade compute for memory by recomputing a segment in backward.

The forward of a checkpointed function runs without recording a graph; its backward runs the
function again with grad on, under the RNG and autocast state of the first run (so dropout
draws the same masks), and backpropagates through that.

- ``use_reentrant=True`` (torch's old default): one ``Function`` whose inputs are the tensor
  arguments; its backward calls ``backward()`` on the recomputed graph, so parameters used
  inside get their ``.grad`` from there (and ``autograd.grad`` cannot reach them).
- ``use_reentrant=False``: the forward also notes every tensor requiring grad that the
  function reads (parameters in a closure too), through dispatch's tracer hook; these are
  the node's inputs and its backward returns their gradients, so ``autograd.grad`` works.

See https://pytorch.org/docs/stable/checkpoint.html.
"""
import contextlib
import warnings

import ember

from .._ops.dispatch import hooks
from .._tensor import Tensor
from ..amp import autocast_mode as _amp
from ..autograd import grad_mode
from ..autograd.function import Function

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError", "CheckpointFunction",
           "noop_context_fn", "detach_variable", "check_backward_validity"]


class CheckpointError(RuntimeError):
    """The recomputation did not reproduce the forward (non-reentrant checkpoint)."""


def noop_context_fn():
    """The default ``context_fn``: no context around the forward or the recomputation."""
    return contextlib.nullcontext(), contextlib.nullcontext()


def detach_variable(inputs):
    """Detached copies of the tensors in ``inputs``, keeping their ``requires_grad``."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(f"Only tuple of tensors is supported. Got Unsupported input type: "
                           f"{type(inputs).__name__}")
    return tuple(x.detach().requires_grad_(x.requires_grad) if isinstance(x, Tensor) else x
                 for x in inputs)


def check_backward_validity(inputs):
    if not any(isinstance(x, Tensor) and x.requires_grad for x in inputs):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None")


class _State:
    """The RNG and autocast state at the forward, replayed around the recomputation."""

    def __init__(self, preserve_rng_state):
        self.rng = ember.get_rng_state() if preserve_rng_state else None
        self.amp = {d: (_amp._enabled[d], _amp._dtypes[d]) for d in _amp._DEVICES}
        self.cache = _amp._cache_enabled[0]

    @contextlib.contextmanager
    def replay(self):
        outer = ember.get_rng_state() if self.rng is not None else None
        if self.rng is not None:
            ember.set_rng_state(self.rng)
        try:
            with contextlib.ExitStack() as stack:
                for dev, (enabled, dtype) in self.amp.items():
                    if enabled or _amp._enabled[dev]:
                        stack.enter_context(_amp.autocast(dev, dtype, enabled, self.cache))
                with grad_mode.enable_grad():
                    yield
        finally:
            if outer is not None:       # the surrounding stream goes on as if nothing ran
                ember.set_rng_state(outer)


class CheckpointFunction(Function):
    """The reentrant checkpoint: ``CheckpointFunction.apply(function, preserve_rng_state,
    *args)``."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        check_backward_validity(args)
        ctx.run_function, ctx.state = run_function, _State(preserve_rng_state)
        ctx.inputs = [None if isinstance(a, Tensor) else a for a in args]
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.save_for_backward(*(a for a in args if isinstance(a, Tensor)))
        return run_function(*args)          # Function.apply runs forward under no_grad

    @staticmethod
    def backward(ctx, *grads):
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors):
            inputs[i] = t
        with ctx.state.replay():
            detached = detach_variable(tuple(inputs))
            outputs = ctx.run_function(*detached)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads)
                 if isinstance(o, Tensor) and o.requires_grad]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not "
                               "necessary")
        ember.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(x.grad if isinstance(x, Tensor) else None for x in detached)


class _Recompute(Function):
    """The non-reentrant checkpoint's node: inputs are every tensor requiring grad that the
    function read; forward hands back the outputs computed already."""

    @staticmethod
    def forward(ctx, run, *inputs):
        ctx.run = run
        return run.outputs

    @staticmethod
    def backward(ctx, *grads):
        run = ctx.run
        with _as_leaves(run.captured):
            outs, detached = run.recompute()
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad and g is not None]
            ins = [t for t in detached + run.captured if t.requires_grad]
            res = ember.autograd.grad([o for o, _ in pairs], ins, [g for _, g in pairs],
                                      allow_unused=True) if pairs and ins else [None] * len(ins)
        res = iter(res)
        return (None,) + tuple(next(res) if t.requires_grad else None
                               for t in detached + run.captured)


@contextlib.contextmanager
def _as_leaves(tensors):
    """Let the captured tensors that have a history act as leaves while the recomputed graph
    is built and differentiated: the gradient stops at them and this node hands it on, and
    the engine runs their own history once, from outside (not twice, the second time freed).
    """
    stash = [(t, t.grad_fn, t._output_nr, t._grad_acc) for t in tensors if t.grad_fn is not None]
    for t, *_ in stash:
        t.grad_fn, t._grad_acc = None, None
    try:
        yield
    finally:
        for t, fn, nr, acc in stash:
            t.grad_fn, t._output_nr, t._grad_acc = fn, nr, acc


class _Run:
    """One non-reentrant checkpointed call: what it needs to run again."""

    def __init__(self, function, args, kwargs, preserve, recompute_ctx, determinism_check):
        self.function, self.args, self.kwargs = function, args, kwargs
        self.state, self.recompute_ctx = _State(preserve), recompute_ctx
        self.check = determinism_check == "default"
        self.explicit = [a for a in args if isinstance(a, Tensor)]

    def trace(self, fwd_ctx):
        """Run the forward without a graph, noting the grad-requiring tensors read."""
        seen, prev = {id(t): t for t in self.explicit}, hooks.tracer
        captured = []

        def tracer(opdef, args, kwargs, outs):
            for a in args:
                for t in (a if type(a) in (list, tuple) else (a,)):
                    if isinstance(t, Tensor) and t._requires_grad and id(t) not in seen:
                        seen[id(t)] = t
                        captured.append(t)
            if prev is not None:
                prev(opdef, args, kwargs, outs)
        hooks.tracer = tracer
        try:
            with grad_mode.no_grad(), fwd_ctx:
                out = self.function(*self.args, **self.kwargs)
        finally:
            hooks.tracer = prev
        self.captured = captured
        return out

    def recompute(self):
        with self.state.replay(), self.recompute_ctx:
            detached = list(detach_variable(tuple(self.explicit)))
            it = iter(detached)
            args = [next(it) if isinstance(a, Tensor) else a for a in self.args]
            outs = _tensors_of(self.function(*args, **self.kwargs))
        if self.check and [_meta(o) for o in outs] != self.meta:
            raise CheckpointError(
                "torch.utils.checkpoint: Recomputed values for the following tensors have "
                "different metadata than during the forward pass.\n" + "\n".join(
                    f"tensor at position {i}:\nsaved metadata: {a}\nrecomputed metadata: {b}"
                    for i, (a, b) in enumerate(zip(self.meta, map(_meta, outs))) if a != b))
        return outs, [t for t in detached]


def _meta(t):
    return {"shape": tuple(t.shape), "dtype": t.dtype, "device": t.device}


def _tensors_of(out):
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [o for o in out if isinstance(o, Tensor)]
    return []


def _with_tensors(out, new):
    """``out`` with its tensors replaced, in order, by ``new``."""
    if isinstance(out, Tensor):
        return new[0]
    if isinstance(out, (tuple, list)):
        it = iter(new)
        return type(out)(next(it) if isinstance(o, Tensor) else o for o in out)
    return out


def _checkpoint_without_reentrant(function, preserve, context_fn, determinism_check, args,
                                  kwargs):
    fwd_ctx, recompute_ctx = context_fn()
    if not grad_mode.state.grad_enabled:       # nothing to recompute for
        with fwd_ctx:
            return function(*args, **kwargs)
    run = _Run(function, args, kwargs, preserve, recompute_ctx, determinism_check)
    out = run.trace(fwd_ctx)
    outs = _tensors_of(out)
    run.outputs, run.meta = tuple(outs), [_meta(o) for o in outs]
    inputs = run.explicit + run.captured
    if not outs or not any(t.requires_grad for t in inputs):
        return out
    new = _Recompute.apply(run, *inputs)
    return _with_tensors(out, list(new))


def checkpoint(function, *args, use_reentrant=None, context_fn=noop_context_fn,
               determinism_check="default", debug=False, **kwargs):
    """Run ``function(*args, **kwargs)`` without keeping its intermediate values; recompute
    them in backward. Gradients equal those of a plain call, dropout included.

    Args:
        use_reentrant (bool): which variant (see the module doc); None warns, as torch, and
            means True.
        preserve_rng_state (bool, default True): replay the forward's RNG state.
        context_fn: returns two context managers, for the forward and for the
            recomputation (``use_reentrant=False`` only).
        determinism_check (str, default "default"): "default" checks that the recomputed
            outputs have the forward's shapes, dtypes and devices; "none" skips it.

    Example:
        >>> import ember
        >>> from ember.utils.checkpoint import checkpoint
        >>> x = ember.ones(3, requires_grad=True)
        >>> y = checkpoint(lambda t: (t * t).sin(), x, use_reentrant=False)
        >>> y.sum().backward()
        >>> x.grad
        tensor([1.0806, 1.0806, 1.0806])
    """
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed "
                      "explicitly. Starting in PyTorch 2.9, calling checkpoint without "
                      "use_reentrant will raise an exception. use_reentrant=False is "
                      "recommended, but if you need to preserve the current default behavior, "
                      "you can pass use_reentrant=True. Refer to docs for more details on the "
                      "differences between the two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if use_reentrant:
        if context_fn is not noop_context_fn or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when "
                             "use_reentrant=False.")
        return CheckpointFunction.apply(function, preserve, *args)
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    return _checkpoint_without_reentrant(function, preserve, context_fn, determinism_check,
                                         args, kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Checkpoint a sequential model in ``segments`` chunks (the last one runs normally).

    Example:
        >>> import ember
        >>> from ember.utils.checkpoint import checkpoint_sequential
        >>> m = ember.nn.Sequential(ember.nn.Linear(2, 2), ember.nn.ReLU(), ember.nn.Linear(2, 1))
        >>> checkpoint_sequential(m, 2, ember.ones(4, 2), use_reentrant=False).shape
        torch.Size([4, 1])
    """
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter "
                      "should be passed explicitly. In version 2.9 we will raise an exception "
                      "if use_reentrant is not passed. use_reentrant=False is recommended, but "
                      "if you need to preserve the current default behavior, you can pass "
                      "use_reentrant=True. Refer to docs for more details on the differences "
                      "between the two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if isinstance(functions, ember.nn.Sequential):
        functions = list(functions.children())

    def run(start, end):
        def forward(x):
            for j in range(start, end + 1):
                x = functions[j](x)
            return x
        return forward

    size, end = len(functions) // segments, -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run(end + 1, len(functions) - 1)(input)
