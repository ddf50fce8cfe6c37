/* Counting ops on contiguous rows (mode, unique, unique_consecutive, histogram, histc),
 * included by kernels.c for float and double: each replaces a dozen NumPy calls (most of a
 * small call's time) and their passes with one loop, step for step as the NumPy reference
 * (ember/_ops/counting.py, statistics.py), so the results are the same bit for bit. */

#ifndef NAN_KEY
#define NAN_KEY(T) (sizeof(T) == 4 ? (uint64_t)UINT32_MAX : UINT64_MAX)
#endif

/* v's order key: unsigned, in the values' order, one for equal values (-0.0 is 0.0), nan
 * (any) above all */
static inline uint64_t S(okey)(T v) {
    uint64_t u = 0;
    if (v != v) return NAN_KEY(T);
    v = v == 0 ? 0 : v;
    memcpy(&u, &v, sizeof(T));
    if (sizeof(T) == 4) return u >> 31 ? (uint32_t)~u : u | 0x80000000u;
    return u >> 63 ? ~u : u | (1ull << 63);
}

/* x's n values' keys and indices sorted stably by key: insertion for short rows, else LSD
 * radix, a byte a pass, skipping a byte every key shares (O(n); a comparison sort's branches
 * mispredict on random data); buf: 4n words. Returns the keys, *idx the indices. */
static uint64_t *S(sorted_keys)(const T *x, int64_t n, uint64_t *buf, int64_t **idx, int desc) {
    uint64_t *k = buf, *k2 = buf + n, *tk, flip = desc ? NAN_KEY(T) : 0;   /* (nan first) */
    int64_t *i = (int64_t *)(buf + 2 * n), *i2 = i + n, *ti, cnt[sizeof(T)][256];
    for (int64_t j = 0; j < n; j++) k[j] = S(okey)(x[j]) ^ flip, i[j] = j;
    for (int64_t j = 1; j < n && n <= 32; j++) {
        uint64_t kv = k[j];
        int64_t l = j, iv = i[j];
        for (; l > 0 && kv < k[l - 1]; l--) k[l] = k[l - 1], i[l] = i[l - 1];
        k[l] = kv, i[l] = iv;
    }
    if (n > 32) memset(cnt, 0, sizeof cnt);
    for (int64_t j = 0; j < n && n > 32; j++)
        for (int d = 0; d < (int)sizeof(T); d++) cnt[d][(k[j] >> (8 * d)) & 255]++;
    for (int d = 0; d < (int)sizeof(T) && n > 32; d++) {
        if (cnt[d][(k[0] >> (8 * d)) & 255] == n) continue;
        for (int64_t b = 0, pos = 0, c; b < 256; b++) c = cnt[d][b], cnt[d][b] = pos, pos += c;
        for (int64_t j = 0, p; j < n; j++) {
            p = cnt[d][(k[j] >> (8 * d)) & 255]++;
            k2[p] = k[j], i2[p] = i[j];
        }
        tk = k, k = k2, k2 = tk, ti = i, i = i2, i2 = ti;
    }
    *idx = i;
    return k;
}

/* row r's mode: the first longest run of equal keys in sorted order (nan: runs of one), i.e.
 * the smallest most frequent value, and the index of its last occurrence */
static int S(mode_row)(const T *x, int64_t n, T *val, int64_t *idx) {
    uint64_t small[128], *buf = n <= 32 ? small : malloc((size_t)n * 4 * sizeof(uint64_t)), *k;
    int64_t *i, best = -1, end = 0, run = 0;
    if (!buf) return 1;
    k = S(sorted_keys)(x, n, buf, &i, 0);
    for (int64_t j = 0; j < n; j++) {
        run = j && k[j] == k[j - 1] && k[j] != NAN_KEY(T) ? run + 1 : 0;
        if (run > best) best = run, end = j;
    }
    *idx = i[end], *val = x[i[end]];
    if (buf != small) free(buf);
    return 0;
}

/* mode of each of rows rows of n (> 0) values; -1 where a buffer cannot be allocated */
EXPORT int S(mode_rows)(const T *x, int64_t rows, int64_t n, T *vals, int64_t *idx, int nt) {
    int bad = 0;
    nt = threads_for(rows * n * 8, nt);
    EACH_ROW(nt, rows, S(mode_row)(x + r * n, n, vals + r, idx + r));
    return -bad;
}

/* each row's values and indices in stable order (descending: reversed keys, nan first, ties
 * still in input order), as sort's: O(n) a row where NumPy's stable argsort is a merge sort */
static int S(sort_row)(const T *x, int64_t n, int desc, T *vals, int64_t *idx) {
    uint64_t small[128], *buf = n <= 32 ? small : malloc((size_t)n * 4 * sizeof(uint64_t));
    int64_t *i;
    if (!buf) return 1;
    S(sorted_keys)(x, n, buf, &i, desc);
    for (int64_t j = 0; j < n; j++) vals[j] = x[i[j]], idx[j] = i[j];
    if (buf != small) free(buf);
    return 0;
}

EXPORT int S(sort_rows)(const T *x, int64_t rows, int64_t n, int desc, T *vals, int64_t *idx,
                        int nt) {
    int bad = 0;
    nt = threads_for(rows * n * 8, nt);
    EACH_ROW(nt, rows, S(sort_row)(x + r * n, n, desc, vals + r * n, idx + r * n));
    return -bad;
}

/* unique (sorted 1) or unique_consecutive (0) of x[0..n): the first element of each run of
 * equal values (nan: each its own run) in vals, each element's run in inverse, the runs'
 * lengths in counts (either may be NULL). Returns the number of runs, -1 where the sort's
 * buffer cannot be allocated. */
EXPORT int64_t S(unique_runs)(const T *x, int64_t n, int sorted, T *vals, int64_t *inverse,
                              int64_t *counts) {
    uint64_t *buf = sorted && n ? malloc((size_t)n * 4 * sizeof(uint64_t)) : NULL;
    int64_t *order = NULL, g = -1, start = 0;
    T prev = 0;
    if (sorted && n && !buf) return -1;
    if (buf) S(sorted_keys)(x, n, buf, &order, 0);
    else if (!inverse && !counts) {     /* the runs' values alone: branch-free, as mask_select */
        for (int64_t j = 0; j < n; j++) vals[g + 1] = x[j], g += !j || !(x[j] == x[j - 1]);
        return g + 1;
    }
    for (int64_t j = 0, i; j < n; j++) {
        T v = x[i = order ? order[j] : j];
        if (!j || !(v == prev)) {
            if (g >= 0 && counts) counts[g] = j - start;
            vals[++g] = v, start = j;
        }
        prev = v;
        if (inverse) inverse[i] = g;
    }
    if (n && counts) counts[g] = n - start;
    free(buf);
    return g + 1;
}

/* One row's histogram (see hist_rows). No fp contraction: the edges and bins round as the
 * reference's NumPy steps. */
NOCONTRACT static int S(hist_row)(const T *x, const T *w, int64_t m, int64_t nb, int how,
                                  double dlo, double dhi, const T *e, T *oe, T *hist) {
    T a = 0, b = 0, lo, hi;       /* a, b: the data's range (0, 0 when empty; nan: nan) */
    int nan = 0;
    for (int64_t j = 0; j < m && (how == 2 || (how == 3 && dlo == dhi)); j++) {
        a = !j || x[j] < a ? x[j] : a, b = !j || x[j] > b ? x[j] : b;
        nan |= x[j] != x[j];
    }
    if (nan) a = b = NAN;
    if (how == 3) {             /* histc: in double, widened by 1, then rounded */
        if (dlo == dhi && m) dlo = a, dhi = b;
        if (dlo == dhi) dlo -= 1, dhi += 1;
        lo = (T)dlo, hi = (T)dhi;
    } else if (how) {           /* histogram: widened by 0.5, then torch's linspace */
        if (how == 1) a = (T)dlo, b = (T)dhi;
        if (a == b) a = a - (T)0.5, b = b + (T)0.5;
        T step = (b - a) / (T)nb;
        for (int64_t i = 0; i <= nb; i++)
            oe[i] = (T)(i < (nb + 1) / 2 ? (double)a + (double)i * (double)step
                                         : (double)b - (double)(nb - i) * (double)step);
        e = oe;
    } else if (oe)
        memcpy(oe, e, (size_t)(nb + 1) * sizeof(T));
    if (how != 3) lo = e[0], hi = e[nb];
    double *acc = calloc((size_t)nb, sizeof(double));
    if (!acc) return 1;
    for (int64_t j = 0, p; j < m; j++) {
        T v = x[j], q = (T)((T)(v - lo) * (T)nb) / (T)(hi - lo);
        if (!(v >= lo && v <= hi)) continue;
        if (how == 0) {         /* the last edge <= v (nan edges sort last) */
            int64_t l = 0, r = nb + 1, c;
            while (l < r) c = (l + r) / 2, v < e[c] || e[c] != e[c] ? (r = c) : (l = c + 1);
            p = l - 1;
        } else {
            /* NOTE: torch bins by arithmetic, as the reference's astype(int64) (x86: nan,
             * infinities, values past int64 to INT64_MIN) then clip; histogram then steps to
             * a neighbour where the edges' rounding puts v there, histc does not */
            p = !(q >= 0) || !(q < (T)9.2e18) ? 0 : (int64_t)q;
            p = p > nb - 1 ? nb - 1 : p;
            if (how != 3) p -= v < e[p], p += v >= e[p + 1];
        }
        acc[p > nb - 1 ? nb - 1 : p] += w ? (double)w[j] : 1.0;
    }
    for (int64_t k = 0; k < nb; k++) hist[k] = (T)acc[k];
    free(acc);
    return 0;
}

/* Histograms of rows rows of m values x (weights w of the same shape, or NULL) in nb bins:
 * how 0: between given edges (erows rows of nb + 1: 1 shared, or one per row), searched;
 * 1: nb equal bins over [lo, hi]; 2: over each row's min..max; both widened by 0.5 where
 * equal, edges by torch's linspace, written to out_edges (rows, nb + 1); 3: histc's rule
 * (over [lo, hi], or the data's range where equal, widened by 1; out_edges unused).
 * Counts (weight sums) in double, in element order as bincount, then rounded to hist. */
EXPORT int S(hist_rows)(const T *x, const T *w, int64_t rows, int64_t m, int64_t nb, int how,
                        double lo, double hi, const T *edges, int64_t erows, T *out_edges,
                        T *hist, int nt) {
    int bad = 0;
    nt = threads_for(rows * m * 4, nt);
    EACH_ROW(nt, rows, S(hist_row)(x + r * m, w ? w + r * m : NULL, m, nb, how, lo, hi,
        edges ? edges + (erows > 1 ? r : 0) * (nb + 1) : NULL,
        out_edges ? out_edges + r * (nb + 1) : NULL, hist + r * nb));
    return -bad;
}

/* bincount's weighted sums, out[idx[i]] += w[i] in element order in T, as torch sums float32
 * weights (NumPy's bincount sums in double: twice the memory its random adds miss in). With
 * out NULL, the bins the indices need (the largest + 1, 0 for none), or -1 where one is
 * negative: the check and the size in one pass, where NumPy's two reductions of a small input
 * cost more than the whole call; the caller sizes out by it. */
EXPORT int64_t S(bincount_w)(const int64_t *idx, const T *w, int64_t n, T *out) {
    int64_t lo = 0, hi = -1;
    if (out)
        for (int64_t i = 0; i < n; i++) out[idx[i]] += w[i];
    else
        for (int64_t i = 0; i < n; i++)
            lo = idx[i] < lo ? idx[i] : lo, hi = idx[i] > hi ? idx[i] : hi;
    return lo < 0 ? -1 : hi + 1;
}

/* searchsorted: out[i] = where x[i] goes in the sorted row of ne edges e (erows rows: 1
 * shared, or one per row of m values), before the equal ones (right: after them), nan
 * sorting last as NumPy's. Branch-free lower bounds (each halving step a select: random
 * values' comparisons would mispredict half the time, as NumPy's branch does), 8 values in
 * lockstep (one search is a chain of dependent loads; 8 chains overlap), over threads. */
#define SEARCH_L(a, v) (((a) < (v)) | (((v) != (v)) & ((a) == (a))))
#define SEARCH_R(a, v) (!(((v) < (a)) | (((a) != (a)) & ((v) == (v)))))
#define SEARCH_LOOP(BEFORE)                                                                    \
    for (int64_t i = i0, row = i0 / m, col = i0 % m; i < i1; i += 8) {                       \
        const T *b[8], *f[8];                                                                  \
        T v[8];                                                                                \
        int c = i1 - i < 8 ? (int)(i1 - i) : 8;                                                \
        for (int k = 0; k < 8; k++) {   /* (lanes past the end search the last value again) */\
            v[k] = x[i + (k < c ? k : c - 1)];                                                 \
            f[k] = b[k] = k < c || !k ? e + (erows > 1 ? row * ne : 0) : f[k - 1];            \
            if (k < c && ++col == m) col = 0, row++;                                           \
        }                                                                                      \
        for (int64_t n = ne, half; n > 1; n -= half) {                                         \
            half = n / 2;                                                                      \
            for (int k = 0; k < 8; k++) b[k] += half & -(int64_t)BEFORE(b[k][half], v[k]);     \
        }                                                                                      \
        for (int k = 0; k < c; k++) out[i + k] = b[k] - f[k] + (ne > 0 && BEFORE(*b[k], v[k])); \
    }
TC static void S(search_part)(const T *x, int64_t i0, int64_t i1, int64_t m, const T *e,
                              int64_t erows, int64_t ne, int right, int64_t *out) {
    if (right)
        SEARCH_LOOP(SEARCH_R)
    else
        SEARCH_LOOP(SEARCH_L)
}
#undef SEARCH_L
#undef SEARCH_R
#undef SEARCH_LOOP

EXPORT void S(search_rows)(const T *x, int64_t size, int64_t m, const T *e, int64_t erows,
                           int64_t ne, int right, int64_t *out, int nt) {
    nt = threads_for(size * 8, nt);
    ROW_RANGES(nt, size, S(search_part)(x, r0, r1, m, e, erows, ne, right, out))
}

/* isin of a small test set (k values): out[i] = whether x[i] == one of t, xor invert (nan
 * matches nothing, -0.0 matches 0.0, as NumPy's ==), one pass per test value over blocks of
 * 256 elements that stay in L1: the compare vectorizes, where NumPy's broadcast == and its
 * or-reduce were two calls and a (k, n) temporary. */
EXPORT void S(isin)(const T *x, int64_t n, const T *t, int64_t k, int invert, uint8_t *out,
                    int nt) {
    THREADED_FOR(threads_for(n * k, nt), n, 256, {
        int64_t e = i + 256 < n ? i + 256 : n;
        memset(out + i, 0, e - i);
        for (int64_t j = 0; j < k; j++)
            for (int64_t c = i; c < e; c++) out[c] |= x[c] == t[j];
        for (int64_t c = i; c < e; c++) out[c] ^= invert;
    })
}
