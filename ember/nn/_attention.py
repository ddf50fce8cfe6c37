"""Blockwise (flash-attention style) scaled dot-product attention.

The naive path materializes the (L, S) score matrix, and autograd keeps it for backward:
memory grows with L * S. Here keys are visited in blocks with an online softmax (a running
max ``m``, normalizer ``l`` and output accumulator per query), so the forward holds one score
tile at a time; backward keeps only q, k, v, the output and the per-query log-sum-exp, and
recomputes each tile's probabilities. Memory is linear in the sequence length.

Two implementations of one algorithm:

- on NumPy float32/float64 arrays, tiles of ``QBLOCK`` queries by ``BLOCK`` keys: the GEMMs go
  to BLAS (accumulating in place, ``beta=1``) and the softmax work between them is one C kernel
  per tile (``ember/_C/attention.h``); causal tiles wholly above the diagonal are skipped and
  only tiles that cross it are masked;
- otherwise (CuPy, half precision, no compiled kernels, double backward) the same steps in
  ember ops, one key block against every query that sees it: the reference the kernels are
  tested against.
"""
import math

import numpy as np

import ember

from .. import _C
from .._backends import blas
from .._tensor import Tensor
from ..autograd.function import Function

# Use the blockwise path when the score matrix would have at least this many entries.
FLASH_MIN_SCORES = 1 << 20
BLOCK = 512        # keys per tile
QBLOCK = 256       # queries per tile (kernel path): a 256 x 512 float32 tile is 512 KiB, in L2


# ---- reference path: ember ops, any device and dtype ------------------------------------------

def _key_blocks(L, S, causal):
    """(key start, key end, first query row that sees any of these keys) per key block."""
    for ks in range(0, S, BLOCK):
        # NOTE: torch's is_causal mask is tril(ones(L, S)) (top-left aligned): query i sees
        # keys j <= i, so rows before ks see none of this block and are skipped.
        q0 = ks if causal else 0
        if q0 >= L:
            break
        yield ks, min(ks + BLOCK, S), q0


def _scores(q, k, ks, ke, q0, causal):
    """Scores of queries q0: against keys ks:ke (``q`` already scaled), masked when causal."""
    s = q[..., q0:, :] @ k[..., ks:ke, :].transpose(-2, -1)
    if causal:
        rows = ember.arange(q0, q.shape[-2], device=q.device).unsqueeze(1)
        s = s.masked_fill(ember.arange(ks, ke, device=q.device) > rows, float("-inf"))
    return s


def _rows_replaced(t, q0, rows):
    """``t`` with its rows q0: replaced by ``rows``, built anew rather than written in place,
    so a graph through it stays valid for double backward."""
    return rows if q0 == 0 else ember.cat([t[..., :q0, :], rows], -2)


def _forward_ops(q, k, v, scale, causal):
    L = q.shape[-2]
    lead = tuple(q.shape[:-2])
    q = q * scale
    m = ember.full(lead + (L, 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = ember.zeros(lead + (L, 1), dtype=q.dtype, device=q.device)
    acc = ember.zeros(lead + (L, v.shape[-1]), dtype=q.dtype, device=q.device)
    for ks, ke, q0 in _key_blocks(L, k.shape[-2], causal):
        s = _scores(q, k, ks, ke, q0, causal)
        m_new = ember.maximum(m[..., q0:, :], s.amax(-1, keepdim=True))
        p = (s - m_new).exp()
        corr = (m[..., q0:, :] - m_new).exp()
        l = _rows_replaced(l, q0, l[..., q0:, :] * corr + p.sum(-1, keepdim=True))
        acc = _rows_replaced(acc, q0, acc[..., q0:, :] * corr + p @ v[..., ks:ke, :])
        m = _rows_replaced(m, q0, m_new)
    return acc / l, m + l.log()


def _backward_ops(g, q, k, v, out, lse, scale, causal):
    d = (g * out).sum(-1, keepdim=True)      # rowsum(dO * O) = sum_j P_ij dP_ij
    qs = q * scale
    dq, dks, dvs = ember.zeros_like(q), [], []
    for ks, ke, q0 in _key_blocks(q.shape[-2], k.shape[-2], causal):
        p = (_scores(qs, k, ks, ke, q0, causal) - lse[..., q0:, :]).exp()
        gq = g[..., q0:, :]
        dvs.append(p.transpose(-2, -1) @ gq)
        ds = p * (gq @ v[..., ks:ke, :].transpose(-2, -1) - d[..., q0:, :])
        dq = _rows_replaced(dq, q0, dq[..., q0:, :] + ds @ k[..., ks:ke, :] * scale)
        dks.append(ds.transpose(-2, -1) @ qs[..., q0:, :])
    seen = sum(t.shape[-2] for t in dks)
    if seen < k.shape[-2]:                   # causal, S > L: the last keys are seen by no query
        dks.append(ember.zeros_like(k[..., seen:, :]))
        dvs.append(ember.zeros_like(v[..., seen:, :]))
    return dq, ember.cat(dks, -2), ember.cat(dvs, -2)


# ---- kernel path: NumPy arrays, BLAS GEMMs and one C kernel per tile ----------------------------

def _tiles(L, S, causal):
    """(query start, query end, key start, key end) per tile, query blocks outer; causal tiles
    wholly above the diagonal are not visited."""
    for qs in range(0, L, QBLOCK):
        qe = min(qs + QBLOCK, L)
        kend = min(S, qe) if causal else S
        for ks in range(0, kend, BLOCK):
            yield qs, qe, ks, min(ks + BLOCK, kend)


def _gemm(a, b, out, beta=0.0):
    """out = a @ b (+ out when beta is 1), in place; BLAS when NumPy's is reachable."""
    if not blas.gemm(a, b, out, beta):
        if beta:
            out += a @ b
        else:
            np.matmul(a, b, out=out)


def _heads(*arrays):
    """Each array as a C-contiguous (heads, rows, cols) stack."""
    return [_C.contiguous(a).reshape(-1, *a.shape[-2:]) for a in arrays]


def _forward_kernel(q, k, v, scale, causal):
    """(out, lse) arrays by the C kernel, or None when it does not apply."""
    fn = _C.kernel("attn_fwd_tile", q.dtype) if type(q) is np.ndarray else None
    if fn is None or not q.dtype == k.dtype == v.dtype:
        return None
    L, S, dv, nt = q.shape[-2], k.shape[-2], v.shape[-1], _C.num_threads()
    # NOTE: k^T is made contiguous once: BLAS runs q @ k^T ~7% faster than with a transposed k
    (q,), (kt, v) = _heads(q * np.asarray(scale, q.dtype)), _heads(k.swapaxes(-1, -2), v)
    out = np.zeros(q.shape[:-1] + (dv,), q.dtype)
    lse = np.empty(q.shape[:-1], q.dtype)
    buf = np.empty(min(QBLOCK, L) * min(BLOCK, S), q.dtype)
    m, l = np.empty(QBLOCK, q.dtype), np.empty(QBLOCK, q.dtype)
    for h in range(q.shape[0]):
        qh, kth, vh, oh = q[h], kt[h], v[h], out[h]
        for qs, qe, ks, ke in _tiles(L, S, causal):
            rows, cols = qe - qs, ke - ks
            acc = oh[qs:qe]                   # the output rows accumulate in place
            if ks == 0:
                m.fill(-np.inf)
                l.fill(0)
            s = buf[:rows * cols].reshape(rows, cols)
            _gemm(qh[qs:qe], kth[:, ks:ke], s)
            fn(s.ctypes.data, cols, m.ctypes.data, l.ctypes.data, acc.ctypes.data, dv, rows,
               cols, dv, qs - ks if causal else cols, nt)
            _gemm(s, vh[ks:ke], acc, 1.0)
            if ke == (min(S, qe) if causal else S):      # the query block's last tile
                acc /= l[:rows, None]
                lse[h, qs:qe] = m[:rows] + np.log(l[:rows])
    return out, lse


def _backward_kernel(g, q, k, v, out, lse, scale, causal):
    """(dq, dk, dv) arrays by the C kernel, or None when it does not apply."""
    fn = _C.kernel("attn_bwd_tile", q.dtype)
    if fn is None:
        return None
    L, S, nt = q.shape[-2], k.shape[-2], _C.num_threads()
    shapes = q.shape, k.shape, v.shape
    dd = np.einsum("...i,...i->...", g, out)            # rowsum(dO * O) = sum_j P_ij dP_ij
    q, k, kt, vt, g, lse, dd = _heads(q * np.asarray(scale, q.dtype), k, k.swapaxes(-1, -2),
                                      v.swapaxes(-1, -2), g, lse, dd[..., None])
    dq, dk = np.zeros_like(q), np.zeros_like(k)
    dv = np.zeros((len(vt), S, vt.shape[1]), q.dtype)
    size = min(QBLOCK, L) * min(BLOCK, S)
    buf_s, buf_d = np.empty(size, q.dtype), np.empty(size, q.dtype)
    for h in range(q.shape[0]):
        qh, kh, kth, vth, gh = q[h], k[h], kt[h], vt[h], g[h]
        for qs, qe, ks, ke in _tiles(L, S, causal):
            rows, cols = qe - qs, ke - ks
            s = buf_s[:rows * cols].reshape(rows, cols)
            ds = buf_d[:rows * cols].reshape(rows, cols)
            _gemm(qh[qs:qe], kth[:, ks:ke], s)
            _gemm(gh[qs:qe], vth[:, ks:ke], ds)
            fn(s.ctypes.data, ds.ctypes.data, cols, lse[h, qs:].ctypes.data,
               dd[h, qs:].ctypes.data, rows, cols, qs - ks if causal else cols, nt)
            _gemm(s.T, gh[qs:qe], dv[h, ks:ke], 1.0)
            _gemm(ds, kh[ks:ke], dq[h, qs:qe], 1.0)
            _gemm(ds.T, qh[qs:qe], dk[h, ks:ke], 1.0)
    dq *= scale
    return [a.reshape(shape) for a, shape in zip((dq, dk, dv), shapes)]


class _FlashAttention(Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        res = _forward_kernel(q._data, k._data, v._data, scale, causal)
        if res is None:
            out, lse = _forward_ops(q, k, v, scale, causal)
        else:
            out, lse = (Tensor._wrap(a.reshape(shape)) for a, shape in
                        zip(res, (q.shape[:-1] + v.shape[-1:], q.shape[:-1] + (1,))))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.causal = scale, causal
        return out

    @staticmethod
    def backward(ctx, g):
        from .._ops.nn import kernel_grads
        q, k, v, out, lse = ctx.saved_tensors
        arrays = kernel_grads(g, q, k, v, out, lse)
        grads = arrays and _backward_kernel(*arrays, ctx.scale, ctx.causal)
        if grads:
            return (*(Tensor._wrap(a) for a in grads), None, None)
        if ember.is_grad_enabled():
            # NOTE: create_graph: the saved out and lse were made without a graph, so the
            # backward formulas would treat them as constants and second derivatives would
            # be wrong; recomputing them here puts their dependence on q, k, v in the graph.
            out, lse = _forward_ops(q, k, v, ctx.scale, ctx.causal)
        return (*_backward_ops(g, q, k, v, out, lse, ctx.scale, ctx.causal), None, None)


def use_flash(query, key, value, attn_mask, dropout_p):
    """Whether scaled_dot_product_attention takes the blockwise path."""
    return (attn_mask is None and dropout_p == 0 and query.dim() >= 2 and
            query.shape[-2] * key.shape[-2] >= FLASH_MIN_SCORES and
            query.shape[:-2] == key.shape[:-2] == value.shape[:-2] and
            query.dtype.is_floating_point)


def flash_attention(query, key, value, is_causal=False, scale=None):
    """``softmax(q k^T * scale) v`` (causal: top-left tril mask) computed blockwise.

    Example:
        >>> import ember
        >>> q = ember.ones(1, 600, 8)
        >>> ember.nn._attention.flash_attention(q, q, q, is_causal=True).shape
        torch.Size([1, 600, 8])
    """
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    return _FlashAttention.apply(query, key, value, scale, is_causal)
