/* gather / scatter / scatter_add (and amax / amin) along the middle axis, included by
 * kernels.c for float (S(x)=x##_f32) and double (S(x)=x##_f64). Data and index are
 * contiguous: the data (outer, n, inner), the index and the values (outer, k, inner), i.e.
 * the index has the data's shape except along the axis (other shapes take ember's NumPy
 * path).
 *
 * Indices are checked before they are followed, a block at a time in a pass the compiler
 * vectorises (gather along the last dim instead reads x[0] in place of a bad index): one
 * outside [0, n) makes the call return 1 (scatter may have written other slices of its
 * output, a copy the caller then drops) and the caller raises torch's error;
 * negatives are caught by the same unsigned compare. scatter's rows of one outer slice run
 * in index order on one thread, so repeated indices accumulate (or the last write wins) in
 * the order torch's CPU kernel uses: scatter_add's float sums are bit-identical to
 * np.add.at's.
 */

/* Rows r0..r1 of the (outer * k, inner) index. Along the last dim (inner 1) one pass both
 * checks and follows the index, reading x at 0 in place of a bad one (then the call returns
 * 1 and the caller drops out); otherwise a check pass the compiler vectorises comes first. */
TC static int S(gather_rows)(const T *x, const int64_t *idx, T *out, int64_t r0, int64_t r1,
                             int64_t n, int64_t k, int64_t inner) {
    const uint64_t *u = (const uint64_t *)idx;
    if (inner == 1) {           /* a run of each slice's row at a time */
        uint64_t bad = 0;
        for (int64_t r = r0; r < r1;) {
            int64_t o = r / k, end = (o + 1) * k < r1 ? (o + 1) * k : r1;
            const T *xo = x + o * n;
            /* the next row's lines fetched while this one is read: its reads land in random
             * order, which no hardware prefetcher follows (1.3x faster at (1024, 1024) on a
             * Zen 3; a prefetch past the end of x is a no-op, it never faults) */
            if (n <= 16384)
                for (int64_t p = 0; p < n; p += 64 / (int64_t)sizeof(T))
                    __builtin_prefetch(xo + n + p);
            for (int64_t e = r; e < end; e++) {
                uint64_t v = u[e], miss = v >= (uint64_t)n;
                bad |= miss;
                out[e] = xo[miss ? 0 : v];
            }
            r = end;
        }
        return bad != 0;
    }
    uint64_t most = 0;
#pragma omp simd reduction(max : most)
    for (int64_t e = r0 * inner; e < r1 * inner; e++) most = u[e] > most ? u[e] : most;
    if (most >= (uint64_t)n)
        return 1;
    int64_t i = r0 % k;                         /* r = o * k + i: no division per row */
    const T *xo = x + (r0 / k) * n * inner;
    for (int64_t r = r0; r < r1; r++, i++) {
        if (i == k) {
            i = 0;
            xo += n * inner;
        }
        const int64_t *ir = idx + r * inner;
        T *orow = out + r * inner;
        for (int64_t j = 0; j < inner; j++) orow[j] = xo[ir[j] * inner + j];
    }
    return 0;
}

/* out[o, i, j] = x[o, idx[o, i, j], j]; rows (o, i) are split over threads */
EXPORT int S(gather)(const T *x, const int64_t *idx, T *out, int64_t outer, int64_t n,
                     int64_t k, int64_t inner, int nt) {
    int bad = 0;
    const int64_t rows = outer * k, B = 1 + 2048 / (inner ? inner : 1);   /* L1-sized */
    nt = threads_for(rows * inner, nt);
#pragma omp parallel for num_threads(nt) schedule(static) reduction(| : bad)
    for (int64_t r = 0; r < rows; r += B)
        bad |= S(gather_rows)(x, idx, out, r, r + B < rows ? r + B : rows, n, k, inner);
    return bad;
}

/* d combined with v by mode: 0 v (a write), 1 d + v, 2 max, 3 min; max and min as NumPy's
 * maximum / minimum (a NaN on either side wins; between equal values, d stays) */
static inline T S(combine)(T d, T v, int mode) {
    switch (mode) {
    case 1: return d + v;
    case 2: d = v > d ? v : d; return v != v ? v : d;     /* (two selects, no ||: no branch) */
    case 3: d = v < d ? v : d; return v != v ? v : d;
    default: return v;
    }
}

/* One outer slice: its indices are checked first (then they are in cache for the writes) */
TC static int S(scatter_slice)(T *out, const int64_t *idx, const T *src, int64_t n, int64_t k,
                               int64_t inner, int mode) {
    uint64_t most = 0;
    const uint64_t *u = (const uint64_t *)idx;
#pragma omp simd reduction(max : most)
    for (int64_t e = 0; e < k * inner; e++) most = u[e] > most ? u[e] : most;
    if (most >= (uint64_t)n)
        return 1;
    if (inner == 1 && mode == 1)
        for (int64_t i = 0; i < k; i++) out[idx[i]] += src[i];
    else if (inner == 1 && mode == 0)
        for (int64_t i = 0; i < k; i++) out[idx[i]] = src[i];
    else if (inner == 1 && mode == 2)     /* (a loop per mode: selects, not branches) */
        for (int64_t i = 0; i < k; i++) out[idx[i]] = S(combine)(out[idx[i]], src[i], 2);
    else if (inner == 1 && mode == 3)
        for (int64_t i = 0; i < k; i++) out[idx[i]] = S(combine)(out[idx[i]], src[i], 3);
    else
        for (int64_t e = 0; e < k * inner; e += inner)
            for (int64_t j = 0; j < inner; j++) {
                T *dst = out + idx[e + j] * inner + j;
                *dst = S(combine)(*dst, src[e + j], mode);
            }
    return 0;
}

/* out[o, idx[o, i, j], j] = src[o, i, j] (mode 0), or combined with it by mode (1 add, 2
 * max, 3 min: S(combine)); outer slices (which write apart) are split over threads. out
 * starts as init: out itself (in place), a copy of init (an out-of-place scatter: each thread
 * copies its slices, which are then in its cache for the writes) or, for a NULL init, zeros
 * (a gather's gradient) */
EXPORT int S(scatter)(T *out, const int64_t *idx, const T *src, const T *init, int64_t outer,
                      int64_t n, int64_t k, int64_t inner, int mode, int nt) {
    int bad = 0;
    nt = threads_for(outer * (init != out ? n : k) * inner, nt);
    /* NOTE: one thread per outer slice at most: a long 1-D scatter split over two threads by
     * destination (each walking every index) ran 1.5-2x slower than one thread here */
    nt = outer < nt ? (int)outer : nt;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(| : bad)
    for (int64_t o = 0; o < outer; o++) {
        T *slice = out + o * n * inner;
        if (init == NULL)
            memset(slice, 0, (size_t)(n * inner) * sizeof(T));
        else if (init != out)
            memcpy(slice, init + o * n * inner, (size_t)(n * inner) * sizeof(T));
        bad |= S(scatter_slice)(slice, idx + o * k * inner, src + o * k * inner, n, k, inner,
                                mode);
    }
    return bad;
}
