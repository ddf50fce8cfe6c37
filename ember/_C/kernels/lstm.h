/* One direction of an LSTM layer over a whole sequence, forward and backward (BPTT), for the
 * `_lstm_layer` op (ember/_ops/recurrent.py). Included by kernels.c for float and double as
 * rowops.h is (T, S(name), EXP, SIGMOID defined there).
 *
 * NumPy spends ~14 passes over memory per step forward and ~27 backward on the gates'
 * pointwise maths, plus a Python frame and a dozen ufunc calls a step; here each step is one
 * product with the recurrent weight (lstm_mm_run) and one fused pass over the step's gates.
 * The recurrent weight's gradient stays one GEMM over all steps, in NumPy. Gates are in
 * torch's order (input, forget, cell, output): each row of G = 4H pre-activations is laid
 * out [i | f | g | o].
 *
 * Threads: the panels of a step's product are split over OpenMP threads (BLAS, where it
 * runs, uses its own); the pointwise pass (a few percent of the work at hidden 256) stays on
 * the calling thread.
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

/* Tests set this to run the BLAS branch of lstm_mm_run on AVX-512 machines too. */
static int lstm_force_blas_flag = 0;
EXPORT void lstm_force_blas(int on) { lstm_force_blas_flag = on; }
#endif

/* float64 takes libm's tanh (scalar, but still one pass); sizeof folds at compile time */
#undef LSTM_TANH
#define LSTM_TANH(x) (sizeof(T) == 4 ? (T)tanh_f32((float)(x)) : (T)tanh(x))

#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")

/* The per-step product out (B x N) = h (B x K) @ W (K x N), W fixed over the steps.
 *
 * NOTE: OpenBLAS packs both operands on every call, i.e. the whole weight at every step, and
 * its kernels are tuned for larger row counts than an LSTM step's batch. Packing W once into
 * NR-column panels (contiguous K x NR blocks, zero-padded) and running an 8 x NR
 * register-blocked loop over them saves both, and keeps up with torch's MKL.
 * The loop is written with 64-byte vectors (NR = two of them, 16 accumulators), which only
 * AVX-512 holds in registers: other CPUs keep calling BLAS. */
typedef T S(lstm_vec) __attribute__((vector_size(64)));
#define LSTM_NR ((int64_t)(128 / sizeof(T)))
#define LSTM_MR 8

typedef struct {
    void *gemm;           /* BLAS cblas_?gemm, when panels is NULL */
    int ilp64;
    const T *w;           /* W, row-major K x N */
    T *panels;            /* W in panels: panel p holds columns [p NR, p NR + NR), k-major */
    int64_t K, N;
} S(lstm_mm);

/* 1 if the panels loop runs here (AVX-512), 0 for BLAS, -1 if the panels cannot be had */
static int S(lstm_mm_init)(S(lstm_mm) *mm, const T *w, int64_t K, int64_t N, void *gemm,
                           int ilp64) {
    mm->gemm = gemm, mm->ilp64 = ilp64, mm->w = w, mm->K = K, mm->N = N, mm->panels = NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    if (lstm_force_blas_flag || !__builtin_cpu_supports("avx512f"))
        return 0;
    int64_t np = (N + LSTM_NR - 1) / LSTM_NR;
    mm->panels = malloc((size_t)(np * K * LSTM_NR) * sizeof(T));
    if (mm->panels == NULL)
        return -1;
    for (int64_t p = 0; p < np; p++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < LSTM_NR; j++) {
                int64_t n = p * LSTM_NR + j;
                mm->panels[(p * K + k) * LSTM_NR + j] = n < N ? w[k * N + n] : 0;
            }
    return 1;
#else
    return 0;
#endif
}

/* Panel p of out = a @ W: rows [i0, i0 + mr), mr <= MR (the accumulators of absent rows are
 * computed from row i0 again and dropped) */
TC static void S(lstm_panel)(const T *a, int64_t lda, int64_t i0, int64_t mr, const T *pw,
                             int64_t K, T *out, int64_t ldc, int64_t n0, int64_t nr) {
    typedef S(lstm_vec) V;
    const int64_t NV = LSTM_NR / 2;
    const T *rows[LSTM_MR];
    for (int i = 0; i < LSTM_MR; i++) rows[i] = a + (i0 + (i < mr ? i : 0)) * lda;
    V acc[LSTM_MR][2];
    for (int i = 0; i < LSTM_MR; i++) acc[i][0] = acc[i][1] = (V){0};
    for (int64_t k = 0; k < K; k++) {
        V b0, b1;
        memcpy(&b0, pw + k * LSTM_NR, sizeof(V));
        memcpy(&b1, pw + k * LSTM_NR + NV, sizeof(V));
#pragma GCC unroll 8
        for (int i = 0; i < LSTM_MR; i++) {
            T x = rows[i][k];
            acc[i][0] += x * b0;
            acc[i][1] += x * b1;
        }
    }
    for (int64_t i = 0; i < mr; i++) {
        T tmp[2 * (64 / sizeof(T))];
        memcpy(tmp, &acc[i][0], sizeof(V));
        memcpy(tmp + NV, &acc[i][1], sizeof(V));
        memcpy(out + (i0 + i) * ldc + n0, tmp, (size_t)nr * sizeof(T));
    }
}

/* out (M x N, leading dim ldc) = a (M x K, leading dim lda) @ W */
static void S(lstm_mm_run)(const S(lstm_mm) *mm, int64_t M, const T *a, int64_t lda, T *out,
                           int64_t ldc, int nt) {
    int64_t K = mm->K, N = mm->N;
    if (mm->panels == NULL) {
        S(blas_gemm)(mm->gemm, mm->ilp64, 111, 111, M, N, K, 1, a, lda, mm->w, N, 0, out, ldc);
        return;
    }
    int64_t np = (N + LSTM_NR - 1) / LSTM_NR;
    nt = threads_for(M * N * K / 8, nt);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t p = 0; p < np; p++) {
        int64_t n0 = p * LSTM_NR, nr = N - n0 < LSTM_NR ? N - n0 : LSTM_NR;
        for (int64_t i0 = 0; i0 < M; i0 += LSTM_MR)
            S(lstm_panel)(a, lda, i0, M - i0 < LSTM_MR ? M - i0 : LSTM_MR,
                          mm->panels + p * K * LSTM_NR, K, out, ldc, n0, nr);
    }
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

/* `_lstm_cell` (ember/_ops/recurrent.py) on rows of igates, hgates (rows, 4H) and cx (rows,
 * H), one row at a time through the rows passes above (igates copied into a scratch row, hgates
 * added as the input projection, a zero bias): ghy NULL, the forward, writes hy, cy into o1,
 * o2; else the backward writes dgates (rows, 4H) into o1 and dcx into o2 from ghy and gcy,
 * the activations recomputed. Rows over threads; -1 where the scratch cannot be had. */
EXPORT int S(lstm_cell)(const T *ig, const T *hg, const T *cx, const T *ghy, const T *gcy,
                        T *o1, T *o2, int64_t rows, int64_t H, int nt) {
    int64_t G = 4 * H;
    int fail = 0;
    nt = threads_for(rows * G * 4, nt);
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : fail)
    {
        T *a = calloc((size_t)(2 * G + 2 * H), sizeof(T)), *zero = a + G, *c = zero + G;
        fail |= a == NULL;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (a == NULL)
                continue;
            memcpy(a, ig + r * G, (size_t)G * sizeof(T));
            if (ghy == NULL) {
                S(lstm_fwd_rows)(a, hg + r * G, zero, cx + r * H, o2 + r * H, o1 + r * H, 1, H);
                continue;
            }
            S(lstm_fwd_rows)(a, hg + r * G, zero, cx + r * H, c, c + H, 1, H);
            memcpy(o2 + r * H, gcy + r * H, (size_t)H * sizeof(T));
            S(lstm_bwd_rows)(a, cx + r * H, c, ghy + r * H, zero, o2 + r * H, o1 + r * G, 1, H);
        }
        free(a);
    }
    return fail ? -1 : 0;
}

/* Forward over `steps` steps of `B` rows: xproj (steps, B, 4H) the input projections, b the
 * hidden bias (4H, zeros when there is none), wt = W_hh^T (H, 4H); writes act (steps, B, 4H)
 * the activated gates, out (steps, B, H) the hidden states, cs (steps + 1, B, H) the cell
 * states in processing order (cs[0] = c0). Step k runs time step t = k, or steps - 1 - k when
 * reverse. All C-contiguous. */
EXPORT int S(lstm_fwd)(const T *xproj, const T *b, const T *h0, const T *c0, const T *wt,
                       T *act, T *out, T *cs, int64_t steps, int64_t B, int64_t H,
                       int reverse, void *gemm, int ilp64, int nt) {
    int64_t G = 4 * H, per = B * H;
    S(lstm_mm) mm;
    if (S(lstm_mm_init)(&mm, wt, H, G, gemm, ilp64) < 0)
        return -1;
    for (int64_t r = 0; r < per; r++) cs[r] = c0[r];
    const T *h = h0;
    for (int64_t k = 0; k < steps; k++) {
        int64_t t = reverse ? steps - 1 - k : k;
        T *a = act + t * B * G;
        S(lstm_mm_run)(&mm, B, h, H, a, G, nt);
        const T *x = xproj + t * B * G, *cp = cs + k * per;
        T *c = cs + (k + 1) * per, *hn = out + t * per;
        S(lstm_fwd_rows)(a, x, b, cp, c, hn, B, H);
        h = hn;
    }
    free(mm.panels);
    return 0;
}

/* Backward through the steps `lstm_fwd` ran (same layout): gout (steps, B, H) the gradient
 * of out, or gout_step 0 with gout a (B, H) of zeros; dh, dc (B, H) hold the gradients of
 * h_n, c_n and end with those of h0, c0; w = W_hh (4H, H); writes dgates (steps, B, 4H), the
 * gradient of the summed gate pre-activations (= that of xproj). dh_next is scratch (B, H). */
EXPORT int S(lstm_bwd)(const T *gout, int64_t gout_step, const T *act, const T *cs,
                       const T *w, T *dh, T *dc, T *dgates, T *dh_next, int64_t steps,
                       int64_t B, int64_t H, int reverse, void *gemm, int ilp64, int nt) {
    int64_t G = 4 * H, per = B * H;
    S(lstm_mm) mm;
    if (S(lstm_mm_init)(&mm, w, G, H, gemm, ilp64) < 0)
        return -1;
    for (int64_t k = steps - 1; k >= 0; k--) {
        int64_t t = reverse ? steps - 1 - k : k;
        const T *a = act + t * B * G, *cp = cs + k * per, *c = cs + (k + 1) * per;
        const T *g = gout + t * gout_step;
        T *d = dgates + t * B * G;
        S(lstm_bwd_rows)(a, cp, c, dh, g, dc, d, B, H);
        S(lstm_mm_run)(&mm, B, d, G, dh_next, H, nt);
        for (int64_t r = 0; r < per; r++) dh[r] = dh_next[r];
    }
    free(mm.panels);
    return 0;
}
