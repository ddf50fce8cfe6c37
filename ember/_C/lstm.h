/* One direction of an LSTM layer over a whole sequence, forward and backward (BPTT), for the
 * `_lstm_layer` op (ember/_ops/recurrent.py). Included by kernels.c for float and double as
 * rowops.h is (T, S(name), EXP, SIGMOID defined there).
 *
 * NumPy spends ~14 passes over memory per step forward and ~27 backward on the gates'
 * pointwise maths, plus a Python frame and a dozen ufunc calls a step; here each step is one
 * BLAS GEMM (through the `cblas_?gemm` NumPy's BLAS gives us, see ember/_backends/blas.py)
 * and one fused pass over the step's gates. The recurrent weight's gradient stays one GEMM
 * over all steps, in NumPy. Gates are in torch's order (input, forget, cell, output), each
 * row of G = 4H pre-activations laid out [i | f | g | o].
 *
 * Threads: the GEMMs run on BLAS's own threads; the pointwise pass (a few percent of the
 * work at hidden 256) stays on the calling thread, since an OpenMP region per step would
 * spin against BLAS's threads between the steps.
 */

#ifndef EMBER_LSTM_ONCE
#define EMBER_LSTM_ONCE
/* tanh(x) in float32: Cephes' tanhf (an odd polynomial below |x| = 0.625, else
 * 1 - 2 / (exp(2|x|) + 1)), ~2 ulp; both branches computed and selected, so it vectorises.
 * exp overflows to inf past |x| ~ 44, which gives exactly +-1; NaN stays NaN. */
static inline float tanh_f32(float x) {
    float a = x < 0.0f ? -x : x;
    float z = x * x;
    float p = -5.70498872745E-3f;
    p = p * z + 2.06390887954E-2f;
    p = p * z - 5.37397155531E-2f;
    p = p * z + 1.33314422036E-1f;
    p = p * z - 3.33332819422E-1f;
    float small = p * z * x + x;
    float big = 1.0f - 2.0f / (exp_f32(a + a) + 1.0f);
    big = x < 0.0f ? -big : big;
    return a < 0.625f ? small : big;
}
#endif

/* float64 takes libm's tanh (scalar, but still one pass); sizeof folds at compile time */
#undef LSTM_TANH
#define LSTM_TANH(x) (sizeof(T) == 4 ? (T)tanh_f32((float)(x)) : (T)tanh(x))

#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")

/* out (m x n, leading dim ldc) = a (m x k) @ b (k x n), row-major, both untransposed */
static void S(lstm_gemm)(void *fn, int ilp64, int64_t m, int64_t n, int64_t k, const T *a,
                         int64_t lda, const T *b, int64_t ldb, T *out, int64_t ldc) {
    if (ilp64)
        ((void (*)(int, int, int, int64_t, int64_t, int64_t, T, const T *, int64_t, const T *,
                   int64_t, T, T *, int64_t))fn)(101, 111, 111, m, n, k, 1, a, lda, b, ldb, 0,
                                                 out, ldc);
    else
        ((void (*)(int, int, int, int, int, int, T, const T *, int, const T *, int, T, T *,
                   int))fn)(101, 111, 111, (int)m, (int)n, (int)k, 1, a, (int)lda, b, (int)ldb,
                            0, out, (int)ldc);
}

/* The rows of one forward step: a holds h_prev @ W_hh^T, x the input projection, b the
 * hidden bias (G each row); a <- activated gates, c <- f * cp + i * g, h <- o * tanh(c). */
TC static void S(lstm_fwd_rows)(T *a, const T *x, const T *b, const T *cp, T *c, T *h,
                                int64_t rows, int64_t H) {
    for (int64_t r = 0; r < rows; r++) {
        /* (ivdep: the gate blocks never overlap, which gcc cannot prove with H unknown) */
        T *ai = a + r * 4 * H, *af = ai + H, *ag = af + H;
        T *ao = ag + H, *cr = c + r * H, *hr = h + r * H;
        const T *xi = x + r * 4 * H, *xf = xi + H, *xg = xf + H;
        const T *xo = xg + H, *cpr = cp + r * H;
        const T *bi = b, *bf = b + H, *bg = bf + H, *bo = bg + H;
#pragma GCC ivdep
        for (int64_t j = 0; j < H; j++) {
            T i = SIGMOID(ai[j] + xi[j] + bi[j]);
            T f = SIGMOID(af[j] + xf[j] + bf[j]);
            T g = LSTM_TANH(ag[j] + xg[j] + bg[j]);
            T o = SIGMOID(ao[j] + xo[j] + bo[j]);
            T cn = f * cpr[j] + i * g;
            ai[j] = i, af[j] = f, ag[j] = g, ao[j] = o;
            cr[j] = cn;
            hr[j] = o * LSTM_TANH(cn);
        }
    }
}

/* The rows of one backward step from the activated gates a, the incoming cell state cp
 * and the outgoing one c: dh (the gradient reaching this step's h, plus gout) and dc (the
 * one reaching c) give the gate gradients d and, in dc, the gradient of cp. */
TC static void S(lstm_bwd_rows)(const T *a, const T *cp, const T *c, const T *dh,
                                const T *gout, T *dc, T *d, int64_t rows, int64_t H) {
    for (int64_t r = 0; r < rows; r++) {
        const T *ai = a + r * 4 * H, *af = ai + H, *ag = af + H;
        const T *ao = ag + H, *cpr = cp + r * H, *cr = c + r * H;
        const T *dhr = dh + r * H, *gr = gout + r * H;
        T *dcr = dc + r * H, *di = d + r * 4 * H, *df = di + H;
        T *dg = df + H, *d_o = dg + H;
#pragma GCC ivdep
        for (int64_t j = 0; j < H; j++) {
            T i = ai[j], f = af[j], g = ag[j], o = ao[j];
            T tc = LSTM_TANH(cr[j]), dhj = dhr[j] + gr[j];
            T dcy = dhj * o * (1 - tc * tc) + dcr[j];
            di[j] = dcy * g * i * (1 - i);
            df[j] = dcy * cpr[j] * f * (1 - f);
            dg[j] = dcy * i * (1 - g * g);
            d_o[j] = dhj * tc * o * (1 - o);
            dcr[j] = dcy * f;
        }
    }
}

#pragma GCC pop_options

/* Forward over `steps` steps of `B` rows: xproj (steps, B, 4H) the input projections, b the
 * hidden bias (4H, zeros when there is none), wt = W_hh^T (H, 4H); writes act (steps, B, 4H)
 * the activated gates, out (steps, B, H) the hidden states, cs (steps + 1, B, H) the cell
 * states in processing order (cs[0] = c0). Step k runs time step t = k, or steps - 1 - k when
 * reverse. All C-contiguous. */
EXPORT void S(lstm_fwd)(const T *xproj, const T *b, const T *h0, const T *c0, const T *wt,
                        T *act, T *out, T *cs, int64_t steps, int64_t B, int64_t H,
                        int reverse, void *gemm, int ilp64) {
    int64_t G = 4 * H, per = B * H;
    for (int64_t r = 0; r < per; r++) cs[r] = c0[r];
    const T *h = h0;
    for (int64_t k = 0; k < steps; k++) {
        int64_t t = reverse ? steps - 1 - k : k;
        T *a = act + t * B * G;
        S(lstm_gemm)(gemm, ilp64, B, G, H, h, H, wt, G, a, G);
        const T *x = xproj + t * B * G, *cp = cs + k * per;
        T *c = cs + (k + 1) * per, *hn = out + t * per;
        S(lstm_fwd_rows)(a, x, b, cp, c, hn, B, H);
        h = hn;
    }
}

/* Backward through the steps `lstm_fwd` ran (same layout): gout (steps, B, H) the gradient
 * of out, or gout_step 0 with gout a (B, H) of zeros; dh, dc (B, H) hold the gradients of
 * h_n, c_n and end with those of h0, c0; w = W_hh (4H, H); writes dgates (steps, B, 4H), the
 * gradient of the summed gate pre-activations (= that of xproj). dh_next is scratch (B, H). */
EXPORT void S(lstm_bwd)(const T *gout, int64_t gout_step, const T *act, const T *cs,
                        const T *w, T *dh, T *dc, T *dgates, T *dh_next, int64_t steps,
                        int64_t B, int64_t H, int reverse, void *gemm, int ilp64) {
    int64_t G = 4 * H, per = B * H;
    for (int64_t k = steps - 1; k >= 0; k--) {
        int64_t t = reverse ? steps - 1 - k : k;
        const T *a = act + t * B * G, *cp = cs + k * per, *c = cs + (k + 1) * per;
        const T *g = gout + t * gout_step;
        T *d = dgates + t * B * G;
        S(lstm_bwd_rows)(a, cp, c, dh, g, dc, d, B, H);
        S(lstm_gemm)(gemm, ilp64, B, H, G, d, G, w, H, dh_next, H);
        for (int64_t r = 0; r < per; r++) dh[r] = dh_next[r];
    }
}
