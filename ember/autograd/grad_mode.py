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


class set_grad_enabled(_Mode):
    """Set grad mode to ``mode``; works as a function call, context manager or decorator."""

    def __init__(self, mode):
        self._mode = bool(mode)
        self._prev = state.grad_enabled
        state.grad_enabled = self._mode

    def __call__(self, fn):
        # NOTE: as a decorator, construction must not have switched the mode for the caller
        state.grad_enabled = self._prev
        return super().__call__(fn)

    def clone(self):
        return self.__class__(self._mode)

    def __enter__(self):
        pass


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
