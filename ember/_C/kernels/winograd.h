/* Winograd F(2x2, 3x3) convolution (stride 1, dilation 1): the forward, and the weight gradient
 * in the same transformed domain. Included twice by kernels.c, with T the element type and S()
 * the name suffix. See docs/kernels.md ("Winograd convolution") for the method.
 *
 * The input is already padded (by the caller) to Hp = 2 * th + 2 rows and Wp = 2 * tw + 2
 * columns, th x tw tiles per sample, so every 4x4 input tile lies inside it; the output
 * (Ho x Wo, Ho <= 2 th, Wo <= 2 tw) is written with bounds. The tiles run in blocks of whole
 * tile rows: a block's transformed input V (16, c, tb) and products M (16, o, tb) stay in L2
 * while 16 BLAS GEMMs per group (called through the pointer NumPy's BLAS gives us, see
 * ember/_backends/blas.py) multiply them by the transformed filter U (16, o, c / groups).
 */

/* out = a @ b (+ out when acc), row-major; ta/tb: 111 no transpose, 112 transpose */
static void S(wino_gemm)(void *fn, int ilp64, int ta, int tb, int64_t m, int64_t n, int64_t k,
                         const T *a, int64_t lda, const T *b, int64_t ldb, int acc, T *out,
                         int64_t ldc) {
    S(blas_gemm)(fn, ilp64, ta, tb, m, n, k, 1, a, lda, b, ldb, acc ? 1 : 0, out, ldc);
}

#define WINO_JB 64      /* tiles of a tile row per pass: the staging rows stay in L1 */

/* The tiles of tile rows [r0, r1) (row r: sample r / th, tile row r % th) of one channel of
 * the padded input (plane: its Hp * Wp cells) transformed, V[xi][t] at v[xi * vs + t]:
 * B^T d B with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. The column pass runs first on
 * the even (e) and odd (od) columns apart, so both passes are unit-stride SIMD loops over
 * tiles (tile j spans columns 2j .. 2j + 3: e[j], od[j], e[j + 1], od[j + 1]). */
TC static void S(wino_in)(const T *x, int64_t Wp, int64_t plane, int64_t th, int64_t tw,
                          int64_t r0, int64_t r1, T *v, int64_t vs) {
    T e[4][WINO_JB + 1], od[4][WINO_JB + 1];
    for (int64_t r = r0; r < r1; r++) {
        const T *p = x + (r / th) * plane + (r % th) * 2 * Wp;
        for (int64_t j0 = 0; j0 < tw; j0 += WINO_JB) {
            int64_t nj = tw - j0 < WINO_JB ? tw - j0 : WINO_JB;
            for (int64_t j = 0; j <= nj; j++) {
                int64_t c = 2 * (j0 + j);
                for (int k = 0; k < 2; k++) {       /* even, then odd column */
                    T d0 = p[c + k], d1 = p[Wp + c + k], d2 = p[2 * Wp + c + k];
                    T d3 = p[3 * Wp + c + k];
                    T (*u)[WINO_JB + 1] = k ? od : e;
                    u[0][j] = d0 - d2;
                    u[1][j] = d1 + d2;
                    u[2][j] = d2 - d1;
                    u[3][j] = d1 - d3;
                }
            }
            T *dst = v + (r - r0) * tw + j0;
            for (int i = 0; i < 4; i++) {
                T *v0 = dst + 4 * i * vs, *v1 = v0 + vs, *v2 = v1 + vs, *v3 = v2 + vs;
                for (int64_t j = 0; j < nj; j++) {
                    v0[j] = e[i][j] - e[i][j + 1];
                    v1[j] = od[i][j] + e[i][j + 1];
                    v2[j] = e[i][j + 1] - od[i][j];
                    v3[j] = od[i][j] - od[i][j + 1];
                }
            }
        }
    }
}

/* The inverse: one output channel's 2x2 tiles A^T m A (A^T = [1 1 1 0; 0 1 -1 -1]) from
 * m[xi][t] at m[xi * ms + t], written into y (plane: Ho * Wo cells per sample) with bounds;
 * computed as even and odd output columns, then interleaved. */
TC static void S(wino_out)(const T *m, int64_t ms, int64_t th, int64_t tw, int64_t r0,
                           int64_t r1, T *y, int64_t plane, int64_t Ho, int64_t Wo) {
    T ye[2][WINO_JB], yo[2][WINO_JB];
    for (int64_t r = r0; r < r1; r++) {
        int64_t row = (r % th) * 2;
        T *dst = y + (r / th) * plane + row * Wo;
        int rows = row + 1 < Ho ? 2 : 1;
        for (int64_t j0 = 0; j0 < tw; j0 += WINO_JB) {
            int64_t nj = tw - j0 < WINO_JB ? tw - j0 : WINO_JB;
            const T *src = m + (r - r0) * tw + j0;
            for (int64_t j = 0; j < nj; j++) {
                T s0[4], s1[4];
                for (int q = 0; q < 4; q++) {
                    T a = src[q * ms + j], b = src[(4 + q) * ms + j];
                    T c = src[(8 + q) * ms + j], d = src[(12 + q) * ms + j];
                    s0[q] = a + b + c;
                    s1[q] = b - c - d;
                }
                ye[0][j] = s0[0] + s0[1] + s0[2];
                yo[0][j] = s0[1] - s0[2] - s0[3];
                ye[1][j] = s1[0] + s1[1] + s1[2];
                yo[1][j] = s1[1] - s1[2] - s1[3];
            }
            /* the last tile of an odd-width row has no odd column */
            int64_t pairs = 2 * (j0 + nj) <= Wo ? nj : nj - 1;
            for (int i = 0; i < rows; i++) {
                T *o = dst + i * Wo + 2 * j0;
                for (int64_t j = 0; j < pairs; j++) {
                    o[2 * j] = ye[i][j];
                    o[2 * j + 1] = yo[i][j];
                }
                if (pairs < nj) o[2 * pairs] = ye[i][pairs];
            }
        }
    }
}

/* The output gradient's tiles of one channel carried back to the transformed domain,
 * A g A^T (4x4 from 2x2; cells past Ho x Wo read as 0), into gm[xi * ms + t]. */
TC static void S(wino_grad)(const T *g, int64_t plane, int64_t Ho, int64_t Wo, int64_t th,
                            int64_t tw, int64_t r0, int64_t r1, T *gm, int64_t ms) {
    T a[2][WINO_JB], b[2][WINO_JB];
    for (int64_t r = r0; r < r1; r++) {
        int64_t row = (r % th) * 2;
        const T *src = g + (r / th) * plane + row * Wo;
        int rows = row + 1 < Ho ? 2 : 1;
        for (int64_t j0 = 0; j0 < tw; j0 += WINO_JB) {
            int64_t nj = tw - j0 < WINO_JB ? tw - j0 : WINO_JB;
            int64_t pairs = 2 * (j0 + nj) <= Wo ? nj : nj - 1;
            for (int i = 0; i < 2; i++) {       /* deinterleave, zeros past the edges */
                const T *s = src + i * Wo + 2 * j0;
                for (int64_t j = 0; j < nj; j++) a[i][j] = b[i][j] = 0;
                if (i < rows) {
                    for (int64_t j = 0; j < pairs; j++) {
                        a[i][j] = s[2 * j];
                        b[i][j] = s[2 * j + 1];
                    }
                    if (pairs < nj) a[i][pairs] = s[2 * pairs];
                }
            }
            T *dst = gm + (r - r0) * tw + j0;
            /* rows of A g: g0, g0 + g1, g0 - g1, -g1; then each row (a, b) -> a, a+b, a-b, -b
             * (a row at a time: four store streams, not sixteen) */
            for (int i = 0; i < 4; i++) {
                T *d0 = dst + 4 * i * ms, *d1 = d0 + ms, *d2 = d1 + ms, *d3 = d2 + ms;
                for (int64_t j = 0; j < nj; j++) {       /* (gcc unswitches on i) */
                    T ra, rb;
                    if (i == 0) ra = a[0][j], rb = b[0][j];
                    else if (i == 1) ra = a[0][j] + a[1][j], rb = b[0][j] + b[1][j];
                    else if (i == 2) ra = a[0][j] - a[1][j], rb = b[0][j] - b[1][j];
                    else ra = -a[1][j], rb = -b[1][j];
                    d0[j] = ra;
                    d1[j] = ra + rb;
                    d2[j] = ra - rb;
                    d3[j] = -rb;
                }
            }
        }
    }
}

/* The buffers of a block: V (16, c, tb) and M (16, o, tb), each xi's plane padded by 32
 * elements so the 16 planes do not sit a multiple of 4 KiB apart (they would share L1 sets). */
#define WINO_PAD 32

/* Threads: each takes whole blocks, with its own buffers, and calls BLAS itself (the caller
 * keeps BLAS to one thread meanwhile): hundreds of small GEMMs each split over BLAS threads,
 * between OpenMP regions, cost several times their work in wake-ups and spinning. */

/* y (n, o, Ho, Wo) = conv(x (n, c, 2 th + 2, 2 tw + 2), w) with u (16, o, c / groups) the
 * transformed filter G w G^T; rb tile rows per block. Returns 0, or -1 when out of memory. */
EXPORT int S(winograd_fwd)(const T *x, int64_t n, int64_t c, int64_t th, int64_t tw,
                           const T *u, int64_t o, int64_t groups, T *y, int64_t Ho, int64_t Wo,
                           int64_t rb, void *gemm, int ilp64, int nt) {
    int64_t Wp = 2 * tw + 2, xplane = (2 * th + 2) * Wp, rows = n * th, tb = rb * tw;
    int64_t cg = c / groups, og = o / groups, vs = c * tb + WINO_PAD, ms = o * tb + WINO_PAD;
    int64_t blocks = (rows + rb - 1) / rb;
    int fail = 0;
    nt = nt < 1 ? 1 : nt < blocks ? nt : (int)blocks;
#pragma omp parallel num_threads(nt) reduction(| : fail)
    {
        T *v = malloc(sizeof(T) * 16 * (vs + ms)), *m = v + 16 * vs;
        fail = !v;
#pragma omp for schedule(dynamic)
        for (int64_t blk = 0; blk < blocks; blk++) {
            if (!v) continue;
            int64_t r0 = blk * rb, r1 = r0 + rb < rows ? r0 + rb : rows, t = (r1 - r0) * tw;
            for (int64_t ch = 0; ch < c; ch++)
                S(wino_in)(x + ch * xplane, Wp, c * xplane, th, tw, r0, r1, v + ch * tb, vs);
            for (int xi = 0; xi < 16; xi++)
                for (int64_t g = 0; g < groups; g++)
                    S(wino_gemm)(gemm, ilp64, 111, 111, og, t, cg, u + (xi * o + g * og) * cg,
                                 cg, v + xi * vs + g * cg * tb, tb, 0,
                                 m + xi * ms + g * og * tb, tb);
            for (int64_t oc = 0; oc < o; oc++)
                S(wino_out)(m + oc * tb, ms, th, tw, r0, r1, y + oc * Ho * Wo, o * Ho * Wo, Ho,
                            Wo);
        }
        free(v);
    }
    return fail ? -1 : 0;
}

/* du (16, o, c / groups), zeroed by the caller, += sum over tiles of (A g A^T) (B^T x B): the
 * weight gradient of the convolution above before G^T du G; g is the output gradient
 * (n, o, Ho, Wo). Each thread sums its blocks apart, then adds its sum in. */
EXPORT int S(winograd_wgrad)(const T *x, int64_t n, int64_t c, int64_t th, int64_t tw,
                             const T *g, int64_t o, int64_t groups, int64_t Ho, int64_t Wo,
                             T *du, int64_t rb, void *gemm, int ilp64, int nt) {
    int64_t Wp = 2 * tw + 2, xplane = (2 * th + 2) * Wp, rows = n * th, tb = rb * tw;
    int64_t cg = c / groups, og = o / groups, vs = c * tb + WINO_PAD, ms = o * tb + WINO_PAD;
    int64_t blocks = (rows + rb - 1) / rb, nu = 16 * o * cg;
    int fail = 0;
    nt = nt < 1 ? 1 : nt < blocks ? nt : (int)blocks;
#pragma omp parallel num_threads(nt) reduction(| : fail)
    {
        T *v = malloc(sizeof(T) * (16 * (vs + ms) + nu)), *m = v + 16 * vs, *acc = m + 16 * ms;
        int any = 0;
        fail = !v;
#pragma omp for schedule(dynamic)
        for (int64_t blk = 0; blk < blocks; blk++) {
            if (!v) continue;
            int64_t r0 = blk * rb, r1 = r0 + rb < rows ? r0 + rb : rows, t = (r1 - r0) * tw;
            for (int64_t ch = 0; ch < c; ch++)
                S(wino_in)(x + ch * xplane, Wp, c * xplane, th, tw, r0, r1, v + ch * tb, vs);
            for (int64_t ch = 0; ch < o; ch++)
                S(wino_grad)(g + ch * Ho * Wo, o * Ho * Wo, Ho, Wo, th, tw, r0, r1, m + ch * tb,
                             ms);
            for (int xi = 0; xi < 16; xi++)
                for (int64_t gr = 0; gr < groups; gr++)
                    S(wino_gemm)(gemm, ilp64, 111, 112, og, cg, t, m + xi * ms + gr * og * tb,
                                 tb, v + xi * vs + gr * cg * tb, tb, any,
                                 acc + (xi * o + gr * og) * cg, cg);
            any = 1;
        }
        if (any) {
#pragma omp critical
            for (int64_t i = 0; i < nu; i++) du[i] += acc[i];
        }
        free(v);
    }
    return fail ? -1 : 0;
}
