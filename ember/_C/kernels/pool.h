/* Max and sum pooling over the last three dims of a contiguous (rows, n0, n1, n2) array (1-d
 * and 2-d pooling pass leading sizes of 1), included by kernels.c for float and double.
 *
 * g holds n0..n2, the output sizes o0..o2 and the dilations, then per dim d in turn the
 * first tap of each of its o_d outputs, then each one's tap count (negative firsts and taps
 * past n_d are padding and skipped), so plain and adaptive pooling share the loop. Replaces
 * a padded copy, a strided view and a NumPy pass per tap, which cost a small pool ~50 us;
 * one thread, for small inputs or wide windows: NumPy's passes over a few taps are faster on
 * large inputs.
 * max (idx not NULL): torch's rule, a tap wins if greater or NaN (the first maximum, the last
 * NaN), with its flat index in the pooled dims. sum: in T, taps in row-major order, as the
 * NumPy reference and torch's kernel add them (the caller divides).
 */
#ifndef POOL_SPAN        /* the taps [lo, hi) of a window at s, dilation d, c taps, in [0, n) */
#define POOL_SPAN(s, d, c, n, lo, hi)                                                         \
    int64_t lo = (s) < 0 ? (-(s) + (d) - 1) / (d) : 0;                                        \
    int64_t hi = (s) + ((c) - 1) * (d) < (n) ? (c) : ((n) - (s) + (d) - 1) / (d);
#endif

TC static void S(pool_row)(const T *x, T *y, int64_t *ir, const int64_t *g,
                          const int64_t *win) {
    const int64_t *n = g, *o = g + 3, *dl = g + 6, *s0 = win, *c0 = s0 + o[0], *s1 = c0 + o[0];
    const int64_t *c1 = s1 + o[1], *s2 = c1 + o[1], *c2 = s2 + o[2];
    for (int64_t a = 0; a < o[0]; a++) {
        POOL_SPAN(s0[a], dl[0], c0[a], n[0], lo0, hi0)
        for (int64_t b = 0; b < o[1]; b++) {
            POOL_SPAN(s1[b], dl[1], c1[b], n[1], lo1, hi1)
            for (int64_t c = 0; c < o[2]; c++, y++) {
                POOL_SPAN(s2[c], dl[2], c2[c], n[2], lo2, hi2)
                T acc = 0;
                int64_t best = -1;
                for (int64_t ta = lo0; ta < hi0; ta++)
                    for (int64_t tb = lo1; tb < hi1; tb++) {
                        int64_t f = ((s0[a] + ta * dl[0]) * n[1] + s1[b] + tb * dl[1]) * n[2] +
                                    s2[c];
                        if (!ir)
                            for (int64_t tc = lo2; tc < hi2; tc++) acc += x[f + tc * dl[2]];
                        else
                            for (int64_t tc = lo2; tc < hi2; tc++) {
                                T v = x[f + tc * dl[2]];
                                if (best < 0 || v > acc || v != v) acc = v, best = f + tc * dl[2];
                            }
                    }
                *y = acc;
                if (ir) *ir++ = best;
            }
        }
    }
}

EXPORT void S(pool)(const T *x, T *y, int64_t *idx, int64_t rows, const int64_t *g) {
    int64_t plane = g[0] * g[1] * g[2], cells = g[3] * g[4] * g[5];
    for (int64_t i = 0; i < rows; i++)
        S(pool_row)(x + i * plane, y + i * cells, idx ? idx + i * cells : NULL, g, g + 9);
}
