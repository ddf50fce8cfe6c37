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

/* One pass of radix p: m = n / p; for each group j and each output t,
 * y[s (p j + t) + q] = W_n^{j t} sum_r W_p^{r t} x[s (j + r m) + q], q < s (s floats a run). */
TC static void fft_pass(int p, int64_t n, int64_t s, const float *restrict xr,
                        const float *restrict xi, float *restrict yr, float *restrict yi,
                        const float *w, int64_t N, float sg) {
    int64_t m = n / p, step = N / n, np_ = N / p;
    float *dr = malloc(sizeof(float) * 2 * p * p), *di = dr + p * p;     /* W_p^{r t}, odd p */
    for (int t = 0; t < p && p & 1; t++)
        for (int r = 0; r < p; r++) {
            int64_t k = (r * t) % p * np_;
            dr[t * p + r] = w[2 * k], di[t * p + r] = sg * w[2 * k + 1];
        }
    for (int64_t j = 0; j < m; j++) {
        float twr[FFT_MAXP], twi[FFT_MAXP];
        for (int t = 0; t < p; t++) {
            int64_t k = j * t * step;              /* < m p step = N */
            twr[t] = w[2 * k], twi[t] = sg * w[2 * k + 1];
        }
        const float *restrict ar = xr + s * j, *restrict ai = xi + s * j;
        float *restrict br = yr + s * p * j, *restrict bi = yi + s * p * j;
        int64_t sm = s * m;
        if (p == 4) {
            #pragma omp simd
            for (int64_t q = 0; q < s; q++) {
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
            for (int64_t q = 0; q < s; q++) {
                float r0 = ar[q], i0 = ai[q], r1 = ar[q + sm], i1 = ai[q + sm];
                float dr = r0 - r1, di = i0 - i1;
                br[q] = r0 + r1, bi[q] = i0 + i1, br[q + s] = dr, bi[q + s] = di;
            }
        } else {          /* odd p: the p-point DFT directly, 16 samples of the p runs at a time
                             (no plain copy loop: gcc makes those small rep-movs memcpys) */
            for (int64_t q0 = 0; q0 < s; q0 += 16) {
                int64_t L = s - q0 < 16 ? s - q0 : 16;
                const float *restrict xr = ar + q0, *restrict xi = ai + q0;
                float sr[16], si[16];
                for (int t = 0; t < p; t++) {
                    #pragma omp simd
                    for (int64_t q = 0; q < L; q++) {
                        sr[q] = xr[q] + xr[q + sm] * dr[t * p + 1] - xi[q + sm] * di[t * p + 1];
                        si[q] = xi[q] + xr[q + sm] * di[t * p + 1] + xi[q + sm] * dr[t * p + 1];
                    }
                    for (int r = 2; r < p - 1; r++) {
                        float cr = dr[t * p + r], ci = di[t * p + r];
                        #pragma omp simd
                        for (int64_t q = 0; q < L; q++) {
                            sr[q] += xr[q + sm * r] * cr - xi[q + sm * r] * ci;
                            si[q] += xr[q + sm * r] * ci + xi[q + sm * r] * cr;
                        }
                    }
                    float cr = dr[t * p + p - 1], ci = di[t * p + p - 1];
                    const float *restrict lr = xr + sm * (p - 1), *restrict li = xi + sm * (p - 1);
                    #pragma omp simd
                    for (int64_t q = 0; q < L; q++) {
                        br[s * t + q0 + q] = sr[q] + lr[q] * cr - li[q] * ci;
                        bi[s * t + q0 + q] = si[q] + lr[q] * ci + li[q] * cr;
                    }
                }
            }
        }
        /* the twiddles, none for group 0 (as pocketfft: an inf stays inf, not inf * 0) */
        for (int t = 1; t < p && j; t++) {
            float *restrict orr = br + s * t, *restrict oi = bi + s * t, c = twr[t], d = twi[t];
            #pragma omp simd
            for (int64_t q = 0; q < s; q++) {
                float vr = orr[q], vi = oi[q];
                orr[q] = vr * c - vi * d, oi[q] = vr * d + vi * c;
            }
        }
    }
    free(dr);
}

/* body for the samples j < n of lines b < nb of a block in the order memory likes: contiguous
 * lines (step 1) 16 samples a line at a time (16 lines a power of two apart evict each other
 * from L1 when read sample by sample), strided lines (which sit side by side) sample-major */
#define FFT_EACH(step, nb, body)                                                              \
    if (step == 1)                                                                            \
        for (int64_t j0 = 0; j0 < n; j0 += 16)                                                \
            for (int64_t b = 0; b < nb; b++)                                                  \
                for (int64_t j = j0; j < (j0 + 16 < n ? j0 + 16 : n); j++) { body; }          \
    else                                                                                      \
        for (int64_t j = 0; j < n; j++)                                                       \
            for (int64_t b = 0; b < nb; b++) { body; }

/* y[o, :, i] = scale * DFT_n(x[o, :, i] zero-padded or cut from nin to n), complex64 arrays of
 * shapes (outer, nin, inner) and (outer, n, inner), lines [l0, l1) of outer * inner, in blocks
 * of B; inverse: sg = -1 (W conjugated). */
static void fft_lines(const float *x, float *y, int64_t l0, int64_t l1, int64_t B, int64_t nin,
                      int64_t n, int64_t inner, const float *w, const int *f, int nf, float sg,
                      float sc) {
    float *buf = malloc(sizeof(float) * 4 * n * B);
    int64_t base[FFT_B], nc = nin < n ? nin : n;
    for (; l0 < l1; l0 += B) {
        int64_t nb = l1 - l0 < B ? l1 - l0 : B;
        float *xr = buf, *xi = buf + n * B, *yr = buf + 2 * n * B, *yi = buf + 3 * n * B;
        for (int64_t b = 0; b < nb; b++)
            base[b] = ((l0 + b) / inner * nin * inner + (l0 + b) % inner) * 2;
        FFT_EACH(inner, B, int in = b < nb && j < nc;
                 xr[j * B + b] = in ? x[base[b] + j * inner * 2] : 0.f;
                 xi[j * B + b] = in ? x[base[b] + j * inner * 2 + 1] : 0.f);
        int64_t len = n, s = B;
        for (int k = 0; k < nf; len /= f[k], s *= f[k], k++) {
            fft_pass(f[k], len, s, xr, xi, yr, yi, w, n, sg);
            float *tr = xr, *ti = xi;
            xr = yr, xi = yi, yr = tr, yi = ti;
        }
        for (int64_t b = 0; b < nb; b++)
            base[b] = ((l0 + b) / inner * n * inner + (l0 + b) % inner) * 2;
        FFT_EACH(inner, nb, y[base[b] + j * inner * 2] = xr[j * B + b] * sc;
                 y[base[b] + j * inner * 2 + 1] = xi[j * B + b] * sc);
    }
    free(buf);
}

/* fft_lines over all outer * inner lines, blocks split over threads; -1: n has a prime factor
 * above FFT_MAXP (the caller runs NumPy's) */
EXPORT int fft_c2c_f32(const float *x, float *y, int64_t outer, int64_t nin, int64_t n,
                       int64_t inner, const float *w, int inverse, double scale, int nt) {
    int f[64], nf = fft_factors(n, f);
    if (nf < 0) return -1;
    int64_t lines = outer * inner, B = lines < FFT_B ? lines : FFT_B;
    while (B > 1 && n * B > (1 << 18)) B /= 2;
    int64_t blocks = (lines + B - 1) / B;
    nt = threads_for(lines * n * 4, nt);
    nt = nt > blocks ? (int)blocks : nt;
    int64_t per = (blocks + nt - 1) / nt * B;         /* lines a thread (one buffer each) */
    float sg = inverse ? -1.f : 1.f, sc = (float)scale;
    THREADED_FOR(nt, nt, 1, fft_lines(x, y, i * per, (i + 1) * per < lines ? (i + 1) * per :
                                      lines, B, nin, n, inner, w, f, nf, sg, sc));
    return 0;
}
