/* Scans (cumsum, cumprod) along the middle axis of a contiguous (outer, n, inner) array,
 * included by kernels.c for float (S(x)=x##_f32) and double (S(x)=x##_f64).
 *
 * NOTE: the running value is a double for float32 too, as torch's CPU scan accumulates in
 * acc_type (double): NumPy's float32 cumsum drifts from torch's by ~sqrt(n) ulp over 1M
 * elements, and its loop is slower than this one. `reverse` runs from the end (the
 * backward of cumsum is a reversed cumsum), with no flipped copies. Sums start from -0.0,
 * the identity that keeps a leading -0.0 (as NumPy's and torch's scans do; 0.0 + -0.0 is 0.0).
 */

#define SCAN_W 256      /* columns of one block when inner > 1: accumulators stay in L1 */

TC static void S(scan_block)(const T *x, T *y, int64_t n, int64_t inner, int64_t w, int prod,
                             int reverse) {
    double acc[SCAN_W];
    for (int64_t j = 0; j < w; j++) acc[j] = prod ? 1.0 : -0.0;
    for (int64_t s = 0; s < n; s++) {
        int64_t i = (reverse ? n - 1 - s : s) * inner;
        if (prod)
            for (int64_t j = 0; j < w; j++) y[i + j] = (T)(acc[j] *= x[i + j]);
        else
            for (int64_t j = 0; j < w; j++) y[i + j] = (T)(acc[j] += x[i + j]);
    }
}

/* A running sum of x[0..n) (backwards with reverse) from acc, in blocks of 8: each block's
 * own running sums do not depend on the blocks before, so the CPU overlaps them, and the
 * carry costs one dependent add per block instead of one per element. For float32 only: the regrouped double sums round to the same float32 as the
 * sequential ones but for ties ~2^-29 apart. Returns the total. */
TC static double S(sum_run)(const T *x, T *y, int64_t n, int reverse, double acc) {
    int64_t s = 0;
    for (; s + 8 <= n; s += 8) {
        const T *xs = reverse ? x + n - 8 - s : x + s;
        T *ys = reverse ? y + n - 8 - s : y + s;
        double run[8];
        if (reverse) {
            run[7] = xs[7];
            for (int j = 6; j >= 0; j--) run[j] = run[j + 1] + xs[j];
            for (int j = 0; j < 8; j++) ys[j] = (T)(acc + run[j]);
            acc += run[0];
        } else {
            run[0] = xs[0];
            for (int j = 1; j < 8; j++) run[j] = run[j - 1] + xs[j];
            for (int j = 0; j < 8; j++) ys[j] = (T)(acc + run[j]);
            acc += run[7];
        }
    }
    for (; s < n; s++) {
        int64_t i = reverse ? n - 1 - s : s;
        y[i] = (T)(acc += x[i]);
    }
    return acc;
}

/* The same for a running product (forward: the only way ember scans products), float32
 * only. Products of 8 factors in [2^-126, 2^127] stay normal doubles, so a block's own
 * running products lose nothing the sequential loop from the carry would keep. The factors
 * are checked 256 at a time (a loop the compiler vectorises); a stretch holding one outside
 * (a zero, a subnormal, an inf, a NaN, one above 2^127) runs one multiply at a time, as
 * torch's loop. */
TC static void S(prod_run)(const T *x, T *y, int64_t n) {
    double acc = 1.0;
    for (int64_t s0 = 0; s0 < n; s0 += 256) {
        int64_t end = n - s0 < 256 ? n : s0 + 256, s = s0;
        int outside = 0;
#pragma omp simd reduction(+ : outside)
        for (int64_t i = s0; i < end; i++) {       /* (a NaN fails both compares) */
            float a = __builtin_fabsf((float)x[i]);
            outside += !((a >= 0x1p-126f) & (a <= 0x1p+127f));
        }
        if (!outside)
            for (; s + 8 <= end; s += 8) {
                double run[8];
                run[0] = x[s];
                for (int j = 1; j < 8; j++) run[j] = run[j - 1] * x[s + j];
                for (int j = 0; j < 8; j++) y[s + j] = (T)(acc * run[j]);
                acc *= run[7];
            }
        for (; s < end; s++) y[s] = (T)(acc *= x[s]);
    }
}

TC static void S(scan_row)(const T *x, T *y, int64_t n, int prod, int reverse) {
    /* (float64 stays sequential: bit-equal to torch's loop) */
    if (sizeof(T) == 4 && !(prod && reverse)) {
        if (prod)
            S(prod_run)(x, y, n);
        else
            S(sum_run)(x, y, n, reverse, -0.0);
        return;
    }
    double acc = prod ? 1.0 : -0.0;
    int64_t step = reverse ? -1 : 1, i = reverse ? n - 1 : 0;
    if (prod)
        for (int64_t s = 0; s < n; s++, i += step) y[i] = (T)(acc *= x[i]);
    else
        for (int64_t s = 0; s < n; s++, i += step) y[i] = (T)(acc += x[i]);
}

/* One long row's running sum over nt threads: each sums its chunk, then scans it from the
 * total of the chunks before it (two reads of x, each split over the threads). */
static void S(sum_row_threaded)(const T *x, T *y, int64_t n, int reverse, int nt) {
    double total[64];
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), team = omp_get_num_threads();   /* may be fewer than nt */
        int64_t chunk = (n + team - 1) / team;
        int64_t c = reverse ? team - 1 - t : t;     /* chunk c is the c-th one scanned */
        int64_t lo = t * chunk, hi = lo + chunk < n ? lo + chunk : n;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = lo; i < hi; i++) sum += x[i];
        total[c] = sum;
#pragma omp barrier
        double acc = -0.0;
        for (int64_t b = 0; b < c; b++) acc += total[b];
        if (lo < hi)
            S(sum_run)(x + lo, y + lo, hi - lo, reverse, acc);
    }
}

/* block b of the (outer slice, SCAN_W columns) blocks of scan */
static inline void S(scan_one)(const T *x, T *y, int64_t b, int64_t per, int64_t n,
                               int64_t inner, int prod, int reverse) {
    int64_t o = b / per, j0 = (b % per) * SCAN_W, at = o * n * inner + j0;
    if (inner == 1)
        S(scan_row)(x + at, y + at, n, prod, reverse);
    else
        S(scan_block)(x + at, y + at, n, inner, inner - j0 < SCAN_W ? inner - j0 : SCAN_W, prod,
                      reverse);
}

/* y = cumsum (prod 0) or cumprod (prod 1) of x along the middle axis; blocks of (outer
 * slice, SCAN_W columns) are split over threads. */
EXPORT void S(scan)(const T *x, T *y, int64_t outer, int64_t n, int64_t inner, int prod,
                    int reverse, int nt) {
    int64_t per = (inner + SCAN_W - 1) / SCAN_W, blocks = outer * per;
    nt = threads_for(outer * n * inner, nt);
    /* a thread woken for a short scan costs more than it saves */
    if (sizeof(T) == 4 && !prod && outer == 1 && inner == 1 && nt > 1 && nt <= 64 &&
        n >= (1 << 18)) {
        S(sum_row_threaded)(x, y, n, reverse, nt);
        return;
    }
    THREADED_FOR(nt, blocks, 1, S(scan_one)(x, y, i, per, n, inner, prod, reverse))
}

/* cummax (mx 1) / cummin of the middle axis of (outer, n, inner), with the index where the
 * running extremum was last reached: as torch, an element equal to it (or any nan) moves the
 * index there, and a nan once taken stays the extremum (no comparison with it is true).
 * inner > 1: SCAN_W columns at a time, the loop along the contiguous axis. */
#define CUMEXT_TAKE(v, m) (mx ? (v) >= (m) || (v) != (v) : (v) <= (m) || (v) != (v))
TC static void S(cumext_block)(const T *x, T *y, int64_t *yi, int64_t n, int64_t inner,
                               int64_t w, int mx) {
    T m[SCAN_W];
    int64_t mi[SCAN_W];
    for (int64_t j = 0; j < w; j++) { m[j] = x[j]; mi[j] = 0; }
    for (int64_t s = 0; s < n; s++) {
        const T *xs = x + s * inner;
        for (int64_t j = 0; j < w; j++) {
            int take = CUMEXT_TAKE(xs[j], m[j]);
            m[j] = take ? xs[j] : m[j];
            mi[j] = take ? s : mi[j];
            y[s * inner + j] = m[j];
            yi[s * inner + j] = mi[j];
        }
    }
}

TC static void S(cumext_row)(const T *x, T *y, int64_t *yi, int64_t n, int mx) {
    T m = x[0];
    int64_t mi = 0;
    for (int64_t s = 0; s < n; s++) {
        if (CUMEXT_TAKE(x[s], m)) { m = x[s]; mi = s; }
        y[s] = m;
        yi[s] = mi;
    }
}

static inline void S(cumext_one)(const T *x, T *y, int64_t *yi, int64_t b, int64_t per,
                                 int64_t n, int64_t inner, int mx) {
    int64_t o = b / per, j0 = (b % per) * SCAN_W, at = o * n * inner + j0;
    if (inner == 1)
        S(cumext_row)(x + at, y + at, yi + at, n, mx);
    else
        S(cumext_block)(x + at, y + at, yi + at, n, inner,
                        inner - j0 < SCAN_W ? inner - j0 : SCAN_W, mx);
}

EXPORT void S(cumext)(const T *x, T *y, int64_t *yi, int64_t outer, int64_t n, int64_t inner,
                      int mx, int nt) {
    int64_t per = (inner + SCAN_W - 1) / SCAN_W, blocks = outer * per;
    nt = threads_for(outer * n * inner, nt);
    THREADED_FOR(nt, blocks, 1, S(cumext_one)(x, y, yi, i, per, n, inner, mx))
}
