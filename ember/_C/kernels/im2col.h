/* 2-D convolution as im2col + GEMM one sample (and a few output rows) at a time: the forward,
 * the weight gradient and the transposed convolution (the input gradient), for layers where
 * Winograd does not pay (few channels on one side: a network's first layer). Included twice by
 * kernels.c, with T the element type and S() the name suffix. See docs/kernels.md ("im2col
 * convolution").
 *
 * A whole-batch im2col copy (c k, n Ho Wo) does not fit in any cache and its GEMM writes
 * (o, n L), which then needs a transpose to (n, o, L). Here each thread takes a sample and a
 * block of output rows, builds that block's columns (c k, rows Wo) in a buffer that stays in
 * L2, and the GEMM writes the sample's output rows in place (ldc = Ho Wo). Padding, stride and
 * dilation are bounds in the copy loops; the GEMMs go through the BLAS NumPy loaded (the
 * pointer winograd.h uses, S(wino_gemm)), one BLAS thread per kernel thread.
 *
 * geom: c, H, W (the image: input of the forward, output of the transposed convolution),
 * kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo (the window grid: output of the forward).
 */

#ifndef EMBER_CONV_GEOM
#define EMBER_CONV_GEOM
enum { G_C, G_H, G_W, G_KH, G_KW, G_SH, G_SW, G_PH, G_PW, G_DH, G_DW, G_HO, G_WO, G_N };

/* [lo, hi) of the window columns x whose tap column x sw - pw + kx dw lies in [0, W) */
static void cols_in_range(const int64_t *g, int64_t kx, int64_t *lo, int64_t *hi) {
    int64_t off = kx * g[G_DW] - g[G_PW], s = g[G_SW];
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = g[G_W] - off <= 0 ? 0 : (g[G_W] - off + s - 1) / s;
    *lo = a < g[G_WO] ? a : g[G_WO];
    *hi = b < g[G_WO] ? b : g[G_WO];
    if (*hi < *lo) *hi = *lo;
}

/* output rows per block: the block's columns (c k rows of rb Wo) within ~512 KiB */
static int64_t cols_rows(const int64_t *g, int64_t size) {
    int64_t per_row = g[G_C] * g[G_KH] * g[G_KW] * g[G_WO] * size;
    int64_t rb = per_row > 0 ? ((int64_t)1 << 19) / per_row : 1;
    return rb < 1 ? 1 : rb > g[G_HO] ? g[G_HO] : rb;
}
#endif

/* col (c kh kw, (y1 - y0) Wo) = the windows of output rows [y0, y1) over img (c, H, W) */
TC static void S(im2col_rows)(const T *img, const int64_t *g, int64_t y0, int64_t y1, T *col) {
    int64_t H = g[G_H], W = g[G_W], Wo = g[G_WO], sw = g[G_SW], L = (y1 - y0) * Wo;
    for (int64_t ch = 0; ch < g[G_C]; ch++)
        for (int64_t ky = 0; ky < g[G_KH]; ky++)
            for (int64_t kx = 0; kx < g[G_KW]; kx++) {
                T *dst = col + ((ch * g[G_KH] + ky) * g[G_KW] + kx) * L;
                int64_t lo, hi, off = kx * g[G_DW] - g[G_PW];
                cols_in_range(g, kx, &lo, &hi);
                for (int64_t y = y0; y < y1; y++, dst += Wo) {
                    int64_t iy = y * g[G_SH] - g[G_PH] + ky * g[G_DH];
                    if (iy < 0 || iy >= H) {
                        for (int64_t x = 0; x < Wo; x++) dst[x] = 0;
                        continue;
                    }
                    const T *src = img + (ch * H + iy) * W + off;
                    for (int64_t x = 0; x < lo; x++) dst[x] = 0;
                    if (sw == 1)
                        for (int64_t x = lo; x < hi; x++) dst[x] = src[x];
                    else
                        for (int64_t x = lo; x < hi; x++) dst[x] = src[x * sw];
                    for (int64_t x = hi; x < Wo; x++) dst[x] = 0;
                }
            }
}

/* img (c, H, W) += the adjoint of im2col_rows: each window cell back where it came from */
TC static void S(col2im_rows)(const T *col, const int64_t *g, int64_t y0, int64_t y1, T *img) {
    int64_t H = g[G_H], W = g[G_W], Wo = g[G_WO], sw = g[G_SW], L = (y1 - y0) * Wo;
    for (int64_t ch = 0; ch < g[G_C]; ch++)
        for (int64_t ky = 0; ky < g[G_KH]; ky++)
            for (int64_t kx = 0; kx < g[G_KW]; kx++) {
                const T *src = col + ((ch * g[G_KH] + ky) * g[G_KW] + kx) * L;
                int64_t lo, hi, off = kx * g[G_DW] - g[G_PW];
                cols_in_range(g, kx, &lo, &hi);
                for (int64_t y = y0; y < y1; y++, src += Wo) {
                    int64_t iy = y * g[G_SH] - g[G_PH] + ky * g[G_DH];
                    if (iy < 0 || iy >= H) continue;
                    T *dst = img + (ch * H + iy) * W + off;
                    if (sw == 1)
                        for (int64_t x = lo; x < hi; x++) dst[x] += src[x];
                    else
                        for (int64_t x = lo; x < hi; x++) dst[x * sw] += src[x];
                }
            }
}

/* The work items: (sample, block of rb output rows), in sample-major order. */
#define COLS_ITEMS(g, n, rb) ((n) * (((g)[G_HO] + (rb) - 1) / (rb)))

/* y (n, o, Ho, Wo) = conv(x (n, c, H, W), w (o, c / groups, kh, kw)), no bias.
 * Returns 0, or -1 when out of memory. */
EXPORT int S(conv_cols_fwd)(const T *x, const T *w, T *y, int64_t n, int64_t o, int64_t groups,
                            const int64_t *g, void *gemm, int ilp64, int nt) {
    int64_t K = g[G_KH] * g[G_KW], cg = g[G_C] / groups, cgk = cg * K, og = o / groups;
    int64_t L = g[G_HO] * g[G_WO], rb = cols_rows(g, sizeof(T)), cc = cg, gc[G_N];
    int chunk = (int64_t)sizeof(T) * g[G_C] * K * g[G_WO] > ((int64_t)1 << 19);
    /* a row whose columns outgrow L2 (a large kernel over many channels): blocks of rows of up
     * to 256 columns (fewer where the threads would want for blocks), their channels cc at a
     * time (each chunk's columns in L2, the GEMMs accumulating). One row a block streamed the
     * weights once per row through GEMMs of thin N (63x42 kernel over 84 channels, 4 x 32
     * outputs: 1 thread 94 -> 75 ms, torch 63) */
    if (chunk) {
        int64_t per = nt < 1 ? 1 : (nt + n - 1) / n;    /* (row blocks: one for each thread) */
        rb = 256 / g[G_WO] < 1 ? 1 : 256 / g[G_WO] > g[G_HO] ? g[G_HO] : 256 / g[G_WO];
        rb = (g[G_HO] + rb - 1) / rb < per ? (g[G_HO] + per - 1) / per : rb;
        cc = ((int64_t)1 << 19) / ((int64_t)sizeof(T) * K * rb * g[G_WO]);
        cc = cc < 1 ? 1 : cc > cg ? cg : cc;
    }
    memcpy(gc, g, sizeof gc);
    int64_t nb = (g[G_HO] + rb - 1) / rb, items = COLS_ITEMS(g, n, rb);
    int fail = 0;
    nt = nt < 1 ? 1 : nt < items ? nt : (int)items;
#pragma omp parallel num_threads(nt) reduction(| : fail) firstprivate(gc)
    {
        T *col = malloc(sizeof(T) * (chunk ? cc : g[G_C]) * K * rb * g[G_WO]);
        fail = !col;
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            if (!col) continue;
            int64_t s = it / nb, y0 = (it % nb) * rb, y1 = y0 + rb < g[G_HO] ? y0 + rb : g[G_HO];
            int64_t cols = (y1 - y0) * g[G_WO];
            const T *img = x + s * g[G_C] * g[G_H] * g[G_W];
            if (!chunk) S(im2col_rows)(img, g, y0, y1, col);
            for (int64_t gr = 0; gr < groups; gr++)
                for (int64_t c0 = 0; c0 < cg; c0 += cc) {
                    int64_t cn = cg - c0 < cc ? cg - c0 : cc;
                    gc[G_C] = cn;
                    if (chunk)
                        S(im2col_rows)(img + (gr * cg + c0) * g[G_H] * g[G_W], gc, y0, y1, col);
                    S(wino_gemm)(gemm, ilp64, 111, 111, og, cols, cn * K,
                                 w + gr * og * cgk + c0 * K, cgk, col + (chunk ? 0 : gr * cgk * cols), cols, c0 > 0,
                                 y + (s * o + gr * og) * L + y0 * g[G_WO], L);
                }
        }
        free(col);
    }
    return fail ? -1 : 0;
}

/* dw (o, c / groups, kh, kw), zeroed by the caller, += the weight gradient of the convolution
 * above given dy (n, o, Ho, Wo): per thread a sum of dy_block @ col_block^T, then added in. */
EXPORT int S(conv_cols_wgrad)(const T *x, const T *dy, T *dw, int64_t n, int64_t o,
                              int64_t groups, const int64_t *g, void *gemm, int ilp64, int nt) {
    int64_t K = g[G_KH] * g[G_KW], cgk = g[G_C] / groups * K, og = o / groups;
    int64_t L = g[G_HO] * g[G_WO], rb = cols_rows(g, sizeof(T));
    int64_t nb = (g[G_HO] + rb - 1) / rb, items = COLS_ITEMS(g, n, rb), nw = o * cgk;
    int fail = 0;
    nt = nt < 1 ? 1 : nt < items ? nt : (int)items;
#pragma omp parallel num_threads(nt) reduction(| : fail)
    {
        T *col = malloc(sizeof(T) * (g[G_C] * K * rb * g[G_WO] + nw)), *acc = col + g[G_C] * K *
                                                                            rb * g[G_WO];
        int any = 0;
        fail = !col;
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            if (!col) continue;
            int64_t s = it / nb, y0 = (it % nb) * rb, y1 = y0 + rb < g[G_HO] ? y0 + rb : g[G_HO];
            int64_t cols = (y1 - y0) * g[G_WO];
            S(im2col_rows)(x + s * g[G_C] * g[G_H] * g[G_W], g, y0, y1, col);
            for (int64_t gr = 0; gr < groups; gr++)
                S(wino_gemm)(gemm, ilp64, 111, 112, og, cgk, cols,
                             dy + (s * o + gr * og) * L + y0 * g[G_WO], L,
                             col + gr * cgk * cols, cols, any, acc + gr * og * cgk, cgk);
            any = 1;
        }
        if (any) {
#pragma omp critical
            for (int64_t i = 0; i < nw; i++) dw[i] += acc[i];
        }
        free(col);
    }
    return fail ? -1 : 0;
}

/* img (n, c, H, W) = the transposed convolution of x (n, o, Ho, Wo) with w (o, c / groups, kh,
 * kw): each block's columns w^T @ x_block scattered back by col2im (the adjoint of the forward,
 * i.e. its input gradient when x is the output gradient). Blocks of one sample overlap in img,
 * so a thread takes whole samples. img is zeroed by the caller. */
EXPORT int S(conv_cols_transpose)(const T *x, const T *w, T *img, int64_t n, int64_t o,
                                  int64_t groups, const int64_t *g, void *gemm, int ilp64,
                                  int nt) {
    int64_t K = g[G_KH] * g[G_KW], cgk = g[G_C] / groups * K, og = o / groups;
    int64_t L = g[G_HO] * g[G_WO], rb = cols_rows(g, sizeof(T));
    int fail = 0;
    nt = nt < 1 ? 1 : nt < n ? nt : (int)n;
#pragma omp parallel num_threads(nt) reduction(| : fail)
    {
        T *col = malloc(sizeof(T) * g[G_C] * K * rb * g[G_WO]);
        fail = !col;
#pragma omp for schedule(static)
        for (int64_t s = 0; s < n; s++) {
            if (!col) continue;
            for (int64_t y0 = 0; y0 < g[G_HO]; y0 += rb) {
                int64_t y1 = y0 + rb < g[G_HO] ? y0 + rb : g[G_HO], cols = (y1 - y0) * g[G_WO];
                for (int64_t gr = 0; gr < groups; gr++)
                    S(wino_gemm)(gemm, ilp64, 112, 111, cgk, cols, og, w + gr * og * cgk, cgk,
                                 x + (s * o + gr * og) * L + y0 * g[G_WO], L, 0,
                                 col + gr * cgk * cols, cols);
                S(col2im_rows)(col, g, y0, y1, img + s * g[G_C] * g[G_H] * g[G_W]);
            }
        }
        free(col);
    }
    return fail ? -1 : 0;
}
