"""Grad mode: whether ops record the graph. Context managers double as decorators."""
import functools
import inspect


class _State:
    grad_enabled = True
    inference = False


state = _State()


def is_grad_enabled():
    """True when ops record the autograd graph."""
    return state.grad_enabled


def is_inference_mode_enabled():
    return state.inference


class _Mode:
    """Base of the grad-mode switches: a context manager and a decorator."""

    def __call__(self, fn):
        if inspect.isclass(fn):                 # @no_grad on a class is not what anyone means
            raise TypeError(f"{type(self).__name__} cannot decorate a class")
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen(*args, **kwargs):
                g = fn(*args, **kwargs)
                with self.clone():
                    resp = next(g)
                while True:
                    try:
                        with self.clone():
                            resp = g.send((yield resp))
                    except StopIteration:
                        return

            return gen

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.clone():
                return fn(*args, **kwargs)
        return wrapper

    def clone(self):
        return self.__class__()

    def __enter__(self):
        self._prev = state.grad_enabled
        state.grad_enabled = self._mode

    def __exit__(self, *exc):
        state.grad_enabled = self._prev


class no_grad(_Mode):
    """Disable graph recording inside the block.

    Example:
        >>> import ember
        >>> x = ember.ones(2, requires_grad=True)
        >>> with ember.no_grad():
        ...     (x * 2).requires_grad
        False
    """
    _mode = False


class enable_grad(_Mode):
    """Enable graph recording inside the block (e.g. within ``no_grad``)."""
    _mode = True


class inference_mode(_Mode):
    """Like ``no_grad``; tensors made inside are plain tensors (ember has no separate
    inference tensor kind)."""

    def __init__(self, mode=True):
        self._mode = not mode
        self._on = mode

    def clone(self):
        return self.__class__(self._on)

    def __enter__(self):
        self._prev_inf = state.inference
        state.inference = self._on
        super().__enter__()

    def __exit__(self, *exc):
        state.inference = self._prev_inf
        super().__exit__(*exc)


class _Flag(_Mode):
    """A switch of ``state`` named ``_attr``, set on construction (as torch's): a function
    call, a context manager restoring it on exit, or a decorator."""

    def __init__(self, mode=True):
        self._mode, self._prev = bool(mode), getattr(state, self._attr)
        setattr(state, self._attr, self._mode)

    def __call__(self, fn):
        # NOTE: as a decorator, construction must not have switched the mode for the caller
        setattr(state, self._attr, self._prev)
        return super().__call__(fn)

    def clone(self):
        return self.__class__(self._mode)

    def __enter__(self):
        """(The mode was set on construction, as torch's is: entering changes nothing.)"""

    def __exit__(self, *exc):
        setattr(state, self._attr, self._prev)


class set_grad_enabled(_Flag):
    """Set grad mode to ``mode``; works as a function call, context manager or decorator."""
    _attr = "grad_enabled"


_State.multithreading = _State.grad_layout = True


class set_multithreading_enabled(_Flag):
    """Whether backward may run on device worker threads. Ember's backward always runs on the
    calling thread, so the switch changes nothing but what ``is_multithreading_enabled`` says.

    Example:
        >>> import ember
        >>> with ember.autograd.set_multithreading_enabled(False):
        ...     ember.autograd.is_multithreading_enabled()
        False
    """
    _attr = "multithreading"


def is_multithreading_enabled():
    """Whether ``set_multithreading_enabled`` is on (the default)."""
    return state.multithreading


class enforce_grad_layout_policy(_Flag):
    """Whether a leaf's new ``.grad`` is given the leaf's strides (its layout contract: the
    leaf's strides where it is dense and non-overlapping, else row-major). Off, a gradient
    that could be taken as it is keeps its own layout.

    Example:
        >>> import ember
        >>> p = ember.empty(2, 3, 4).permute(2, 0, 1).requires_grad_()
        >>> (p.contiguous() * 2).sum().backward()
        >>> p.grad.stride()
        (1, 12, 4)
    """
    _attr = "grad_layout"
