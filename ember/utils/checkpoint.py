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
import enum
import warnings

import ember

from .._ops import dispatch as _dispatch
from .._ops.dispatch import hooks
from .._tensor import Tensor
from ..amp import autocast_mode as _amp
from ..autograd import grad_mode
from ..autograd.function import Function

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError", "CheckpointFunction",
           "check_backward_validity", "detach_variable", "get_device_states", "set_device_states",
           "noop_context_fn", "set_checkpoint_early_stop", "DefaultDeviceType",
           "set_checkpoint_debug_enabled", "CheckpointPolicy", "SelectiveCheckpointContext",
           "create_selective_checkpoint_contexts", "SAC_IGNORED_OPS", "GraphExecGroup"]


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
        run, group = ctx.run, GraphExecGroup._current
        # in a GraphExecGroup the region is recomputed once; later backward calls of the
        # group differentiate that graph again (kept with its leaves' accumulators)
        done = group._recomputed.get(id(run)) if group is not None else None
        accs = done[2] if done is not None else {}
        with _as_leaves(run.captured, accs):
            outs, detached = done[:2] if done is not None else run.recompute()
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad and g is not None]
            ins = [t for t in detached + run.captured if t.requires_grad]
            res = ember.autograd.grad([o for o, _ in pairs], ins, [g for _, g in pairs],
                                      retain_graph=group is not None, allow_unused=True) \
                if pairs and ins else [None] * len(ins)
        if group is not None and done is None:
            group._recomputed[id(run)] = (outs, detached, accs, run)
        res = iter(res)
        return (None,) + tuple(next(res) if t.requires_grad else None
                               for t in detached + run.captured)


@contextlib.contextmanager
def _as_leaves(tensors, accs):
    """Let the captured tensors that have a history act as leaves while the recomputed graph
    is built and differentiated: the gradient stops at them and this node hands it on, and
    the engine runs their own history once, from outside (not twice, the second time freed).
    ``accs`` keeps the accumulators they get meanwhile (for a GraphExecGroup's next backward).
    """
    stash = [(t, t.grad_fn, t._output_nr, t._grad_acc) for t in tensors if t.grad_fn is not None]
    for t, *_ in stash:
        t.grad_fn, t._grad_acc = None, accs.get(id(t))
    try:
        yield
    finally:
        for t, fn, nr, acc in stash:
            accs[id(t)] = t._grad_acc
            t.grad_fn, t._output_nr, t._grad_acc = fn, nr, acc


class _Run:
    """One non-reentrant checkpointed call: what it needs to run again."""

    def __init__(self, function, args, kwargs, preserve, recompute_ctx, determinism_check, debug):
        self.function, self.args, self.kwargs = function, args, kwargs
        self.state, self.recompute_ctx = _State(preserve), recompute_ctx
        self.check = determinism_check == "default"
        self.explicit = [a for a in args if isinstance(a, Tensor)]
        # debug: the ops of the forward and of the recomputation, with where each was called
        self.logs = ([], []) if (debug if _debug[0] is None else _debug[0]) else None

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
            if self.logs is not None:
                _log_op(self.logs[0], opdef, args, outs)
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
        prev = hooks.tracer
        if self.logs is not None:
            self.logs[1].clear()
            hooks.tracer = lambda opdef, args, kwargs, outs: (
                _log_op(self.logs[1], opdef, args, outs),
                prev is not None and prev(opdef, args, kwargs, outs))
        try:
            with self.state.replay(), self.recompute_ctx:
                detached = list(detach_variable(tuple(self.explicit)))
                it = iter(detached)
                args = [next(it) if isinstance(a, Tensor) else a for a in self.args]
                outs = _tensors_of(self.function(*args, **self.kwargs))
        finally:
            hooks.tracer = prev
        if self.check and [_meta(o) for o in outs] != self.meta:
            err = CheckpointError(
                "torch.utils.checkpoint: Recomputed values for the following tensors have "
                "different metadata than during the forward pass.\n" + "\n".join(
                    f"tensor at position {i}:\nsaved metadata: {a}\nrecomputed metadata: {b}"
                    for i, (a, b) in enumerate(zip(self.meta, map(_meta, outs))) if a != b))
            if self.logs is None:
                raise err
            raise CheckpointError(_debug_report(*self.logs)) from err
        return outs, [t for t in detached]


def _log_op(log, opdef, args, outs):
    """Note one op call for a debug report: ``sin(f32[3]) -> f32[3]`` and where it ran."""
    import traceback

    def desc(x):
        if isinstance(x, Tensor):
            return f"{x.dtype}{list(x.shape)}".replace("torch.", "")
        return "[" + ", ".join(map(desc, x)) + "]" if type(x) in (list, tuple) else repr(x)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    frames = [f for f in traceback.extract_stack()[:-1] if "/ember/" not in f.filename]
    log.append((f"{opdef.name}({', '.join(map(desc, args))}) -> {', '.join(map(desc, outs))}",
                [f"{f.filename}:{f.lineno}:{f.name}" for f in frames]))


def _debug_report(fwd, rec):
    """torch's ``debug=True`` report: the ops of the forward and of the recomputation."""
    def traces(log, label):
        return "".join(f"{op}   ({i + 1} of {len(log)} in {label})\n\n" + "\n".join(tb) + "\n\n\n"
                       for i, (op, tb) in enumerate(log))
    return _DEBUG_TEMPLATE.format(forward_traces=traces(fwd, "original"),
                                  recompute_traces=traces(rec, "recompute"),
                                  forward_ops="\n".join(op for op, _ in fwd),
                                  recompute_ops="\n".join(op for op, _ in rec))


_RULE = "+" + "~" * 78 + "+"
_DEBUG_TEMPLATE = f""" \
An error happened while unpacking tensors; dumping logs of latest computation
because you passed `debug=True` to `torch.utils.checkpoint.checkpoint()`.
Scroll all the way down for guidance on how to navigate these logs.

{_RULE}
|        1. Stack traces of the operators that ran in the original forward     |
+{"-" * 78}+

{{forward_traces}}
{_RULE}
|        2. Stack traces of the operators that ran during recomputation        |
+{"-" * 78}+

{{recompute_traces}}
{_RULE}
|       3. Log of operators in the original forward and recomputation          |
+{"-" * 78}+
(Scroll up to correlate stack traces with each operation listed below. This
 helps identify their source in the code.)

Operations executed during the original forward:

{{forward_ops}}

Operations executed during recomputation:

{{recompute_ops}}

+{"-" * 78}+
 ERROR: Detected non-determinism while running activation checkpointing

 You are seeing this error because you passed `debug=True` to checkpoint and
 tensors to be saved during the original forward and differ between those saved
 during recomputation. This can happen if different operators were ran in the
 original forward and in the recomputation.

 To identify where the mismatch may be coming from, you can do the following:

 1) Compare the operators ran during original forward and recomputation to
    see where they differ. These operators are printed above in the order they
    were executed.

 2) Review the stack trace for each operator to locate its invocation source.
    Each operator's stack trace is printed in their execution order.

 Note that the logs can be quite long. Here's how they are structured:
 (Tip: you can Ctrl-f for these headers)

 1. Stack traces of the operators that ran in the original forward
 2. Stack traces of the operators that ran during recomputation
 3. Log of operators in the original forward and recomputation
 4. Error message                                             <--- You are here
{"-" * 80}
"""


def _meta(t):
    return {"shape": tuple(t.shape), "dtype": t.dtype, "device": t.device}


def _tensors_of(out):
    if isinstance(out, Tensor):
        return [out]
    return [o for o in out if isinstance(o, Tensor)] if isinstance(out, (tuple, list)) else []


def _with_tensors(out, new):
    """``out`` with its tensors replaced, in order, by ``new``."""
    if isinstance(out, Tensor):
        return new[0]
    if isinstance(out, (tuple, list)):
        it = iter(new)
        return type(out)(next(it) if isinstance(o, Tensor) else o for o in out)
    return out


def _checkpoint_without_reentrant(function, preserve, context_fn, determinism_check, debug,
                                  args, kwargs):
    fwd_ctx, recompute_ctx = context_fn()
    if not grad_mode.state.grad_enabled:       # nothing to recompute for
        with fwd_ctx:
            return function(*args, **kwargs)
    run = _Run(function, args, kwargs, preserve, recompute_ctx, determinism_check, debug)
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
                                         debug, args, kwargs)


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


_debug = [None]


@contextlib.contextmanager
def set_checkpoint_debug_enabled(enabled):
    """Within the block, ``enabled`` (unless None) overrides the ``debug`` of each checkpoint
    made: with debug, a recomputation that differs from the forward raises a CheckpointError
    listing the ops of both, with where each was called."""
    prev, _debug[0] = _debug[0], enabled
    try:
        yield
    finally:
        _debug[0] = prev


_early_stop = [True]


@contextlib.contextmanager
def set_checkpoint_early_stop(enable):
    """Whether a non-reentrant checkpoint may stop its recomputation once the tensors backward
    needs exist. NOTE: ember's recomputation always runs the whole function (it differentiates
    the recomputed outputs), the setting is kept as torch keeps it."""
    prev, _early_stop[0] = _early_stop[0], enable
    try:
        yield
    finally:
        _early_stop[0] = prev


class DefaultDeviceType:
    """The device type whose RNG states checkpoint saves when no argument is off the cpu:
    the current accelerator's type, or "cpu" without one.

    Example:
        >>> from ember.utils.checkpoint import DefaultDeviceType
        >>> DefaultDeviceType.get_device_type() in ("cpu", "cuda")
        True
    """

    _default_device_type = None

    @staticmethod
    def set_device_type(device="cuda"):
        DefaultDeviceType._default_device_type = device

    @staticmethod
    def get_device_type():
        if not DefaultDeviceType._default_device_type:
            acc = ember.accelerator.current_accelerator(True)
            DefaultDeviceType._default_device_type = acc.type if acc else "cpu"
        return DefaultDeviceType._default_device_type


def _device_module(device_type):
    return getattr(ember, "cuda" if device_type == "cuda" else device_type)


def get_device_states(*args):
    """``(device ids, RNG states)`` of the accelerator devices the tensors in ``args`` (nested
    too) live on, as checkpoint saves them.

    Example:
        >>> import ember
        >>> ember.utils.checkpoint.get_device_states(ember.ones(2))
        ([], [])
    """
    def leaves(a):
        if isinstance(a, dict):
            a = list(a.values())
        return [t for x in a for t in leaves(x)] if isinstance(a, (list, tuple)) else [a]
    ts = [a for a in leaves(args) if isinstance(a, Tensor)]
    ids = [t.get_device() for t in ts if t.device.type not in ("cpu", "meta")]
    types = [t.device.type for t in ts if t.device.type != "cpu"]
    mod = _device_module("cuda" if "cuda" in types else types[0] if types else
                         DefaultDeviceType.get_device_type())
    states = []
    for i in ids:
        with mod.device(i):
            states.append(mod.get_rng_state())
    return ids, states


def set_device_states(devices, states, *, device_type=None):
    """Restore the RNG ``states`` of ``devices`` (as ``get_device_states`` gave them).

    Example:
        >>> import ember
        >>> from ember.utils.checkpoint import get_device_states, set_device_states
        >>> set_device_states(*get_device_states(ember.ones(2)))
    """
    device_type = device_type or DefaultDeviceType.get_device_type()
    if device_type == "meta":
        return
    mod = _device_module(device_type)
    for d, st in zip(devices, states):
        with mod.device(d):
            mod.set_rng_state(st)


class SelectiveCheckpointContext:
    """What a selective checkpoint policy function gets first: ``op_output``, the op's
    output in the forward (``is_recompute`` is always False, as torch's).

    Example:
        >>> from ember.utils.checkpoint import SelectiveCheckpointContext
        >>> SelectiveCheckpointContext(is_recompute=False, op_output=3).op_output
        3
    """

    def __init__(self, *, is_recompute, op_output=None):
        self.is_recompute, self.op_output = is_recompute, op_output


class CheckpointPolicy(enum.Enum):
    """What selective checkpointing does with an op's output: ``*_SAVE`` keeps it from the
    forward (the recomputation does not run the op again), ``*_RECOMPUTE`` runs the op again,
    ``*_CPU_OFFLOAD`` keeps it in cpu memory. ``MUST_*`` and ``PREFER_*`` act alike in eager.

    Example:
        >>> from ember.utils.checkpoint import CheckpointPolicy
        >>> CheckpointPolicy.MUST_SAVE.value, CheckpointPolicy.PREFER_RECOMPUTE.value
        (0, 3)
    """

    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3
    MUST_CPU_OFFLOAD = 4
    PREFER_CPU_OFFLOAD = 5


# NOTE: torch's are aten.detach and prim.device, which the checkpoint machinery itself calls
# a different number of times in forward and recomputation; ember's detach is not an op
# call, so none needs leaving out.
SAC_IGNORED_OPS = frozenset()
_RECOMPUTE, _CONSUMED = object(), object()
_SAVES = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE,
          CheckpointPolicy.MUST_CPU_OFFLOAD, CheckpointPolicy.PREFER_CPU_OFFLOAD)
_MISMATCH = ("This can happen if the operations in the checkpointed region are nondeterministic or "
             "depend on global state that changed between forward and backward.")


class _SACMode:
    """Dispatch's transform hook over a checkpointed region: in the forward (``caching``)
    each op's output is kept or marked for recomputation by the policy; in the recomputation
    an op whose output was kept is recorded in the graph with that output, not run."""

    def __init__(self, policy_fn, storage, caching, allow_mutation=False):
        self.policy_fn, self.storage, self.caching = policy_fn, storage, caching
        self.allow_mutation, self.counter = allow_mutation, {}

    def __enter__(self):
        self.counter.clear()
        self.prev, hooks.transform = hooks.transform, self
        return self

    def __exit__(self, *exc):
        hooks.transform = self.prev

    def __call__(self, opdef, args, kwargs, run):
        def call():
            return run(opdef, args, kwargs) if self.prev is None else \
                self.prev(opdef, args, kwargs, run)
        if opdef in SAC_IGNORED_OPS or opdef.view:      # (a view costs nothing: not kept)
            return call()
        idx = self.counter[opdef] = self.counter.get(opdef, -1) + 1
        entries = self.storage.setdefault(opdef, {})
        if self.caching:
            out = call()
            policy = self.policy_fn(SelectiveCheckpointContext(is_recompute=False, op_output=out),
                                    opdef, *args, **kwargs)
            if isinstance(policy, bool):
                policy = CheckpointPolicy.MUST_SAVE if policy else CheckpointPolicy.PREFER_RECOMPUTE
            outs = out if isinstance(out, tuple) else (out,)
            entries[idx] = [(o._data, o._version, o) for o in outs] if policy in _SAVES and \
                all(isinstance(o, Tensor) for o in outs) else _RECOMPUTE
            return out
        entry = entries.get(idx)
        if entry is None:
            raise RuntimeError(f"{opdef.name} invocation index {idx} encountered during backward "
                               f"but not found in storage. {_MISMATCH}")
        if entry is _CONSUMED:
            raise RuntimeError("Trying to backward an extra time. You are only allowed to backward "
                               "once on any region computed under selective activation checkpoint.")
        if entry is _RECOMPUTE:
            return call()
        entries[idx] = _CONSUMED
        if not self.allow_mutation and any(o._version != v for _, v, o in entry):
            raise RuntimeError("Tensor cached during selective activation checkpoint has been "
                               "mutated")
        arrays = [a for a, _, _ in entry]
        return _dispatch._dispatch(opdef, args, dict(kwargs),
                                   given=tuple(arrays) if len(arrays) > 1 else arrays[0])


def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation=False):
    """The two contexts (forward, recomputation) of selective activation checkpointing, for
    ``checkpoint(..., use_reentrant=False, context_fn=functools.partial(
    create_selective_checkpoint_contexts, policy))``. ``policy`` is a function ``(ctx, op,
    *args, **kwargs) -> CheckpointPolicy`` (or bool), ``op`` the OpDef called (its ``name``
    is torch's), or a list of ops (OpDefs or their names) to save, the rest recomputed.

    Example:
        >>> import functools, ember
        >>> from ember.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts
        >>> x = ember.ones(2, 2, requires_grad=True)
        >>> ctx_fn = functools.partial(create_selective_checkpoint_contexts, ["mm"])
        >>> y = checkpoint(lambda t: (t @ t).sin(), x, use_reentrant=False, context_fn=ctx_fn)
        >>> y.sum().backward(); x.grad
        tensor([[-1.6646, -1.6646],
                [-1.6646, -1.6646]])
    """
    from .._ops.registry import OpDef
    if isinstance(policy_fn_or_list, list):
        for op in policy_fn_or_list:
            if not isinstance(op, (OpDef, str)):
                raise ValueError(f"Expected op in `op_list` to be an OpOverload but got: {op} "
                                 f"of type {type(op)}. ")
        names = {op if isinstance(op, str) else op.name for op in policy_fn_or_list}

        def policy_fn(ctx, op, *args, **kwargs):
            return CheckpointPolicy.MUST_SAVE if op.name in names else \
                CheckpointPolicy.PREFER_RECOMPUTE
    elif callable(policy_fn_or_list):
        policy_fn = policy_fn_or_list
    else:
        raise TypeError("policy_fn_or_list must be either a function or a list of ops.")
    storage = {}
    return (_SACMode(policy_fn, storage, True),
            _SACMode(policy_fn, storage, False, allow_cache_entry_mutation))


class GraphExecGroup:
    """Backward calls under one instance form a group: a (non-reentrant) checkpointed region
    they reach is recomputed once for the group, not once per backward. NOTE: torch requires
    the group's backward calls to use disjoint saved activations and raises otherwise;
    ember's differentiate the region's one recomputed graph again, so overlapping calls work.

    Example:
        >>> import ember
        >>> from ember.utils.checkpoint import checkpoint, GraphExecGroup
        >>> x = ember.ones(2, requires_grad=True)
        >>> a, b = checkpoint(lambda t: (t.sin(), t.cos()), x, use_reentrant=False)
        >>> with GraphExecGroup():       # the region runs again once, for both
        ...     a.sum().backward(retain_graph=True)
        ...     b.sum().backward()
    """

    _current = None

    def __enter__(self):
        if GraphExecGroup._current is not None:
            raise RuntimeError(f"GraphExecGroup contexts cannot be nested. Already inside "
                               f"group {GraphExecGroup._current}")
        GraphExecGroup._current, self._recomputed = self, {}
        return self

    def __exit__(self, *exc):
        GraphExecGroup._current, self._recomputed = None, {}

    @classmethod
    def _get_current_group(cls):
        return cls._current
