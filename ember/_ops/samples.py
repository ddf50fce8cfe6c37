"""Test inputs for ops, as NumPy arrays and Python values. The registry-driven tests turn the
arrays into ember and torch tensors of the dtype under test and compare the two."""
import numpy as np


class Sample:
    """One call of an op: ``op(*args, **kwargs)``; NumPy arrays become tensors.

    ``smooth=False`` marks a sample at a non-differentiable point (ties, kinks), which finite
    differences cannot check; ``grad_args`` lists the positions of the float arguments that
    are differentiable when not all are (e.g. nll_loss's class weights).
    """

    smooth = True
    grad = True
    grad_args = None

    def __init__(self, *args, **kwargs):
        self._given = args, kwargs

    @property
    def args(self):
        return self._arrays()[0]

    @property
    def kwargs(self):
        return self._arrays()[1]

    def _arrays(self):
        """The arguments, with the ``const`` placeholders of error samples made arrays."""
        try:
            return self._made
        except AttributeError:
            args, kwargs = self._given
            self._made = (_materialize(args), {k: _materialize(v) for k, v in kwargs.items()})
            return self._made

    def at_kink(self):
        self.smooth = False
        return self

    def forward_only(self):
        """A call with no derivative in torch (e.g. scatter with ``reduce=``): grads unchecked."""
        self.grad = False
        return self

    def differentiable_in(self, *positions):
        self.grad_args = positions
        return self

    def __repr__(self):
        def d(a):
            return f"array{a.shape}:{a.dtype}" if isinstance(a, np.ndarray) else repr(a)
        return ", ".join([d(a) for a in self.args] + [f"{k}={d(v)}" for k, v in
                                                      self.kwargs.items()])


def make(shape, dt, low=-2.0, high=2.0, seed=0, noncontig=False):
    """A deterministic array of ``shape`` in ember dtype ``dt`` with values in [low, high)."""
    rng = np.random.default_rng(seed + 7 * len(shape))
    if noncontig:
        return make(tuple(reversed(shape)), dt, low, high, seed).T
    if dt.name == "bool":
        return np.asarray(rng.random(shape) > 0.5)
    if dt.category == 1:
        lo, hi = (0, 9) if dt.name == "uint8" else (int(min(low, -1) * 2), int(max(high, 1) * 3))
        return rng.integers(max(lo, 0) if dt.name == "uint8" else lo, hi, shape).astype(dt.np)
    x = rng.uniform(low, high, shape)
    if dt.category == 3:
        x = x + 1j * rng.uniform(low, high, shape)
    return np.asarray(x).astype(dt.np)


def unary_samples(dev, dt, domain=None):
    lo, hi = domain or (-2.0, 2.0)
    return [Sample(make(s, dt, lo, hi)) for s in [(), (5,), (3, 4)]] + \
        [Sample(make((3, 4), dt, lo, hi, noncontig=True))]


def binary_samples(dev, dt, nonzero_rhs=False):
    def rhs(shape, seed):
        x = make(shape, dt, seed=seed)
        if nonzero_rhs and dt.category != 0:
            x = np.where(x == 0, np.ones((), x.dtype), x)
            if dt.category >= 2:
                x = np.where(np.abs(x) < 0.2, x + np.asarray(0.5, x.dtype), x)
        return x
    scalar = {0: True, 1: 3}.get(dt.category, 1.5)
    return [Sample(make((3, 4), dt), rhs((3, 4), 1)),
            Sample(make((3, 4), dt), rhs((4,), 2)),
            Sample(make((2, 1, 4), dt), rhs((3, 1), 3)),
            Sample(make((3, 4), dt, noncontig=True), rhs((3, 4), 4)),
            Sample(make((3,), dt), scalar),
            Sample(make((), dt), rhs((2, 3), 5))]


def compare_samples(dev, dt):
    a = make((3, 4), dt)
    b = a.copy()
    b[0] = make((4,), dt, seed=3)
    return [Sample(a, b), Sample(a, make((4,), dt, seed=1)),
            Sample(make((3,), dt), {0: True, 1: 1}.get(dt.category, 0.5))]


def where_samples(dev, dt):
    cond = make((3, 4), type("B", (), {"name": "bool", "category": 0})())
    return [Sample(cond, make((3, 4), dt), make((3, 4), dt, seed=2)),
            Sample(cond, make((4,), dt), make((3, 1), dt, seed=2)),
            Sample(cond, make((3, 4), dt), 0),
            Sample(cond, 1.5, 0).forward_only(),      # two scalars: torch's default dtype
            Sample(make((3, 4), dt))]                # where(condition): nonzero's indices


def reduce_samples(dev, dt):
    x = make((3, 4, 5), dt)
    return [Sample(x), Sample(x, 1), Sample(x, -1, True), Sample(x, (0, 2)),
            Sample(make((4,), dt), 0), Sample(make((), dt))]


class ErrorSample:
    """A call that must fail: ``op(*sample.args, **sample.kwargs)`` raises ``exc_type`` with a
    message matching the regex ``match`` (PyTorch's OpInfo ``ErrorInput``). The tests also
    check that PyTorch raises the same type for the same call."""

    def __init__(self, sample, exc_type, match):
        self.sample, self.exc_type, self.match = sample, exc_type, match

    def __repr__(self):
        return f"ErrorSample({self.sample!r} -> {self.exc_type.__name__}: {self.match})"


def const(*shape, dtype=np.float32):
    """A constant array for error samples, where the values do not matter. Made when a test
    reads the sample: the ~300 error samples are built at import, and their arrays would slow
    ``import ember``."""
    return _Const(shape, dtype)


class _Const:
    __slots__ = ("shape", "dtype", "array")

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.array = shape, dtype, None

    def make(self):
        if self.array is None:          # once: a const used twice is one array, as before
            self.array = np.ones(self.shape, self.dtype)
        return self.array


def _materialize(x):
    if type(x) is _Const:
        return x.make()
    if type(x) in (list, tuple):
        return type(x)(_materialize(v) for v in x)
    return x


def broadcast_errors(arity=2):
    """Operands whose shapes do not broadcast."""
    return [ErrorSample(Sample(const(3, 4), *[const(5)] * (arity - 1)), RuntimeError, "must match the size of tensor b"),
            ErrorSample(Sample(const(2, 4), *[const(3, 1)] * (arity - 2), const(3, 4)),
                        RuntimeError, "must match the size of tensor b")]


def dim_errors(*extra):
    """A dim out of range and a repeated dim, for reductions over ``dim``."""
    return [ErrorSample(Sample(const(3, 4), 2, *extra), IndexError, r"Dimension out of range "
                        r"\(expected to be in range of \[-2, 1\], but got 2\)"),
            ErrorSample(Sample(const(3, 4), -3, *extra), IndexError, "Dimension out of range")]


def dtype_error(name, *shapes, dtype=np.int64, exc=NotImplementedError, match=None, **kwargs):
    """The op rejects ``dtype`` operands (by default with a missing-kernel error)."""
    return ErrorSample(Sample(*[const(*s, dtype=dtype) for s in shapes or [(3,)]], **kwargs), exc,
                       match or f"{name}.*not implemented for")


def public_call(lib, opdef, args, kwargs):
    """Call ``opdef`` through its public name in ``lib`` (ember, or torch as the tests' and
    benchmarks' peer): ``torch_fn`` (a dotted path), else the function, else the Tensor method;
    a private op's ``torch_ref`` composes it from ``lib``'s ops. Dtypes among the keyword
    arguments become ``lib``'s dtypes."""
    from .._dtype import dtype
    kwargs = {k: getattr(lib, v.name) if isinstance(v, dtype) else v for k, v in kwargs.items()}
    ref = getattr(opdef, "torch_ref", None)
    if ref:
        return ref(lib, *args, **kwargs) if lib.__name__ == "torch" else opdef(*args, **kwargs)
    path = getattr(opdef, "torch_fn", None)
    if path:
        fn = lib
        for part in path.split("."):
            fn = getattr(fn, part)
        return fn(*args, **kwargs)
    if opdef.function and hasattr(lib, opdef.name):
        return getattr(lib, opdef.name)(*args, **kwargs)
    return getattr(args[0], opdef.name)(*args[1:], **kwargs)
