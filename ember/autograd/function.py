"""Custom differentiable operations: subclass ``Function`` with static ``forward``/``backward``.

As in torch, the ``ctx`` that ``forward`` and ``backward`` receive *is* the graph node
(``y.grad_fn``): an instance of ``<Name>Backward``, a class made for each ``Function``
subclass. See https://pytorch.org/docs/stable/autograd.html#function
"""
import functools
import sys

from . import grad_mode
from .._dtype import _FLOAT
from .graph import (_FREED_MSG, Node, TensorMeta, _active_hooks, _Packed, check_saved_version)


_hooks = None


def _dispatch_hooks():
    """``ember._ops.dispatch.hooks`` (imported on first use: dispatch imports autograd)."""
    global _hooks
    if _hooks is None:
        from .._ops.dispatch import hooks as _hooks
    return _hooks


def _is_tensor(x):
    global _Tensor
    if _Tensor is None:         # (ember._tensor imports autograd: bound on first use)
        from .._tensor import Tensor as _Tensor
    return isinstance(x, _Tensor)


_Tensor = None


class FunctionCtx:
    """What ``forward``/``setup_context`` use to hand state to ``backward``."""

    def save_for_backward(self, *tensors):
        """Keep ``tensors`` (or None) for ``backward``; read them back via ``saved_tensors``."""
        for i, t in enumerate(tensors):
            if t is not None and not _is_tensor(t):
                raise TypeError(f"save_for_backward can only save variables, but argument {i} "
                                f"is of type {type(t).__name__}")
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        self.saved_for_forward = tensors

    def mark_dirty(self, *args):
        """Declare the inputs that ``forward`` modified in place (and returns)."""
        self.dirty_tensors = args

    def mark_non_differentiable(self, *args):
        """Declare outputs that never get a gradient (e.g. indices)."""
        self.non_differentiable = args

    def set_materialize_grads(self, value):
        """When False, ``backward`` receives None (not zeros) for outputs that got no
        gradient."""
        self.materialize_grads = bool(value)


class BackwardCFunction(FunctionCtx, Node):
    """The graph node of one ``Function.apply`` call; subclassed as ``<Name>Backward``."""

    _forward_cls = None
    to_save = None
    dirty_tensors = non_differentiable = ()
    materialize_grads = True

    def __init__(self, tensor_inputs, needs_input_grad, arg_is_tensor):
        Node.__init__(self, tensor_inputs)
        self.needs_input_grad, self._arg_is_tensor = needs_input_grad, arg_is_tensor
        self._saved = None

    def _pack(self):
        # NOTE: versions are taken once forward is done (as torch does), so in-place edits made
        # by forward itself on dirty inputs are not a later modification.
        hooks = _active_hooks()
        if self.to_save is not None:
            self._saved = [None if t is None else self._saved_entry(t, hooks) for t in self.to_save]
            self._has_saved = True
        self.to_save = None

    def _saved_entry(self, t, hooks):
        """(what is kept, its version or None when packed by hooks, output index or None)."""
        nr = t._output_nr if t.grad_fn is self else None
        if hooks:
            return _Packed(t, hooks), None, nr
        # NOTE: an output is kept as a history-less alias (as OpNode keeps results): holding
        # the output itself would make a node <-> tensor reference cycle.
        return (t if nr is None else t._alias()), t._version, nr

    @property
    def saved_tensors(self):
        if self._released:
            raise RuntimeError(_FREED_MSG)
        out = []
        for s in self._saved or ():
            if s is None or s[1] is None:      # None, or packed by saved_tensors_hooks
                out.append(s if s is None else s[0].unpack())
                continue
            check_saved_version(s[0], s[1], self, s[2])
            out.append(s[0] if s[2] is None else s[0]._as_output_of(self, s[2]))
        return tuple(out)

    saved_variables = saved_tensors

    def release(self):
        if self._has_saved:
            self._saved, self._released = None, True

    def apply(self, grads):
        # engine materializes None grads through out_meta, which is None when switched off
        fn = self._forward_cls
        impl = fn.vjp if fn.vjp is not Function.vjp else fn.backward
        res = impl(self, *grads)
        if not isinstance(res, tuple):
            res = (res,)
        n = len(self.needs_input_grad)
        if len(res) != n:
            if len(res) < n or any(r is not None for r in res[n:]):
                raise RuntimeError(f"function {self.name()} returned an incorrect number of "
                                   f"gradients (expected {n}, got {len(res)})")
            res = res[:n]
        flat = []
        for i, (g, is_t) in enumerate(zip(res, self._arg_is_tensor)):
            if not is_t:
                if g is not None:
                    raise RuntimeError(f"function {self.name()} returned a gradient different "
                                       f"than None at position {i + 1}, but the corresponding "
                                       "forward input was not a Variable")
                continue
            if g is not None:
                self._check_shape(len(flat), g)
            flat.append(g)
        return flat

    def _check_shape(self, i, g):
        want, got = tuple(self.input_meta[i].shape), tuple(g.shape)
        # a gradient the input broadcasts to is summed down by the engine, as in torch
        if len(want) > len(got) or any(w != s and w != 1 for w, s in zip(want[::-1], got[::-1])):
            raise RuntimeError(f"Function {self.name()} returned an invalid gradient at index {i} "
                               f"- got {list(got)} but expected shape compatible with {list(want)}")


class _FunctionMeta(type):
    """Gives each ``Function`` subclass its node class ``<Name>Backward``."""

    def __init__(cls, name, bases, attrs):
        cls._backward_cls = type(name + "Backward", (BackwardCFunction,), {"_forward_cls": cls})
        super().__init__(name, bases, attrs)


class Function(FunctionCtx, metaclass=_FunctionMeta):
    """Base of custom autograd operations.

    Example:
        >>> import ember
        >>> class Cube(ember.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x ** 3
        ...     @staticmethod
        ...     def backward(ctx, g):
        ...         (x,) = ctx.saved_tensors
        ...         return g * 3 * x ** 2
        >>> x = ember.tensor([1.0, 2.0], requires_grad=True)
        >>> y = Cube.apply(x)
        >>> y.grad_fn.name()
        'CubeBackward'
        >>> y.sum().backward()
        >>> x.grad
        tensor([ 3., 12.])
    """

    def __init__(self, *args, **kwargs):
        import warnings
        warnings.warn(f"{type(self)} should not be instantiated. Methods on autograd functions "
                      "are all static, so you should invoke them on the class itself.",
                      DeprecationWarning, stacklevel=2)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your "
                                  "custom autograd.Function to use it with backward mode AD.")

    vjp = backward      # aliases: a subclass defines one of the two

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run ``forward`` on ``args`` and, if any tensor input requires grad, record one node
        whose backward is ``cls.backward``."""
        prof = _dispatch_hooks().profiler
        if prof is None or not hasattr(prof, "begin"):   # (vmap's and forward AD's hook)
            return cls._apply(args, kwargs)
        # NOTE: as torch's profiler, the forward is one event named by the class
        ev = prof.begin(cls.__name__)
        try:
            out = cls._apply(args, kwargs)
            node = getattr(out[0] if isinstance(out, tuple) and out else out, "grad_fn", None)
            if node is not None:
                ev.sequence_nr = node.seq     # links it to its backward node, as an op's event
            return out
        finally:
            prof.end(ev)

    @classmethod
    def _apply(cls, args, kwargs):
        is_t = tuple(_is_tensor(a) for a in args)
        tensors = [a for a, t in zip(args, is_t) if t]
        needs = tuple(t and a._requires_grad for a, t in zip(args, is_t))
        ctx = cls._backward_cls(tensors, needs, is_t)
        separate = cls.setup_context is not Function.setup_context
        with grad_mode.no_grad():
            out = cls.forward(*args, **kwargs) if separate else cls.forward(ctx, *args, **kwargs)
            if separate:
                cls.setup_context(ctx, args, out)
        executable = grad_mode.state.grad_enabled and any(needs)
        out = _wrap_outputs(ctx, tensors, out, executable)
        fw = sys.modules.get("ember.autograd.forward_ad")
        if fw is not None and fw._LEVEL[0] >= 0:
            fw.function_jvp(cls, ctx, args, out)
        return out


def _wrap_outputs(ctx, inputs, out, executable):
    """Give the outputs their place in the graph (or none), and pack the saved tensors."""
    from .._ops.dispatch import rebase_history
    single = not isinstance(out, tuple)
    outs = (out,) if single else out
    dirty = {id(t) for t in ctx.dirty_tensors}
    nondiff = {id(t) for t in ctx.non_differentiable}
    ids = {id(t) for t in inputs}
    if executable:
        for t in ctx.dirty_tensors:
            if t._requires_grad and t.grad_fn is None:
                raise RuntimeError("a leaf Variable that requires grad has been used in an "
                                   "in-place operation.")
    if not dirty <= {id(o) for o in outs}:
        raise RuntimeError("Some elements marked as dirty during the forward method were not "
                           "returned as output. The inputs that are modified inplace must all "
                           "be outputs of the Function.")
    for t in ctx.dirty_tensors:
        t._bump_version()
    wrapped = []
    for i, o in enumerate(outs):
        if not _is_tensor(o):
            wrapped.append(o)
            continue
        diff = executable and id(o) not in nondiff and o.dtype.category >= _FLOAT
        if id(o) in dirty:
            if diff:
                alias = o._alias()
                alias.grad_fn, alias._output_nr = ctx, i
                rebase_history(o, alias)
        else:
            if id(o) in ids:     # NOTE: an input returned as is becomes a view of it, as in torch
                src, o = o, o._alias()
                if o._base is None:
                    o._base, o._view_fn, o._view_version = src, _identity, src._version
            if diff:
                o.grad_fn, o._output_nr, o._requires_grad = ctx, i, True
                if o._base is not None:  # a view: later in-place writes must not bypass us
                    o._fn_view = f"Output {i} of {ctx._forward_cls.__name__}"
        wrapped.append(o)
    ctx.n_outputs = len(outs)
    ctx.out_meta = [TensorMeta(o) if _is_tensor(o) else None for o in wrapped] \
        if ctx.materialize_grads else None
    ctx._pack()
    return wrapped[0] if single else tuple(wrapped)


def _identity(t):
    return t


class _DelayedError(Node):
    """Stands in the graph for a ``once_differentiable`` backward's results: differentiating
    them again raises."""

    def __init__(self, msg, inputs):
        super().__init__(inputs)
        self.msg, self.n_outputs = msg, 1

    def apply(self, grads):
        raise RuntimeError(self.msg)


def once_differentiable(fn):
    """Decorate a ``backward`` whose own result cannot be differentiated: it runs without
    recording, and a later attempt to differentiate through it raises.

    Example:
        >>> import ember
        >>> from ember.autograd.function import once_differentiable
        >>> class Square(ember.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x * x
        ...     @staticmethod
        ...     @once_differentiable
        ...     def backward(ctx, g):
        ...         (x,) = ctx.saved_tensors
        ...         return 2 * g * x
        >>> x = ember.tensor([3.0], requires_grad=True)
        >>> ember.autograd.grad(Square.apply(x).sum(), x)
        (tensor([6.]),)
    """

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with grad_mode.no_grad():
            outputs = fn(ctx, *args)
        if not grad_mode.state.grad_enabled:
            return outputs
        grads_in = [a for a in args if _is_tensor(a) and a._requires_grad]
        if not grads_in:
            return outputs
        single = not isinstance(outputs, tuple)
        res = []
        for o in ((outputs,) if single else outputs):
            if _is_tensor(o) and o.dtype.is_floating_point:
                o = o.detach()
                o.grad_fn = _DelayedError("trying to differentiate twice a function that was "
                                          "marked with @once_differentiable", grads_in)
                o._requires_grad = True
            res.append(o)
        return res[0] if single else tuple(res)
    return wrapper


def _flat(obj):
    """The tensors of a nested structure of tuples and lists, in order."""
    if _is_tensor(obj) or obj is None:
        return [obj]
    return [t for o in obj for t in _flat(o)] if isinstance(obj, (list, tuple)) else []


def _unflatten(flat, like):
    """``flat`` poured back into the nesting of ``like``."""
    it = iter(flat)

    def fill(o):
        if isinstance(o, (list, tuple)):
            return type(o)(fill(x) for x in o)
        return next(it) if _is_tensor(o) or o is None else o
    return fill(like)


class NestedIOFunction(Function):
    """The legacy custom Function with nested inputs and outputs: an *instance* is called on
    tensors or nested tuples of them; ``forward_extended`` and ``backward_extended`` (instance
    methods) see and return the same nesting, and ``self`` is the context. Kept for old code;
    new code subclasses ``Function``. NOTE: torch 2.13 keeps the class but calling one fails
    there (its ``_do_forward`` needs a base method torch removed); ember's works.

    Example:
        >>> import ember, warnings
        >>> class MulAdd(ember.autograd.NestedIOFunction):
        ...     def forward_extended(self, a, pair):
        ...         self.save_for_backward(a, pair)
        ...         return a * pair[0] + pair[1]
        ...     def backward_extended(self, g):
        ...         a, (b, c) = self.saved_tensors
        ...         return g * b, (g * a, g)
        >>> a, b, c = (ember.full((2,), v, requires_grad=True) for v in (1.0, 3.0, 5.0))
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     out = MulAdd()(a, (b, c))
        >>> out.sum().backward(); a.grad, b.grad
        (tensor([3., 3.]), tensor([1., 1.]))
    """

    def _do_forward(self, *input):
        self._nested_input = input
        out = _Nested.apply(self, *_flat(input))
        return _unflatten(out if isinstance(out, tuple) else (out,), self._nested_output)

    __call__ = _do_forward

    def forward_extended(self, *input):
        """User defined forward."""
        raise NotImplementedError

    def backward_extended(self, *grad_output):
        """User defined backward."""
        raise NotImplementedError

    def save_for_backward(self, *args):
        self.to_save, self._to_save_nested = tuple(_flat(args)), args

    saved_tensors = property(lambda self: _unflatten(self._ctx.saved_tensors, self._to_save_nested))

    def mark_dirty(self, *args, **kwargs):
        self.dirty_tensors = tuple(_flat((args, tuple(kwargs.values()))))

    def mark_non_differentiable(self, *args, **kwargs):
        self.non_differentiable = tuple(_flat((args, tuple(kwargs.values()))))


class _Nested(Function):
    """The graph node of a ``NestedIOFunction`` call: flat tensors in and out."""

    @staticmethod
    def forward(ctx, fn, *flat):
        ctx.fn, fn._ctx = fn, ctx
        out = fn._nested_output = fn.forward_extended(*_unflatten(flat, fn._nested_input))
        del fn._nested_input
        if "to_save" in vars(fn):
            ctx.save_for_backward(*fn.to_save)
        ctx.mark_dirty(*getattr(fn, "dirty_tensors", ()))
        ctx.mark_non_differentiable(*getattr(fn, "non_differentiable", ()))
        return tuple(_flat(out))

    @staticmethod
    def backward(ctx, *grads):
        fn = ctx.fn
        out = fn._nested_output
        res = fn.backward_extended(*_unflatten(grads, out if isinstance(out, tuple) else (out,)))
        return (None,) + tuple(_flat(res))
