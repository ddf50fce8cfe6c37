"""Blockwise (flash-attention style) scaled dot-product attention.

The naive path materializes the (L, S) score matrix, and autograd keeps it for backward:
memory grows with L * S. Here keys are visited in blocks with an online softmax (a running
max ``m``, normalizer ``l`` and output accumulator per query), so the forward holds one
(L, block) score tile at a time; backward keeps only q, k, v, the output and the per-query
log-sum-exp, and recomputes each tile's probabilities. Memory is linear in the sequence
length. Forward and backward are ember ops, so the path runs on any device.
"""
import math

import ember

from ..autograd.function import Function

# Use the blockwise path when the score matrix would have at least this many entries.
FLASH_MIN_SCORES = 1 << 20
BLOCK = 512


def _tiles(L, S, causal):
    """(key start, key end, first query row that sees any of these keys) per key block."""
    for ks in range(0, S, BLOCK):
        # NOTE: torch's is_causal mask is tril(ones(L, S)) (top-left aligned): query i sees
        # keys j <= i, so rows before ks see none of this block and are skipped.
        q0 = ks if causal else 0
        if q0 >= L:
            break
        yield ks, min(ks + BLOCK, S), q0


def _scores(q, k, ks, ke, q0, scale, causal):
    s = (q[..., q0:, :] @ k[..., ks:ke, :].transpose(-2, -1)) * scale
    if causal:
        rows = ember.arange(q0, q.shape[-2], device=q.device).unsqueeze(1)
        s = s.masked_fill(ember.arange(ks, ke, device=q.device) > rows, float("-inf"))
    return s


class _FlashAttention(Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        L = q.shape[-2]
        lead = tuple(q.shape[:-2])
        m = ember.full(lead + (L, 1), float("-inf"), dtype=q.dtype, device=q.device)
        l = ember.zeros(lead + (L, 1), dtype=q.dtype, device=q.device)
        acc = ember.zeros(lead + (L, v.shape[-1]), dtype=q.dtype, device=q.device)
        for ks, ke, q0 in _tiles(L, k.shape[-2], causal):
            s = _scores(q, k, ks, ke, q0, scale, causal)
            m_new = ember.maximum(m[..., q0:, :], s.amax(-1, keepdim=True))
            p = (s - m_new).exp()
            corr = (m[..., q0:, :] - m_new).exp()
            l[..., q0:, :] = l[..., q0:, :] * corr + p.sum(-1, keepdim=True)
            acc[..., q0:, :] = acc[..., q0:, :] * corr + p @ v[..., ks:ke, :]
            m[..., q0:, :] = m_new
        out = acc / l
        ctx.save_for_backward(q, k, v, out, m + l.log())
        ctx.scale, ctx.causal = scale, causal
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, lse = ctx.saved_tensors
        scale, causal = ctx.scale, ctx.causal
        d = (g * out).sum(-1, keepdim=True)      # rowsum(dO * O) = sum_j P_ij dP_ij
        dq = ember.zeros_like(q)
        dk, dv = ember.zeros_like(k), ember.zeros_like(v)
        for ks, ke, q0 in _tiles(q.shape[-2], k.shape[-2], causal):
            p = (_scores(q, k, ks, ke, q0, scale, causal) - lse[..., q0:, :]).exp()
            gq = g[..., q0:, :]
            dv[..., ks:ke, :] = p.transpose(-2, -1) @ gq
            ds = p * (gq @ v[..., ks:ke, :].transpose(-2, -1) - d[..., q0:, :]) * scale
            dq[..., q0:, :] = dq[..., q0:, :] + ds @ k[..., ks:ke, :]
            dk[..., ks:ke, :] = ds.transpose(-2, -1) @ q[..., q0:, :]
        return dq, dk, dv, None, None


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
