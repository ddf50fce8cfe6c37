"""Flash-style scaled dot-product attention on CUDA: three RawKernels of ember's own beside
``nn/_attention.py``'s CPU kernels (``_FlashAttention`` picks them for CuPy arrays).

- ``attn_fwd``: a block of ``BR`` query rows walks the keys in tiles of ``BC`` (K and V tiles
  in shared memory, converted to the accumulation type), with an online softmax: a running
  max ``m``, normalizer ``l`` and output accumulator per row in registers. It writes the output
  and the row's log-sum-exp, the only thing backward keeps besides q, k, v and the output:
  memory is linear in the sequence length.
- ``attn_bwd_dq`` (per query row, over key tiles) and ``attn_bwd_dkdv`` (per key row, over
  query tiles) recompute each probability ``exp(s - lse)``; with ``D = rowsum(dO * O)``,
  ``dS = P (dO V^T - D)``. Two kernels rather than atomics: nothing is added twice, the result
  does not depend on scheduling.

Each row is served by ``G`` = 8 threads, each holding every 8th element of the row's vectors
(so head dims up to 256 fit in registers) and summing its dot products with warp shuffles.
Causal masks (torch's top-left ``tril``) skip the tiles above the diagonal; a boolean mask
(True keeps) or an additive float mask is read where it lies through per-head offsets and
row/column strides, so a broadcast ``(L, S)`` mask is never expanded. A row that sees no key
gives zeros (torch's safe softmax) and an lse of +inf, so backward gives it zero gradient.

Storage types: float32 and float64 natively; float16 and bfloat16 as 16-bit words converted
with PTX ``cvt`` (no CUDA headers are needed, so the sources compile with bare NVRTC), always
accumulating in float (double for float64). A host compiler (the tests' CPU emulator) gets
software conversions instead. CuPy has no bfloat16 arrays, so that instantiation is compiled
by tests/test_cuda_kernels.py but not reachable from ember yet.
"""
import functools
import math

import numpy as np

from ._kernels import fusable

try:
    from ml_dtypes import bfloat16 as _bf16
except ImportError:       # pragma: no cover (ml_dtypes is a runtime dependency)
    _bf16 = None
# storage type, accumulation type, conversion kind (0 native, 1 float16, 2 bfloat16)
TYPES = {np.dtype(np.float32): ("float", "float", 0), np.dtype(np.float64): ("double", "double", 0),
         np.dtype(np.float16): ("unsigned short", "float", 1)}
if _bf16 is not None:
    TYPES[np.dtype(_bf16)] = ("unsigned short", "float", 2)
G, BR = 8, 32             # threads per row, rows per block (256 threads)
MAX_DIM = 256             # head dims up to this keep a row's vectors in registers

SOURCE = r"""
#define NEG_INF (-__int_as_float(0x7f800000))
#define POS_INF (__int_as_float(0x7f800000))
#define NQ ((DQ + G - 1) / G)
#define NV ((DV + G - 1) / G)

// 16-bit storage: PTX conversions on the GPU; on a host compiler (the tests' emulator),
// _Float16 and bfloat16's round-to-nearest-even by hand
__device__ __forceinline__ A ld(T x) {
#if KIND == 1 && defined(__CUDA_ARCH__)
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x)); return f;
#elif KIND == 1
    _Float16 h; __builtin_memcpy(&h, &x, 2); return (float)h;
#elif KIND == 2
    return __uint_as_float(((unsigned)x) << 16);
#else
    return (A)x;
#endif
}

__device__ __forceinline__ T st(A v) {
#if KIND == 1 && defined(__CUDA_ARCH__)
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); return h;
#elif KIND == 1
    _Float16 f = (_Float16)v; unsigned short h; __builtin_memcpy(&h, &f, 2); return h;
#elif KIND == 2 && defined(__CUDA_ARCH__)
    unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v)); return h;
#elif KIND == 2
    unsigned u; __builtin_memcpy(&u, &v, 4);
    return (unsigned short)(v != v ? 0x7fc0 : (u + 0x7fff + ((u >> 16) & 1)) >> 16);
#else
    return (T)v;
#endif
}

// the sum of v over the G threads of a row (G consecutive lanes)
__device__ __forceinline__ A gsum(A v) {
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// rows r0.. of a (nrows, width) matrix into shared memory as A, zeros past its end
__device__ __forceinline__ void load(A* dst, const T* src, int rows, int r0, int nrows,
                                     int width) {
    for (int e = threadIdx.x; e < rows * width; e += blockDim.x) {
        int r = e / width;
        dst[e] = r0 + r < nrows ? ld(src[(long long)(r0 + r) * width + e - r * width]) : (A)0;
    }
}

// this thread's share of the dot product of a register row with shared row `row`
template <int N, int W>
__device__ __forceinline__ A dot(const A* reg, const A* row) {
    A p = 0;
#pragma unroll
    for (int c = 0; c < N; c++) {
        int d = threadIdx.x % G + c * G;
        if (d < W) p += reg[c] * row[d];
    }
    return p;
}

template <int N, int W>
__device__ __forceinline__ void axpy(A* reg, A a, const A* row) {
#pragma unroll
    for (int c = 0; c < N; c++) {
        int d = threadIdx.x % G + c * G;
        if (d < W) reg[c] += a * row[d];
    }
}

template <int N, int W>
__device__ __forceinline__ void load_row(A* reg, const T* src) {
#pragma unroll
    for (int c = 0; c < N; c++) {
        int d = threadIdx.x % G + c * G;
        reg[c] = d < W ? ld(src[d]) : (A)0;
    }
}

// keys k0.. of K and V into shared memory, between barriers
__device__ __forceinline__ void kv_tile(A* ks, A* vs, const T* k, const T* v, int k0, int S) {
    __syncthreads();
    load(ks, k, BC, k0, S, DQ);
    load(vs, v, BC, k0, S, DV);
    __syncthreads();
}

// the keys a block of query rows sees: causal, none past its last row
__device__ __forceinline__ int key_end(int causal, int S) {
    return causal ? min(S, (int)(blockIdx.x + 1) * BR) : S;
}

// the score of query i for key j: scaled, masked (-inf where not seen)
__device__ __forceinline__ A score(A dot, int i, int j, int S, A scale, int causal,
                                   const M* mr, long long msr, long long msc) {
    if (j >= S || (causal && j > i)) return NEG_INF;
    A s = dot * scale;
#if MASK == 1
    if (!mr[i * msr + j * msc]) return NEG_INF;
#elif MASK == 2
    s += (A)mr[i * msr + j * msc];
#endif
    return s;
}

#define PARAMS const T* q, const T* k, const T* v, const M* mask, const long long* moff, \
    long long msr, long long msc, int L, int S, int rep, double scale_, int causal
#if MASK
#define MROW(h) (mask + moff[h])
#else
#define MROW(h) mask
#endif

extern "C" __global__ void attn_fwd(PARAMS, T* out, A* lse) {
    __shared__ A ks[BC * DQ], vs[BC * DV];
    const A scale = (A)scale_;
    const int h = blockIdx.y, i = blockIdx.x * BR + threadIdx.x / G, ic = min(i, L - 1);
    const long long kv = (long long)(h / rep) * S;
    const M* mr = MROW(h);
    A qr[NQ], acc[NV], m = NEG_INF, l = 0;
    load_row<NQ, DQ>(qr, q + ((long long)h * L + ic) * DQ);
#pragma unroll
    for (int c = 0; c < NV; c++) acc[c] = 0;
    const int kend = key_end(causal, S);
    for (int k0 = 0; k0 < kend; k0 += BC) {
        kv_tile(ks, vs, k + kv * DQ, v + kv * DV, k0, S);
        A s[BC], mt = NEG_INF;
#pragma unroll
        for (int j = 0; j < BC; j++) {
            s[j] = score(gsum(dot<NQ, DQ>(qr, ks + j * DQ)), ic, k0 + j, S, scale, causal, mr,
                         msr, msc);
            mt = fmax(mt, s[j]);
        }
        A mn = fmax(m, mt);
        if (mn == NEG_INF) continue;                // every key so far masked
        A corr = exp(m - mn);
        l *= corr;
#pragma unroll
        for (int c = 0; c < NV; c++) acc[c] *= corr;
#pragma unroll
        for (int j = 0; j < BC; j++) {
            A p = exp(s[j] - mn);
            l += p;
            axpy<NV, DV>(acc, p, vs + j * DV);
        }
        m = mn;
    }
    if (i < L) {
        T* o = out + ((long long)h * L + i) * DV;
        A inv = l > 0 ? (A)1 / l : (A)0;            // a row that sees no key gives zeros
#pragma unroll
        for (int c = 0; c < NV; c++) {
            int d = threadIdx.x % G + c * G;
            if (d < DV) o[d] = st(acc[c] * inv);
        }
        if (threadIdx.x % G == 0) lse[(long long)h * L + i] = l > 0 ? m + log(l) : POS_INF;
    }
}

// dQ_i = scale sum_j P_ij (dO_i . V_j - D_i) K_j, one query row per G threads
extern "C" __global__ void attn_bwd_dq(PARAMS, const T* go, const A* lse, const A* dd, T* dq) {
    __shared__ A ks[BC * DQ], vs[BC * DV];
    const A scale = (A)scale_;
    const int h = blockIdx.y, i = blockIdx.x * BR + threadIdx.x / G, ic = min(i, L - 1);
    const long long kv = (long long)(h / rep) * S, row = (long long)h * L + ic;
    const M* mr = MROW(h);
    A qr[NQ], gr[NV], acc[NQ];
    load_row<NQ, DQ>(qr, q + row * DQ);
    load_row<NV, DV>(gr, go + row * DV);
#pragma unroll
    for (int c = 0; c < NQ; c++) acc[c] = 0;
    const A li = lse[row], di = dd[row];
    const int kend = key_end(causal, S);
    for (int k0 = 0; k0 < kend; k0 += BC) {
        kv_tile(ks, vs, k + kv * DQ, v + kv * DV, k0, S);
#pragma unroll 4
        for (int j = 0; j < BC; j++) {
            A p = exp(score(gsum(dot<NQ, DQ>(qr, ks + j * DQ)), ic, k0 + j, S, scale, causal,
                            mr, msr, msc) - li);
            A dp = gsum(dot<NV, DV>(gr, vs + j * DV));
            axpy<NQ, DQ>(acc, p * (dp - di), ks + j * DQ);
        }
    }
    if (i < L) {
#pragma unroll
        for (int c = 0; c < NQ; c++) {
            int d = threadIdx.x % G + c * G;
            if (d < DQ) dq[((long long)h * L + i) * DQ + d] = st(acc[c] * scale);
        }
    }
}

// dV_j = sum_i P_ij dO_i and dK_j = scale sum_i dS_ij Q_i, one key row per G threads, per
// query head (a grouped key/value head's sum over its query heads is taken after)
extern "C" __global__ void attn_bwd_dkdv(PARAMS, const T* go, const A* lse, const A* dd, A* dk,
                                         A* dv) {
    __shared__ A qs[BC * DQ], gs[BC * DV], ls[BC], ds[BC];
    const A scale = (A)scale_;
    const int h = blockIdx.y, j = blockIdx.x * BR + threadIdx.x / G, jc = min(j, S - 1);
    const long long kv = (long long)(h / rep) * S, qh = (long long)h * L;
    const M* mr = MROW(h);
    A kr[NQ], vr[NV], gk[NQ], gv[NV];
    load_row<NQ, DQ>(kr, k + (kv + jc) * DQ);
    load_row<NV, DV>(vr, v + (kv + jc) * DV);
#pragma unroll
    for (int c = 0; c < NQ; c++) gk[c] = 0;
#pragma unroll
    for (int c = 0; c < NV; c++) gv[c] = 0;
    // causal: queries before the block's first key see none of its keys
    for (int i0 = causal ? blockIdx.x * BR : 0; i0 < L; i0 += BC) {
        __syncthreads();
        load(qs, q + qh * DQ, BC, i0, L, DQ);
        load(gs, go + qh * DV, BC, i0, L, DV);
        for (int e = threadIdx.x; e < BC; e += blockDim.x) {
            ls[e] = i0 + e < L ? lse[qh + i0 + e] : POS_INF;     // rows past L: P = 0
            ds[e] = i0 + e < L ? dd[qh + i0 + e] : (A)0;
        }
        __syncthreads();
#pragma unroll 4
        for (int r = 0; r < BC; r++) {
            A p = exp(score(gsum(dot<NQ, DQ>(kr, qs + r * DQ)), min(i0 + r, L - 1), jc, S,
                            scale, causal, mr, msr, msc) - ls[r]);
            A dp = gsum(dot<NV, DV>(vr, gs + r * DV));
            axpy<NV, DV>(gv, p, gs + r * DV);
            axpy<NQ, DQ>(gk, p * (dp - ds[r]), qs + r * DQ);
        }
    }
    if (j < S) {
        const long long row = (long long)h * S + j;
#pragma unroll
        for (int c = 0; c < NQ; c++) {
            int d = threadIdx.x % G + c * G;
            if (d < DQ) dk[row * DQ + d] = gk[c] * scale;
        }
#pragma unroll
        for (int c = 0; c < NV; c++) {
            int d = threadIdx.x % G + c * G;
            if (d < DV) dv[row * DV + d] = gv[c];
        }
    }
}
"""


def _cols(dq, dv, acc):
    """Keys (or queries) per shared-memory tile: a power of two up to 32 whose two tiles fit
    in 32 KiB."""
    bc = 32
    while bc > 4 and bc * (dq + dv) * acc > 32768:
        bc //= 2
    return bc


def source(dtype, dq, dv, mask):
    """The CUDA C of the three kernels for storage ``dtype``, head dims ``dq`` (query/key) and
    ``dv`` (value), and ``mask`` 0 (none), 1 (boolean) or 2 (additive)."""
    t, a, kind = TYPES[np.dtype(dtype)]
    defs = dict(T=t, A=a, M={0: "char", 1: "bool", 2: a}[mask])
    consts = dict(KIND=kind, MASK=mask, G=G, BR=BR, DQ=dq, DV=dv,
                  BC=_cols(dq, dv, 8 if a == "double" else 4))
    return "".join(f"typedef {v} {n};\n" for n, v in defs.items()) + "".join(
        f"#define {n} {v}\n" for n, v in consts.items()) + SOURCE


@functools.lru_cache(maxsize=None)
def _functions(xp, dtype, dq, dv, mask):
    module = xp.RawModule(code=source(dtype, dq, dv, mask))
    return [module.get_function(n) for n in ("attn_fwd", "attn_bwd_dq", "attn_bwd_dkdv")]


def _acc(dtype):
    return np.dtype(np.float64 if dtype == np.float64 else np.float32)


def applies(q, k, v):
    """Whether the kernels take these arrays (heads..., rows, dim): CuPy arrays of one of
    ``TYPES`` on a GPU with the fused kernels on, head dims up to ``MAX_DIM``, key/value heads
    dividing the query heads."""
    nh, nkv = math.prod(q.shape[:-2]), math.prod(k.shape[:-2])
    return (q.ndim >= 2 and fusable(q, k, v, types=TYPES) is not None and
            max(q.shape[-1], v.shape[-1]) <= MAX_DIM and min(k.shape[-2], v.shape[-1]) > 0 and
            k.shape[-1] == q.shape[-1] and 0 < nkv and nh % nkv == 0 and nh < 65536)


def _mask_args(xp, mask, lead, L, S, acc):
    """(kind, kernel arguments) of ``mask``, read in place through per-head offsets and its
    row and column strides (0 where broadcast)."""
    if mask is None:
        return 0, (np.uintp(0), np.uintp(0), np.int64(0), np.int64(0))
    kind = 1 if mask.dtype == np.bool_ else 2
    m = xp.broadcast_to(mask if kind == 1 else mask.astype(acc, copy=False), lead + (L, S))
    st = [s // m.itemsize for s in m.strides]
    off = np.zeros(lead, np.int64)
    for ax, n in enumerate(lead):
        off = off + np.arange(n).reshape((-1,) + (1,) * (len(lead) - ax - 1)) * st[ax]
    return kind, (m, xp.asarray(off.reshape(-1)), np.int64(st[-2]), np.int64(st[-1]))


def _setup(xp, q, k, v, mask, scale, causal):
    """The kernels, launch arguments and grid size common to forward and backward."""
    (L, dq), S, dv, lead = q.shape[-2:], k.shape[-2], v.shape[-1], q.shape[:-2]
    nh, nkv = math.prod(lead), math.prod(k.shape[:-2])
    kind, margs = _mask_args(xp, mask, lead, L, S, _acc(q.dtype))
    q, k, v = (xp.ascontiguousarray(a) for a in (q, k, v))
    args = (q, k, v, *margs, np.int32(L), np.int32(S), np.int32(nh // nkv), np.float64(scale),
            np.int32(bool(causal)))
    return _functions(xp, q.dtype, dq, dv, kind), args, nh, nkv


def forward(q, k, v, mask, scale, causal):
    """(output, log-sum-exp per query row in float32 (float64 for float64)) of attention over
    CuPy arrays ``(heads..., rows, dim)``, or None where the kernels do not apply."""
    if not applies(q, k, v):
        return None
    xp = fusable(q, types=TYPES)[0]
    (fwd, _, _), args, nh, _ = _setup(xp, q, k, v, mask, scale, causal)
    L = q.shape[-2]
    out = xp.empty(q.shape[:-1] + v.shape[-1:], q.dtype)
    lse = xp.empty(q.shape[:-1], _acc(q.dtype))
    fwd((-(-L // BR), nh), (BR * G,), args + (out, lse))
    return out, lse


def backward(g, q, k, v, out, lse, mask, scale, causal):
    """(dq, dk, dv) arrays by the kernels, or None where they do not apply (tensors in: grad
    mode on, as under ``create_graph``, sends backward to the ember-op path)."""
    found = fusable(g, q, k, v, out, types=TYPES)
    if found is None or not applies(*found[1][1:4]):
        return None
    xp, (g, q, k, v, out) = found
    acc = _acc(q.dtype)
    (_, bwd_dq, bwd_dkdv), args, nh, nkv = _setup(xp, q, k, v, None if mask is None else
                                                  mask._data, scale, causal)
    (L, dq), S, dv = q.shape[-2:], k.shape[-2], v.shape[-1]
    dd = (g.astype(acc) * out.astype(acc)).sum(-1)      # rowsum(dO * O) = sum_j P_ij dP_ij
    rest = (xp.ascontiguousarray(g), xp.ascontiguousarray(lse._data.astype(acc, copy=False)),
            xp.ascontiguousarray(dd))
    gq = xp.empty(q.shape, q.dtype)
    gk, gv = xp.empty((nh, S, dq), acc), xp.empty((nh, S, dv), acc)
    bwd_dq((-(-L // BR), nh), (BR * G,), args + rest + (gq,))
    bwd_dkdv((-(-S // BR), nh), (BR * G,), args + rest + (gk, gv))
    gk, gv = (a.reshape(nkv, nh // nkv, S, -1).sum(1) if nh > nkv else a for a in (gk, gv))
    return gq, gk.astype(q.dtype).reshape(k.shape), gv.astype(q.dtype).reshape(v.shape)
