/* A float32 GEMM of ember's own for CPUs with AVX-512 (included once by kernels.c; float64 and
 * other CPUs keep NumPy's BLAS, see ember/_ops/gemm.py).
 *
 * NumPy's OpenBLAS reaches ~75-80% of a core's peak on the 1-100 MFLOP products of a training
 * step, torch's MKL ~90%. OpenBLAS's losses there are per-call work, not its inner loop: it
 * packs both operands, and for beta = 0 it first zeroes C, a full extra pass over the output
 * (the attention's (256, 64) @ (64, 256) writes 4x more C than it reads A and B). Here:
 *
 * - only B is packed, a KC x NC block at a time into panels of NR = 32 columns (a panel is
 *   KC NR floats = 32 KiB, in L1 while it is used); a transposed B (the attention's q @ k^T,
 *   every backward's g @ W^T) is packed by 16x16 register transposes, not element by element;
 * - A is read in place: an MR = 12 row micro-tile is 12 streams broadcast against the
 *   panel's two vectors; the tile (12 x KC) stays in L1 while every panel of the block passes
 *   by (a transposed A's tile, 12 floats per step on lines of their own, is first copied);
 * - C is written once per KC block, straight from the 24 accumulator registers (no zeroing
 *   pass, no beta multiply); with K <= KC (attention: 64, 256) C is written exactly once;
 * - threads take whole products of a batch, or column ranges of a 2-D product.
 *
 * Accumulation is float32 FMA, in k order within a KC block, as BLAS does: results match
 * NumPy's within float32 rounding, not bit for bit. The micro-tile is written with GCC vector
 * extensions (64-byte vectors, one AVX-512 register), the transpose with intrinsics. */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define SG_TARGET __attribute__((target("avx512f,fma"), optimize("fp-contract=fast")))
#define SG_INLINE SG_TARGET static inline __attribute__((always_inline))
#define SG_MR 12
#define SG_NR 32
#define SG_KC 256
#define SG_NC 512

typedef float sg_vec __attribute__((vector_size(64)));
typedef float sg_uvec __attribute__((vector_size(64), aligned(4)));

/* 1 when this CPU runs the kernel (AVX-512F); the Python side asks once */
EXPORT int gemm_simd_f32(void) { return __builtin_cpu_supports("avx512f") ? 1 : 0; }

/* dst[i * ldd + j] = src[j * ld + i] for a 16 x 16 block: 16 loads, 3 rounds of lane
 * shuffles (64 instructions), 16 stores */
SG_TARGET static void sg_transpose16(const float *src, int64_t ld, float *dst, int64_t ldd) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ld);
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        __m512d t0 = _mm512_castps_pd(t[4 * i]), t1 = _mm512_castps_pd(t[4 * i + 1]);
        __m512d t2 = _mm512_castps_pd(t[4 * i + 2]), t3 = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    /* (r[4 i + c] now holds, in 128-bit lane L, rows 4i..4i+3 of column 4L + c) */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        _mm512_storeu_ps(dst + i * ldd, _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88));
        _mm512_storeu_ps(dst + (i + 8) * ldd, _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd));
    }
}

/* B's rows [0, kb) and columns [0, nb) (element (p, j) at b[p * rbs + j * cbs]) into panels:
 * panel q holds columns [q NR, q NR + NR) row after row, zero past nb */
SG_TARGET static void sg_pack_b(int64_t kb, int64_t nb, const float *b, int64_t rbs,
                                int64_t cbs, float *bp) {
    for (int64_t j0 = 0; j0 < nb; j0 += SG_NR) {
        int64_t w = nb - j0 < SG_NR ? nb - j0 : SG_NR;
        float *dst = bp + j0 * kb;
        if (cbs == 1 && w == SG_NR) {
            for (int64_t p = 0; p < kb; p++) {
                const sg_uvec *src = (const sg_uvec *)(b + p * rbs + j0);
                ((sg_vec *)(dst + p * SG_NR))[0] = src[0];
                ((sg_vec *)(dst + p * SG_NR))[1] = src[1];
            }
            continue;
        }
        if (cbs == 1) {
            for (int64_t p = 0; p < kb; p++)
                for (int64_t j = 0; j < SG_NR; j++)
                    dst[p * SG_NR + j] = j < w ? b[p * rbs + j0 + j] : 0.0f;
            continue;
        }
        /* stored transposed (rbs == 1): 16 x 16 blocks, the ragged edges element-wise */
        int64_t pe = rbs == 1 ? kb / 16 * 16 : 0, je = rbs == 1 ? w / 16 * 16 : 0;
        for (int64_t jj = 0; jj < je; jj += 16)
            for (int64_t p = 0; p < pe; p += 16)
                sg_transpose16(b + (j0 + jj) * cbs + p, cbs, dst + p * SG_NR + jj, SG_NR);
        for (int64_t p = 0; p < kb; p++)
            for (int64_t j = p < pe ? je : 0; j < SG_NR; j++)
                dst[p * SG_NR + j] = j < w ? b[p * rbs + (j0 + j) * cbs] : 0.0f;
    }
}

/* the micro-tile, mr x 32 (mr 12, 8 or 4, a constant once inlined): acc[r] = sum over p < kb
 * of A(r, p) * panel row p (two vectors), A(r, p) at a[r * ras + p * cas] (callers pass
 * cas = 1 or ras = 1, also constants). 12 rows: 24 accumulators, 2 panel vectors and the
 * broadcast in 27 of the 32 registers, so each panel vector loaded from L2 feeds 12 FMAs */
SG_INLINE void sg_tile(int64_t kb, const float *a, int64_t ras, int64_t cas, const float *bp,
                       sg_vec *c0, sg_vec *c1, const int mr, const float *pf) {
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) c0[r] = c1[r] = (sg_vec){0};
    const sg_vec *bv = (const sg_vec *)bp;
    for (int64_t p = 0; p < kb; p++) {
        sg_vec b0 = bv[2 * p], b1 = bv[2 * p + 1];
        if (pf != NULL && (p & 15) == 0)       /* the next tile's rows, a line each 16 steps */
#pragma GCC unroll 12
            for (int r = 0; r < mr; r++) __builtin_prefetch(pf + r * ras + p);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            float x = a[r * ras + p * cas];
            c0[r] += x * b0;
            c1[r] += x * b1;
        }
    }
}

/* c[0:rows, 0:nr] = (or +=, when add) the tile's first rows, rows of C at stride ldc, plus
 * bias[0:nr] on every row when bias is not NULL (a linear layer's, added as C is first
 * written: no second pass over C). Every index of c0/c1 is a constant once unrolled, so they
 * stay in registers (a variable index would spill all 24 to the stack after every tile) */
SG_INLINE void sg_store(const sg_vec *c0, const sg_vec *c1, float *c, int64_t ldc, int add,
                        const float *bias, const int mr, int64_t rows, int64_t nr) {
    if (rows == mr && nr == SG_NR) {
        sg_vec b0 = {0}, b1 = {0};
        if (bias != NULL) {
            b0 = *(const sg_uvec *)bias;
            b1 = *(const sg_uvec *)(bias + 16);
        }
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            sg_uvec *o = (sg_uvec *)(c + r * ldc);
            if (add) {
                o[0] += c0[r];
                o[1] += c1[r];
            } else {
                o[0] = c0[r] + b0;
                o[1] = c1[r] + b1;
            }
        }
        return;
    }
    float tile[SG_MR][SG_NR] __attribute__((aligned(64)));
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        *(sg_vec *)&tile[r][0] = c0[r];
        *(sg_vec *)&tile[r][16] = c1[r];
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < nr; j++)
            c[r * ldc + j] = add ? c[r * ldc + j] + tile[r][j]
                                 : tile[r][j] + (bias != NULL ? bias[j] : 0.0f);
}

/* rows [0, mr) of C against every panel of the packed block (A's tile stays in L1) */
SG_INLINE void sg_rows(int64_t kb, int64_t nb, const float *a, int64_t ras, int64_t cas,
                       const float *bp, float *c, int64_t ldc, int add, const float *bias,
                       const int mr, int64_t rows) {
    sg_vec c0[SG_MR], c1[SG_MR];
    for (int64_t j0 = 0; j0 < nb; j0 += SG_NR) {
        int64_t nr = nb - j0 < SG_NR ? nb - j0 : SG_NR;
        /* (A read in place streams from memory: on the first panel, the next tile's rows are
         * fetched while this one computes) */
        if (cas == 1)
            sg_tile(kb, a, ras, 1, bp + j0 * kb, c0, c1, mr, j0 == 0 ? a + mr * ras : NULL);
        else
            sg_tile(kb, a, 1, cas, bp + j0 * kb, c0, c1, mr, NULL);
        /* (a ragged last panel adds its bias element-wise: no read past the bias's end) */
        sg_store(c0, c1, c + j0, ldc, add, bias != NULL ? bias + j0 : NULL, mr, rows, nr);
    }
}

SG_TARGET static void sg_rows12(int64_t kb, int64_t nb, const float *a, int64_t ras,
                                int64_t cas, const float *bp, float *c, int64_t ldc, int add,
                                const float *bias) {
    sg_rows(kb, nb, a, ras, cas, bp, c, ldc, add, bias, 12, 12);
}

/* the last m % 12 rows: a tile of 4 or 8 rows (of 12 past 8), read in place when the rows
 * fill it, else from ap, a zero-padded copy, so the micro-tile never reads past A */
SG_TARGET static void sg_rows_tail(int64_t kb, int64_t nb, const float *a, int64_t ras,
                                   int64_t cas, const float *bp, float *c, int64_t ldc, int add,
                                   const float *bias, int64_t rows, float *ap) {
    int size = rows <= 4 ? 4 : rows <= 8 ? 8 : 12;
    if (rows < size) {
        for (int64_t r = 0; r < size; r++)
            for (int64_t p = 0; p < kb; p++)
                ap[r * kb + p] = r < rows ? a[r * ras + p * cas] : 0.0f;
        a = ap, ras = kb, cas = 1;
    }
    if (size == 4)
        sg_rows(kb, nb, a, ras, cas, bp, c, ldc, add, bias, 4, rows);
    else if (size == 8)
        sg_rows(kb, nb, a, ras, cas, bp, c, ldc, add, bias, 8, rows);
    else
        sg_rows(kb, nb, a, ras, cas, bp, c, ldc, add, bias, 12, rows);
}

/* c (m x nb, row stride ldc) = a @ b (+ c when acc) for B's columns [0, nb), nb <= NC: for
 * each KC block of k, B is packed once (L2), then each MR-row tile of A (L1) meets every
 * panel. (The other order, a panel in L1 against A's tiles, measured slower with A unpacked.)
 * bp: KC x NC floats, 64-byte aligned; ap: MR x KC floats */
SG_TARGET static void sg_gemm_cols(int64_t m, int64_t nb, int64_t k, const float *a,
                                   int64_t ras, int64_t cas, const float *b, int64_t rbs,
                                   int64_t cbs, int acc, const float *bias, float *c,
                                   int64_t ldc, float *bp, float *ap) {
    int64_t full = m / SG_MR * SG_MR;
    if (k == 0 && !acc)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < nb; j++) c[i * ldc + j] = bias != NULL ? bias[j] : 0.0f;
    for (int64_t p0 = 0; p0 < k; p0 += SG_KC) {
        int64_t kb = k - p0 < SG_KC ? k - p0 : SG_KC;
        int add = acc || p0 > 0;
        const float *bk = add ? NULL : bias;      /* (the bias goes in with C's first write) */
        const float *ak = a + p0 * cas;
        sg_pack_b(kb, nb, b + p0 * rbs, rbs, cbs, bp);
        for (int64_t i = 0; i < full; i += SG_MR) {
            if (ras == 1 && cas != 1) {
                /* A stored transposed: its tile is 12 floats per step, a new line (or two)
                 * each, 256-512 lines for a block, which the panels streaming by evict from
                 * L1: copied to 12 x kb contiguous floats it takes 12 KiB */
                for (int64_t p = 0; p < kb; p++)
                    for (int r = 0; r < SG_MR; r++) ap[p * SG_MR + r] = ak[i + p * cas + r];
                sg_rows12(kb, nb, ap, 1, SG_MR, bp, c + i * ldc, ldc, add, bk);
            } else {
                sg_rows12(kb, nb, ak + i * ras, ras, cas, bp, c + i * ldc, ldc, add, bk);
            }
        }
        if (full < m)
            sg_rows_tail(kb, nb, ak + full * ras, ras, cas, bp, c + full * ldc, ldc, add, bk,
                         m - full, ap);
    }
}

/* c[i] = a[i] @ b[i] (+ c[i] when acc, + bias broadcast over rows when bias is not NULL and
 * acc is 0) for i < batch: matrix i of a at a + i * sa (sa 0: one matrix broadcast), its
 * element (r, p) at [r * ras + p * cas]; b likewise with (rbs, cbs); C row-major with row
 * stride ldc; bias n contiguous floats. Threads take (product, NC column block) items.
 * Returns -1 when this CPU lacks AVX-512 or a buffer cannot be allocated (the caller then
 * uses BLAS). */
EXPORT int gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t ras, int64_t cas, int64_t sa, const float *b, int64_t rbs,
                    int64_t cbs, int64_t sb, int acc, const float *bias, float *c, int64_t ldc,
                    int64_t sc, int nt) {
    if (!gemm_simd_f32()) return -1;
    int64_t nb = n < SG_NC ? n : SG_NC, kc = k < SG_KC ? k : SG_KC;
    nb = (nb + SG_NR - 1) / SG_NR * SG_NR;
    kc = kc > 0 ? kc : 1;
    /* (a thread's wake-up costs what ~4M multiply-adds do: a 256^3 product takes two) */
    nt = threads_for(batch * m * n * k / 128, nt);
    /* a 2-D product (or a batch smaller than the threads) splits its columns: blocks of
     * whole panels, at most NC wide, at least as many as the threads */
    int64_t per = (n + SG_NC - 1) / SG_NC;
    if (batch * per < nt) {
        int64_t want = (nt + batch - 1) / batch, panels = (n + SG_NR - 1) / SG_NR;
        per = want < panels ? want : panels;
    }
    int64_t width = ((n + per - 1) / per + SG_NR - 1) / SG_NR * SG_NR;
    if (nt > batch * per) nt = (int)(batch * per);
    size_t bytes = (size_t)kc * nb * sizeof(float) + (size_t)SG_MR * kc * sizeof(float);
    int failed = 0;
#pragma omp parallel num_threads(nt) reduction(| : failed)
    {
        char *raw = malloc(bytes + 64);
        if (raw == NULL) {
            failed = 1;
        } else {
            float *bp = (float *)(raw + (64 - (uintptr_t)raw % 64));
            float *ap = bp + (size_t)kc * nb;
#pragma omp for schedule(static)
            for (int64_t it = 0; it < batch * per; it++) {
                int64_t i = it / per, j0 = it % per * width;
                int64_t w = n - j0 < width ? n - j0 : width;
                for (int64_t j = j0; j < j0 + w; j += SG_NC)
                    sg_gemm_cols(m, j0 + w - j < SG_NC ? j0 + w - j : SG_NC, k, a + i * sa,
                                 ras, cas, b + i * sb + j * cbs, rbs, cbs, acc,
                                 bias != NULL ? bias + j : NULL, c + i * sc + j, ldc, bp, ap);
            }
            free(raw);
        }
    }
    return failed ? -1 : 0;
}

#undef SG_TARGET
#undef SG_INLINE
#else
EXPORT int gemm_simd_f32(void) { return 0; }
EXPORT int gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t ras, int64_t cas, int64_t sa, const float *b, int64_t rbs,
                    int64_t cbs, int64_t sb, int acc, const float *bias, float *c, int64_t ldc,
                    int64_t sc, int nt) {
    return -1;
}
#endif
