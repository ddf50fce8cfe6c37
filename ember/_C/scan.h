/* Scans (cumsum, cumprod) along the middle axis of a contiguous (outer, n, inner) array,
 * included by kernels.c for float (S(x)=x##_f32) and double (S(x)=x##_f64).
 *
 * NOTE: the running value is a double for float32 too, as torch's CPU scan accumulates in
 * acc_type (double): NumPy's float32 cumsum drifts from torch's by ~sqrt(n) ulp over 1M
 * elements, and its loop is 3x slower than this one. `reverse` runs from the end (the
 * backward of cumsum is a reversed cumsum), with no flipped copies.
 */

#define SCAN_W 256      /* columns of one block when inner > 1: accumulators stay in L1 */

TC static void S(scan_block)(const T *x, T *y, int64_t n, int64_t inner, int64_t w, int prod,
                             int reverse) {
    double acc[SCAN_W];
    for (int64_t j = 0; j < w; j++) acc[j] = prod ? 1.0 : 0.0;
    for (int64_t s = 0; s < n; s++) {
        int64_t i = (reverse ? n - 1 - s : s) * inner;
        if (prod)
            for (int64_t j = 0; j < w; j++) y[i + j] = (T)(acc[j] *= x[i + j]);
        else
            for (int64_t j = 0; j < w; j++) y[i + j] = (T)(acc[j] += x[i + j]);
    }
}

TC static void S(scan_row)(const T *x, T *y, int64_t n, int prod, int reverse) {
    double acc = prod ? 1.0 : 0.0;
    int64_t step = reverse ? -1 : 1, i = reverse ? n - 1 : 0;
    if (prod)
        for (int64_t s = 0; s < n; s++, i += step) y[i] = (T)(acc *= x[i]);
    else
        for (int64_t s = 0; s < n; s++, i += step) y[i] = (T)(acc += x[i]);
}

/* y = cumsum (prod 0) or cumprod (prod 1) of x along the middle axis; blocks of (outer
 * slice, SCAN_W columns) are split over threads. */
EXPORT void S(scan)(const T *x, T *y, int64_t outer, int64_t n, int64_t inner, int prod,
                    int reverse, int nt) {
    int64_t per = (inner + SCAN_W - 1) / SCAN_W, blocks = outer * per;
    nt = threads_for(outer * n * inner, nt);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t o = b / per, j0 = (b % per) * SCAN_W;
        int64_t w = inner - j0 < SCAN_W ? inner - j0 : SCAN_W;
        const T *xb = x + o * n * inner + j0;
        T *yb = y + o * n * inner + j0;
        if (inner == 1)
            S(scan_row)(xb, yb, n, prod, reverse);
        else
            S(scan_block)(xb, yb, n, inner, w, prod, reverse);
    }
}
