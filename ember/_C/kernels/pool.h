/* Max and sum pooling over the last three dims of a contiguous (rows, n0, n1, n2) array (1-d
 * and 2-d pooling pass leading sizes of 1), included by kernels.c for float and double.
 *
 * g holds n0..n2, the output sizes o0..o2 and the dilations, then per dim d in turn the
 * first tap of each of its o_d outputs, then the window's taps inside the input, [lo, hi) of
 * each (padding skipped), so plain and adaptive pooling share the loop. Replaces
 * a padded copy, a strided view and a NumPy pass per tap, which cost a small pool ~50 us;
 * one thread, for small inputs or wide windows: NumPy's passes over a few taps are faster on
 * large inputs.
 * max (idx not NULL): torch's rule, a tap wins if greater or NaN (the first maximum, the last
 * NaN), with its flat index in the pooled dims. sum: in T, taps in row-major order, as the
 * NumPy reference and torch's kernel add them, over div[cell] (the output plane's divisors)
 * where div is not NULL.
 */
TC static void S(pool_row)(T *x, T *y, int64_t *ir, const T *div, int back, const int64_t *g) {
    const int64_t *n = g, *o = g + 3, *dl = g + 6, *s0 = g + 9, *l0 = s0 + o[0], *h0 = l0 + o[0];
    const int64_t *s1 = h0 + o[0], *l1 = s1 + o[1], *h1 = l1 + o[1];
    const int64_t *s2 = h1 + o[1], *l2 = s2 + o[2], *h2 = l2 + o[2];
    int64_t cell = 0, cells = o[0] * o[1] * o[2];
    if (back)        /* (zeroed here: by the threads, each its rows, where NumPy's is one) */
        memset(x, 0, (size_t)(n[0] * n[1] * n[2]) * sizeof(T));
    for (int64_t k = 0; back && ir && k < cells; k++) x[ir[k]] += y[k];
    if (back && ir) return;
    for (int64_t a = 0; a < o[0]; a++)
        for (int64_t b = 0; b < o[1]; b++)
            for (int64_t c = 0; c < o[2]; c++, y++, cell++) {
                T acc = 0, v = back ? (div ? *y / div[cell] : *y) : 0;
                int64_t best = -1;
                for (int64_t ta = l0[a]; ta < h0[a]; ta++)
                    for (int64_t tb = l1[b]; tb < h1[b]; tb++) {
                        int64_t f = ((s0[a] + ta * dl[0]) * n[1] + s1[b] + tb * dl[1]) * n[2] +
                                    s2[c];
                        if (back)
                            for (int64_t tc = l2[c]; tc < h2[c]; tc++) x[f + tc * dl[2]] += v;
                        else if (!ir)
                            for (int64_t tc = l2[c]; tc < h2[c]; tc++) acc += x[f + tc * dl[2]];
                        else      /* (branch-free: random data mispredicts a branch) */
                            for (int64_t tc = l2[c]; tc < h2[c]; tc++) {
                                T u = x[f + tc * dl[2]];
                                int w = (best < 0) | (u > acc) | (u != u);
                                acc = w ? u : acc, best = w ? f + tc * dl[2] : best;
                            }
                    }
                if (back) continue;
                *y = div ? acc / div[cell] : acc;
                if (ir) *ir++ = best;
            }
}

/* back: x takes the gradient of an average pooling from y, each window's over its divisor
 * added to every tap in window order, as torch's kernel adds them; with idx, of a max pooling:
 * y added at the forward's indices, in output order */
EXPORT void S(pool)(T *x, T *y, int64_t *idx, int64_t rows, const int64_t *g, const T *div,
                    int back, int nt) {
    int64_t plane = g[0] * g[1] * g[2], cells = g[3] * g[4] * g[5];
    nt = threads_for(rows * (plane + cells) / 4, rows < nt ? (int)rows : nt);
    THREADED_FOR(nt, rows, 1, S(pool_row)(x + i * plane, y + i * cells, idx ? idx + i * cells :
                                          NULL, div, back, g));
}
