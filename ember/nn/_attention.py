"""Blockwise (flash-attention style) scaled dot-product attention.

The naive path materializes the (L, S) score matrix, and autograd keeps it for backward:
memory grows with L * S. Here keys are visited in blocks with an online softmax (a running
max ``m``, normalizer ``l`` and output accumulator per query), so the forward holds one score
tile at a time; backward keeps only q, k, v, the output and the per-query log-sum-exp, and
recomputes each tile's probabilities. Memory is linear in the sequence length.

Implementations of one algorithm:

- short key sequences (``_attention_small``, up to ``MAX_KEYS``) on NumPy float32/float64:
  every head in one C call that runs BLAS itself (``ember/_C/kernels/attention_small.h``); at GPT
  sizes the tiles below would spend most of their time in Python between tiny GEMMs;
- on NumPy float32/float64 arrays, tiles of ``QBLOCK`` queries by ``BLOCK`` keys: the GEMMs go
  to BLAS (accumulating in place, ``beta=1``) and the softmax work between them is one C kernel
  per tile (``ember/_C/kernels/attention.h``); causal tiles wholly above the diagonal are skipped and
  only tiles that cross it are masked. Heads whose tiles are small share one call, and a
  grouped-query key/value head serves its query heads without being repeated;
- on CuPy arrays on a GPU, ember's CUDA kernels (``ember/cuda/_attention.py``: one kernel for
  the forward, two for the backward, the online softmax in registers), which also take
  boolean and additive masks;
- otherwise (the CuPy test double, half precision on the cpu, no compiled kernels, a mask on
  the cpu, double backward) the same steps in ember ops, one key block against every query
  that sees it: the reference the kernels are tested against.
"""
import math

import numpy as np

import ember

from .._C import kernels
from .._backends import blas
from . import _attention_small
from .._tensor import Tensor
from .._ops.dispatch import hooks as _hooks
from ..autograd.function import Function

# Use the blockwise path when one head's score matrix would have at least this many entries;
# from far fewer when the compiled kernels run it (it then beats the naive path at seq 128).
FLASH_MIN_SCORES = 1 << 20
KERNEL_MIN_SCORES = 1 << 13
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


def _scores(q, k, ks, ke, q0, causal, mask):
    """Scores of queries q0: against keys ks:ke (``q`` already scaled), masked when causal or
    by ``mask`` (boolean: True keeps; float: added; broadcast to the scores' shape)."""
    s = q[..., q0:, :] @ k[..., ks:ke, :].transpose(-2, -1)
    if causal:
        rows = ember.arange(q0, q.shape[-2], device=q.device).unsqueeze(1)
        s = s.masked_fill(ember.arange(ks, ke, device=q.device) > rows, float("-inf"))
    if mask is not None:
        m = mask[..., q0:, ks:ke]
        s = s.masked_fill(m.logical_not(), float("-inf")) if m.dtype is ember.bool else s + m
    return s


def _mask2d(mask, L, S):
    """``mask`` with at least the two (L, S) dims (broadcast), for slicing by tile."""
    return mask if mask is None or mask.dim() >= 2 else mask.expand(L, S)


def _rows_replaced(t, q0, rows):
    """``t`` with its rows q0: replaced by ``rows``, built anew rather than written in place,
    so a graph through it stays valid for double backward."""
    return rows if q0 == 0 else ember.cat([t[..., :q0, :], rows], -2)


def _kv_heads(q, *kv):
    """Key/value tensors with each head repeated for the query heads it serves (GQA)."""
    rep = q.shape[-3] // kv[0].shape[-3] if q.dim() > 2 else 1
    return [t.repeat_interleave(rep, -3) if rep > 1 else t for t in kv]


def _forward_ops(q, k, v, scale, causal, mask=None):
    k, v = _kv_heads(q, k, v)
    L = q.shape[-2]
    mask = _mask2d(mask, L, k.shape[-2])
    lead = tuple(q.shape[:-2])
    q = q * scale
    m = ember.full(lead + (L, 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = ember.zeros(lead + (L, 1), dtype=q.dtype, device=q.device)
    acc = ember.zeros(lead + (L, v.shape[-1]), dtype=q.dtype, device=q.device)
    for ks, ke, q0 in _key_blocks(L, k.shape[-2], causal):
        s = _scores(q, k, ks, ke, q0, causal, mask)
        m_new = ember.maximum(m[..., q0:, :], s.amax(-1, keepdim=True))
        if mask is not None:        # rows that have seen only masked keys: exp(-inf - 0) = 0
            m_new = m_new.masked_fill(m_new == float("-inf"), 0.0)
        p = (s - m_new).exp()
        corr = (m[..., q0:, :] - m_new).exp()
        l = _rows_replaced(l, q0, l[..., q0:, :] * corr + p.sum(-1, keepdim=True))
        acc = _rows_replaced(acc, q0, acc[..., q0:, :] * corr + p @ v[..., ks:ke, :])
        m = _rows_replaced(m, q0, m_new)
    if mask is None:
        return acc / l, m + l.log()
    # NOTE: a row that sees no key gives zeros, as torch's safe softmax; its lse is +inf, so
    # its probabilities in backward are exp(-inf) = 0
    empty = l == 0
    return acc / l.masked_fill(empty, 1.0), (m + l.log()).masked_fill(empty, float("inf"))


def _backward_ops(g, q, k0, v0, out, lse, scale, causal, mask=None):
    k, v = _kv_heads(q, k0, v0)
    mask = _mask2d(mask, q.shape[-2], k.shape[-2])
    d = (g * out).sum(-1, keepdim=True)      # rowsum(dO * O) = sum_j P_ij dP_ij
    qs = q * scale
    dq, dks, dvs = ember.zeros_like(q), [], []
    for ks, ke, q0 in _key_blocks(q.shape[-2], k.shape[-2], causal):
        p = (_scores(qs, k, ks, ke, q0, causal, mask) - lse[..., q0:, :]).exp()
        gq = g[..., q0:, :]
        dvs.append(p.transpose(-2, -1) @ gq)
        ds = p * (gq @ v[..., ks:ke, :].transpose(-2, -1) - d[..., q0:, :])
        dq = _rows_replaced(dq, q0, dq[..., q0:, :] + ds @ k[..., ks:ke, :] * scale)
        dks.append(ds.transpose(-2, -1) @ qs[..., q0:, :])
    seen = sum(t.shape[-2] for t in dks)
    if seen < k.shape[-2]:                   # causal, S > L: the last keys are seen by no query
        dks.append(ember.zeros_like(k[..., seen:, :]))
        dvs.append(ember.zeros_like(v[..., seen:, :]))
    dk, dv = ember.cat(dks, -2), ember.cat(dvs, -2)
    if k.shape != k0.shape:                  # GQA: sum over the query heads of a kv head
        dk, dv = (t.reshape(*k0.shape[:-2], -1, *t.shape[-2:]).sum(-3) for t in (dk, dv))
    return dq, dk, dv


# ---- kernel path: NumPy arrays, BLAS GEMMs and one C kernel per tile ----------------------------

def _tiles(L, S, causal):
    """(query start, query end, key start, key end) per tile, query blocks outer; causal tiles
    wholly above the diagonal are not visited."""
    for qs in range(0, L, QBLOCK):
        qe = min(qs + QBLOCK, L)
        kend = min(S, qe) if causal else S
        for ks in range(0, kend, BLOCK):
            yield qs, qe, ks, min(ks + BLOCK, kend)


def _mm(a, b, out, beta=0.0):
    """out = a @ b (+ out when beta is 1) in place, over (heads..., rows, cols) stacks; one
    matrix goes straight to BLAS, which accumulates for free."""
    if out.size == out.shape[-2] * out.shape[-1]:
        a, b, out = (x.reshape(x.shape[-2:]) for x in (a, b, out))
        if blas.gemm(a, b, out, beta):
            return
    if beta:
        out += a @ b
    else:
        np.matmul(a, b, out=out)


def _mm_sum(a, b, out):
    """out += (a @ b) summed over the query heads (axis 1) that share one key/value head."""
    if a.shape[1] == 1:
        _mm(a, b, out, 1.0)
    else:
        out += (a @ b).sum(1, keepdims=True)


def _layout(q, k, scale):
    """q scaled, as (kv heads, query heads per kv head, L, d) (grouped-query attention shares
    a key/value head among consecutive query heads), and heads per group of tiles: several
    heads per BLAS call and kernel call when their tiles are small."""
    n, nkv = math.prod(q.shape[:-2]), math.prod(k.shape[:-2])
    rep, (L, d), S = n // nkv, q.shape[-2:], k.shape[-2]
    q = kernels.contiguous(q * np.asarray(scale, q.dtype)).reshape(nkv, rep, L, d)
    tile = rep * min(QBLOCK, L) * min(BLOCK, S)
    return q, max(1, QBLOCK * BLOCK // tile)


def _kv(a, transpose=False):
    """A key/value array as a contiguous (kv heads, 1, rows, cols) stack, transposed once
    (BLAS runs q @ k^T faster on a contiguous k^T than with a transposed k)."""
    a = a.swapaxes(-1, -2) if transpose else a
    return kernels.contiguous(a).reshape(-1, 1, *a.shape[-2:])


def _forward_kernel(q, k, v, scale, causal):
    """(out, lse) arrays by the C kernel, or None when it does not apply."""
    fn = kernels.kernel("attn_fwd_tile", q.dtype) if type(q) is np.ndarray else None
    if fn is None or not q.dtype == k.dtype == v.dtype:
        return None
    L, S, dv, nt = q.shape[-2], k.shape[-2], v.shape[-1], kernels.num_threads()
    (q, group), kt, v = _layout(q, k, scale), _kv(k, True), _kv(v)
    out = np.zeros(q.shape[:-1] + (dv,), q.dtype)
    lse = np.empty(q.shape[:-1], q.dtype)
    buf = np.empty(group * q.shape[1] * min(QBLOCK, L) * min(BLOCK, S), q.dtype)
    for g0 in range(0, len(q), group):
        qg, ktg, vg, og = (a[g0:g0 + group] for a in (q, kt, v, out))
        heads = og.shape[0] * og.shape[1]
        for qs, qe, ks, ke in _tiles(L, S, causal):
            rows, cols = qe - qs, ke - ks
            acc = og[:, :, qs:qe]                  # the output rows accumulate in place
            if ks == 0:
                m = np.full(og.shape[:2] + (rows,), -np.inf, q.dtype)
                l = np.zeros_like(m)
            s = buf[:heads * rows * cols].reshape(og.shape[:2] + (rows, cols))
            _mm(qg[:, :, qs:qe], ktg[..., ks:ke], s)
            fn(s.ctypes.data, cols, rows * cols, m.ctypes.data, l.ctypes.data, rows,
               acc.ctypes.data, dv, L * dv, heads, rows, cols, dv, qs - ks if causal else cols, nt)
            _mm(s, vg[:, :, ks:ke], acc, float(ks > 0))
            if ke == (min(S, qe) if causal else S):      # the query block's last tile
                acc /= l[..., None]
                lse[g0:g0 + group, :, qs:qe] = m + np.log(l)
    return out, lse


def _backward_kernel(g, q, k, v, out, lse, scale, causal):
    """(dq, dk, dv) arrays by the C kernel, or None when it does not apply."""
    fn = kernels.kernel("attn_bwd_tile", q.dtype)
    if fn is None:
        return None
    L, S, nt = q.shape[-2], k.shape[-2], kernels.num_threads()
    shapes = q.shape, k.shape, v.shape
    dd = np.einsum("...i,...i->...", g, out)            # rowsum(dO * O) = sum_j P_ij dP_ij
    (q, group), k, kt, vt = _layout(q, k, scale), _kv(k), _kv(k, True), _kv(v, True)
    g, lse, dd = (kernels.contiguous(a).reshape(q.shape[:3] + (-1,)) for a in (g, lse, dd))
    dq, dk = np.zeros_like(q), np.zeros_like(k)
    dv = np.zeros(vt.shape[:2] + (S, vt.shape[2]), q.dtype)
    size = group * q.shape[1] * min(QBLOCK, L) * min(BLOCK, S)
    buf_s, buf_d = np.empty(size, q.dtype), np.empty(size, q.dtype)
    for g0 in range(0, len(q), group):
        qg, kg, ktg, vtg, gg, dqg, dkg, dvg = (a[g0:g0 + group] for a in
                                               (q, k, kt, vt, g, dq, dk, dv))
        heads = qg.shape[0] * qg.shape[1]
        for qs, qe, ks, ke in _tiles(L, S, causal):
            rows, cols = qe - qs, ke - ks
            s = buf_s[:heads * rows * cols].reshape(qg.shape[:2] + (rows, cols))
            ds = buf_d[:heads * rows * cols].reshape(s.shape)
            _mm(qg[:, :, qs:qe], ktg[..., ks:ke], s)
            _mm(gg[:, :, qs:qe], vtg[..., ks:ke], ds)
            fn(s.ctypes.data, ds.ctypes.data, cols, rows * cols, lse[g0, 0, qs:].ctypes.data,
               dd[g0, 0, qs:].ctypes.data, L, heads, rows, cols, qs - ks if causal else cols, nt)
            _mm_sum(s.swapaxes(-1, -2), gg[:, :, qs:qe], dvg[:, :, ks:ke])
            _mm(ds, kg[:, :, ks:ke], dqg[:, :, qs:qe], 1.0)
            _mm_sum(ds.swapaxes(-1, -2), qg[:, :, qs:qe], dkg[:, :, ks:ke])
    dq *= scale
    return [a.reshape(shape) for a, shape in zip((dq, dk, dv), shapes)]


class _FlashAttention(Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, mask=None):
        arrays = q._data, k._data, v._data
        if type(arrays[0]) is not np.ndarray:
            from ..cuda import _attention as cuda_attention
            res = cuda_attention.forward(*arrays, None if mask is None else mask._data, scale,
                                         causal)
        else:
            res = mask is None and (_attention_small.forward(*arrays, scale, causal) or
                                    _forward_kernel(*arrays, scale, causal)) or None
        if res is None:
            out, lse = _forward_ops(q, k, v, scale, causal, mask)
        else:
            out, lse = (Tensor._wrap(a.reshape(shape), q.device) for a, shape in
                        zip(res, (q.shape[:-1] + v.shape[-1:], q.shape[:-1] + (1,))))
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.scale, ctx.causal = scale, causal
        return out

    @staticmethod
    def backward(ctx, g):
        from .._ops.nn import kernel_grads
        q, k, v, out, lse, mask = ctx.saved_tensors
        if type(q._data) is not np.ndarray:
            from ..cuda import _attention as cuda_attention
            grads = cuda_attention.backward(g, q, k, v, out, lse, mask, ctx.scale, ctx.causal)
        else:
            arrays = mask is None and kernel_grads(g, q, k, v, out, lse)
            grads = arrays and (_attention_small.backward(*arrays, ctx.scale, ctx.causal) or
                                _backward_kernel(*arrays, ctx.scale, ctx.causal))
        if grads:
            return (*(Tensor._wrap(a, q.device) for a in grads), None, None, None)
        if ember.is_grad_enabled() or lse.dtype != q.dtype:
            # NOTE: create_graph: the saved out and lse were made without a graph, so the
            # backward formulas would treat them as constants and second derivatives would
            # be wrong; recomputing them here puts their dependence on q, k, v in the graph.
            out, lse = _forward_ops(q, k, v, ctx.scale, ctx.causal, mask)
        return (*_backward_ops(g, q, k, v, out, lse, ctx.scale, ctx.causal, mask), None, None, None)


def use_flash(query, key, value, attn_mask, dropout_p, enable_gqa=False):
    """Whether scaled_dot_product_attention takes the blockwise path: without a mask, or on
    a GPU with a boolean or additive one of the query's dtype that needs no gradient and
    broadcasts to the scores (the CUDA kernels take it)."""
    if _hooks.tracer is not None:       # a trace records the ops, not the kernel
        return False
    lq, lk = tuple(query.shape[:-2]), tuple(key.shape[:-2])
    # grouped-query attention: each key/value head serves heads // kv_heads query heads
    gqa = enable_gqa and len(lq) == len(lk) > 0 and lq[:-1] == lk[:-1] and lq[-1] % lk[-1] == 0
    if not (dropout_p == 0 and query.dim() >= 2 and (lq == lk or gqa) and
            lk == tuple(value.shape[:-2]) and query.dtype.is_floating_point and
            (attn_mask is None or _mask_fits(attn_mask, query, key))):
        return False
    scores = query.shape[-2] * key.shape[-2]
    if type(query._data) is not np.ndarray:
        from ..cuda import _attention as cuda_attention
        if cuda_attention.applies(query._data, key._data, value._data):
            return True     # the CUDA kernels: any size, and linear memory
    if attn_mask is not None:   # (on the cpu the naive path's fused softmax is faster)
        return False
    if _attention_small.applies(query._data, key._data, value._data):
        return True     # short keys: all heads in one kernel call beat the naive path
    return scores >= FLASH_MIN_SCORES or (
        scores >= min(KERNEL_MIN_SCORES, FLASH_MIN_SCORES) and type(query._data) is np.ndarray
        and kernels.kernel("attn_fwd_tile", query._data.dtype) is not None)


def _mask_fits(mask, query, key):
    if mask.requires_grad or mask.device != query.device or not (
            mask.dtype is ember.bool or mask.dtype == query.dtype):
        return False
    shape = tuple(query.shape[:-1]) + (key.shape[-2],)
    try:
        return ember.broadcast_shapes(tuple(mask.shape), shape) == shape
    except RuntimeError:
        return False


def flash_attention(query, key, value, is_causal=False, scale=None, attn_mask=None):
    """``softmax(q k^T * scale + mask) v`` (causal: top-left tril mask; a boolean
    ``attn_mask`` keeps True) computed blockwise.

    Example:
        >>> import ember
        >>> q = ember.ones(1, 600, 8)
        >>> ember.nn._attention.flash_attention(q, q, q, is_causal=True).shape
        torch.Size([1, 600, 8])
    """
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    return _FlashAttention.apply(query, key, value, scale, is_causal, attn_mask)
