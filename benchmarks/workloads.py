"""The benchmark workloads, written once against a torch-shaped module ``T`` (ember or torch)
and, where a NumPy version says something useful, once against NumPy.

A workload's ``build(T)`` returns a zero-argument callable; ``run.py`` times it. ``per`` divides
the time of one call (a 10-op chain reports time per op); ``flops`` turns time into GFLOP/s.
"""


class Workload:
    """One timed thing: ``build(T) -> fn`` for ember/torch, ``numpy(np) -> fn`` or None."""

    def __init__(self, name, build, numpy=None, per=1, flops=None, unit=None):
        self.name, self.build, self.numpy = name, build, numpy
        self.per, self.flops, self._unit = per, flops, unit

    @property
    def unit(self):
        return self._unit or ("GFLOP/s" if self.flops else ("us/op" if self.per > 1 else "us"))

    def value(self, seconds):
        """What the table shows for one call taking ``seconds``: GFLOP/s, or time per op."""
        if self.flops:
            return self.flops / seconds / 1e9
        return seconds / self.per * (1e3 if self.unit == "ms" else 1e6)


# ---- per-op overhead: a + b ------------------------------------------------------------------

def _add(n, grad):
    def build(T):
        a = T.ones(n, dtype=T.float32, requires_grad=grad)
        b = T.ones(n, dtype=T.float32, requires_grad=grad)
        return lambda: a + b
    return build


def _np_add(n):
    def build(np):
        a, b = np.ones(n, np.float32), np.ones(n, np.float32)
        return lambda: a + b
    return build


# ---- a 10-op chain, forward (no grad) and forward + backward --------------------------------

_CHAIN_N = 100


def _chain(x, w, b, tanh):
    # mul, add, tanh x3, mul, add, mul, sub, sum: 10 ops
    h = tanh(tanh(tanh(x * w + b)))
    return ((h * w + x) * 0.5 - b).sum()


def _chain_fwd(T):
    x, w, b = (T.full((_CHAIN_N,), v, dtype=T.float32) for v in (0.5, 0.7, 0.1))
    return lambda: _chain(x, w, b, T.tanh)


def _chain_bwd(T):
    leaves = [T.full((_CHAIN_N,), v, dtype=T.float32, requires_grad=True)
              for v in (0.5, 0.7, 0.1)]

    def step():
        for t in leaves:
            t.grad = None
        _chain(*leaves, T.tanh).backward()
    return step


def _np_chain_fwd(np):
    x, w, b = (np.full(_CHAIN_N, v, np.float32) for v in (0.5, 0.7, 0.1))
    return lambda: _chain(x, w, b, np.tanh)


def _np_chain_bwd(np):
    """The same chain with a hand-written backward: the floor of the arithmetic itself."""
    x, w, b = (np.full(_CHAIN_N, v, np.float32) for v in (0.5, 0.7, 0.1))
    one = np.ones(_CHAIN_N, np.float32)

    def step():
        t1 = np.tanh(x * w + b)
        t2 = np.tanh(t1)
        t3 = np.tanh(t2)
        loss = ((t3 * w + x) * 0.5 - b).sum()
        g = one * 0.5
        gw, gx, gb = g * t3, g.copy(), -one
        gh = g * w * (1 - t3 * t3) * (1 - t2 * t2) * (1 - t1 * t1)
        gb += gh
        gw += gh * x
        gx += gh * w
        return loss, gx, gw, gb
    return step


# ---- matmul ---------------------------------------------------------------------------------

def _matmul(n):
    def build(T):
        # BLAS speed does not depend on the values; two arrays so no a @ a.T shortcut applies
        a, b = T.full((n, n), 0.5, dtype=T.float32), T.full((n, n), 0.25, dtype=T.float32)
        return lambda: a @ b
    return build


def _np_matmul(n):
    def build(np):
        a, b = np.full((n, n), 0.5, np.float32), np.full((n, n), 0.25, np.float32)
        return lambda: a @ b
    return build


# ---- einsum: attention-shaped contractions (batch 8, heads 8, seq 256, head dim 64) ----------

_ATT = {"q": (8, 8, 256, 64), "k": (8, 8, 256, 64), "p": (8, 8, 256, 256)}
_EINSUMS = {"bhqd,bhkd->bhqk": ("q", "k"), "bhqk,bhkd->bhqd": ("p", "k")}


def _operands(eq, make):
    # deterministic, values in [-1, 1): results comparable between the frameworks
    return [make(_ATT[n], seed) for seed, n in enumerate(_EINSUMS[eq])]


def _einsum(eq):
    def build(T):
        def make(shape, seed):
            n = 1
            for s in shape:
                n *= s
            return (T.arange(n, dtype=T.float32).reshape(shape) * (0.37 + seed) % 2) - 1
        a, b = _operands(eq, make)
        return lambda: T.einsum(eq, a, b)
    return build


def _np_einsum(eq):
    def build(np):
        def make(shape, seed):
            return (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) *
                    np.float32(0.37 + seed) % 2) - 1
        a, b = _operands(eq, make)
        return lambda: np.einsum(eq, a, b, optimize=True)
    return build



# ---- torch.distributions: a reparameterised sample and its log density (VAE, policy step) ---

def _dist(multivariate):
    def build(T):
        g = T.Generator().manual_seed(0)
        loc = T.randn(4096, 16 if multivariate else 1, generator=g).squeeze(-1).requires_grad_()
        if multivariate:
            a = T.randn(16, 16, generator=g)
            tril = T.linalg.cholesky(a @ a.T + 16 * T.eye(16)).requires_grad_()

            def run():
                d = T.distributions.MultivariateNormal(loc, scale_tril=tril)
                return d.log_prob(d.rsample())
            return run
        scale = (T.rand(4096, generator=g) + 0.5).requires_grad_()

        def run():
            d = T.distributions.Normal(loc, scale)
            return d.log_prob(d.rsample())
        return run
    return build

WORKLOADS = [
    Workload("add 1 elem", _add(1, False), _np_add(1)),
    Workload("add 100 elem", _add(100, False), _np_add(100)),
    Workload("add 1 elem, requires_grad", _add(1, True)),
    Workload("add 100 elem, requires_grad", _add(100, True)),
    Workload("chain10 fwd (no grad)", _chain_fwd, _np_chain_fwd, per=10),
    Workload("chain10 fwd+bwd", _chain_bwd, _np_chain_bwd, per=10),
    Workload("matmul 256 f32", _matmul(256), _np_matmul(256), flops=2 * 256 ** 3),
    Workload("matmul 1024 f32", _matmul(1024), _np_matmul(1024), flops=2 * 1024 ** 3),
    Workload("einsum bhqd,bhkd->bhqk f32", _einsum("bhqd,bhkd->bhqk"),
             _np_einsum("bhqd,bhkd->bhqk"), flops=2 * 8 * 8 * 256 * 256 * 64),
    Workload("einsum bhqk,bhkd->bhqd f32", _einsum("bhqk,bhkd->bhqd"),
             _np_einsum("bhqk,bhkd->bhqd"), flops=2 * 8 * 8 * 256 * 256 * 64),
    Workload("Normal(4096) rsample+log_prob", _dist(False)),
    Workload("MultivariateNormal(4096x16) rsample+log_prob", _dist(True)),
]
