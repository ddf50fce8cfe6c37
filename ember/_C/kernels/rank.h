/* Order statistics of contiguous rows (kthvalue, median, nanmedian, topk), included by
 * kernels.c for float and double. Each row's non-nan values are copied and partitioned
 * around the wanted rank (quickselect, median-of-three pivots: O(n), where NumPy's path
 * sorts the row); the element taken is then the one a stable sort (nan last) puts at that
 * rank: among the elements equal to the value, the right one in input order. */

/* The r-th smallest of a[0..n) (no nan), b: n of scratch. Each round partitions around a
 * median-of-three into the other buffer without branches (an element is stored at both the
 * left and the right end, and only one end advances: a comparison branch on random data
 * mispredicts half the time), then keeps the side holding rank r. */
static T S(qselect)(T *a, T *b, int64_t n, int64_t r) {
    while (n > 16) {
        T p = a[0], q = a[n / 2], s = a[n - 1];
        p = p < q ? (q < s ? q : (p < s ? s : p)) : (p < s ? p : (q < s ? s : q));
        int64_t lo = 0, hi = n;
        for (int64_t j = 0; j < n; j++) {
            T v = a[j];
            b[lo] = v;
            b[hi - 1] = v;
            lo += v < p;
            hi -= v > p;
        }
        T *t = a;
        if (r < lo) { a = b; n = lo; }
        else if (r >= hi) { a = b + hi; n -= hi; r -= hi; }
        else return p;
        b = t;
    }
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0 && a[j] < a[j - 1]; j--) {
            T t = a[j];
            a[j] = a[j - 1];
            a[j - 1] = t;
        }
    return a[r];
}

/* Copies x's non-nan values to buf, returns how many. */
static int64_t S(non_nan)(const T *x, int64_t n, T *buf) {
    int64_t m = 0;
    for (int64_t j = 0; j < n; j++) { buf[m] = x[j]; m += x[j] == x[j]; }
    return m;
}

/* mode 0: rank k; 1: median (a nan anywhere: the first nan); 2: nanmedian (the lower median
 * of the others; all nan: the first nan) */
static int S(rank_row)(const T *x, int64_t n, int mode, int64_t k, T *val, int64_t *idx) {
    T small[128], *buf = n <= 64 ? small : malloc((size_t)n * 2 * sizeof(T));
    if (!buf) return 1;
    int64_t m = S(non_nan)(x, n, buf), nans = n - m, r, c;
    r = mode == 0 ? k : mode == 1 ? (nans ? m : (n - 1) / 2) : (m > 1 ? (m - 1) / 2 : 0);
    T v = NAN;
    if (r < m) {
        v = S(qselect)(buf, buf + n, m, r);
        c = r;
        for (int64_t j = 0; j < n; j++) c -= x[j] < v;
    } else
        c = r - m;
    for (int64_t j = 0; j < n; j++)
        if ((r < m ? x[j] == v : x[j] != x[j]) && c-- == 0) { *idx = j; *val = x[j]; break; }
    if (buf != small) free(buf);
    return 0;
}

#ifndef EACH_ROW
/* bad |= f for each row r (bad: the caller's int), over nt threads (one: without an OpenMP
 * region, which costs microseconds, more than a small call's work) */
#define EACH_ROW(nt, rows, f)                                                            \
    if (nt == 1) for (int64_t r = 0; r < rows; r++) bad |= f;                                 \
    else {                                                                                    \
        _Pragma("omp parallel for num_threads(nt) schedule(dynamic, 16) reduction(| : bad)")  \
        for (int64_t r = 0; r < rows; r++) bad |= f;                                          \
    }
#endif

EXPORT int S(rank_rows)(const T *x, int64_t rows, int64_t n, int mode, int64_t k, T *vals,
                        int64_t *idx, int nt) {
    int bad = 0;
    nt = threads_for(rows * n * 4, nt);
    EACH_ROW(nt, rows, S(rank_row)(x + r * n, n, mode, k, vals + r, idx + r));
    return bad ? -1 : 0;
}

/* topk of rows without nan (1 returned where a row holds one), k <= TOPK_MAX: one pass
 * keeping the best k so far, sorted best first, ties in input order (a later equal element is
 * not better); blocks of 16 elements are first compared with the k-th best at once
 * (vectorised), so the rare insertions alone branch. */
#ifndef TOPK_MAX
#define TOPK_MAX 64
#endif
#define TOPK_BETTER(v, w) (largest ? (v) > (w) : (v) < (w))
static inline void S(topk_insert)(T v, int64_t i, int64_t pos, int largest, T *tv, int64_t *ti) {
    for (; pos > 0 && TOPK_BETTER(v, tv[pos - 1]); pos--) {
        tv[pos] = tv[pos - 1];
        ti[pos] = ti[pos - 1];
    }
    tv[pos] = v;
    ti[pos] = i;
}

TC static int S(topk_row)(const T *x, int64_t n, int64_t k, int largest, T *tv, int64_t *ti) {
    int64_t j = 0;
    int nan = 0;
    for (; j < k; j++) {
        S(topk_insert)(x[j], j, j, largest, tv, ti);
        nan |= x[j] != x[j];
    }
    for (; j < n; j += 16) {
        int64_t end = j + 16 <= n ? j + 16 : n;
        T t = tv[k - 1];
        int any = 0;
        for (int64_t l = j; l < end; l++) {
            any |= TOPK_BETTER(x[l], t);
            nan |= x[l] != x[l];
        }
        if (any)
            for (int64_t l = j; l < end; l++)
                if (TOPK_BETTER(x[l], tv[k - 1])) S(topk_insert)(x[l], l, k - 1, largest, tv, ti);
    }
    return nan;
}

EXPORT int S(topk_rows)(const T *x, int64_t rows, int64_t n, int64_t k, int largest, T *vals,
                        int64_t *idx, int nt) {
    if (k > TOPK_MAX) return -1;
    int bad = 0;                /* (a row with nan) */
    nt = threads_for(rows * n, nt);
    EACH_ROW(nt, rows, S(topk_row)(x + r * n, n, k, largest, vals + r * k, idx + r * k));
    return bad;
}
