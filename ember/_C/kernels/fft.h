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
#define FFT_MAXP 61

static int fft_factors(int64_t n, int *f) {
    int k = 0;
    for (; n % 4 == 0; n /= 4) f[k++] = 4;
    for (int p = 2; n > 1; p += 1 + (p > 2)) {
        if (p > FFT_MAXP) return -1;
        for (; n % p == 0; n /= p) f[k++] = p;
    }
    return k;
}

/* group j of fft_pass's radix-p pass, the runs' samples [c0, c0 + qn) */
TC static void fft_group(int p, int64_t s, int64_t m, int64_t j, int64_t c0, int64_t qn,
                         const float *restrict xr, const float *restrict xi,
                         float *restrict yr, float *restrict yi, const float *w, int64_t step,
                         float sg, const float *dr, const float *di) {
    float twr[FFT_MAXP], twi[FFT_MAXP];
    for (int t = 0; t < p; t++) {
        int64_t k = j * t * step;              /* < m p step = N */
        twr[t] = w[2 * k], twi[t] = sg * w[2 * k + 1];
    }
    const float *restrict ar = xr + s * j + c0, *restrict ai = xi + s * j + c0;
    float *restrict br = yr + s * p * j + c0, *restrict bi = yi + s * p * j + c0;
    int64_t sm = s * m;
    if (p == 4) {
        #pragma omp simd
        for (int64_t q = 0; q < qn; q++) {
            float r0 = ar[q], i0 = ai[q], r1 = ar[q + sm], i1 = ai[q + sm];
            float r2 = ar[q + 2 * sm], i2 = ai[q + 2 * sm];
            float r3 = ar[q + 3 * sm], i3 = ai[q + 3 * sm];
            float ur = r0 + r2, ui = i0 + i2, vr = r0 - r2, vi = i0 - i2;
            float cr = r1 + r3, ci = i1 + i3, dr = sg * (i1 - i3), di = sg * (r3 - r1);
            float or1 = vr + dr, oi1 = vi + di, or2 = ur - cr, oi2 = ui - ci;
            float or3 = vr - dr, oi3 = vi - di;
            br[q] = ur + cr, bi[q] = ui + ci, br[q + s] = or1, bi[q + s] = oi1;
            br[q + 2 * s] = or2, bi[q + 2 * s] = oi2, br[q + 3 * s] = or3, bi[q + 3 * s] = oi3;
        }
    } else if (p == 2) {
        #pragma omp simd
        for (int64_t q = 0; q < qn; q++) {
            float r0 = ar[q], i0 = ai[q], r1 = ar[q + sm], i1 = ai[q + sm];
            float dr = r0 - r1, di = i0 - i1;
            br[q] = r0 + r1, bi[q] = i0 + i1, br[q + s] = dr, bi[q + s] = di;
        }
    } else {          /* odd p: the p-point DFT directly, 16 samples of the p runs at a time,
                         outputs t and p - t from the runs' sums and differences x_r +- x_{p-r}
                         (as pocketfft's: a quarter of the multiplies) */
        int h = p / 2;
        for (int64_t q0 = 0; q0 < qn; q0 += 16) {
            int64_t L = qn - q0 < 16 ? qn - q0 : 16;
            const float *restrict xr = ar + q0, *restrict xi = ai + q0;
            float ur[FFT_MAXP / 2][16], ui[FFT_MAXP / 2][16], vr[FFT_MAXP / 2][16],
                vi[FFT_MAXP / 2][16], y0r[16], y0i[16];
            for (int r = 1; r <= h; r++) {
                const float *restrict ir = xr + sm * r, *restrict ii = xi + sm * r;
                const float *restrict jr = xr + sm * (p - r), *restrict ji = xi + sm * (p - r);
                #pragma omp simd
                for (int64_t q = 0; q < L; q++) {
                    ur[r - 1][q] = ir[q] + jr[q], ui[r - 1][q] = ii[q] + ji[q];
                    vr[r - 1][q] = ir[q] - jr[q], vi[r - 1][q] = ii[q] - ji[q];
                    y0r[q] = (r == 1 ? xr[q] : y0r[q]) + ur[r - 1][q];
                    y0i[q] = (r == 1 ? xi[q] : y0i[q]) + ui[r - 1][q];
                }
            }
            for (int t = 1; t <= h; t++) {
                float sr[16], si[16], er[16], ei[16];
                for (int r = 1; r <= h; r++) {
                    float cr = dr[t * p + r], ci = di[t * p + r];
                    #pragma omp simd
                    for (int64_t q = 0; q < L; q++) {
                        sr[q] = (r == 1 ? xr[q] : sr[q]) + ur[r - 1][q] * cr;
                        si[q] = (r == 1 ? xi[q] : si[q]) + ui[r - 1][q] * cr;
                        er[q] = (r == 1 ? 0.f : er[q]) + vr[r - 1][q] * ci;
                        ei[q] = (r == 1 ? 0.f : ei[q]) + vi[r - 1][q] * ci;
                    }
                }
                float *restrict or_ = br + s * t + q0, *restrict oi = bi + s * t + q0;
                float *restrict pr = br + s * (p - t) + q0, *restrict pi = bi + s * (p - t) + q0;
                #pragma omp simd
                for (int64_t q = 0; q < L; q++) {
                    or_[q] = sr[q] - ei[q], oi[q] = si[q] + er[q];
                    pr[q] = sr[q] + ei[q], pi[q] = si[q] - er[q];
                }
            }
            #pragma omp simd
            for (int64_t q = 0; q < L; q++)
                br[q0 + q] = y0r[q], bi[q0 + q] = y0i[q];
        }
    }
    /* the twiddles, none for group 0 (as pocketfft: an inf stays inf, not inf * 0) */
    for (int t = 1; t < p && j; t++) {
        float *restrict orr = br + s * t, *restrict oi = bi + s * t, c = twr[t], d = twi[t];
        #pragma omp simd
        for (int64_t q = 0; q < qn; q++) {
            float vr = orr[q], vi = oi[q];
            orr[q] = vr * c - vi * d, oi[q] = vr * d + vi * c;
        }
    }
}

/* One pass of radix p: m = n / p; for each group j and each output t,
 * y[s (p j + t) + q] = W_n^{j t} sum_r W_p^{r t} x[s (j + r m) + q], q < s (s floats a run);
 * nt > 1 (one long line): the groups, and runs of 512 of a long run, split over threads. */
TC static void fft_pass(int p, int64_t n, int64_t s, const float *restrict xr,
                        const float *restrict xi, float *restrict yr, float *restrict yi,
                        const float *w, int64_t N, float sg, int nt) {
    int64_t m = n / p, np_ = N / p, qc = nt > 1 && s > 1024 ? 512 : s, nq = (s + qc - 1) / qc;
    float *dr = malloc(sizeof(float) * 2 * p * p), *di = dr + p * p;     /* W_p^{r t}, odd p */
    for (int t = 0; t < p && p & 1; t++)
        for (int r = 0; r < p; r++) {
            int64_t k = (r * t) % p * np_;
            dr[t * p + r] = w[2 * k], di[t * p + r] = sg * w[2 * k + 1];
        }
    THREADED_FOR(nt, m * nq, 1, fft_group(p, s, m, i / nq, i % nq * qc, s - i % nq * qc < qc ?
                 s - i % nq * qc : qc, xr, xi, yr, yi, w, N / n, sg, dr, di));
    free(dr);
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
        float *xr = buf, *xi = buf + n * B, *yr = buf + 2 * n * B, *yi = buf + 3 * n * B;
        for (int64_t b = 0; b < nb; b++)
            base[b] = ((l0 + b) / inner * nin * inner + (l0 + b) % inner) * 2;
        if (real && sg < 0)
            FFT_EACH(1, B, const float *a = x + base[b < nb ? b : 0]; int64_t k = 2 * (N - j);
                     float er = a[2 * j] + a[k], ei = j ? a[2 * j + 1] - a[k + 1] : 0.f,
                     dr = a[2 * j] - a[k], di = j ? a[2 * j + 1] + a[k + 1] : 0.f,
                     or_ = dr * w[2 * j] + di * w[2 * j + 1],
                     oi = di * w[2 * j] - dr * w[2 * j + 1];
                     xr[j * B + b] = b < nb ? er - oi : 0.f; xi[j * B + b] = b < nb ? ei + or_ : 0.f)
        else
            FFT_EACH(inner, B, int in = b < nb && j < nc;
                     xr[j * B + b] = in ? x[base[b] + j * inner * 2] : 0.f;
                     xi[j * B + b] = in ? x[base[b] + j * inner * 2 + 1] : 0.f);
        int64_t len = n, s = B;
        for (int k = 0; k < nf; len /= f[k], s *= f[k], k++) {
            fft_pass(f[k], len, s, xr, xi, yr, yi, w, n << real, sg, nt);
            float *tr = xr, *ti = xi;
            xr = yr, xi = yi, yr = tr, yi = ti;
        }
        for (int64_t b = 0; b < nb; b++)
            base[b] = ((l0 + b) / inner * nout * inner + (l0 + b) % inner) * 2;
        if (real && sg > 0) {
            n = N + 1;
            FFT_EACH(1, nb, int64_t k = (j ? N - j : 0) * B + b, i = (j < N ? j : 0) * B + b;
                     float er = xr[i] + xr[k], ei = xi[i] - xi[k], or_ = xi[i] + xi[k],
                     oi = xr[k] - xr[i], wr = w[2 * j], wi = w[2 * j + 1];
                     float vr = (er + or_ * wr - oi * wi) * sc * 0.5f;
                     float vi = j % N ? (ei + or_ * wi + oi * wr) * sc * 0.5f : 0.f;
                     y[base[b] + 2 * j] = vr; y[base[b] + 2 * j + 1] = vi;
                     bad |= vr - vr != 0.f || vi - vi != 0.f);
            n = N;
        } else
            FFT_EACH(inner, nb, y[base[b] + j * inner * 2] = xr[j * B + b] * sc;
                     y[base[b] + j * inner * 2 + 1] = xi[j * B + b] * sc);
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
