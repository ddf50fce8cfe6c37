/* fft.h: complex float32 FFTs along one axis of a batch (ember/_ops/fft.py's forwards).
 *
 * Mixed-radix Stockham (self-sorting, no bit reversal): radices 4, 2, then odd primes up to
 * FFT_MAXP (a larger prime factor: the caller's Bluestein convolution or pocketfft). Up to
 * FFT_B lines are gathered into split re/im planes as [sample][line], so every butterfly's innermost loop
 * runs contiguously across the lines (and, after the first pass, across the sub-transforms
 * already done): the loops vectorise whatever the radix, and a non-last axis is gathered
 * straight from its strided rows. Blocks of lines are split over threads. The twiddles
 * W_n^k = exp(-2 pi i k / n) come from the caller (computed once in double, then rounded).
 */
#define FFT_B 16
#define FFT_MAXP 251

static int fft_factors(int64_t n, int *f) {
    int k = 0;
    for (; n % 4 == 0; n /= 4) f[k++] = 4;
    for (int p = 2; n > 1; p += 1 + (p > 2)) {
        if (p > FFT_MAXP) return -1;
        for (; n % p == 0; n /= p) f[k++] = p;
    }
    return k;
}

typedef float fft_v __attribute__((vector_size(32)));
typedef float fft_uv __attribute__((vector_size(32), aligned(4)));
#define FFT_LD(p) (*(const fft_uv *)(p))
#define FFT_ST(p, v) (*(fft_uv *)(p) = (v))

/* 8 samples of the p runs (p odd, sm floats apart) of a radix-p group: the p-point DFT
 * directly, outputs t and p - t together from the runs' sums and differences x_r +- x_{p-r}
 * (as pocketfft's: a quarter of the multiplies), twiddled by tr + i ti unless group 0; c + i d:
 * W_p^k, k < p. In vectors of 8, so the accumulators stay in registers whatever p is. */
CLONE_INLINE void fft_odd8(int p, const float *ar, const float *ai, int64_t sm, float *br,
                        float *bi, int64_t s, const float *c, const float *d, const float *tr,
                        const float *ti, int tw) {
    int h = p / 2;
    fft_v ur[FFT_MAXP / 2], ui[FFT_MAXP / 2], vr[FFT_MAXP / 2], vi[FFT_MAXP / 2];
    fft_v x0r = FFT_LD(ar), x0i = FFT_LD(ai), y0r = x0r, y0i = x0i;
    for (int r = 1; r <= h; r++) {
        fft_v a = FFT_LD(ar + sm * r), b = FFT_LD(ar + sm * (p - r));
        fft_v e = FFT_LD(ai + sm * r), f = FFT_LD(ai + sm * (p - r));
        ur[r - 1] = a + b, vr[r - 1] = a - b, ui[r - 1] = e + f, vi[r - 1] = e - f;
        y0r += ur[r - 1], y0i += ui[r - 1];
    }
    FFT_ST(br, y0r), FFT_ST(bi, y0i);
#define FFT_ODD_OUT(t, vr_, vi_)                                                              \
    { fft_v o_r = vr_, o_i = vi_;                                                             \
      FFT_ST(br + s * (t), tw ? o_r * tr[t] - o_i * ti[t] : o_r);                             \
      FFT_ST(bi + s * (t), tw ? o_r * ti[t] + o_i * tr[t] : o_i); }
    /* two outputs (and their partners) at a time: eight independent sums hide the FMA latency */
    for (int t = 1; t <= h; t += 2) {
        int u = t < h ? t + 1 : t;
        fft_v sr = x0r, si = x0i, er = {0}, ei = {0}, Sr = x0r, Si = x0i, Er = {0}, Ei = {0};
        for (int r = 1, k = t, l = u; r <= h; r++) {
            sr += ur[r - 1] * c[k], si += ui[r - 1] * c[k];
            er += vr[r - 1] * d[k], ei += vi[r - 1] * d[k];
            Sr += ur[r - 1] * c[l], Si += ui[r - 1] * c[l];
            Er += vr[r - 1] * d[l], Ei += vi[r - 1] * d[l];
            k = k + t < p ? k + t : k + t - p, l = l + u < p ? l + u : l + u - p;
        }
        FFT_ODD_OUT(t, sr - ei, si + er) FFT_ODD_OUT(p - t, sr + ei, si - er)
        FFT_ODD_OUT(u, Sr - Ei, Si + Er) FFT_ODD_OUT(p - u, Sr + Ei, Si - Er)
    }
#undef FFT_ODD_OUT
}

/* group j of fft_pass's radix-p pass, the runs' samples [c0, c0 + qn); the twiddles as each
 * output is stored, none for group 0 (as pocketfft: an inf stays inf, not inf * 0) */
TC static void fft_group(int p, int64_t s, int64_t m, int64_t j, int64_t c0, int64_t qn,
                         const float *restrict xr, const float *restrict xi,
                         float *restrict yr, float *restrict yi, const float *w, int64_t step,
                         float sg, const float *dc, const float *dd) {
    float twr[FFT_MAXP], twi[FFT_MAXP];
    for (int t = 0; t < p; t++) {
        int64_t k = j * t * step;              /* < m p step = N */
        twr[t] = w[2 * k], twi[t] = sg * w[2 * k + 1];
    }
    const float *restrict ar = xr + s * j + c0, *restrict ai = xi + s * j + c0;
    float *restrict br = yr + s * p * j + c0, *restrict bi = yi + s * p * j + c0;
    int64_t sm = s * m;
#define FFT_OUT(t, vr_, vi_)                                                                  \
    { float o_r = vr_, o_i = vi_;                                                             \
      br[q + s * t] = j ? o_r * twr[t] - o_i * twi[t] : o_r;                                  \
      bi[q + s * t] = j ? o_r * twi[t] + o_i * twr[t] : o_i; }
    if (p == 4) {
        #pragma omp simd
        for (int64_t q = 0; q < qn; q++) {
            float r0 = ar[q], i0 = ai[q], r1 = ar[q + sm], i1 = ai[q + sm];
            float r2 = ar[q + 2 * sm], i2 = ai[q + 2 * sm];
            float r3 = ar[q + 3 * sm], i3 = ai[q + 3 * sm];
            float ur = r0 + r2, ui = i0 + i2, vr = r0 - r2, vi = i0 - i2;
            float cr = r1 + r3, ci = i1 + i3, dr = sg * (i1 - i3), di = sg * (r3 - r1);
            br[q] = ur + cr, bi[q] = ui + ci;
            FFT_OUT(1, vr + dr, vi + di) FFT_OUT(2, ur - cr, ui - ci) FFT_OUT(3, vr - dr, vi - di)
        }
    } else if (p == 2) {
        #pragma omp simd
        for (int64_t q = 0; q < qn; q++) {
            float r0 = ar[q], i0 = ai[q], r1 = ar[q + sm], i1 = ai[q + sm];
            br[q] = r0 + r1, bi[q] = i0 + i1;
            FFT_OUT(1, r0 - r1, i0 - i1)
        }
    } else {
        int64_t q0 = 0;
        /* (3, 5, 7 inlined with p constant: their loops unrolled, ~40% fewer instructions) */
#define FFT_ODD(P) for (; q0 + 8 <= qn; q0 += 8)                                              \
            fft_odd8(P, ar + q0, ai + q0, sm, br + q0, bi + q0, s, dc, dd, twr, twi, j != 0);
        if (p == 3) FFT_ODD(3) else if (p == 5) FFT_ODD(5) else if (p == 7) FFT_ODD(7)
        else FFT_ODD(p)
#undef FFT_ODD
        if (q0 < qn) {                 /* a partial vector: through zero-padded copies */
            fft_v a[2][FFT_MAXP], b[2][FFT_MAXP];
            int r = 0;
            do {                       /* (do: the compiler sees a written before use) */
                a[0][r] = a[1][r] = (fft_v){0};
                for (int64_t q = q0; q < qn; q++)
                    a[0][r][q - q0] = ar[q + sm * r], a[1][r][q - q0] = ai[q + sm * r];
            } while (++r < p);
            fft_odd8(p, (float *)a[0], (float *)a[1], 8, (float *)b[0], (float *)b[1], 8, dc,
                     dd, twr, twi, j != 0);
            for (int t = 0; t < p; t++)
                for (int64_t q = q0; q < qn; q++)
                    br[q + s * t] = b[0][t][q - q0], bi[q + s * t] = b[1][t][q - q0];
        }
    }
#undef FFT_OUT
}

/* One pass of radix p: m = n / p; for each group j and each output t,
 * y[s (p j + t) + q] = W_n^{j t} sum_r W_p^{r t} x[s (j + r m) + q], q < s (s floats a run);
 * nt > 1 (one long line): the groups, and runs of 512 of a long run, split over threads. */
TC static void fft_pass(int p, int64_t n, int64_t s, const float *restrict xr,
                        const float *restrict xi, float *restrict yr, float *restrict yi,
                        const float *w, int64_t N, float sg, int nt) {
    int64_t m = n / p, np_ = N / p, qc = nt > 1 && s > 1024 ? 512 : s, nq = (s + qc - 1) / qc;
    float dc[FFT_MAXP], dd[FFT_MAXP];                                    /* W_p^k, odd p */
    for (int k = 0; k < p; k++)
        dc[k] = w[2 * k * np_], dd[k] = sg * w[2 * k * np_ + 1];
    THREADED_FOR(nt, m * nq, 1, fft_group(p, s, m, i / nq, i % nq * qc, s - i % nq * qc < qc ?
                 s - i % nq * qc : qc, xr, xi, yr, yi, w, N / n, sg, dc, dd));
}

/* body for the samples j < n of lines b < nb of a block in the order memory likes: contiguous
 * lines (step 1) 16 samples a line at a time (16 lines a power of two apart evict each other
 * from L1 when read sample by sample), strided lines (which sit side by side) sample-major */
#define FFT_EACH(step, nb, ...)                                                              \
    if (step == 1)                                                                            \
        for (int64_t j0 = 0; j0 < n; j0 += 16)                                                \
            for (int64_t b = 0; b < nb; b++)                                                  \
                for (int64_t j = j0; j < (j0 + 16 < n ? j0 + 16 : n); j++) { __VA_ARGS__; }   \
    else                                                                                      \
        for (int64_t j = 0; j < n; j++)                                                       \
            for (int64_t b = 0; b < nb; b++) { __VA_ARGS__; }

/* y[o, :, i] = scale * DFT_n(x[o, :, i] zero-padded or cut from nin to n), complex64 arrays of
 * shapes (outer, nin, inner) and (outer, n, inner), lines [l0, l1) of outer * inner, in blocks
 * of B; inverse: sg = -1 (W conjugated). real (inner 1, w W_2n, no padding): a real transform of
 * 2n points as an n-point c2c: r2c, x the real lines viewed as n complex (even and odd samples)
 * and y n + 1 bins, split as X_k = E_k + W_2n^k O_k (bins 0 and n real, as pocketfft's: the
 * rounded W_2n^n would leave ~1e-16 i); c2r, x n + 1 bins merged into
 * Z_k = E_k + i O_k (the imaginary parts of bins 0 and n dropped, as pocketfft), y 2n reals. */
static int fft_lines(const float *x, float *y, int64_t l0, int64_t l1, int64_t B, int64_t nin,
                      int64_t n, int64_t inner, const float *w, const int *f, int nf, float sg,
                      float sc, int real, int nt) {
    float *buf = malloc(sizeof(float) * 4 * n * B);
    int64_t base[FFT_B], nc = nin < n ? nin : n, N = n, nout = n + (real && sg > 0);
    int bad = 0;
    for (; l0 < l1; l0 += B) {
        int64_t nb = l1 - l0 < B ? l1 - l0 : B;
        int run = nb == B && inner > 1 && l0 % inner + B <= inner;      /* side by side */
        float *xr = buf, *xi = buf + n * B, *yr = buf + 2 * n * B, *yi = buf + 3 * n * B;
        for (int64_t b = 0; b < nb; b++)
            base[b] = ((l0 + b) / inner * nin * inner + (l0 + b) % inner) * 2;
        if (inner == 1 && nb == B && nc == n)  /* whole contiguous lines (the branch-free
                                        * FFT_EACH(1, ...): a third of its instructions) */
            for (int64_t j0 = 0; j0 < n; j0 += 16)
                for (int64_t b = 0, e = j0 + 16 < n ? j0 + 16 : n; b < B; b++)
                    for (int64_t j = j0; j < e; j++)
                        xr[j * B + b] = x[base[b] + 2 * j], xi[j * B + b] = x[base[b] + 2 * j + 1];
        else if (run)                  /* B side by side columns: contiguous, vectorised */
            for (int64_t j = 0; j < n; j++)
                for (int64_t b = 0; b < B; b++)
                    xr[j * B + b] = j < nc ? x[base[0] + j * inner * 2 + 2 * b] : 0.f,
                    xi[j * B + b] = j < nc ? x[base[0] + j * inner * 2 + 2 * b + 1] : 0.f;
        else
            FFT_EACH(inner, B, int in = b < nb && j < nc;
                     xr[j * B + b] = in ? x[base[b] + j * inner * 2] : 0.f;
                     xi[j * B + b] = in ? x[base[b] + j * inner * 2 + 1] : 0.f);
        if (real && sg < 0) {          /* the merge in place across the lines: Z_j and Z_{N-j}
                                        * from bins j and N - j (bin N's real part read here) */
            for (int64_t b = 0; b < B; b++) {
                float a0 = xr[b], an = b < nb ? x[base[b] + 2 * N] : 0.f, dr = a0 - an;
                xr[b] = a0 + an - (0.f * w[0] - dr * w[1]), xi[b] = dr * w[0] + 0.f * w[1];
            }
            for (int64_t j = 1; j <= N / 2; j++) {
                int64_t k = N - j;
                float wr = w[2 * j], wi = w[2 * j + 1], ur = w[2 * k], ui = w[2 * k + 1];
                for (int64_t b = 0; b < B; b++) {
                    float ar = xr[j * B + b], ai = xi[j * B + b], cr = xr[k * B + b];
                    float ci = xi[k * B + b], er = ar + cr, ei = ai - ci, dr = ar - cr, di = ai + ci;
                    xr[j * B + b] = er - (di * wr - dr * wi), xi[j * B + b] = ei + (dr * wr + di * wi);
                    xr[k * B + b] = er - (di * ur + dr * ui), xi[k * B + b] = di * ui - dr * ur - ei;
                }
            }
        }
        int64_t len = n, s = B;
        for (int k = 0; k < nf; len /= f[k], s *= f[k], k++) {
            fft_pass(f[k], len, s, xr, xi, yr, yi, w, n << real, sg, nt);
            float *tr = xr, *ti = xi;
            xr = yr, xi = yi, yr = tr, yi = ti;
        }
        for (int64_t b = 0; b < nb; b++)
            base[b] = ((l0 + b) / inner * nout * inner + (l0 + b) % inner) * 2;
        float sy = sc, h = sc * 0.5f;
        if (real && sg > 0) {          /* the split in place across the block's lines (vector
                                        * loops): bins 0 and N (real) from Z_0, the bins j and
                                        * N - j from Z_j and Z_{N-j} */
            for (int64_t b = 0; b < nb; b++) {
                float er = xr[b] + xr[b], or_ = xi[b] + xi[b], oi = xr[b] - xr[b];
                float v0 = (er + or_ * w[0] - oi * w[1]) * h;
                float vn = (er + or_ * w[2 * N] - oi * w[2 * N + 1]) * h;
                y[base[b] + 2 * N] = vn, y[base[b] + 2 * N + 1] = xi[b] = 0.f, xr[b] = v0;
                bad |= vn - vn != 0.f || v0 - v0 != 0.f;
            }
            for (int64_t j = 1; j <= N / 2; j++) {
                int64_t k = N - j;
                float wr = w[2 * j], wi = w[2 * j + 1], ur = w[2 * k], ui = w[2 * k + 1];
                for (int64_t b = 0; b < B; b++) {
                    float ar = xr[j * B + b], ai = xi[j * B + b], cr = xr[k * B + b];
                    float ci = xi[k * B + b], er = ar + cr, ei = ai - ci, or_ = ai + ci, oi = cr - ar;
                    float vr = (er + or_ * ur + oi * ui) * h, vi = (or_ * ui - ei - oi * ur) * h;
                    float Vr = (er + or_ * wr - oi * wi) * h, Vi = (ei + or_ * wi + oi * wr) * h;
                    xr[k * B + b] = vr, xi[k * B + b] = vi, xr[j * B + b] = Vr, xi[j * B + b] = Vi;
                    bad |= vr - vr != 0.f || vi - vi != 0.f || Vr - Vr != 0.f || Vi - Vi != 0.f;
                }
            }
            sy = 1.f;
        }
        if (inner == 1 && nb == B)
            for (int64_t j0 = 0; j0 < n; j0 += 16)
                for (int64_t b = 0, e = j0 + 16 < n ? j0 + 16 : n; b < B; b++)
                    for (int64_t j = j0; j < e; j++)
                        y[base[b] + 2 * j] = xr[j * B + b] * sy,
                        y[base[b] + 2 * j + 1] = xi[j * B + b] * sy;
        else if (run)
            for (int64_t j = 0; j < n; j++)
                for (int64_t b = 0; b < B; b++)
                    y[base[0] + j * inner * 2 + 2 * b] = xr[j * B + b] * sc,
                    y[base[0] + j * inner * 2 + 2 * b + 1] = xi[j * B + b] * sc;
        else
            FFT_EACH(inner, nb, y[base[b] + j * inner * 2] = xr[j * B + b] * sy;
                     y[base[b] + j * inner * 2 + 1] = xi[j * B + b] * sy);
    }
    free(buf);
    return bad;
}

/* fft_lines over all outer * inner lines, blocks split over threads; mode: 1 inverse, 2 real
 * (fft_lines' r2c, or c2r when inverse), 4 no passes (real's split or merge alone, around the
 * caller's Bluestein); -1: n has a prime factor above FFT_MAXP (the caller runs NumPy's); 1: an
 * r2c split gave an inf or a NaN (the split mixes bins where an inf may stand alone, and
 * overflows near FLT_MAX: the caller redoes it as a c2c) */
EXPORT int fft_c2c_f32(const float *x, float *y, int64_t outer, int64_t nin, int64_t n,
                       int64_t inner, const float *w, int mode, double scale, int nt) {
    int f[64], nf = mode & 4 ? 0 : fft_factors(n, f);
    if (nf < 0) return -1;
    int64_t lines = outer * inner, B = lines < FFT_B ? lines : FFT_B;
    while (B > 1 && n * B > (1 << 18)) B /= 2;
    int64_t blocks = (lines + B - 1) / B;
    nt = threads_for(lines * n * 4, nt);
    int pass_nt = blocks < nt ? nt : 1;               /* fewer blocks than threads: split passes */
    nt = blocks < nt ? 1 : nt;
    int64_t per = (blocks + nt - 1) / nt * B;         /* lines a thread (one buffer each) */
    float sg = mode & 1 ? -1.f : 1.f, sc = (float)scale;
    int bad = 0;
    THREADED_FOR(nt, nt, 1, if (fft_lines(x, y, i * per, (i + 1) * per < lines ? (i + 1) * per :
                 lines, B, nin, n, inner, w, f, nf, sg, sc, mode >> 1 & 1, pass_nt)) {
                     _Pragma("omp atomic write") bad = 1; });
    return bad;
}
