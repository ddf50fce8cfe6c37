/* gather / scatter / scatter_add (and prod, amax, amin) along the middle axis, included by
 * kernels.c for float (S(x)=x##_f32) and double (S(x)=x##_f64). Data and index are
 * contiguous: the data (outer, n, inner), the index and the values (outer, k, inner), i.e.
 * the index has the data's shape except along the axis, or (scatter's SC_ROWS: index_add,
 * index_reduce) one index entry per slice along the axis (other shapes take ember's NumPy
 * path).
 *
 * Along the last dim an index is checked as it is followed (gather reads x[0] in place of
 * a bad one, scatter stops), except in place; otherwise indices are checked first, a slice
 * at a time in a pass the compiler vectorises. One outside [0, n) makes the call return 1
 * (an out-of-place scatter may have written part of its output, which the caller then
 * drops; in place, the slice holding it is left unwritten) and the caller raises torch's
 * error; negatives are caught by the same unsigned compare. scatter's rows of one outer
 * slice run in index order on one thread (a thread's block of columns or rows, where split),
 * so repeated indices accumulate (or the last write wins) in the order torch's CPU kernel
 * uses: scatter_add's float sums are bit-identical to np.add.at's.
 */

/* The largest of idx[0:count] seen as unsigned (0 for none): one compare of it against n
 * checks them all, a negative index being past any n. A pass the compiler vectorises. */
static inline uint64_t S(index_max)(const int64_t *idx, int64_t count) {
    const uint64_t *u = (const uint64_t *)idx;
    uint64_t most = 0;
#pragma omp simd reduction(max : most)
    for (int64_t e = 0; e < count; e++) most = u[e] > most ? u[e] : most;
    return most;
}

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
             * order, which no hardware prefetcher follows (a prefetch past the end of x is a
             * no-op, it never faults) */
            int far = n > 16384;
            if (!far)
                for (int64_t p = 0; p < n; p += 64 / (int64_t)sizeof(T))
                    __builtin_prefetch(xo + n + p);
            for (int64_t e = r; e < end; e++) {
                /* a row past the caches: each read a miss at a random place, so the one 16
                 * indices ahead is fetched meanwhile (as the 1-D scatter does) */
                if (far && e + 16 < end) {
                    uint64_t f = u[e + 16];
                    __builtin_prefetch(xo + (f < (uint64_t)n ? f : 0));
                }
                uint64_t v = u[e], miss = v >= (uint64_t)n;
                bad |= miss;
                out[e] = xo[miss ? 0 : v];
            }
            r = end;
        }
        return bad != 0;
    }
    if (S(index_max)(idx + r0 * inner, (r1 - r0) * inner) >= (uint64_t)n)
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
    THREADED_FOR_BAD(nt, rows, B,
                     S(gather_rows)(x, idx, out, i, i + B < rows ? i + B : rows, n, k, inner))
    return bad;
}

/* index_select (and take: one row): out[o, i, :] = x[o, idx[i], :] (4- or 8-byte elements as
 * T), rows (o, i) over threads (NumPy's take runs on one); 1, nothing written, for an index
 * outside [0, n) ([-n, n) with wrap: a negative one counts from the end) */
EXPORT int S(take_rows)(const T *x, const int64_t *idx, T *out, int64_t outer, int64_t n,
                        int64_t k, int64_t inner, int wrap, int nt) {
    uint64_t most = 0, lo = wrap ? (uint64_t)n : 0;
#pragma omp simd reduction(max : most)
    for (int64_t e = 0; e < k; e++) most = (uint64_t)idx[e] + lo > most ? idx[e] + lo : most;
    if (k && most >= lo + (uint64_t)n) return 1;
    const int64_t rows = outer * k, B = 1 + 16384 / (inner ? inner : 1), far = n > 16384;
    nt = threads_for(rows * inner, nt);
    THREADED_FOR(nt, rows, B, {
        int64_t o = i / k;                          /* (no division per row) */
        int64_t e = i % k;
        for (int64_t r = i; r < i + B && r < rows; r++) {
            if (e == k) { o++; e = 0; }
            /* (a negative made positive without a branch; the one 16 on fetched meanwhile:
             * random reads no hardware prefetcher follows) */
            if (far && e + 16 < k)
                __builtin_prefetch(x + (o * n + idx[e + 16] + (n & (idx[e + 16] >> 63))) * inner);
            const T *s = x + (o * n + idx[e] + (n & (idx[e] >> 63))) * inner;
            e++;
            if (inner == 1) out[r] = *s;
            else memcpy(out + r * inner, s, (size_t)inner * sizeof(T));
        }
    })
    return 0;
}

/* d combined with v by mode: 0 v (a write), 1 d + v, 2 max, 3 min, 4 d * v; max and min as
 * NumPy's maximum / minimum (a NaN on either side wins; between equal values, d stays) */
static inline T S(combine)(T d, T v, int mode) {
    switch (mode) {
    case 1: return d + v;
    case 2: d = v > d ? v : d; return v != v ? v : d;     /* (two selects, no ||: no branch) */
    case 3: d = v < d ? v : d; return v != v ? v : d;
    case 4: return d * v;
    default: return v;
    }
}

/* Columns c0..c1 of one outer slice (with SC_ROWS, its rows d0..d1: other indices skipped).
 * Along the last dim (inner 1) of a fresh output each
 * index is checked as it is followed (a bad one stops the slice: the caller drops the
 * output), and the destination SC_AHEAD indices on is prefetched when the slice outgrows the
 * L2: its random read-modify-writes defeat the hardware prefetcher. In place (SC_FIRST),
 * along another dim, or without the old values (SC_FRESH: their places first set to the
 * mode's identity), the indices are all checked before anything is written (then they are in
 * cache for the writes). With SC_ROWS the index has one entry per slice along the dim
 * (index_reduce, index_add): whole rows of `inner` combine, a loop the compiler vectorises. */
#define SC_ROWS 1
#define SC_FRESH 2
#define SC_FIRST 4
#define SC_AHEAD 16
#define SC_LOOP(FAR, OP)                                                                       \
    for (int64_t i = 0; i < k; i++) {                                                          \
        uint64_t v = u[i];                                                                     \
        if (v >= (uint64_t)n) return 1;                                                        \
        if (FAR && i + SC_AHEAD < k) __builtin_prefetch(out + u[i + SC_AHEAD], 1);             \
        out[v] = S(combine)(out[v], src[i], OP);                                               \
    }
#define SC_ROW_LOOP(FAR, OP)                                                                   \
    for (int64_t i = 0; i < k; i++) {                                                          \
        if (idx[i] < d0 || idx[i] >= d1) continue;                                             \
        T *restrict d = out + idx[i] * inner;                                                  \
        const T *restrict s = src + i * inner;                                                 \
        for (int64_t j = c0; j < c1; j++) d[j] = S(combine)(d[j], s[j], OP);                   \
    }
#define SC_EACH_LOOP(FAR, OP)                                                                  \
    for (int64_t e = 0; e < k * inner; e += inner)                                             \
        for (int64_t j = c0; j < c1; j++) {                                                    \
            T *dst = out + idx[e + j] * inner + j;                                             \
            *dst = S(combine)(*dst, src[e + j], OP);                                           \
        }
#define SC_MODES(LOOP, FAR)                                                                    \
    switch (mode) {      /* (a loop per mode, combine's constant: selects, not branches) */   \
    case 1: LOOP(FAR, 1) break;                                                                \
    case 2: LOOP(FAR, 2) break;                                                                \
    case 3: LOOP(FAR, 3) break;                                                                \
    case 4: LOOP(FAR, 4) break;                                                                \
    default: LOOP(FAR, 0) break;                                                               \
    }
TC static int S(scatter_slice)(T *out, const int64_t *idx, const T *src, int64_t n, int64_t k,
                               int64_t inner, int mode, int flags, int64_t c0, int64_t c1,
                               int64_t d0, int64_t d1) {
    const uint64_t *u = (const uint64_t *)idx;
    int rows = flags & SC_ROWS;
    int64_t span = rows ? k : k * inner, whole = rows || c1 - c0 == inner;
    if (flags & (SC_FIRST | SC_FRESH) || inner != 1)    /* (whole: one pass, else by row) */
        for (int64_t e = 0; e < span; e += whole ? span : inner)
            if (S(index_max)(idx + e + (whole ? 0 : c0), whole ? span : c1 - c0) >= (uint64_t)n)
                return 1;
    const T id = mode == 4 ? 1 : mode == 2 ? -INFINITY : mode == 3 ? INFINITY : 0;
    if (flags & SC_FRESH)       /* (torch's start without the old values: the identity) */
        for (int64_t e = 0; e < span; e += rows ? 1 : inner)
            for (int64_t j = c0; j < c1 && (!rows || (idx[e] >= d0 && idx[e] < d1)); j++)
                out[idx[rows ? e : e + j] * inner + j] = id;
    if (inner == 1 && n * (int64_t)sizeof(T) > (256 << 10))
        SC_MODES(SC_LOOP, 1)
    else if (inner == 1)
        SC_MODES(SC_LOOP, 0)
    else if (rows)
        SC_MODES(SC_ROW_LOOP, 0)
    else
        SC_MODES(SC_EACH_LOOP, 0)
    return 0;
}

/* scatter's task t: of outer slice t / cb, block t % cb of columns (w of them) or, with
 * SC_ROWS, of rows */
TC static int S(scatter_task)(T *out, const int64_t *idx, const T *src, const T *init,
                              int64_t n, int64_t k, int64_t inner, int mode, int flags,
                              int64_t t, int64_t cb, int64_t w) {
    int rows = flags & SC_ROWS;
    int64_t o = t / cb, p = t % cb, c0 = rows ? 0 : p * w;
    int64_t c1 = c0 + w < inner ? c0 + w : inner;
    int64_t d0 = rows ? n * p / cb : 0, d1 = rows ? n * (p + 1) / cb : n;
    T *slice = out + o * n * inner;
    if (c0 >= c1)
        return 0;
    for (int64_t r = d0; r < (init == out ? d0 : d1); r += c1 - c0 == inner ? d1 - d0 : 1) {
        size_t len = (size_t)(c1 - c0 == inner ? (d1 - d0) * inner : c1 - c0) * sizeof(T);
        T *dst = slice + r * inner + c0;
        if (init == NULL)
            memset(dst, 0, len);
        else
            memcpy(dst, init + (dst - out), len);
    }
    return S(scatter_slice)(slice, idx + (rows ? 0 : o * k * inner), src + o * k * inner, n, k,
                            inner, mode, flags, c0, c1, d0, d1);
}

/* out[o, idx[o, i, j], j] = src[o, i, j] (mode 0), or combined with it by mode (1 add, 2
 * max, 3 min, 4 multiply: S(combine)); with SC_ROWS in flags, out[o, idx[i], j] (index_add,
 * index_reduce); with SC_FRESH, the places written start from the mode's identity, not from
 * init's values. out starts as init: out itself (in place), a copy of init (an out-of-place
 * scatter: each thread copies its part, which is then in its cache for the writes) or, for a
 * NULL init, zeros (a gather's gradient). Outer slices (which write apart) are split over
 * threads; fewer slices than threads, out of place, split their columns too (blocks of whole
 * cache lines), each thread then walking every index of its slice. With SC_ROWS (rows of at
 * least 64) they split their rows instead, in place too: each thread copies its block of
 * rows and adds the source rows whose index falls in it (torch's way: a row's line shared by
 * two threads at a block of columns' edge, in every row, cost more than the split gained). */
EXPORT int S(scatter)(T *out, const int64_t *idx, const T *src, const T *init, int64_t outer,
                      int64_t n, int64_t k, int64_t inner, int mode, int flags, int nt) {
    int bad = 0, rows = flags & SC_ROWS;
    nt = threads_for(outer * (init != out ? n : k) * inner, nt);
    /* NOTE: a long 1-D scatter split over two threads by destination has each thread walk
     * every index, and loses to one thread: columns split only where rows are long */
    int64_t cb = outer < nt && (rows ? inner >= 64 : init != out && inner >= 64 * nt) ? nt : 1;
    int64_t w = rows ? inner : ((inner + cb - 1) / cb + 15) & ~(int64_t)15, tasks = outer * cb;
    nt = tasks < nt ? (int)tasks : nt;
    flags |= init == out ? SC_FIRST : 0;
    THREADED_FOR_BAD(nt, tasks, 1, S(scatter_task)(out, idx, src, init, n, k, inner, mode,
                                                    flags, i, cb, w))
    return bad;
}

/* out[idx[i], :] += src[i, :] for i < k, in i order: rows of `inner` contiguous elements, an
 * embedding's (or index_add's) gradient. Each element's sum runs in i order, as np.add.at's
 * does, so the results are NumPy's bit for bit. One thread: the adds are bound by memory,
 * and two threads splitting the columns only contend for it. With `sidx` and `scale` the row
 * added is scale[i] * src[sidx[i], :]: a sparse (COO or CSR) matrix times a dense one, its
 * entries' rows, columns and values. Returns 1, nothing written, for an index outside
 * [0, n) (or sidx's outside [0, nsrc)). */
TC static void S(add_rows_run)(T *out, const int64_t *idx, const T *src, const int64_t *sidx,
                               const T *scale, int64_t k, int64_t inner) {
    for (int64_t i = 0; i < k; i++) {
        T *restrict o = out + idx[i] * inner;
        const T *restrict s = src + (sidx != NULL ? sidx[i] : i) * inner;
        if (scale == NULL) {
            for (int64_t j = 0; j < inner; j++) o[j] += s[j];
        } else {
            const T v = scale[i];
            for (int64_t j = 0; j < inner; j++) o[j] += v * s[j];
        }
    }
}

EXPORT int S(add_rows)(T *out, const int64_t *idx, const T *src, const int64_t *sidx,
                       const T *scale, int64_t k, int64_t n, int64_t nsrc, int64_t inner) {
    if (k > 0 && (S(index_max)(idx, k) >= (uint64_t)n ||
                  (sidx != NULL && S(index_max)(sidx, k) >= (uint64_t)nsrc)))
        return 1;
    S(add_rows_run)(out, idx, src, sidx, scale, k, inner);
    return 0;
}
