/* The kernels, written once and included by kernels.c for float (T=float, S(x)=x##_f32) and
 * double (S(x)=x##_f64). Each exported function splits its rows (or elements) over `nt`
 * OpenMP threads and calls a per-block worker; the worker is where the SIMD loops are, and
 * carries TC (target clones: an AVX2 copy picked at load time on x86_64, baseline elsewhere).
 *
 * Reductions use `omp simd reduction`, which lets gcc keep one partial sum per lane without
 * -ffast-math; everything else is plain loops the auto-vectoriser handles.
 */

/* Threads for a row kernel of `work` units (a unit: a layer_norm forward's element; the
 * weights below are costs per element relative to it). A second thread that sleeps between
 * the calls of a training step costs a futex wake-up of an idle vCPU, which a short kernel
 * cannot repay: below ROWS_SPLIT_MIN units the rows stay on the calling thread. */
#ifndef ROWS_SPLIT_MIN
#define ROWS_SPLIT_MIN (1 << 18)
/* a helper of a TC worker that gcc would not inline: called, it runs its baseline (SSE2) copy */
#define CLONE_INLINE static inline __attribute__((always_inline))
static int rows_threads(int64_t work, int nt) {
    return work < ROWS_SPLIT_MIN ? 1 : threads_for(work, nt);
}
#endif

/* ---- softmax / log_softmax over the middle axis of (outer, d, inner) ------------------ */

TC static void S(softmax_rows)(const T *x, T *y, int64_t r0, int64_t r1, int64_t d, int lg) {
    for (int64_t r = r0; r < r1; r++) {
        const T *xr = x + r * d;
        T *yr = y + r * d;
        T m = -INFINITY, s = 0;
#pragma omp simd reduction(max : m)
        for (int64_t j = 0; j < d; j++) m = xr[j] > m ? xr[j] : m;
        if (lg) {
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < d; j++) s += EXP(xr[j] - m);
            T ls = LOG(s);
            for (int64_t j = 0; j < d; j++) yr[j] = (xr[j] - m) - ls;
        } else {
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < d; j++) {
                T e = EXP(xr[j] - m);
                yr[j] = e;
                s += e;
            }
            T inv = 1 / s;
            for (int64_t j = 0; j < d; j++) yr[j] *= inv;
        }
    }
}

/* Columns c0..c0+w of one outer slice, all d rows: accumulators per column, so the loops run
 * along the contiguous inner axis and nothing is transposed. */
#define CHUNK 64
TC static void S(softmax_cols)(const T *x, T *y, int64_t d, int64_t inner, int64_t w, int lg) {
    T m[CHUNK], s[CHUNK];
    for (int64_t j = 0; j < w; j++) { m[j] = -INFINITY; s[j] = 0; }
    for (int64_t k = 0; k < d; k++)
        for (int64_t j = 0; j < w; j++) m[j] = x[k * inner + j] > m[j] ? x[k * inner + j] : m[j];
    for (int64_t k = 0; k < d; k++)
        for (int64_t j = 0; j < w; j++) {
            T e = EXP(x[k * inner + j] - m[j]);
            if (!lg) y[k * inner + j] = e;
            s[j] += e;
        }
    for (int64_t j = 0; j < w; j++) s[j] = lg ? LOG(s[j]) : 1 / s[j];
    for (int64_t k = 0; k < d; k++)
        for (int64_t j = 0; j < w; j++)
            y[k * inner + j] = lg ? (x[k * inner + j] - m[j]) - s[j] : y[k * inner + j] * s[j];
}

/* gx = y * (g - sum(g * y)) for softmax; gx = g - exp(y) * sum(g) for log_softmax */
TC static void S(softmax_bwd_rows)(const T *g, const T *y, T *gx, int64_t r0, int64_t r1,
                                   int64_t d, int lg) {
    for (int64_t r = r0; r < r1; r++) {
        const T *gr = g + r * d, *yr = y + r * d;
        T *o = gx + r * d;
        T s = 0;
        if (lg) {
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < d; j++) s += gr[j];
            for (int64_t j = 0; j < d; j++) o[j] = gr[j] - EXP(yr[j]) * s;
        } else {
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < d; j++) s += gr[j] * yr[j];
            for (int64_t j = 0; j < d; j++) o[j] = yr[j] * (gr[j] - s);
        }
    }
}

TC static void S(softmax_bwd_cols)(const T *g, const T *y, T *gx, int64_t d, int64_t inner,
                                   int64_t w, int lg) {
    T s[CHUNK];
    for (int64_t j = 0; j < w; j++) s[j] = 0;
    for (int64_t k = 0; k < d; k++)
        for (int64_t j = 0; j < w; j++)
            s[j] += lg ? g[k * inner + j] : g[k * inner + j] * y[k * inner + j];
    for (int64_t k = 0; k < d; k++)
        for (int64_t j = 0; j < w; j++) {
            int64_t i = k * inner + j;
            gx[i] = lg ? g[i] - EXP(y[i]) * s[j] : y[i] * (g[i] - s[j]);
        }
}

/* a: x (forward) or g (backward); b: unused (forward) or y (backward) */
EXPORT void S(softmax)(const T *a, const T *b, T *out, int64_t outer, int64_t d, int64_t inner,
                       int lg, int backward, int nt) {
    if (inner == 1) {
        nt = rows_threads(outer * d * 3 / 2, nt);
        THREADED_FOR(nt, outer, 16, {
            int64_t r1 = i + 16 < outer ? i + 16 : outer;
            if (backward) S(softmax_bwd_rows)(a, b, out, i, r1, d, lg);
            else S(softmax_rows)(a, out, i, r1, d, lg);
        });
        return;
    }
    int64_t chunks = (inner + CHUNK - 1) / CHUNK;
    nt = rows_threads(outer * d * inner * 3 / 2, nt);
    THREADED_FOR(nt, outer * chunks, 1, {
        int64_t c0 = (i % chunks) * CHUNK;
        int64_t w = inner - c0 < CHUNK ? inner - c0 : CHUNK;
        int64_t off = i / chunks * d * inner + c0;
        if (backward) S(softmax_bwd_cols)(a + off, b + off, out + off, d, inner, w, lg);
        else S(softmax_cols)(a + off, out + off, d, inner, w, lg);
    });
}

/* ---- GELU, exact (x * Phi(x)) and tanh (x * sigmoid(2 * sqrt(2/pi) (x + 0.044715 x^3))) --- */

#define GELU_K 0.7978845608028654
#define GELU_C 0.044715

TC static void S(gelu_block)(const T *x, const T *g, T *out, int64_t n, int tanh_mode) {
    T e;
    if (!g && !tanh_mode)
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * PHI(x[i], &e);
    else if (!g)
        for (int64_t i = 0; i < n; i++) {
            T v = x[i];
            out[i] = v * SIGMOID((T)(2 * GELU_K) * (v + (T)GELU_C * v * v * v));
        }
    else if (!tanh_mode)    /* Phi(x) + x phi(x) */
        for (int64_t i = 0; i < n; i++) {
            T v = x[i];
            T c = PHI(v, &e);
            out[i] = g[i] * (c + v * e * (T)0.3989422804014327);
        }
    else                    /* s + 2 x s (1 - s) k (1 + 3 c x^2), s = sigmoid(2 k (x + c x^3)) */
        for (int64_t i = 0; i < n; i++) {
            T v = x[i];
            T s = SIGMOID((T)(2 * GELU_K) * (v + (T)GELU_C * v * v * v));
            out[i] = g[i] * (s + 2 * v * s * (1 - s) * (T)GELU_K * (1 + (T)(3 * GELU_C) * v * v));
        }
}

/* g NULL: out = gelu(x); else out = g * gelu'(x) */
EXPORT void S(gelu)(const T *x, const T *g, T *out, int64_t n, int tanh_mode, int nt) {
    const int64_t B = 16384;
    nt = rows_threads(n * 3 / 2, nt);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; i += B)
        S(gelu_block)(x + i, g ? g + i : NULL, out + i, n - i < B ? n - i : B, tanh_mode);
}

/* ---- layer_norm / rms_norm over rows of length n -------------------------------------- */

/* Row statistics keep NORM_LANES partial sums per reduction (two vectors of doubles): with one
 * accumulator the loop-carried add (3-4 cycles a vector) bound the pass, and `omp simd
 * reduction` adds its lanes at the end one by one through memory. The partial sums are added
 * as a tree, in a fixed order. (16 float lanes in the backward's reduction loop gain
 * nothing.) */
#define NORM_LANES 8

static inline double S(sum_lanes)(double *p) {
    for (int l = 0; l < 4; l++) p[l] += p[l + 4];
    return (p[0] + p[2]) + (p[1] + p[3]);
}

/* mean and 1/sqrt(var + eps) of one row (rms: mean 0 and the mean square for var) */
CLONE_INLINE void S(row_stats)(const T *xr, int64_t n, T eps, int rms, T *mean, T *rstd) {
    if (sizeof(T) == 4) {
        /* float32: one pass (the row's first read, from memory) summing x - x[0] and its
         * squares in double: the shift keeps the variance from cancelling, the doubles keep
         * float32 rounding out of the sums, and no second read of the row */
        double k = rms ? 0.0 : (double)xr[0], s1 = 0.0, s2 = 0.0, p1[NORM_LANES] = {0},
               p2[NORM_LANES] = {0};
        int64_t j = 0;
        for (; j + NORM_LANES <= n; j += NORM_LANES)
#pragma omp simd
            for (int l = 0; l < NORM_LANES; l++) {
                double d = (double)xr[j + l] - k;
                p1[l] += d;
                p2[l] += d * d;
            }
        for (; j < n; j++) {
            double d = (double)xr[j] - k;
            s1 += d;
            s2 += d * d;
        }
        s1 += S(sum_lanes)(p1);
        s2 += S(sum_lanes)(p2);
        double var = rms ? s2 / (double)n : (s2 - s1 * s1 / (double)n) / (double)n;
        *mean = (T)(rms ? 0.0 : k + s1 / (double)n);
        *rstd = (T)(1.0 / sqrt((var < 0.0 ? 0.0 : var) + (double)eps));   /* (nan kept) */
        return;
    }
    T mu = 0, v = 0;
    if (!rms) {
#pragma omp simd reduction(+ : mu)
        for (int64_t j = 0; j < n; j++) mu += xr[j];
        mu /= (T)n;
    }
#pragma omp simd reduction(+ : v)
    for (int64_t j = 0; j < n; j++) v += (xr[j] - mu) * (xr[j] - mu);
    *mean = mu;
    *rstd = 1 / SQRT(v / (T)n + eps);
}

TC static void S(norm_rows)(const T *x, const T *w, const T *b, T *y, T *mean, T *rstd,
                            int64_t r0, int64_t r1, int64_t n, T eps, int rms, int64_t wg) {
    for (int64_t r = r0; r < r1; r++) {
        const T *xr = x + r * n, *wr = w + r % wg * n, *br = b + r % wg * n;
        T *yr = y + r * n;
        T mu, rs;
        S(row_stats)(xr, n, eps, rms, &mu, &rs);
        if (mean) { mean[r] = mu; rstd[r] = rs; }
        for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - mu) * rs * wr[j] + br[j];
    }
}

/* w, b: never NULL (the caller passes ones / zeros), wg rows of n that rows take in turn (row r
 * w + (r % wg) n: group_norm's per-channel affine over its (sample, group) rows); mean, rstd:
 * NULL or one per row */
EXPORT void S(layer_norm)(const T *x, const T *w, const T *b, T *y, T *mean, T *rstd,
                          int64_t m, int64_t n, double eps, int rms, int64_t wg, int nt) {
    nt = rows_threads(m * n, nt);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < m; r += 8)
        S(norm_rows)(x, w, b, y, mean, rstd, r, r + 8 < m ? r + 8 : m, n, (T)eps, rms, wg);
}

/* gx = rstd (g w - mean(g w) - xhat mean(g w xhat)) with the mean term dropped for rms; the
 * row statistics are recomputed (one pass over a row already in L1). gw/gb (may be NULL) are
 * per-thread double partial sums, nt rows of n, summed by the caller. The reduction pass also
 * adds g xhat and g into T-typed row accumulators (vectorised FMAs, no float->double
 * conversion per element), flushed into gw/gb every NORM_FLUSH rows so float32 sums stay
 * short; accumulating straight into the doubles took longer than the rest of the kernel. */
#define NORM_FLUSH 16
TC static void S(norm_bwd_rows)(const T *g, const T *x, const T *w0, T *gx, double *gw,
                                double *gb, int64_t r0, int64_t r1, int64_t n, T eps, int rms,
                                int64_t wg) {
    size_t nw = (size_t)(wg * n);
    T *aw0 = (gw || gb) ? (T *)calloc(2 * nw, sizeof(T)) : NULL;
    for (int64_t r = r0; r < r1; r++) {
        const T *xr = x + r * n, *gr = g + r * n, *w = w0 + r % wg * n;
        T *aw = aw0 ? aw0 + r % wg * n : NULL, *ab = aw ? aw + nw : NULL;
        T *o = gx + r * n;
        T mu, rs, a = 0, c = 0;
        S(row_stats)(xr, n, eps, rms, &mu, &rs);
        if (aw) {
#pragma omp simd reduction(+ : a, c)
            for (int64_t j = 0; j < n; j++) {
                T gj = gr[j], xh = (xr[j] - mu) * rs, gh = gj * w[j];
                a += gh;
                c += gh * xh;
                aw[j] += gj * xh;
                ab[j] += gj;
            }
        } else {
#pragma omp simd reduction(+ : a, c)
            for (int64_t j = 0; j < n; j++) {
                T gh = gr[j] * w[j];
                a += gh;
                c += gh * ((xr[j] - mu) * rs);
            }
        }
        a = rms ? 0 : a / (T)n;
        c /= (T)n;
#pragma omp simd
        for (int64_t j = 0; j < n; j++)
            o[j] = rs * (gr[j] * w[j] - a - (xr[j] - mu) * rs * c);
        if (aw && ((r - r0) % (NORM_FLUSH * wg) == NORM_FLUSH * wg - 1 || r == r1 - 1)) {
            if (gw)
                for (size_t j = 0; j < nw; j++) gw[j] += (double)aw0[j];
            if (gb)
                for (size_t j = 0; j < nw; j++) gb[j] += (double)aw0[nw + j];
            memset(aw0, 0, 2 * nw * sizeof(T));
        }
    }
    free(aw0);
}

/* w: wg rows of n as the forward's; gw, gb: nt x wg x n */
EXPORT void S(layer_norm_bwd)(const T *g, const T *x, const T *w, T *gx, double *gw, double *gb,
                              int64_t m, int64_t n, double eps, int rms, int64_t wg, int nt) {
    nt = rows_threads(m * n * 2, nt);
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), k = omp_get_num_threads();
        int64_t r0 = m * t / k, r1 = m * (t + 1) / k;
        S(norm_bwd_rows)(g, x, w, gx, gw ? gw + t * wg * n : NULL, gb ? gb + t * wg * n : NULL,
                         r0, r1, n, (T)eps, rms, wg);
    }
}

/* ---- batch_norm over the channels of a contiguous (n, c, s) array ------------------------ */

/* acc += the sums of d = x - k, d^2, g and g d over a row of s (g NULL: its sums stay 0), in
 * double lanes as row_stats: the shift k keeps the variance from cancelling in one pass */
CLONE_INLINE void S(bn_sums)(const T *x, const T *g, int64_t s, double k, double *acc) {
    double p[4][NORM_LANES] = {{0}};
    int64_t j = 0;
    for (; j + NORM_LANES <= s; j += NORM_LANES)
#pragma omp simd
        for (int l = 0; l < NORM_LANES; l++) {
            double d = (double)x[j + l] - k, e = g ? (double)g[j + l] : 0.0;
            p[0][l] += d, p[1][l] += d * d, p[2][l] += e, p[3][l] += e * d;
        }
    for (; j < s; j++) {
        double d = (double)x[j] - k, e = g ? (double)g[j] : 0.0;
        acc[0] += d, acc[1] += d * d, acc[2] += e, acc[3] += e * d;
    }
    for (int q = 0; q < 4; q++) acc[q] += S(sum_lanes)(p[q]);
}

TC static void S(bn_channels)(const T *x, const T *g, T *y, const T *w, const T *b, T *st,
                              int64_t n, int64_t c, int64_t s, double eps, int train,
                              int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ch++) {
        double acc[4] = {0}, m = (double)(n * s), k = train ? (double)x[ch * s] : (double)st[ch];
        if (train || g)
            for (int64_t r = 0; r < n; r++)
                S(bn_sums)(x + (r * c + ch) * s, g ? g + (r * c + ch) * s : NULL, s, k, acc);
        double mu = train ? k + acc[0] / m : k, var = train ? (acc[1] - acc[0] * acc[0] / m) / m
                                                           : (double)st[c + ch];
        double rs = 1.0 / sqrt((var < 0.0 ? 0.0 : var) + eps), a = (w ? w[ch] : 1) * rs;
        double sgd = acc[3] - (mu - k) * acc[2];         /* sum of g (x - mean) */
        if (g)
            st[2 * c + ch] = (T)(sgd * rs), st[3 * c + ch] = (T)acc[2];
        else if (train)
            st[ch] = (T)mu, st[c + ch] = (T)var;
        T A = (T)a, M = (T)mu, O = g ? (T)(-a * acc[2] / m) : b ? b[ch] : 0,
          Q = (T)(-a * rs * rs * sgd / m);
        for (int64_t r = 0; r < n; r++) {
            const T *xr = x + (r * c + ch) * s, *gr = g ? g + (r * c + ch) * s : NULL;
            T *yr = y + (r * c + ch) * s;
            if (!g)
                for (int64_t j = 0; j < s; j++) yr[j] = (xr[j] - M) * A + O;
            else if (train)
                for (int64_t j = 0; j < s; j++) yr[j] = A * gr[j] + Q * (xr[j] - M) + O;
            else
                for (int64_t j = 0; j < s; j++) yr[j] = A * gr[j];
        }
    }
}

/* Forward (g NULL): y = (x - mean) w / sqrt(var + eps) + b per channel, the batch's mean and
 * biased variance computed into st[0:c], st[c:2c] where train, else read from there (the
 * running ones). Backward: y = the input's gradient, st[2c:3c] = sum g xhat, st[3c:4c] = sum g.
 * w, b may be NULL. Channels over threads: NumPy's reductions and passes run on one. */
EXPORT void S(batch_norm)(const T *x, const T *g, T *y, const T *w, const T *b, T *st,
                          int64_t n, int64_t c, int64_t s, double eps, int train, int nt) {
    nt = threads_for(n * c * s, c < nt ? (int)c : nt);
    ROW_RANGES(nt, c, S(bn_channels)(x, g, y, w, b, st, n, c, s, eps, train, r0, r1));
}

/* ---- cross-entropy over class indices: fused log_softmax + nll ------------------------- */

/* m and log(sum(exp(x - m))) of one row */
CLONE_INLINE void S(row_lse)(const T *xr, int64_t c, T *m_out, T *ls_out) {
    T m = -INFINITY, s = 0;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < c; j++) m = xr[j] > m ? xr[j] : m;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < c; j++) s += EXP(xr[j] - m);
    *m_out = m;
    *ls_out = LOG(s);
}

/* coef NULL: loss[r] = -log_softmax(x)[r, t[r]] (0 where t[r] == ignore). Else the backward:
 * gx[r] = coef[r] * (softmax(x[r]) - onehot(t[r])). */
TC static void S(ce_rows)(const T *x, const int64_t *t, const T *coef, T *out, int64_t r0,
                          int64_t r1, int64_t c, int64_t ignore) {
    for (int64_t r = r0; r < r1; r++) {
        const T *xr = x + r * c;
        T m, ls;
        S(row_lse)(xr, c, &m, &ls);
        int64_t k = t[r];
        if (!coef) {
            out[r] = k == ignore ? 0 : ls - (xr[k] - m);
            continue;
        }
        T cr = k == ignore ? 0 : coef[r];
        T *o = out + r * c;
        for (int64_t j = 0; j < c; j++) o[j] = EXP((xr[j] - m) - ls) * cr;
        if (k != ignore) o[k] -= cr;
    }
}

/* Returns how many targets are not `ignore`, or -1 (out untouched) where one is outside
 * [0, c): the caller's reference path raises torch's error. Checking here spares the caller
 * four NumPy passes over the targets, which cost more than the kernel on a small batch.
 * The forward (coef NULL) also leaves the losses' sum (in double) and mean in out[m] and
 * out[m + 1]: NumPy's sum, divide and 0-dim wrap cost ~1.5 us of a small call. */
EXPORT int64_t S(cross_entropy)(const T *x, const int64_t *t, const T *coef, T *out,
                                int64_t m, int64_t c, int64_t ignore, int nt) {
    int64_t valid = 0;
    for (int64_t r = 0; r < m; r++) {
        if (t[r] == ignore)
            continue;
        if (t[r] < 0 || t[r] >= c)
            return -1;
        valid++;
    }
    nt = rows_threads(m * c * 3 / 2, nt);
    THREADED_FOR(nt, m, 8, S(ce_rows)(x, t, coef, out, i, i + 8 < m ? i + 8 : m, c, ignore));
    if (!coef) {
        double s = 0;
        for (int64_t r = 0; r < m; r++) s += out[r];
        out[m] = (T)s;
        out[m + 1] = (T)s / (T)valid;
    }
    return valid;
}

/* nll_loss over x viewed as (m, c, k) (an (N, C, d...) input, k the positions): out[r] =
 * -(x[., t[r], .] w[t[r]]) for the m k targets (0 where ignored; w NULL: 1), then the losses'
 * and the weights' sums (in double) in out[m k] and out[m k + 1]. -1 where a target is outside
 * [0, c) (the caller's reference path raises), else 0. One small pass: a Python call's work. */
EXPORT int S(nll)(const T *x, const int64_t *t, const T *w, T *out, int64_t m, int64_t c,
                  int64_t k, int64_t ignore) {
    double sl = 0, sw = 0;
    for (int64_t r = 0; r < m * k; r++) {
        int64_t j = t[r];
        T wj = w && j != ignore ? w[j] : 1;
        if (j != ignore && (j < 0 || j >= c)) return -1;
        out[r] = j == ignore ? 0 : -(x[(r / k * c + j) * k + r % k] * wj);
        sl += out[r];
        sw += j == ignore ? 0 : wj;
    }
    out[m * k] = (T)sl;
    out[m * k + 1] = (T)sw;
    return 0;
}

/* ---- Adam / AdamW over a flat buffer --------------------------------------------------- */

/* The same operations in the same order (and roundings) as Adam's NumPy passes, so the
 * result is bit-identical: p *= decay (AdamW); m = (m - g) beta1 + g;
 * v = v beta2 + g g (1 - beta2); p -= m / (sqrt(v) + eps_c) * step_size.
 * vmax (AMSGrad) may be NULL. */
TC NOCONTRACT static void S(adam_block)(T *p, const T *g, T *m, T *v, T *vmax, int64_t n,
                                        T b1, T b2, T omb2, T eps_c, T step_size, T decay) {
    for (int64_t i = 0; i < n; i++) {
        T gi = g[i];
        T mi = (m[i] - gi) * b1 + gi;
        T vi = v[i] * b2 + (gi * gi) * omb2;
        m[i] = mi;
        v[i] = vi;
        if (vmax) {
            vi = vmax[i] > vi ? vmax[i] : vi;
            vmax[i] = vi;
        }
        p[i] = p[i] * decay - (mi / (SQRT(vi) + eps_c)) * step_size;
    }
}

EXPORT void S(adam)(T *p, const T *g, T *m, T *v, T *vmax, int64_t n, double b1, double b2,
                    double omb2, double eps_c, double step_size, double decay, int nt) {
    const int64_t B = 16384;
    nt = threads_for(n * 4, nt);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; i += B)
        S(adam_block)(p + i, g + i, m + i, v + i, vmax ? vmax + i : NULL, n - i < B ? n - i : B,
                      (T)b1, (T)b2, (T)omb2, (T)eps_c, (T)step_size, (T)decay);
}

/* A linear layer's bias: out[r, :] += bias for r < rows (rows of cols contiguous elements),
 * rows split over threads. One add per element, as NumPy's out += bias. */
EXPORT void S(add_bias)(T *out, const T *bias, int64_t rows, int64_t cols, int nt) {
    nt = threads_for(rows * cols, nt);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        T *o = out + r * cols;
#pragma omp simd
        for (int64_t j = 0; j < cols; j++) o[j] += bias[j];
    }
}

/* Per-sample weight gradients of a linear layer: out[b, o, :] = g[b, o] * x[b, :] (B * O rows
 * of I, one multiply each, as NumPy's broadcast multiply), rows over threads. The result
 * (hundreds of MB for an MLP's layer) is written once and not read back soon: streaming stores
 * bypass the cache, so the write costs no read for ownership, half the memory traffic. */
TC static void S(outer_rows)(const T *g, const T *x, T *out, int64_t r0, int64_t r1, int64_t O,
                             int64_t I, int stream) {
    for (int64_t r = r0; r < r1; r++) {     /* (the rows in the clone: kron's are 14 long) */
        T *o = out + r * I, s = g[r];
        const T *xr = x + (r / O) * I;
        int64_t j = 0;
#ifdef __SSE2__
        for (; stream && j < I && (uintptr_t)(o + j) & 15; j++) o[j] = s * xr[j];
        if (stream && sizeof(T) == 4)
            for (; j + 4 <= I; j += 4)
                _mm_stream_ps((float *)(o + j), _mm_mul_ps(_mm_set1_ps((float)s),
                              _mm_loadu_ps((const float *)(xr + j))));
        else if (stream)
            for (; j + 2 <= I; j += 2)
                _mm_stream_pd((double *)(o + j), _mm_mul_pd(_mm_set1_pd((double)s),
                              _mm_loadu_pd((const double *)(xr + j))));
#endif
        for (; j < I; j++) o[j] = s * xr[j];    /* (vectorised: no stream, or the tail) */
    }
#ifdef __SSE2__
    if (stream) _mm_sfence();   /* (this thread's streaming stores visible before the join) */
#endif
}

EXPORT void S(outer)(const T *g, const T *x, T *out, int64_t B, int64_t O, int64_t I, int nt) {
    /* (streaming stores only for a result beyond the caches in rows of whole lines: short
     * rows flush partly filled write-combining buffers, kron's (294, 21, 14) took 14x torch) */
    int stream = B * O * I >= (1 << 20) && I >= 64;
    nt = rows_threads(B * O * I, nt);
    ROW_RANGES(nt, B * O, S(outer_rows)(g, x, out, r0, r1, O, I, stream))
}

/* kron of 2-D factors a (I, n) and b (K, q) (ember/_ops/linalg.py): out[i * K + k, j * q + l]
 * = a[i, j] * b[k, l], the one product NumPy's broadcast a * b computes, read from the factors
 * (NumPy's copies of them merged into rows cost as much as the product); rows over threads from
 * torch's grain (32k elements), as its 86k-element kron splits */
TC static void S(kron_part)(const T *a, const T *b, T *out, int64_t r0, int64_t r1, int64_t n,
                            int64_t K, int64_t q) {
    for (int64_t r = r0; r < r1; r++) {
        const T *x = a + r / K * n, *y = b + r % K * q;
        T *o = out + r * n * q;
        for (int64_t j = 0; j < n; j++)
            for (int64_t l = 0; l < q; l++) o[j * q + l] = x[j] * y[l];
    }
}

EXPORT void S(kron_rows)(const T *a, const T *b, T *out, int64_t I, int64_t n, int64_t K,
                         int64_t q, int nt) {
    nt = threads_for(I * K * n * q, nt);
    ROW_RANGES(nt, I * K, S(kron_part)(a, b, out, r0, r1, n, K, q));
}

/* addr's beta c + alpha v1 v2^T in one pass, rounded as the NumPy reference's passes (the
 * product, times alpha, plus c times beta: a factor of 1 is exact, so no branch); c's rows `cs`
 * apart (0: one row broadcast) or NULL (beta 0: torch reads no input); rows over threads */
NOCONTRACT TC static void S(addr_part)(const T *c, int64_t cs, const T *v1, const T *v2, T *out,
                                       int64_t r0, int64_t r1, int64_t n, T beta, T alpha) {
    for (int64_t r = r0; r < r1; r++) {
        T s = v1[r], *o = out + r * n;
        const T *cr = c + r * cs;
        if (c)
            for (int64_t j = 0; j < n; j++) o[j] = s * v2[j] * alpha + cr[j] * beta;
        else
            for (int64_t j = 0; j < n; j++) o[j] = s * v2[j] * alpha;
    }
}

EXPORT void S(addr)(const T *c, int64_t cs, const T *v1, const T *v2, T *out, int64_t m,
                    int64_t n, double beta, double alpha, int nt) {
    nt = rows_threads(m * n, nt);
    ROW_RANGES(nt, m, S(addr_part)(c, cs, v1, v2, out, r0, r1, n, (T)beta, (T)alpha));
}

/* diff along the last dim of contiguous rows of n: out[r, j] = x[r, j + 1] - x[r, j] (NumPy
 * subtracts 2-D row views ~3x slower than flat ones); rows over threads */
TC static void S(diff_part)(const T *x, T *out, int64_t r0, int64_t r1, int64_t n) {
    for (int64_t r = r0; r < r1; r++)
        for (int64_t j = 0; j + 1 < n; j++) out[r * (n - 1) + j] = x[r * n + j + 1] - x[r * n + j];
}

EXPORT void S(diff_rows)(const T *x, T *out, int64_t rows, int64_t n, int nt) {
    nt = rows_threads(rows * n, nt);
    ROW_RANGES(nt, rows, S(diff_part)(x, out, r0, r1, n));
}

/* out[2i], out[2i + 1] = a[i], b[i]: a complex array from its parts in one pass over threads
 * (NumPy's .real and .imag writes are two strided passes on one thread) */
TC static void S(interleave_part)(const T *a, const T *b, T *o, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
        o[2 * i] = a[i];
        o[2 * i + 1] = b[i];
    }
}

EXPORT void S(interleave)(const T *a, const T *b, T *out, int64_t n, int nt) {
    nt = rows_threads(n * 2, nt);
    ROW_RANGES(nt, n, S(interleave_part)(a, b, out, r0, r1));
}

/* the cross product along the middle axis of contiguous (rows, 3, inner) a and b, each
 * component a[c1] b[c2] - a[c2] b[c1] rounded as the reference's passes (no fma); one pass
 * where the reference's takes, products and difference are seven */
TC NOCONTRACT static void S(cross_part)(const T *a, const T *b, T *o, int64_t r0, int64_t r1,
                                        int64_t in) {
    if (in == 1)
        for (int64_t r = r0; r < r1; r++) {
            const T *x = a + 3 * r, *y = b + 3 * r;
            T x0 = x[0], x1 = x[1], x2 = x[2], y0 = y[0], y1 = y[1], y2 = y[2];
            o[3 * r] = x1 * y2 - x2 * y1;
            o[3 * r + 1] = x2 * y0 - x0 * y2;
            o[3 * r + 2] = x0 * y1 - x1 * y0;
        }
    else
        for (int64_t r = r0; r < r1; r++)
            for (int c = 0; c < 3; c++) {
                const T *x = a + 3 * r * in, *y = b + 3 * r * in;
                int64_t p = (c + 1) % 3 * in, q = (c + 2) % 3 * in;
                T *z = o + (3 * r + c) * in;
                for (int64_t j = 0; j < in; j++) z[j] = x[p + j] * y[q + j] - x[q + j] * y[p + j];
            }
}

EXPORT void S(cross3)(const T *a, const T *b, T *out, int64_t rows, int64_t inner, int nt) {
    nt = rows_threads(rows * inner * 3, nt);
    ROW_RANGES(nt, rows, S(cross_part)(a, b, out, r0, r1, inner));
}

/* prod over each contiguous row: 32 partial products (several vector registers, so the
 * multiplies' latency overlaps; NumPy's multiply.reduce takes one element at a time); rows
 * over threads */
TC static void S(prod_row)(const T *x, T *out, int64_t n) {
    T acc[32], p = 1;
    int64_t j = 0;
    for (int l = 0; l < 32; l++) acc[l] = 1;
    for (; j + 32 <= n; j += 32)
        for (int l = 0; l < 32; l++) acc[l] *= x[j + l];
    for (; j < n; j++) p *= x[j];
    for (int l = 0; l < 32; l++) p *= acc[l];
    *out = p;
}

EXPORT void S(prod_rows)(const T *a, T *out, int64_t rows, int64_t cols, int nt) {
    nt = rows_threads(rows * cols, nt);     /* (one thread: no OpenMP region, ~0.5 us) */
    ROW_RANGES(nt, rows, for (int64_t r = r0; r < r1; r++) S(prod_row)(a + r * cols, out + r, cols));
}

/* NumPy's pairwise sum (loops_utils.h.src) of n elements `s` apart, step for step: serial
 * below 8 (from -0.0, so -0.0 alone stays), 8 accumulators up to 128, halves above */
static T S(np_pairwise)(const T *a, int64_t n, int64_t s) {
    T r[8], res = (T)-0.0;
    int64_t i = 0;
    if (n < 8) {
        for (; i < n; i++) res += a[i * s];
        return res;
    }
    if (n > 128) {
        int64_t h = n / 2 - n / 2 % 8;
        return S(np_pairwise)(a, h, s) + S(np_pairwise)(a + h * s, n - h, s);
    }
    for (int l = 0; l < 8; l++) r[l] = a[l * s];
    for (i = 8; i < n - n % 8; i += 8)
        for (int l = 0; l < 8; l++) r[l] += a[(i + l) * s];
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += a[i * s];
    return res;
}

/* trace: n elements `step` apart (a matrix's diagonal) summed as NumPy's add.reduce of them
 * (its identity 0, plus their pairwise sum: -0.0 sums to 0.0): bit for bit, in one call */
EXPORT void S(diag_sum)(const T *a, int64_t n, int64_t step, T *out) {
    *out = (T)0 + S(np_pairwise)(a, n, step);
}

/* A bias's gradient: out[j] = a[0, j] + a[1, j] + ... in row order, as NumPy's
 * add.reduce(a, 0) sums a C-contiguous matrix (bit for bit); threads take column blocks of
 * whole cache lines, each walking every row. */
EXPORT void S(sum_rows)(const T *a, T *out, int64_t rows, int64_t cols, int nt) {
    const int64_t line = 64 / (int64_t)sizeof(T), lines = (cols + line - 1) / line;
    nt = threads_for(rows * cols, nt);
    nt = lines < nt ? (int)lines : nt;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), w = omp_get_num_threads();
        int64_t j0 = lines * t / w * line, j1 = lines * (t + 1) / w * line;
        j1 = j1 < cols ? j1 : cols;
        if (j0 < j1) {
            memcpy(out + j0, a + j0, (size_t)(j1 - j0) * sizeof(T));
            for (int64_t r = 1; r < rows; r++) {
                const T *row = a + r * cols;
#pragma omp simd
                for (int64_t j = j0; j < j1; j++) out[j] += row[j];
            }
        }
    }
}

/* ---- reduce_rows: sum / sum of squares / nan-sum / max / min / logsumexp of each contiguous
 * row. Sums are pairwise, as NumPy's add.reduce (leaves of RL lanes x 16 serial terms, the
 * 16 terms NumPy's leaves add serially; leaves merged by a binary counter, so every partial
 * adds two of equal weight), with RL independent lanes: the adds vectorise and overlap.
 * Max / min propagate nan as torch, in selects that vectorise. */
#ifndef RL
#define RL 32
enum { RR_SUM, RR_SUMSQ, RR_NANSUM, RR_MAX, RR_MIN, RR_LSE, RR_MSE, RR_SMOOTH_L1, RR_HUBER,
       RR_NANCOUNT, RR_CSQ };
enum { RS_VAR, RS_STD, RS_MINMAX };     /* (stats_rows) */
#endif

/* One term: of x for the one-input sums, of d = x - y for the losses (c: logsumexp's shift,
 * smooth L1's beta, Huber's delta; the operations in the order of the NumPy reference) */
static inline T S(rr_term)(T v, T w, int op, T c, T hc) {
    T d = op == RR_MSE ? v - w : (v > w ? v - w : w - v);
    return op == RR_SUM ? v : op == RR_SUMSQ ? v * v : op == RR_NANSUM ? (v == v ? v : 0) :
           op == RR_NANCOUNT ? (T)(v == v) : op == RR_CSQ ? (v - c) * (v - c) :
           op == RR_LSE ? EXP(v - c) : op == RR_MSE ? d * d :
           op == RR_SMOOTH_L1 ? (d < c ? (T)0.5 * d * d / c : d - hc) :
           (d < c ? (T)0.5 * d * d : c * (d - hc));
}

CLONE_INLINE void S(rr_add)(const T *v, const T *w, T *acc, int op, T c, T hc) {
    /* (a loop per op, so each vectorises on its own) */
    if (op == RR_SUM) for (int l = 0; l < RL; l++) acc[l] += v[l];
    else if (op == RR_SUMSQ) for (int l = 0; l < RL; l++) acc[l] += v[l] * v[l];
    else if (op == RR_NANSUM) for (int l = 0; l < RL; l++) acc[l] += v[l] == v[l] ? v[l] : 0;
    else if (op == RR_NANCOUNT) for (int l = 0; l < RL; l++) acc[l] += v[l] == v[l];
    else if (op == RR_CSQ) for (int l = 0; l < RL; l++) acc[l] += (v[l] - c) * (v[l] - c);
    else if (op == RR_LSE) for (int l = 0; l < RL; l++) acc[l] += EXP(v[l] - c);
    else if (op == RR_MSE) for (int l = 0; l < RL; l++) acc[l] += (v[l] - w[l]) * (v[l] - w[l]);
    else if (op == RR_SMOOTH_L1)
        for (int l = 0; l < RL; l++) acc[l] += S(rr_term)(v[l], w[l], RR_SMOOTH_L1, c, hc);
    else
        for (int l = 0; l < RL; l++) acc[l] += S(rr_term)(v[l], w[l], RR_HUBER, c, hc);
}

CLONE_INLINE void S(rr_leaf)(const T *x, const T *y, T *acc, int op, T c, T hc) {
    for (int l = 0; l < RL; l++) acc[l] = 0;
    for (int k = 0; k < 16; k++) S(rr_add)(x + k * RL, y ? y + k * RL : y, acc, op, c, hc);
}

CLONE_INLINE T S(rr_fold)(T *acc) {   /* the lanes' pairwise sum (constant trip counts) */
    for (int l = 0; l < RL / 2; l++) acc[l] += acc[l + RL / 2];
    for (int l = 0; l < RL / 4; l++) acc[l] += acc[l + RL / 4];
    for (int l = 0; l < RL / 8; l++) acc[l] += acc[l + RL / 8];
    for (int l = 0; l < RL / 16; l++) acc[l] += acc[l + RL / 16];
    return acc[0] + acc[1];
}

CLONE_INLINE T S(rr_tail)(const T *x, const T *y, int64_t n, int op, T c, T hc) {
    T s = 0, acc[RL];   /* (less than a leaf: lanes of up to 16 terms, then serial) */
    int64_t j = 0;
    if (n >= RL) {
        for (int l = 0; l < RL; l++) acc[l] = 0;
        for (; j + RL <= n; j += RL) S(rr_add)(x + j, y ? y + j : y, acc, op, c, hc);
        s = S(rr_fold)(acc);
    }
    for (; j < n; j++) s += S(rr_term)(x[j], y ? y[j] : 0, op, c, hc);
    return s;
}

CLONE_INLINE T S(rr_sum)(const T *x, const T *y, int64_t n, int op, T c, T hc) {
    T stack[48][RL], cur[RL];
    int64_t leaves = n / (16 * RL), depth = 0;
    if (!leaves) return S(rr_tail)(x, y, n, op, c, hc);
    for (int64_t b = 0; b < leaves; b++) {
        S(rr_leaf)(x + b * 16 * RL, y ? y + b * 16 * RL : y, cur, op, c, hc);
        /* leaf b+1's trailing zero bits: how many equal-weight partials it completes */
        for (int64_t c = b + 1; !(c & 1); c >>= 1) {
            depth--;
            for (int l = 0; l < RL; l++) cur[l] += stack[depth][l];
        }
        memcpy(stack[depth++], cur, sizeof cur);
    }
    for (int l = 0; l < RL; l++) cur[l] = 0;
    while (depth > 0) { depth--; for (int l = 0; l < RL; l++) cur[l] += stack[depth][l]; }
    int64_t done = leaves * 16 * RL;
    return S(rr_fold)(cur) + S(rr_tail)(x + done, y ? y + done : y, n - done, op, c, hc);
}

/* The max (want 1), the min (2) or both (3) of x[0..n), n >= 1, into *hi, *lo: RL lanes of
 * selects that compile to maxps / minps (v > m ? v : m drops a nan v) and RL lanes keeping any
 * nan seen, which is then the result (torch propagates nan); ties keep the first seen. */
#define RR_MAXSEL(v, m) ((v) > (m) ? (v) : (m))
#define RR_MINSEL(v, m) ((v) < (m) ? (v) : (m))
CLONE_INLINE void S(rr_minmax)(const T *x, int64_t n, int want, T *lo, T *hi) {
    T mn[RL], mx[RL], nn[RL], l0 = x[0], h0 = x[0], u = 0;
    int64_t j = 0;
    for (int l = 0; l < RL; l++) mn[l] = mx[l] = x[0], nn[l] = 0;
    for (; j + RL <= n; j += RL)
        for (int l = 0; l < RL; l++) {
            T v = x[j + l];
            if (want & 1) mx[l] = RR_MAXSEL(v, mx[l]);
            if (want & 2) mn[l] = RR_MINSEL(v, mn[l]);
            nn[l] = v != v ? v : nn[l];
        }
    for (int l = 0; l < RL; l++) {
        h0 = RR_MAXSEL(mx[l], h0), l0 = RR_MINSEL(mn[l], l0);
        u = nn[l] != nn[l] ? nn[l] : u;
    }
    for (; j < n; j++) {
        h0 = RR_MAXSEL(x[j], h0), l0 = RR_MINSEL(x[j], l0);
        u = x[j] != x[j] ? x[j] : u;
    }
    *lo = u != u ? u : l0;
    *hi = u != u ? u : h0;
}

CLONE_INLINE T S(rr_row)(const T *x, const T *y, int64_t n, int op, double c) {
    T m, lo;
    if (op == RR_MAX || op == RR_MIN) {
        S(rr_minmax)(x, n, op == RR_MAX ? 1 : 2, &lo, &m);
        return op == RR_MAX ? m : lo;
    }
    if (op != RR_LSE) return S(rr_sum)(x, y, n, op, (T)c, (T)(0.5 * c));
    S(rr_minmax)(x, n, 1, &lo, &m);   /* (torch: an infinite max shifts by 0) */
    if (m != m) return m;
    T sh = isinf(m) ? 0 : m;
    return LOG(S(rr_sum)(x, NULL, n, op, sh, 0)) + sh;
}

TC static void S(rr_rows)(int op, const T *a, const T *b, double c, T *out, int64_t cols,
                         int64_t r0, int64_t r1) {   /* (rows r0..r1, all in one clone) */
    /* (the common ops with op a constant: each inlined copy is its own loop) */
#define RR_ROWS(o) \
    for (int64_t r = r0; r < r1; r++) out[r] = S(rr_row)(a + r * cols, NULL, cols, o, c)
    if (op == RR_SUM) {  /* c: a mean's count (0: a sum); in double, which rounds as T's / */
        RR_ROWS(RR_SUM);
        if (c) for (int64_t r = r0; r < r1; r++) out[r] = (T)(out[r] / c);
    } else if (op == RR_NANSUM) RR_ROWS(RR_NANSUM);
    else if (op == RR_SUMSQ) RR_ROWS(RR_SUMSQ);
    else if (op == RR_MAX) RR_ROWS(RR_MAX);
    else if (op == RR_MIN) RR_ROWS(RR_MIN);
    else
        for (int64_t r = r0; r < r1; r++)
            out[r] = S(rr_row)(a + r * cols, b ? b + r * cols : b, cols, op, c);
#undef RR_ROWS
}

/* b: the second input of the losses (NULL for the others), c their parameter. One long row
 * (a whole-array reduction) runs as k chunks of RR_CHUNK or more over the threads, then
 * combines their partials as one more row (sums as a sum, extrema as extrema, logsumexps as a
 * logsumexp): in C rather than NumPy, as the Python steps after a pass over a large array find
 * their code and objects evicted from the cache (~10 us of a 1M-element sum's 80). */
#ifndef RR_CHUNK
#define RR_CHUNK (1 << 16)
#endif
EXPORT void S(reduce_rows)(int op, const T *a, const T *b, double c, T *out, int64_t rows,
                           int64_t cols, int nt) {
    nt = threads_for(rows * cols * (op == RR_LSE ? 8 : 1), nt);
    int64_t k = cols / RR_CHUNK, len = k ? cols / k : 0, rest = cols - k * len;
    if (rows > 1 || k < 2) {
        ROW_RANGES(nt, rows, S(rr_rows)(op, a, b, c, out, cols, r0, r1))
        return;
    }
    T *parts = malloc((k + 1) * sizeof(T));
    double pc = op == RR_SUM ? 0 : c;   /* (a mean divides the total only) */
    ROW_RANGES(nt, k, S(rr_rows)(op, a, b, pc, parts, len, r0, r1))
    if (rest) S(rr_rows)(op, a + k * len, b ? b + k * len : b, pc, parts + k, rest, 0, 1);
    S(rr_rows)(op == RR_MAX || op == RR_MIN || op == RR_LSE ? op : RR_SUM, parts, NULL, c - pc,
               out, k + (rest > 0), 0, 1);
    free(parts);
}

/* Two statistics of each contiguous row: what 0 (RS_VAR), 1 (RS_STD): the variance (or its
 * square root) with correction c into o1 and the mean into o2, as the NumPy reference's two
 * passes (the row's sum over cols, then the sum of the squared deviations from that mean over
 * max(cols - c, 0), both pairwise as reduce_rows' sums); 2 (RS_MINMAX): the min into o1 and
 * the max into o2 (nan sticks, as reduce_rows' extrema). */
TC static void S(stat_rows)(const T *a, T *o1, T *o2, int64_t cols, double c, int what,
                            int64_t r0, int64_t r1) {
    T dof = (T)(cols - c > 0 ? cols - c : 0);
    for (int64_t r = r0; r < r1; r++) {
        const T *x = a + r * cols;
        if (what == RS_MINMAX) {
            S(rr_minmax)(x, cols, 3, o1 + r, o2 + r);
            continue;
        }
        T m = S(rr_sum)(x, NULL, cols, RR_SUM, 0, 0) / (T)cols;
        T v = S(rr_sum)(x, NULL, cols, RR_CSQ, m, 0) / dof;
        o1[r] = what == RS_STD ? SQRT(v) : v;
        o2[r] = m;
    }
}

EXPORT void S(stats_rows)(const T *a, T *o1, T *o2, int64_t rows, int64_t cols, double c,
                          int what, int nt) {
    nt = threads_for(rows * cols * 2, nt);
    ROW_RANGES(nt, rows, S(stat_rows)(a, o1, o2, cols, c, what, r0, r1))
}
