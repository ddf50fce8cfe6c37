/* The loops of ember's float32 GEMM for one vector width, included by sgemm.h once per
 * instruction set with SG(name) (the copy's names), SG_TARGET, SG_W (floats per vector),
 * SG_MR (the micro-tile's rows), SG_NC, SG_MC (A's rows packed at a time), SG_PACKS_A(batch,
 * width) (whether a call packs A) and SG(transpose) (a W x W block) defined, and optionally
 * SG_PACK6 (6 rows of A packed by registers, for MR 6), which it undefines at its end; see
 * sgemm.h for the design. */
#define SG_NR (2 * SG_W)        /* the micro-tile's columns: two vectors */
typedef float SG(vec) __attribute__((vector_size(SG_W * 4)));
typedef float SG(uvec) __attribute__((vector_size(SG_W * 4), aligned(4)));

/* B's rows [0, kb) and columns [0, nb) (element (p, j) at b[p * rbs + j * cbs]) into panels:
 * panel q holds columns [q NR, q NR + NR) row after row, zero past nb */
SG_TARGET static void SG(pack_b)(int64_t kb, int64_t nb, const float *b, int64_t rbs,
                                int64_t cbs, float *bp) {
    for (int64_t j0 = 0; j0 < nb; j0 += SG_NR) {
        int64_t w = nb - j0 < SG_NR ? nb - j0 : SG_NR;
        float *dst = bp + j0 * kb;
        if (cbs == 1 && w == SG_NR) {
            for (int64_t p = 0; p < kb; p++) {
                const SG(uvec) *src = (const SG(uvec) *)(b + p * rbs + j0);
                ((SG(vec) *)(dst + p * SG_NR))[0] = src[0];
                ((SG(vec) *)(dst + p * SG_NR))[1] = src[1];
            }
            continue;
        }
        if (cbs == 1) {
            for (int64_t p = 0; p < kb; p++)
                for (int64_t j = 0; j < SG_NR; j++)
                    dst[p * SG_NR + j] = j < w ? b[p * rbs + j0 + j] : 0.0f;
            continue;
        }
        /* stored transposed (rbs == 1): W x W blocks, the ragged edges element-wise */
        int64_t pe = rbs == 1 ? kb / SG_W * SG_W : 0, je = rbs == 1 ? w / SG_W * SG_W : 0;
        for (int64_t jj = 0; jj < je; jj += SG_W)
            for (int64_t p = 0; p < pe; p += SG_W)
                SG(transpose)(b + (j0 + jj) * cbs + p, cbs, dst + p * SG_NR + jj, SG_NR);
        for (int64_t p = 0; p < kb; p++)
            for (int64_t j = p < pe ? je : 0; j < SG_NR; j++)
                dst[p * SG_NR + j] = j < w ? b[p * rbs + (j0 + j) * cbs] : 0.0f;
    }
}

/* the micro-tile, mr x NR (mr MR, 2/3 MR or 1/3 MR, a constant once inlined): acc[r] = sum
 * over p < kb of A(r, p) * panel row p (two vectors), A(r, p) at a[r * ras + p * cas]
 * (callers pass cas = 1 or ras = 1, also constants). MR rows: 2 MR accumulators, 2 panel
 * vectors and the broadcast in the registers (AVX-512: 27 of 32; AVX2: 15 of 16), so each
 * panel vector loaded from L2 feeds MR FMAs */
SG_INLINE void SG(tile)(int64_t kb, const float *a, int64_t ras, int64_t cas, const float *bp,
                       SG(vec) *c0, SG(vec) *c1, const int mr, const float *pf) {
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) c0[r] = c1[r] = (SG(vec)){0};
    const SG(vec) *bv = (const SG(vec) *)bp;
    for (int64_t p = 0; p < kb; p++) {
        SG(vec) b0 = bv[2 * p], b1 = bv[2 * p + 1];
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
SG_INLINE void SG(store)(const SG(vec) *c0, const SG(vec) *c1, float *c, int64_t ldc, int add,
                        const float *bias, const int mr, int64_t rows, int64_t nr) {
    if (rows == mr && nr == SG_NR) {
        SG(vec) b0 = {0}, b1 = {0};
        if (bias != NULL) {
            b0 = *(const SG(uvec) *)bias;
            b1 = *(const SG(uvec) *)(bias + SG_W);
        }
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            SG(uvec) *o = (SG(uvec) *)(c + r * ldc);
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
        *(SG(vec) *)&tile[r][0] = c0[r];
        *(SG(vec) *)&tile[r][SG_W] = c1[r];
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < nr; j++)
            c[r * ldc + j] = add ? c[r * ldc + j] + tile[r][j]
                                 : tile[r][j] + (bias != NULL ? bias[j] : 0.0f);
}

/* rows [0, mr) of C against every panel of the packed block (A's tile stays in L1) */
SG_INLINE void SG(rows)(int64_t kb, int64_t nb, const float *a, int64_t ras, int64_t cas,
                       const float *bp, float *c, int64_t ldc, int add, const float *bias,
                       const int mr, int64_t rows) {
    SG(vec) c0[SG_MR], c1[SG_MR];
    for (int64_t j0 = 0; j0 < nb; j0 += SG_NR) {
        int64_t nr = nb - j0 < SG_NR ? nb - j0 : SG_NR;
        /* (A read in place streams from memory: on the first panel, the next tile's rows are
         * fetched while this one computes) */
        if (cas == 1)
            SG(tile)(kb, a, ras, 1, bp + j0 * kb, c0, c1, mr, j0 == 0 ? a + mr * ras : NULL);
        else
            SG(tile)(kb, a, 1, cas, bp + j0 * kb, c0, c1, mr, NULL);
        /* (a ragged last panel adds its bias element-wise: no read past the bias's end) */
        SG(store)(c0, c1, c + j0, ldc, add, bias != NULL ? bias + j0 : NULL, mr, rows, nr);
    }
}

SG_TARGET static void SG(rows_full)(int64_t kb, int64_t nb, const float *a, int64_t ras,
                                int64_t cas, const float *bp, float *c, int64_t ldc, int add,
                                const float *bias) {
    SG(rows)(kb, nb, a, ras, cas, bp, c, ldc, add, bias, SG_MR, SG_MR);
}

/* the last m % MR rows: a tile of a third or two thirds of MR rows (of MR past that), read
 * in place when the rows fill it, else from ap, a zero-padded copy, so the micro-tile never
 * reads past A (powers of two end in full tiles: 4 or 8 rows of 12, 2 or 4 of 6) */
SG_TARGET static void SG(rows_tail)(int64_t kb, int64_t nb, const float *a, int64_t ras,
                                   int64_t cas, const float *bp, float *c, int64_t ldc, int add,
                                   const float *bias, int64_t rows, float *ap) {
    const int q = SG_MR / 3;
    int size = rows <= q ? q : rows <= 2 * q ? 2 * q : SG_MR;
    if (rows < size) {
        for (int64_t r = 0; r < size; r++)
            for (int64_t p = 0; p < kb; p++)
                ap[r * kb + p] = r < rows ? a[r * ras + p * cas] : 0.0f;
        a = ap, ras = kb, cas = 1;
    }
    if (size == q)
        SG(rows)(kb, nb, a, ras, cas, bp, c, ldc, add, bias, SG_MR / 3, rows);
    else if (size == 2 * q)
        SG(rows)(kb, nb, a, ras, cas, bp, c, ldc, add, bias, SG_MR / 3 * 2, rows);
    else
        SG(rows)(kb, nb, a, ras, cas, bp, c, ldc, add, bias, SG_MR, rows);
}

/* A's rows [0, rows) (rows <= MC) and k range [0, kb) into micro-panels of MR rows, MR floats
 * per step, zero past rows (the packed order's A: one stream the micro-tile walks) */
SG_TARGET static void SG(pack_a)(int64_t rows, int64_t kb, const float *a, int64_t ras,
                                int64_t cas, float *ap) {
    int64_t full = rows / SG_MR * SG_MR;
    if (ras == 1) {
        /* A stored transposed: its rows read in order, MR floats to each micro-panel (a
         * micro-panel at a time would read a line, and with m >= 1024 a page, per step) */
        for (int64_t p = 0; p < kb; p++)
            for (int64_t i0 = 0; i0 < full; i0 += SG_MR)
#pragma GCC unroll 12
                for (int r = 0; r < SG_MR; r++) ap[i0 * kb + p * SG_MR + r] = a[p * cas + i0 + r];
    } else {
        for (int64_t i0 = 0; i0 < full; i0 += SG_MR) {
#ifdef SG_PACK6
            if (cas == 1) {
                SG_PACK6(kb, a + i0 * ras, ras, ap + i0 * kb);
                continue;
            }
#endif
            for (int64_t p = 0; p < kb; p++)
#pragma GCC unroll 12
                for (int r = 0; r < SG_MR; r++)
                    ap[i0 * kb + p * SG_MR + r] = a[(i0 + r) * ras + p * cas];
        }
    }
    for (int64_t p = 0; full < rows && p < kb; p++)        /* the last rows, zero-padded */
        for (int r = 0; r < SG_MR; r++)
            ap[full * kb + p * SG_MR + r] = full + r < rows ? a[(full + r) * ras + p * cas] : 0.0f;
}

/* the micro-tile on a packed A: MR floats per step from one stream (L2), the panel's two
 * vectors from L1. SG(tile)(kb, a, 1, MR, ..., MR, NULL) computes the same, but its k loop is
 * not unrolled: this one's 4x unroll pays at one thread (AVX2), and tile keeps the shape the
 * AVX-512 copy was tuned with */
SG_INLINE void SG(tile_packed)(int64_t kb, const float *a, const float *bp, SG(vec) *c0,
                              SG(vec) *c1) {
#pragma GCC unroll 12
    for (int r = 0; r < SG_MR; r++) c0[r] = c1[r] = (SG(vec)){0};
    const SG(vec) *bv = (const SG(vec) *)bp;
#pragma GCC unroll 4
    for (int64_t p = 0; p < kb; p++) {
        SG(vec) b0 = bv[2 * p], b1 = bv[2 * p + 1];
#pragma GCC unroll 12
        for (int r = 0; r < SG_MR; r++) {
            float x = a[p * SG_MR + r];
            c0[r] += x * b0;
            c1[r] += x * b1;
        }
    }
}

/* rows [0, rows) of C (rows <= MC) from the packed A block against every panel: each panel
 * stays in L1 while A's micro-panels pass by; C's lines are fetched as the tile computes */
SG_TARGET static void SG(panels)(int64_t rows, int64_t kb, int64_t nb, const float *ap,
                                const float *bp, float *c, int64_t ldc, int add,
                                const float *bias) {
    SG(vec) c0[SG_MR], c1[SG_MR];
    for (int64_t j0 = 0; j0 < nb; j0 += SG_NR) {
        int64_t nr = nb - j0 < SG_NR ? nb - j0 : SG_NR;
        for (int64_t i = 0; i < rows; i += SG_MR) {
#pragma GCC unroll 12
            for (int r = 0; r < SG_MR; r++) {
                __builtin_prefetch(c + (i + r) * ldc + j0, 1);
                __builtin_prefetch(c + (i + r) * ldc + j0 + SG_NR - 1, 1);
            }
            SG(tile_packed)(kb, ap + i * kb, bp + j0 * kb, c0, c1);
            SG(store)(c0, c1, c + i * ldc + j0, ldc, add, bias != NULL ? bias + j0 : NULL,
                      SG_MR, rows - i < SG_MR ? rows - i : SG_MR, nr);
        }
    }
}

/* c (m x nb, row stride ldc) = a @ b (+ c when acc) for B's columns [0, nb), nb <= NC: for
 * each KC block of k, B is packed once, then either (pack_a) A is packed MC rows at a time (L2)
 * and each panel (L1) meets its micro-panels, or each MR-row tile of A read in place (L1) meets
 * every panel (L2). (A panel in L1 against A's tiles read in place loses to both.)
 * bp: KC x NC floats, 64-byte aligned; ap: (MC + MR) x KC floats and 2 more */
SG_TARGET static void SG(gemm_cols)(int64_t m, int64_t nb, int64_t k, const float *a,
                                   int64_t ras, int64_t cas, const float *b, int64_t rbs,
                                   int64_t cbs, int acc, const float *bias, float *c,
                                   int64_t ldc, float *bp, float *ap, int pack_a) {
    int64_t full = m / SG_MR * SG_MR;
    if (k == 0 && !acc)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < nb; j++) c[i * ldc + j] = bias != NULL ? bias[j] : 0.0f;
    for (int64_t p0 = 0; p0 < k; p0 += SG_KC) {
        int64_t kb = k - p0 < SG_KC ? k - p0 : SG_KC;
        int add = acc || p0 > 0;
        const float *bk = add ? NULL : bias;      /* (the bias goes in with C's first write) */
        const float *ak = a + p0 * cas;
        SG(pack_b)(kb, nb, b + p0 * rbs, rbs, cbs, bp);
        if (pack_a) {
            for (int64_t i0 = 0; i0 < m; i0 += SG_MC) {
                int64_t rows = m - i0 < SG_MC ? m - i0 : SG_MC;
                SG(pack_a)(rows, kb, ak + i0 * ras, ras, cas, ap);
                SG(panels)(rows, kb, nb, ap, bp, c + i0 * ldc, ldc, add, bk);
            }
            continue;
        }
        for (int64_t i = 0; i < full; i += SG_MR) {
            if (ras == 1 && cas != 1) {
                /* A stored transposed: its tile is MR floats per step, a new line (or two)
                 * each, 256-512 lines for a block, which the panels streaming by evict from
                 * L1: copied to MR x kb contiguous floats (one micro-panel) it takes 6-12 KiB */
                SG(pack_a)(SG_MR, kb, ak + i, 1, cas, ap);
                SG(rows_full)(kb, nb, ap, 1, SG_MR, bp, c + i * ldc, ldc, add, bk);
            } else {
                SG(rows_full)(kb, nb, ak + i * ras, ras, cas, bp, c + i * ldc, ldc, add, bk);
            }
        }
        if (full < m)
            SG(rows_tail)(kb, nb, ak + full * ras, ras, cas, bp, c + full * ldc, ldc, add, bk,
                         m - full, ap);
    }
}

/* c[i] = a[i] @ b[i] (+ c[i] when acc, + bias broadcast over rows when bias is not NULL and
 * acc is 0) for i < batch: matrix i of a at a + i * sa (sa 0: one matrix broadcast), its
 * element (r, p) at [r * ras + p * cas]; b likewise with (rbs, cbs); C row-major with row
 * stride ldc; bias n contiguous floats. Threads take (product, NC column block, row range)
 * items. Returns -1 when a buffer cannot be allocated (the caller then uses BLAS). */
SG_TARGET static int SG(gemm)(int64_t batch, int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t ras, int64_t cas, int64_t sa, const float *b, int64_t rbs,
                    int64_t cbs, int64_t sb, int acc, const float *bias, float *c, int64_t ldc,
                    int64_t sc, int nt) {
    int64_t nb = n < SG_NC ? n : SG_NC, kc = k < SG_KC ? k : SG_KC;
    nb = (nb + SG_NR - 1) / SG_NR * SG_NR;
    kc = kc > 0 ? kc : 1;
    /* (a thread's wake-up costs what ~4M multiply-adds do: a 256^3 product takes two) */
    nt = threads_for(batch * m * n * k / 128, nt);
    /* a 2-D product (or a batch smaller than the threads) splits its columns: blocks of
     * whole panels, at most NC wide, at least as many as the threads; or, a 2-D product with
     * A packed and 4x as many rows as columns, its rows: each thread then packs its rows of A
     * and all of B, not all of A and its columns of B (a gain on a step's tall products,
     * a loss on square ones, so only those) */
    int64_t per = (n + SG_NC - 1) / SG_NC, rper = 1;
    if (batch * per < nt && batch == 1 && m >= 4 * n && SG_PACKS_A(batch, n)) {
        int64_t tiles = (m + SG_MR - 1) / SG_MR;
        rper = nt < tiles ? nt : tiles;
    }
    else if (batch * per < nt) {
        int64_t want = (nt + batch - 1) / batch, panels = (n + SG_NR - 1) / SG_NR;
        per = want < panels ? want : panels;
    }
    int64_t width = ((n + per - 1) / per + SG_NR - 1) / SG_NR * SG_NR;
    if (nt > batch * per * rper) nt = (int)(batch * per * rper);
    int pack_a = SG_PACKS_A(batch, width);
    size_t bytes = (size_t)kc * nb * sizeof(float) + (size_t)(SG_MC + SG_MR) * kc * sizeof(float)
                   + 2 * sizeof(float);
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
            for (int64_t it = 0; it < batch * per * rper; it++) {
                int64_t i = it / (per * rper), j0 = it / rper % per * width, q = it % rper;
                int64_t w = n - j0 < width ? n - j0 : width, tiles = (m + SG_MR - 1) / SG_MR;
                int64_t r0 = tiles * q / rper * SG_MR, r1 = tiles * (q + 1) / rper * SG_MR;
                r1 = r1 < m ? r1 : m;
                for (int64_t j = j0; j < j0 + w; j += SG_NC)
                    SG(gemm_cols)(r1 - r0, j0 + w - j < SG_NC ? j0 + w - j : SG_NC, k,
                                 a + i * sa + r0 * ras, ras, cas, b + i * sb + j * cbs, rbs, cbs,
                                 acc, bias != NULL ? bias + j : NULL, c + i * sc + r0 * ldc + j,
                                 ldc, bp, ap, pack_a);
            }
            free(raw);
        }
    }
    return failed ? -1 : 0;
}

#undef SG
#undef SG_W
#undef SG_MR
#undef SG_NR
#undef SG_NC
#undef SG_TARGET
#undef SG_MC
#undef SG_PACKS_A
#undef SG_PACK6
