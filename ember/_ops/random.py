"""Random numbers: Generator, the default generator, and random creation functions.

Every generator draws on the host with NumPy's PCG64 and copies to the device, so a seed gives
the same numbers on every device. Each GPU has a default generator of its own (torch's
``torch.cuda.default_generators``), which draws for tensors made there without a
``generator=``; ``manual_seed`` seeds them all.
"""
import numpy as np

from .. import _dtype
from .._device import CPU, META, to_device
from .creation import _drawn, _dt, _finish, _size, _T, empty


class Generator:
    """A random number generator, like ``torch.Generator``.

    Example:
        >>> import ember
        >>> g = ember.Generator().manual_seed(0)
        >>> a = ember.rand(3, generator=g); _ = g.manual_seed(0)
        >>> bool((a == ember.rand(3, generator=g)).all())
        True
    """

    def __init__(self, device="cpu"):
        from .._device import to_device
        self.device = to_device(device)
        self.manual_seed(67280421310721)

    def manual_seed(self, seed):
        seed = int(seed)
        if seed < 0:
            seed += 1 << 64
        if not 0 <= seed < 1 << 64:
            raise RuntimeError(f"Overflow when unpacking long long: seed {seed} is out of range")
        self._seed, self._rng = seed, None
        return self

    @property
    def rng(self):
        """NumPy's PCG64 generator for the seed, made on first draw: ``numpy.random`` takes
        long to import, too long for ``import ember``."""
        r = self._rng
        if r is None:
            r = self._rng = np.random.Generator(np.random.PCG64(self._seed))
        return r

    def seed(self):
        import secrets        # imported here: it pulls in hashlib and friends at startup
        s = secrets.randbits(63)
        self.manual_seed(s)
        return s

    def initial_seed(self):
        return self._seed

    def get_state(self):
        """The state as a uint8 tensor (to restore with ``set_state``)."""
        import pickle
        blob = pickle.dumps((self._seed, self.rng.bit_generator.state))
        return _T()._wrap(np.frombuffer(blob, dtype=np.uint8).copy())

    def set_state(self, new_state):
        if not isinstance(new_state, _T()) or new_state.dtype is not _dtype.uint8:
            raise TypeError("expected a torch.ByteTensor as the generator state")
        import pickle
        self._seed, st = pickle.loads(new_state.numpy().tobytes())
        self.rng.bit_generator.state = st
        return self

    def __getstate__(self):
        return {"device": self.device, "state": self.get_state().numpy()}

    def __setstate__(self, d):
        self.__init__(d["device"])
        self.set_state(_T()._wrap(d["state"]))


default_generator = Generator()
cuda_generators = {}        # GPU index -> its default generator, made on first use


def device_generator(dev):
    """The default generator of device ``dev``: ``default_generator`` for the cpu, one per GPU,
    seeded on creation as the cpu's was (a ``manual_seed`` before it was made covers it)."""
    if dev is None or dev.type != "cuda":
        return default_generator
    g = cuda_generators.get(dev.index or 0)
    if g is None:
        g = cuda_generators[dev.index or 0] = Generator(dev)
        g.manual_seed(default_generator.initial_seed())
    return g


def manual_seed(seed):
    """Seed the default generators of every device."""
    for g in cuda_generators.values():
        g.manual_seed(seed)
    return default_generator.manual_seed(seed)


def seed():
    s = default_generator.seed()
    for g in cuda_generators.values():
        g.manual_seed(s)
    return s


def initial_seed():
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(new_state):
    default_generator.set_state(new_state)


# ember.func.vmap's randomness rule while a vmap runs (func/_vmap.py's ``random_call``):
# ``vmap_random(kind, f, args, kwargs)`` runs the random function ``f`` for the batch
vmap_random = None


def _vmapped(kind):
    """Random functions go to vmap's randomness rule inside vmap. ``kind`` says how it
    batches them: ``"size"`` (a factory: its size, the last positional argument or
    ``size=``, gains the batch dims; ``"sizes"``: all its positional arguments are the size),
    ``"tensor"`` (draws shaped as tensor inputs), ``"fill"``
    (an in-place fill of its first argument), ``"loop"`` (one call per example: randperm)."""
    def deco(f):
        def g(*args, **kwargs):
            if vmap_random is not None:
                return vmap_random(kind, f, args, kwargs)
            return f(*args, **kwargs)
        g.__name__, g.__qualname__, g.__doc__, g.__wrapped__ = f.__name__, f.__qualname__, \
            f.__doc__, f
        return g
    return deco


def _rng(generator, device=None):
    """The NumPy generator to draw with for a tensor on ``device``: ``generator``'s (which
    must be of that device's type, as torch checks), else the device's default one."""
    if vmap_random is not None:         # a draw that no randomness rule batched
        vmap_random("draw", None, (), {})
    dev = to_device(device)
    if generator is None:
        return device_generator(dev).rng
    if generator.device.type != dev.type and dev.type != "meta":
        raise RuntimeError(f"Expected a '{dev.type}' device type for generator but found "
                           f"'{generator.device.type}'")
    return generator.rng


def _float_dtype(dtype, name):
    d = _dtype.to_dtype(dtype) if dtype is not None else _dtype.get_default_dtype()
    if d.category < _dtype._FLOAT:
        raise RuntimeError(f"\"{name}\" not implemented for '{d.name}'")
    return d


def _random(name, draw):
    def f(*size, generator=None, out=None, dtype=None, layout=None, device=None,
          requires_grad=False, pin_memory=False):
        d, shape = _float_dtype(dtype, name), _size(size)
        if to_device(device) is META:
            return _finish(_drawn(device, shape, d.np, None), device, requires_grad, out)
        arr = draw(_rng(generator, device), shape)
        if d.category == _dtype._COMPLEX:
            arr = (arr + 1j * draw(_rng(generator, device), shape)) / np.sqrt(2)
        t = _finish(np.asarray(arr).astype(d.np), device, requires_grad, out)
        if pin_memory:
            from .._composites import pinned_new
            return pinned_new(t, True)
        return t
    f.__name__ = name
    return _vmapped("sizes")(f)


rand = _random("rand", lambda rng, s: rng.random(s))
rand.__doc__ = "Uniform samples in [0, 1)."
randn = _random("randn", lambda rng, s: rng.standard_normal(s))
randn.__doc__ = "Standard normal samples."


@_vmapped("size_arg")
def randint(low=0, high=None, size=None, *, generator=None, out=None, dtype=None, layout=None,
            device=None, requires_grad=False):
    """Integers uniform in [low, high)."""
    if size is None:
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if high <= low:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= "
                           f"to={high}")
    shape, dt = _size((size,) if isinstance(size, int) else size), _dt(dtype, _dtype.int64)
    return _finish(_drawn(device, shape, dt, lambda: _rng(generator, device).integers(
        low, high, shape).astype(dt)), device, requires_grad, out)


@_vmapped("loop")
def randperm(n, *, generator=None, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    """A random permutation of 0..n-1."""
    dt = _dt(dtype, _dtype.int64)
    return _finish(_drawn(device, (n,), dt, lambda: _rng(generator, device).permutation(
        n).astype(dt)), device, requires_grad, out)


def rand_like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None):
    return rand(tuple(input.shape), dtype=dtype or input.dtype, device=device or input.device,
                requires_grad=requires_grad)


def randn_like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None):
    return randn(tuple(input.shape), dtype=dtype or input.dtype, device=device or input.device,
                 requires_grad=requires_grad)


def randint_like(input, low=0, high=None, *, dtype=None, device=None, requires_grad=False):
    return randint(low, high, tuple(input.shape), dtype=dtype or input.dtype,
                   device=device or input.device)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, out=None, dtype=None, device=None,
           requires_grad=False):
    """Normal samples with the given mean and std (numbers or tensors, broadcast)."""
    T = _T()
    if isinstance(mean, T) or isinstance(std, T):
        m = mean if isinstance(mean, T) else None
        s = std if isinstance(std, T) else None
        ref = m if m is not None else s
        shape = np.broadcast_shapes(tuple(getattr(mean, "shape", ())),
                                    tuple(getattr(std, "shape", ())))
        z = randn(shape, generator=generator, dtype=ref.dtype, device=ref.device)
        return z * std + mean
    if size is None:
        raise TypeError("normal(): with float mean and std, size is required")
    # NOTE: torch's default device does not reach normal(): it is not among its factories
    device = CPU if device is None else device
    return randn(_size((size,) if isinstance(size, int) else tuple(size)), generator=generator,
                 out=out, dtype=dtype, device=device, requires_grad=requires_grad) * std + mean \
        if out is None else out.copy_(randn(tuple(size), generator=generator) * std + mean)


def bernoulli(input, p=None, *, generator=None, out=None):
    """1 with probability ``input`` (or ``p``), else 0, in ``input``'s dtype."""
    probs = input.detach() if p is None else p
    u = rand(tuple(input.shape), generator=generator, dtype=_dtype.float64, device=input.device)
    r = (u < probs).to(input.dtype)
    return r if out is None else out.copy_(r)


@_vmapped("tensor")
def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """Draw ``num_samples`` category indices per row with probabilities ``input``."""
    if input.device.type == "meta":
        return empty(tuple(input.shape[:-1]) + (num_samples,), dtype=_dtype.int64,
                     device=input.device)
    probs = np.asarray(input.detach().cpu().double().numpy())
    rows = probs.reshape(-1, probs.shape[-1])
    if (rows < 0).any() or not np.isfinite(rows).all():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if not replacement and num_samples > rows.shape[1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    rng = _rng(generator, input.device)
    res = np.stack([rng.choice(r.size, num_samples, replace=replacement, p=r / r.sum())
                    for r in rows]).astype(np.int64)
    res = res.reshape(probs.shape[:-1] + (num_samples,))
    return _finish(res, input.device, False, out)


# ---- in-place random fills (Tensor methods) ---------------------------------------------------

@_vmapped("fill")
def _fill_from(self, generator, draw):
    """Fill ``self`` with the host array ``draw(rng, shape)`` makes; on the meta device, draw
    nothing."""
    from .._backends import backend
    if self.device.type == "meta":
        return self
    arr = draw(_rng(generator, self.device), tuple(self.shape))
    with _nograd():
        self._assign(_T()._wrap(backend(self.device).from_host(
            np.asarray(arr, dtype=self.dtype.np), self.device), self.device), "random_")
    return self


def _nograd():
    from ..autograd.grad_mode import no_grad
    return no_grad()


def uniform_(self, a=0.0, b=1.0, *, generator=None):
    """Fill with samples uniform in [a, b)."""
    return _fill_from(self, generator, lambda g, s: g.uniform(a, b, s))


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    """Fill with normal samples."""
    return _fill_from(self, generator, lambda g, s: g.normal(mean, std, s))


def random_(self, from_=0, to=None, *, generator=None):
    """Fill with integers uniform in [from, to); ``random_(to)`` is [0, to), and ``random_()``
    spans the integers the dtype holds exactly."""
    if to is None and from_ != 0:
        from_, to = 0, from_
    if to is None:
        to = (2 ** 24 + 1 if self.dtype is _dtype.float32 else 2 ** 53 + 1
              if self.dtype is _dtype.float64 else 2 ** 8 + 1 if self.dtype is _dtype.bfloat16
              else 2 ** 11 + 1 if self.dtype is _dtype.float16 else
              2 if self.dtype is _dtype.bool_ else int(np.iinfo(self.dtype.np).max) + 1)
    if from_ >= to:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} "
                           f">= to={to}")
    return _fill_from(self, generator, lambda g, s: g.integers(from_, to, s))


def bernoulli_(self, p=0.5, *, generator=None):
    pp = p.detach().cpu().numpy() if isinstance(p, _T()) and self.device.type != "meta" else p
    return _fill_from(self, generator, lambda g, s: g.random(s) < pp)


def exponential_(self, lambd=1.0, *, generator=None):
    return _fill_from(self, generator, lambda g, s: g.exponential(1.0 / lambd, s))


def _float_fill(self, name, what="a floating point"):
    if self.dtype.category != _dtype._FLOAT:
        raise RuntimeError(f"{name}_ expects {what} dtype, got {self.dtype}")


def _positive(name, what, value):
    if not value > 0:
        raise RuntimeError(f"{name}_ expects {what} > 0.0, but found {what}={value}")


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """Fill with samples of the Cauchy distribution ``median + sigma * tan(pi * (u - 1/2))``."""
    _float_fill(self, "cauchy")
    _positive("cauchy", "sigma", sigma)
    return _fill_from(self, generator, lambda g, s: median + sigma * g.standard_cauchy(s))


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """Fill with ``exp(N(mean, std))`` samples."""
    _float_fill(self, "log_normal")
    _positive("log_normal", "std", std)
    return _fill_from(self, generator, lambda g, s: g.lognormal(mean, std, s))


def geometric_(self, p, *, generator=None):
    """Fill with the number of Bernoulli(p) trials up to the first success (1, 2, ...)."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    return _fill_from(self, generator, lambda g, s: g.geometric(p, s))


@_vmapped("tensor")
def poisson(input, generator=None):
    """Poisson samples with rates ``input`` (non-negative floats), in ``input``'s dtype.

    Example:
        >>> ember.poisson(ember.zeros(3))
        tensor([0., 0., 0.])
    """
    if input.dtype.category != _dtype._FLOAT:
        raise NotImplementedError(f"\"poisson_cpu\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")
    if input.device.type == "meta":
        return empty(tuple(input.shape), dtype=input.dtype, device=input.device)
    rates = input.detach().cpu().double().numpy()
    if (rates < 0).any() or np.isnan(rates).any():
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")
    return _finish(_rng(generator, input.device).poisson(rates).astype(input.dtype.np),
                   input.device, False, None)


@_vmapped("tensor")
def binomial(count, prob, generator=None):
    """Binomial samples: successes in ``count`` trials of probability ``prob`` (float tensors,
    broadcast), in ``count``'s dtype.

    Example:
        >>> ember.binomial(ember.tensor([5., 3.]), ember.tensor([1., 0.]))
        tensor([5., 0.])
    """
    if count.dtype.category != _dtype._FLOAT:
        raise ValueError(f"binomial only supports floating-point dtypes for count, got: "
                         f"{_type_name(count.dtype)}")
    n = count.detach().cpu().double().numpy()
    p = prob.detach().cpu().double().numpy()
    return _finish(_rng(generator, count.device).binomial(n.astype(np.int64), p).astype(
        count.dtype.np), count.device, False, None)


def _type_name(dt):
    from .pointwise import type_name
    return type_name(dt.name)


TENSOR_METHODS = {"uniform_": uniform_, "normal_": normal_, "random_": random_,
                  "bernoulli_": bernoulli_, "exponential_": exponential_, "cauchy_": cauchy_,
                  "log_normal_": log_normal_, "geometric_": geometric_, "bernoulli": bernoulli,
                  "multinomial": multinomial}



@_vmapped("tensor")
def _standard_gamma(input, generator=None):
    """Samples of ``Gamma(input, 1)`` (NumPy's Marsaglia-Tsang sampler), differentiable in
    ``input`` by implicit reparameterisation: the gradient holds each sample's CDF value fixed
    (``ember._standard_gamma_grad``), as torch's.

    Example:
        >>> a = ember.tensor([2., 5.], requires_grad=True)
        >>> x = ember._standard_gamma(a)
        >>> x.sum().backward(); bool((a.grad > 0).all())
        True
    """
    if input.dtype.category != _dtype._FLOAT:
        raise NotImplementedError(f"\"_standard_gamma_cpu\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")
    alpha = input.detach().cpu().double().numpy()
    ok = alpha > 0
    x = np.where(ok, _rng(generator, input.device).standard_gamma(np.where(ok, alpha, 1.0)), 0.0)
    # NOTE: as torch's sampler, a draw below the smallest normal number (an underflow, or a
    # concentration that is not positive) is that number
    npdt = input.dtype.np
    x = _finish(np.maximum(x.astype(npdt), np.finfo(npdt).tiny), input.device, False, None)
    from .. import autograd
    if input.requires_grad and autograd.grad_mode.is_grad_enabled():
        x = _gamma_function().apply(input, x)
    return x


def _gamma_function():
    """The autograd Function attaching the gradient to Gamma samples (made on first use: the
    autograd package is not loaded at ``import ember``)."""
    global _GammaFn
    if _GammaFn is None:
        from .. import autograd

        class StandardGamma(autograd.Function):
            @staticmethod
            def forward(ctx, alpha, x):
                ctx.save_for_backward(alpha, x)
                return x.clone()

            @staticmethod
            def backward(ctx, g):
                alpha, x = ctx.saved_tensors
                from .registry import get
                return g * get("_standard_gamma_grad")(alpha, x), None
        _GammaFn = StandardGamma
    return _GammaFn


_GammaFn = None


def _sample_dirichlet(input, generator=None):
    """Dirichlet samples with concentrations ``input`` (last dim): normalised Gamma draws,
    without gradient (``Dirichlet.rsample`` differentiates through the Gamma draws instead).

    Example:
        >>> x = ember._sample_dirichlet(ember.ones(2, 3))
        >>> x.shape, bool(x.sum(-1).allclose(ember.ones(2)))
        (torch.Size([2, 3]), True)
    """
    g = _standard_gamma(input.detach(), generator).double()
    g = g.clamp(min=np.finfo(input.dtype.np).tiny)
    return (g / g.sum(-1, keepdim=True)).to(input.dtype)
