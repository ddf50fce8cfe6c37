"""``ember.quasirandom``: ``SobolEngine``, torch's scrambled and unscrambled Sobol' sequences.

The direction numbers are Joe & Kuo's (``_directions.py``, the table torch uses; ember ships
its first 1111 dimensions). Unscrambled draws equal torch's exactly; scrambling follows torch's
algorithm (a random linear matrix scramble and digital shift) with draws from ember's
generator.
"""
import base64
import zlib

import numpy as np

import ember

__all__ = ["SobolEngine"]
MAXBIT = 30
_STATE = {}


def _state_from(flat, dims):
    """(dims, MAXBIT) int64 direction numbers from the packed table (torch's
    ``_sobol_engine_initialize_state_``)."""
    state = np.zeros((dims, MAXBIT), np.int64)
    state[0] = 1
    at = 1
    for d in range(dims):
        p = int(flat[at])
        m = p.bit_length() - 1
        init = [int(x) for x in flat[at + 1:at + 1 + m]]
        at += 1 + m
        if d == 0:
            continue
        v = init + [0] * (MAXBIT - m)
        for j in range(m, MAXBIT):
            new, pow2 = v[j - m], 1
            for k in range(m):
                pow2 <<= 1
                if (p >> (m - 1 - k)) & 1:
                    new ^= pow2 * v[j - k - 1]
            v[j] = new
        state[d] = v
    return state * (1 << np.arange(MAXBIT - 1, -1, -1, dtype=np.int64))


def _table():
    if "flat" not in _STATE:
        from ._directions import PACKED
        flat = np.frombuffer(zlib.decompress(base64.b85decode("".join(PACKED))), np.uint32)
        _STATE["flat"], _STATE["dims"] = flat[1:], int(flat[0])
        _STATE["state"] = _state_from(np.concatenate([[0], flat[1:]]), int(flat[0]))
    return _STATE["state"]


def _scramble(state, ltm):
    """torch's ``_sobol_engine_scramble_``: each direction number times the lower-triangular
    bit matrix (unit diagonal) of its dimension, over GF(2)."""
    ltm = ltm.copy()
    idx = np.arange(MAXBIT)
    ltm[:, idx, idx] = 1
    rows = (ltm * (1 << np.arange(MAXBIT - 1, -1, -1, dtype=np.int64))).sum(-1)   # (d, MAXBIT)
    bits_v = (state[:, :, None] >> np.arange(MAXBIT)) & 1                     # (d, j, k)
    bits_r = (rows[:, :, None] >> np.arange(MAXBIT)) & 1                      # (d, p, k)
    t1 = np.einsum("djk,dpk->djp", bits_v, bits_r) % 2                        # (d, j, p)
    return (t1[:, :, ::-1] << np.arange(MAXBIT)).sum(-1)


def _lowest_zero(n):
    return (~n & (n + 1)).bit_length() - 1


class SobolEngine:
    """Draws from the Sobol' low-discrepancy sequence in ``dimension`` dimensions, as
    ``torch.quasirandom.SobolEngine``.

    Example:
        >>> import ember
        >>> e = ember.quasirandom.SobolEngine(2)
        >>> e.draw(4)
        tensor([[0.0000, 0.0000],
                [0.5000, 0.5000],
                [0.7500, 0.2500],
                [0.2500, 0.7500]])
    """
    MAXBIT = MAXBIT
    MAXDIM = 21201

    def __init__(self, dimension, scramble=False, seed=None):
        if dimension > self.MAXDIM or dimension < 1:
            raise ValueError("Supported range of dimensionality for SobolEngine is "
                             f"[1, {self.MAXDIM}]")
        table = _table()
        if dimension > len(table):
            raise ValueError(f"SobolEngine: ember ships Joe & Kuo's direction numbers for "
                             f"{len(table)} dimensions, asked for {dimension}")
        self.seed, self.scramble, self.dimension = seed, scramble, dimension
        self._state = table[:dimension].copy()
        self._shift = np.zeros(dimension, np.int64)
        if scramble:
            g = ember.Generator()
            if seed is not None:
                g.manual_seed(seed)
            else:
                g.seed()
            bits = ember.randint(2, (dimension, MAXBIT), generator=g).numpy()
            self._shift = bits @ (1 << np.arange(MAXBIT, dtype=np.int64))
            ltm = np.tril(ember.randint(2, (dimension, MAXBIT, MAXBIT), generator=g).numpy())
            self._state = _scramble(self._state, ltm)
        self.sobolstate = ember.tensor(self._state)
        self.shift = ember.tensor(self._shift)
        self._quasi = self._shift.copy()
        self.num_generated = 0

    quasi = property(lambda self: ember.tensor(self._quasi))

    def _run(self, n, start):
        out = np.empty((n, self.dimension), np.int64)
        q = self._quasi
        for i in range(n):
            q = q ^ self._state[:, _lowest_zero(start + i)]
            out[i] = q
        self._quasi = q
        return out

    def draw(self, n=1, out=None, dtype=None):
        """The next ``n`` points, (n, dimension), in ``dtype`` (default: the default dtype)."""
        dtype = dtype or ember.get_default_dtype()
        if self.num_generated == 0:
            pts = np.concatenate([self._shift[None], self._run(n - 1, 0)]) if n > 1 else \
                self._shift[None]
        else:
            pts = self._run(n, self.num_generated - 1)
        self.num_generated += n
        # NOTE: torch scales in the result's dtype (float32 rounds as torch's does)
        res = ember.tensor(pts.astype(dtype.np) * dtype.np.type(2.0 ** -MAXBIT), dtype=dtype)
        if out is not None:
            out.resize_as_(res).copy_(res)
            return out
        return res

    def draw_base2(self, m, out=None, dtype=None):
        """The next ``2**m`` points; the total drawn must stay a power of 2."""
        n = 2 ** m
        total = self.num_generated + n
        if total & (total - 1):
            raise ValueError("The balance properties of Sobol' points require n to be a power "
                             f"of 2. {self.num_generated} points have been previously "
                             f"generated, then: n={self.num_generated}+2**{m}={total}. If you "
                             "still want to do this, please use 'SobolEngine.draw()' instead.")
        return self.draw(n=n, out=out, dtype=dtype)

    def reset(self):
        """Back to the first point."""
        self._quasi, self.num_generated = self._shift.copy(), 0
        return self

    def fast_forward(self, n):
        """Skip ``n`` points."""
        self._run(n - 1 if self.num_generated == 0 else n,
                  self.num_generated if self.num_generated == 0 else self.num_generated - 1)
        self.num_generated += n
        return self

    def __repr__(self):
        parts = [f"dimension={self.dimension}"] + (["scramble=True"] if self.scramble else []) \
            + ([f"seed={self.seed}"] if self.seed is not None else [])
        return f"SobolEngine({', '.join(parts)})"
