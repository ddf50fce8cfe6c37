"""Random numbers: Generator, the default generator, and random creation functions.

Every generator is torch's CPU generator (mt19937, drawn with NumPy's ``MT19937``) and its
transformations, vectorised: a seed gives torch's CPU numbers bit for bit, on every device (a
GPU's tensors are drawn on the host and copied). Each GPU has a default generator of its own
(torch's ``torch.cuda.default_generators``), which draws for tensors made there without a
``generator=``; ``manual_seed`` seeds them all.
"""
import math

import numpy as np

from .. import _dtype
from .._device import CPU, META, to_device
from .creation import _drawn, _dt, _finish, _size, _T, empty, empty_like, like_strides


class Generator:
    """A random number generator, like ``torch.Generator``: torch's CPU engine (mt19937 seeded
    with ``init_genrand``), drawn with NumPy's ``MT19937`` bit generator, so a seed gives the
    numbers torch's CPU generator gives, and ``get_state`` is torch's state tensor.

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
        # torch's ``next`` word reads 0 until the first draw after seeding; the normal caches
        # hold the second Box-Muller sample of the scalar samplers (double, float)
        self._seed, self._mt, self._rng, self._fresh, self._cache = seed, None, None, True, {}
        return self

    @property
    def engine(self):
        """NumPy's ``MT19937`` in torch's state, made on first draw: ``numpy.random`` takes
        long to import, too long for ``import ember``."""
        if self._mt is None:
            self._mt = np.random.MT19937()
            self._mt._legacy_seeding(self._seed & 0xFFFFFFFF)
        return self._mt

    @property
    def rng(self):
        """A NumPy Generator on the same engine, for the distributions torch's numbers are not
        reproduced for (they advance the same stream)."""
        self._fresh = False
        if self._rng is None:
            self._rng = np.random.Generator(self.engine)
        return self._rng

    def seed(self):
        import secrets        # imported here: it pulls in hashlib and friends at startup
        s = secrets.randbits(63)
        self.manual_seed(s)
        return s

    def initial_seed(self):
        return self._seed

    def get_state(self):
        """torch's ``CPUGeneratorImplState`` as a uint8 tensor of 5056 bytes: the seed, ``left``,
        ``seeded``, ``next``, the 624 state words (as uint64), the double normal cache
        (``normal_y``/``normal_is_valid``) and the float one."""
        st = self.engine.state["state"]
        pos = int(st["pos"])
        b = np.zeros(5056, np.uint8)
        d, f = self._cache.get("d"), self._cache.get("f")
        b[:24] = np.frombuffer(np.array([self._seed], "<u8").tobytes() + np.array(
            [625 - pos, 1], "<i4").tobytes() + np.array([0 if self._fresh else pos], "<u8")
            .tobytes(), np.uint8)
        b[24:5016] = np.frombuffer(st["key"].astype("<u8").tobytes(), np.uint8)
        b[5024:5032] = np.frombuffer(np.array([d or 0.0], "<f8").tobytes(), np.uint8)
        b[5040], b[5052] = d is not None, f is not None
        b[5048:5052] = np.frombuffer(np.array([f or 0.0], "<f4").tobytes(), np.uint8)
        return _T()._wrap(b)

    def set_state(self, new_state):
        """Set the state from ``get_state``'s tensor, or from torch's."""
        if not isinstance(new_state, _T()) or new_state.dtype is not _dtype.uint8:
            raise TypeError(f"expected a torch.ByteTensor, but got "
                            f"{getattr(new_state, 'dtype', type(new_state))}")
        b = new_state.detach().cpu().numpy().tobytes()
        if len(b) != 5056:
            raise RuntimeError(f"Expected a CPUGeneratorImplState of size 5056 but found the "
                               f"input RNG state size to be {len(b)}")
        seed, = np.frombuffer(b, "<u8", 1)
        left, seeded = np.frombuffer(b, "<i4", 2, 8)
        nxt, = np.frombuffer(b, "<u8", 1, 16)
        if not (seeded and 0 < left <= 624 and nxt <= 624):
            raise RuntimeError("Invalid mt19937 state")
        mt = np.random.MT19937()
        # NOTE: numpy's position is torch's 625 - left: a state whose ``next`` disagrees (never
        # made by torch itself) reads on from there
        mt.state = {"bit_generator": "MT19937", "state": {
            "key": np.frombuffer(b, "<u8", 624, 24).astype(np.uint32), "pos": 625 - int(left)}}
        cache = {}
        if np.frombuffer(b, "<i4", 1, 5040)[0]:
            cache["d"] = float(np.frombuffer(b, "<f8", 1, 5024)[0])
        if b[5052]:
            cache["f"] = float(np.frombuffer(b, "<f4", 1, 5048)[0])
        self._seed, self._mt, self._rng, self._fresh, self._cache = int(seed), mt, None, \
            nxt == 0, cache
        return self

    def __getstate__(self):
        return {"device": self.device, "state": self.get_state().numpy()}

    def __setstate__(self, d):
        self.__init__(d["device"])
        self.set_state(_T()._wrap(d["state"]))

    # ---- torch's transformations of the 32-bit stream (ATen's DistributionsHelper.h) ----

    def _raw(self, n):
        """``n`` draws of ``random()``: 32 bits each."""
        self._fresh = False
        return self.engine.random_raw(n) if n else np.zeros(0, np.uint64)

    def _random64(self, n):
        """``n`` draws of ``random64()``: two 32-bit draws, the first the high word."""
        r = self._raw(2 * n)
        return (r[0::2] << np.uint64(32)) | r[1::2]

    def _ints(self, n, lo, hi, dt):
        """``uniform_int_from_to_distribution``: ``random()`` modulo ``hi - lo``, plus ``lo``;
        ``random64()`` for a range of 2**32 or more in int64, float, double or bfloat16."""
        dt, rng = np.dtype(dt), hi - lo
        wide = rng >= 1 << 32 and dt.name in ("int64", "float32", "float64", "bfloat16")
        r = (self._random64(n) if wide else self._raw(n)) % np.uint64(rng)
        return (r.astype(np.int64) + np.int64(lo)).astype(dt)

    def _perm(self, n):
        """``randperm_cpu``: Fisher-Yates swapping ``i`` with ``i + random() % (n - i)``; from
        2**32 / 20 on, the inside-out variant with ``random64() % (i + 1)`` (a loop)."""
        if n >= 0xFFFFFFFF // 20:
            p = list(range(n))
            for i, j in enumerate((self._random64(n) % np.arange(1, n + 1, dtype=np.uint64))
                                  .tolist()):
                p[i], p[j] = p[j], i
            return np.array(p, np.int64)
        if n < 2:
            return np.arange(n)
        m = np.arange(n - 1)
        j = (self._raw(n - 1) % np.arange(n, 1, -1, dtype=np.uint64)).astype(np.int64) + m
        return _swapped(j)

    def _uniform(self, n, dt, a=0.0, b=1.0):
        """``uniform_real_distribution``: the dtype's mantissa bits of ``random()`` (of
        ``random64()`` for float64) times 2**-digits, scaled to [a, b) in float (double)."""
        dt = np.dtype(dt)
        bits, acc = (53, np.float64) if dt == np.float64 else (24, np.float32)
        r = self._random64(n) if bits == 53 else self._raw(n)
        x = (r & np.uint64((1 << bits) - 1)).astype(acc) * acc(2.0 ** -bits)
        if dt.itemsize > 2:
            a, b = np.array(a, dt), np.array(b, dt)
            return _fma(x, b - a, a).astype(dt)
        # half and bfloat16 draw a float in [a, b) (in float) and round it: one that rounds to
        # b is a instead (measured)
        out = _fma(x, acc(b) - acc(a), acc(a)).astype(dt)
        return np.where(out == np.array(b, dt), np.array(a, dt), out)

    def _normal(self, n, dt, mean=0.0, std=1.0, fill=True):
        """torch's ``normal_``: ``normal_fill`` (uniforms for all, then Box-Muller on blocks of
        16, the last 16 redrawn when 16 does not divide ``n``) for ``fill`` (16 or more
        contiguous elements), else the scalar double sampler with its cached second sample."""
        dt = np.dtype(dt)
        if fill and n >= 16:
            acc = np.float64 if dt == np.float64 else np.float32
            box = _box16 if acc is np.float64 else _box16_avx2
            # (half and bfloat16 draw no uniforms for the last n % 16 before the redraw)
            k = n - n % 16
            out = box(self._uniform(n if dt.itemsize > 2 else k, acc)[:k].reshape(-1, 2, 8),
                      mean, std).ravel()
            if n % 16:
                out = np.concatenate([out[:n - 16], box(self._uniform(16, acc).reshape(
                    1, 2, 8), mean, std).ravel()])
            return out.astype(dt)
        c = self._cache.pop("d", None)
        m = n - (c is not None)
        u = self._uniform(m + m % 2, np.float64).reshape(-1, 2)
        r, th = np.sqrt(-2.0 * _libm("log1p", -u[:, 1])), 2.0 * np.pi * u[:, 0]
        z = np.stack([r * np.cos(th), r * np.sin(th)], 1).ravel()
        if m % 2:
            self._cache["d"] = float(z[-1])
        z = np.concatenate([[] if c is None else [c], z[:m]])
        return _fma(z, std, mean).astype(dt)


def _swapped(j):
    """``range(n)`` after swapping ``i`` with ``j[i] >= i`` for i = 0, 1, ..., n - 2, without a
    loop: step i fixes position i to what position j[i] holds then, which is the value at
    position m before step m, for m the last earlier step to write there (the one that wrote
    position k last, for that value: pointer chains, resolved by doubling), or j[i] if none."""
    n, m = len(j) + 1, np.arange(len(j))
    o = np.argsort(j, kind="stable")            # steps by target, then by time
    sj, sm = j[o], m[o]
    same = np.r_[False, sj[1:] == sj[:-1]]
    prev = np.full(n - 1, -1)
    prev[sm[same]] = sm[np.nonzero(same)[0] - 1]     # the last earlier step with my target
    k = np.arange(n)
    i = np.searchsorted(sj, k, "right") - 1
    i -= (i >= 0) & (sm[i] == k)                     # (not step k itself, if it targets k)
    v = np.where((i >= 0) & (sj[i] == k), sm[i], k)  # position k's last writer before step k
    while (v[v] != v).any():
        v = v[v]
    return np.r_[np.where(j == m, v[:-1], np.where(prev >= 0, v[np.maximum(prev, 0)], j)), v[-1]]


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _odd_sum(a, b):
    """``a + b`` (float64) rounded to odd: exact when rounded again to fewer bits."""
    s, e = _two_sum(a, b)
    return np.where((e != 0) & (s.view(np.int64) & 1 == 0), np.nextafter(s, np.copysign(
        np.inf, e)), s)


_LIBM = {"log": 0, "log1p": 1, "exp": 2, "tan": 3}


def _libm(name, x):
    """glibc's float64 ``name`` (log, log1p, exp, tan) of ``x``: torch's CPU transforms call it
    per value; NumPy's AVX-512 loops for these differ from it in the last bit."""
    from .._C.kernels import kernel, ptr
    x, f = np.ascontiguousarray(x, np.float64), kernel("libm", np.dtype(np.float64))
    if f is not None:
        y = np.empty_like(x)
        f(_LIBM[name], ptr(x), ptr(y), x.size)
        return y
    if not _numpy_simd_math():
        return getattr(np, name)(x)
    return np.fromiter(map(getattr(math, name), x.ravel().tolist()), np.float64,
                       x.size).reshape(x.shape)


def _numpy_simd_math():
    """Whether NumPy runs float64 log/exp/tan through its AVX-512 (SVML) loops here."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
        return bool(__cpu_features__.get("AVX512_SKX"))
    except ImportError:
        return True


def _fma(a, b, c):
    """``a * b + c`` rounded once, as the fused multiply-adds torch's compiled kernels use:
    float32 through float64 rounded to odd, float64 by Boldo and Melquiond's emulation."""
    if a.dtype != np.float64:
        return _odd_sum(a.astype(np.float64) * np.float64(b), np.float64(c)).astype(a.dtype)
    b = np.broadcast_to(np.float64(b), a.shape)
    p, (ah, al), (bh, bl) = a * b, _split(a), _split(b)
    ul = ((ah * bh - p) + ah * bl + al * bh) + al * bl      # a * b == p + ul exactly
    th, tl = _two_sum(np.float64(c), p)
    return th + _odd_sum(tl, ul)


def _split(x):
    t = x * 134217729.0
    hi = t - (t - x)
    return hi, x - hi


def _box16(d, mean, std):
    """``normal_fill_16`` in double: Box-Muller of (1 - first 8, next 8) uniforms per block."""
    r, th = np.sqrt(-2.0 * _libm("log", 1.0 - d[:, 0])), 2.0 * np.pi * d[:, 1]
    return np.stack([_fma(r * np.cos(th), std, mean), _fma(r * np.sin(th), std, mean)], 1)


F32 = np.float32


def _ma(a, b, c):
    """``a * b + c`` as float32 FMA: torch's AVX2 build fuses avx_mathfun's multiply-adds."""
    return _fma(np.asarray(a, F32), F32(b) if np.isscalar(b) else b, F32(c))


def _box16_avx2(d, mean, std):
    """``normal_fill_16_AVX2`` for float32: avx_mathfun's ``log256_ps`` and ``sincos256_ps``
    (Cephes polynomials), step for step, fused where GCC fuses them (found by experiment)."""
    x = np.maximum(F32(1) - d[:, 0], F32(2.0 ** -126))      # log256_ps
    i = x.view(np.int32)
    e = ((i >> 23) - 126).astype(F32)
    x = ((i & ~0x7f800000) | 0x3f000000).view(F32)
    m = x < F32(0.707106781186547524)
    x, e = (x - F32(1)) + np.where(m, x, F32(0)), e - m
    z, y = x * x, np.full_like(x, F32(7.0376836292E-2))
    for p in (-1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1, 1.4249322787E-1,
              -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1):
        y = _ma(y, x, p)
    y = _ma(z, -0.5, _ma(y * x, z, e * F32(-2.12194440e-4)))
    r = np.sqrt(F32(-2) * _ma(e, 0.693359375, x + y))
    x = F32(2 * np.pi) * d[:, 1]                                  # sincos256_ps (x >= 0)
    j = (((x * F32(1.27323954473516)).astype(np.int32) + 1) & ~1)
    y = j.astype(F32)
    for p in (-0.78515625, -2.4187564849853515625e-4, -3.77489497744594108e-8):
        x = _ma(y, p, x)
    z = x * x
    c = _ma(_ma(_ma(np.full_like(z, F32(2.443315711809948E-005)), z, -1.388731625493765E-003),
                z, 4.166664568298827E-002) * z, z, -(z * F32(0.5))) + F32(1)
    s = _ma(_ma(_ma(np.full_like(z, F32(-1.9515295891E-4)), z, 8.3321608736E-3), z,
                -1.6666654611E-1) * z, x, x)
    poly = (j & 2) == 0
    sin, cos = np.where(poly, s, c), np.where(poly, c, s)
    sin, cos = np.where(j & 4 != 0, -sin, sin), np.where(~(j - 2) & 4 != 0, -cos, cos)
    return np.stack([_ma(r * cos, std, mean), _ma(r * sin, std, mean)], 1)


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


# ember.func.vmap's randomness rule while a vmap runs (func/_vmap/randomness.py's ``random_call``):
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


def _gen(generator, device=None):
    """The Generator to draw with for a tensor on ``device``: ``generator`` (which must be of
    that device's type, as torch checks), else the device's default one."""
    if vmap_random is not None:         # a draw that no randomness rule batched
        vmap_random("draw", None, (), {})
    dev = to_device(device)
    if generator is None:
        return device_generator(dev)
    if generator.device.type != dev.type and dev.type != "meta":
        raise RuntimeError(f"Expected a '{dev.type}' device type for generator but found "
                           f"'{generator.device.type}'")
    return generator


def _rng(generator, device=None):
    """The NumPy generator on that Generator's engine, for draws torch's numbers are not
    reproduced for."""
    return _gen(generator, device).rng


def _draw(g, n, dt, draw, fill=True):
    """``draw(g, n, real dtype, fill, complex)`` for ``n`` elements of NumPy dtype ``dt``: a
    complex dtype draws its real and imaginary parts interleaved, as torch's ``view_as_real``."""
    if dt.kind != "c":
        return draw(g, n, dt, fill, False)
    return draw(g, 2 * n, np.dtype(dt.char.lower()), fill, True).view(dt)


def _float_dtype(dtype, name):
    d = _dtype.to_dtype(dtype) if dtype is not None else _dtype.get_default_dtype()
    if d.category < _dtype._FLOAT:
        raise RuntimeError(f"\"{name}\" not implemented for '{d.name}'")
    return d


def _random(name, draw):
    def f(*sizes, size=None, generator=None, out=None, dtype=None, layout=None, device=None,
          requires_grad=False, pin_memory=False):
        d, shape = _float_dtype(dtype, name), _size(sizes, size, name)
        if to_device(device) is META:
            return _finish(_drawn(device, shape, d.np, None), device, requires_grad, out)
        arr = _draw(_gen(generator, device), int(np.prod(shape)), np.dtype(d.np), draw)
        return _finish(arr.reshape(shape), device, requires_grad, out, pin_memory)
    f.__name__ = name
    return _vmapped("sizes")(f)


def _std(c, std):
    """A complex normal's parts have variance 1/2 each (torch divides std by sqrt 2)."""
    return std / np.sqrt(2) if c else std


rand = _random("rand", lambda g, n, dt, fill, c: g._uniform(n, dt))
rand.__doc__ = """Uniform samples in [0, 1): torch's CPU numbers for the same seed.

    Example:
        >>> _ = ember.manual_seed(0)
        >>> ember.rand(3)
        tensor([0.4963, 0.7682, 0.0885])
    """
randn = _random("randn", lambda g, n, dt, fill, c: g._normal(n, dt, 0.0, _std(c, 1.0)))
randn.__doc__ = """Standard normal samples: torch's CPU numbers for the same seed.

    Example:
        >>> _ = ember.manual_seed(0)
        >>> ember.randn(3)
        tensor([ 1.5410, -0.2934, -2.1788])
    """


@_vmapped("size_arg")
def randint(low=0, high=None, size=None, *, generator=None, out=None, dtype=None, layout=None,
            device=None, requires_grad=False):
    """Integers uniform in [low, high): torch's CPU numbers for the same seed.

    Example:
        >>> _ = ember.manual_seed(0)
        >>> ember.randint(10, (5,))
        tensor([4, 9, 3, 0, 3])
    """
    if size is None:
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if high <= low:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= "
                           f"to={high}")
    shape, dt = _size((size,) if isinstance(size, int) else size), _dt(dtype, _dtype.int64)
    return _finish(_drawn(device, shape, dt, lambda: _gen(generator, device)._ints(
        int(np.prod(shape)), low, high, dt).reshape(shape)), device, requires_grad, out)


@_vmapped("loop")
def randperm(n, *, generator=None, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    """A random permutation of 0..n-1: torch's CPU numbers for the same seed.

    Example:
        >>> _ = ember.manual_seed(0)
        >>> ember.randperm(6)
        tensor([2, 5, 3, 0, 1, 4])
    """
    dt = _dt(dtype, _dtype.int64)
    return _finish(_drawn(device, (n,), dt, lambda: _gen(generator, device)._perm(n).astype(
        dt)), device, requires_grad, out)


def _like(factory, fill):
    def f(input, *args, generator=None, dtype=None, layout=None, device=None,
          requires_grad=False, memory_format=None):
        kw = {"dtype": dtype or input.dtype, "device": to_device(device or input.device)}
        # NOTE: torch draws into empty_like(input) in memory order: where that is not
        # row-major, an in-place fill's numbers (inside vmap, the factory's batching rule)
        if vmap_random is None and like_strides(input, kw["device"], memory_format):
            return fill(empty_like(input, memory_format=memory_format, **kw), *args,
                        generator=generator).requires_grad_(requires_grad)
        return factory(*args, size=tuple(input.shape), generator=generator,
                       requires_grad=requires_grad, **kw)
    f.__name__ = factory.__name__ + "_like"
    f.__doc__ = f"``{factory.__name__}`` of input's size, laid out as input (dtype, device too)."
    return f


rand_like = _like(rand, lambda t, generator: uniform_(t, generator=generator))
randn_like = _like(randn, lambda t, generator: normal_(t, generator=generator))
randint_like = _like(randint, lambda t, low, high=None, generator=None: random_(
    t, *((0, low) if high is None else (low, high)), generator=generator))


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
        # NOTE: torch's normal_(0, std) then + mean (normal_(0, 1) * std + mean for a tensor
        # std): not rounded once as normal_(mean, std)
        z = randn(shape, generator=generator, dtype=ref.dtype, device=ref.device)
        return z * std + mean
    if size is None:
        raise TypeError("normal(): with float mean and std, size is required")
    # NOTE: torch's default device does not reach normal(): it is not among its factories
    device = CPU if device is None else device
    size = _size((size,) if isinstance(size, int) else tuple(size))
    t = empty(size, dtype=dtype, device=device) if out is None else out
    normal_(t, mean, std, generator=generator)
    return t.requires_grad_() if requires_grad else t


def bernoulli(input, p=None, *, generator=None, out=None):
    """1 with probability ``input`` (or ``p``), else 0, in ``input``'s dtype: torch's CPU
    numbers for the same seed (``bernoulli_``'s).

    Example:
        >>> _ = ember.manual_seed(0)
        >>> ember.bernoulli(ember.full((6,), 0.5))
        tensor([1., 0., 1., 1., 1., 0.])
    """
    probs = input.detach() if p is None else p
    if not isinstance(probs, _T()) and not 0 <= probs <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={probs}")
    # bernoulli_'s uniforms, drawn by a factory (which vmap batches)
    dt = _dtype.float32 if isinstance(probs, _T()) and probs.dtype is not _dtype.float64 \
        else _dtype.float64
    r = (rand(tuple(input.shape), generator=generator, dtype=dt, device=input.device) < probs)
    return r.to(input.dtype) if out is None else out.copy_(r)


@_vmapped("tensor")
def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """Draw ``num_samples`` category indices per row with probabilities ``input``: torch's CPU
    numbers for the same seed.

    Example:
        >>> _ = ember.manual_seed(0)
        >>> ember.multinomial(ember.tensor([0.1, 0.2, 0.7]), 4, replacement=True)
        tensor([2, 2, 2, 2])
    """
    if input.device.type == "meta":
        return empty(tuple(input.shape[:-1]) + (num_samples,), dtype=_dtype.int64,
                     device=input.device)
    probs = input.detach().cpu().numpy()
    rows = probs.reshape(-1, probs.shape[-1])
    if (rows < 0).any() or not np.isfinite(rows).all():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if not replacement and num_samples > rows.shape[1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    if (rows.sum(-1) == 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    g = _gen(generator, input.device)
    if not replacement or num_samples == 1:
        # NOTE: torch's fast path: the top ``num_samples`` of p / q, q ~ Exp(1) in p's dtype
        q = _exponential(g, rows.size, rows.dtype, 1.0).reshape(rows.shape)
        res = np.argsort(-(rows / q), axis=-1, kind="stable")[:, :num_samples]
    else:
        # torch's cumulative distribution (float for half), normalised, its last bucket 1, and a
        # lower-bound search of a double uniform per sample
        acc = np.float64 if rows.dtype == np.float64 else np.float32
        cum = np.cumsum(rows.astype(acc), -1, dtype=acc)
        cum = cum / cum[:, -1:]
        cum[:, -1] = 1
        u = g._uniform(rows.size // rows.shape[1] * num_samples, np.float64)
        res = np.stack([np.searchsorted(c, v) for c, v in zip(cum, u.reshape(len(rows), -1))])
    res = res.astype(np.int64).reshape(probs.shape[:-1] + (num_samples,))
    return _finish(res, input.device, False, out)


# ---- in-place random fills (Tensor methods) ---------------------------------------------------

@_vmapped("fill")
def _fill_from(self, generator, draw, exact=False):
    """Fill ``self`` with the host array ``draw(rng, shape)`` makes (with ``exact``,
    ``draw(generator, n, dtype, fill, complex)``'s flat array of torch's numbers, in torch's
    order: memory order, and ``fill`` when ``self`` is contiguous); on the meta device, draw
    nothing."""
    from .._backends import backend
    if self.device.type == "meta":
        return self
    g, shape = _gen(generator, self.device), tuple(self.shape)
    if exact:
        order = _order(self)
        arr = _draw(g, self.numel(), np.dtype(self.dtype.np), draw, self.is_contiguous())
        arr = arr.reshape([shape[i] for i in order]).transpose(np.argsort(order))
    else:
        arr = draw(g.rng, shape)
    with _nograd():
        self._assign(_T()._wrap(backend(self.device).from_host(
            np.asarray(arr, dtype=self.dtype.np), self.device), self.device), "random_")
    return self


def _nograd():
    from ..autograd.grad_mode import no_grad
    return no_grad()


def uniform_(self, a=0.0, b=1.0, *, generator=None):
    """Fill with samples uniform in [a, b): torch's CPU numbers for the same seed.

    Example:
        >>> _ = ember.manual_seed(0)
        >>> ember.empty(3).uniform_(-1, 1)
        tensor([-0.0075,  0.5364, -0.8230])
    """
    if a > b:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={a} "
                           f"> to={b}")
    return _fill_from(self, generator, lambda g, n, dt, fill, c: g._uniform(n, dt, a, b), True)


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    """Fill with normal samples: torch's CPU numbers for the same seed.

    Example:
        >>> _ = ember.manual_seed(0)
        >>> ember.empty(3).normal_(1, 2)
        tensor([ 4.0820,  0.4131, -3.3576])
    """
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _fill_from(self, generator, lambda g, n, dt, fill, c: g._normal(
        n, dt, mean, _std(c, std), fill), True)


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
    return _fill_from(self, generator, lambda g, n, dt, fill, c: g._ints(n, from_, to, dt), True)


def _order(self):
    """The dims in the order torch's TensorIterator walks a strided tensor: memory order."""
    return sorted(range(self.dim()), key=lambda i: -abs(self.stride(i)))


def bernoulli_(self, p=0.5, *, generator=None):
    """Fill with 1 with probability ``p`` (a number or a tensor), else 0: torch's CPU numbers,
    a double uniform below ``p`` (a float one for a ``p`` tensor not of float64).

    Example:
        >>> _ = ember.manual_seed(0)
        >>> ember.empty(6).bernoulli_(0.5)
        tensor([0., 0., 1., 0., 0., 0.])
    """
    if not isinstance(p, _T()):
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
        return _fill_from(self, generator, lambda g, n, dt, fill, c: g._uniform(
            n, np.float64) < p, True)
    if self.device.type == "meta":
        return self
    pp = np.broadcast_to(p.detach().cpu().numpy(), tuple(self.shape)).transpose(
        _order(self)).ravel()
    acc = np.float64 if pp.dtype == np.float64 else np.float32
    return _fill_from(self, generator, lambda g, n, dt, fill, c: g._uniform(n, acc) < pp.astype(
        acc), True)


def _exponential(g, n, dt, lambd):
    """``exponential_distribution<double>``: ``-1/lambda * log1p(-u)`` of a double uniform."""
    return (-1.0 / lambd * _libm("log1p", -g._uniform(n, np.float64))).astype(dt)


def exponential_(self, lambd=1.0, *, generator=None):
    """Fill with Exp(``lambd``) samples: torch's CPU numbers for the same seed."""
    return _fill_from(self, generator, lambda g, n, dt, fill, c: _exponential(
        g, n, dt, lambd), True)


def _float_fill(self, name, what="a floating point"):
    if self.dtype.category != _dtype._FLOAT:
        raise RuntimeError(f"{name}_ expects {what} dtype, got {self.dtype}")


def _positive(name, what, value):
    if not value > 0:
        raise RuntimeError(f"{name}_ expects {what} > 0.0, but found {what}={value}")


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """Fill with samples of the Cauchy distribution ``median + sigma * tan(pi * (u - 1/2))``
    (torch's CPU numbers for the same seed)."""
    _float_fill(self, "cauchy")
    _positive("cauchy", "sigma", sigma)
    return _fill_from(self, generator, lambda g, n, dt, fill, c: _fma(_libm("tan", np.pi * (
        g._uniform(n, np.float64) - 0.5)), sigma, median).astype(dt), True)


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """Fill with ``exp(N(mean, std))`` samples (torch's CPU numbers: its scalar normal
    sampler's, whatever the size)."""
    _float_fill(self, "log_normal")
    _positive("log_normal", "std", std)
    return _fill_from(self, generator, lambda g, n, dt, fill, c: _libm("exp", g._normal(
        n, np.float64, mean, std, False)).astype(dt), True)


def geometric_(self, p, *, generator=None):
    """Fill with the number of Bernoulli(p) trials up to the first success (1, 2, ...):
    ``ceil(log(u) / log1p(-p))`` (torch's CPU numbers for the same seed)."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    return _fill_from(self, generator, lambda g, n, dt, fill, c: np.ceil(_libm("log", g._uniform(
        n, np.float64)) / math.log1p(-p)).astype(dt), True)


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
