/* LAPACK's unblocked factorizations of a batch of b C-contiguous (m, n) matrices in place,
 * included by kernels.c for float and double (sums in double): for small matrices, where
 * OpenBLAS's LAPACK spends more on each call's setup (workspace, thread checks, LAPACKE's
 * transposes: 7-25 us for a 4x4, torch's whole call is 10-15) than the arithmetic.
 * op 0, Cholesky (potf2 'L' on the rows): L below the diagonal, zeros above; info the order
 *   of the first leading minor that is not positive-definite (the rest then unspecified).
 * op 1, LU with partial pivoting (getf2): L's multipliers below U, the 1-based row swaps in
 *   piv (b, min(m, n)), info the first zero pivot (1-based), whose column is then not scaled.
 * op 2, Householder QR (geqr2): R on and above the diagonal, the reflectors v (v_j = 1
 *   implied) below, their scales in t (b, min(m, n)); with cols > 0 zeros below R instead,
 *   and with q (b, m, cols) not NULL Q's first cols columns there (org2r: the reflectors
 *   applied to the identity, last first). info may be NULL.
 */
static void S(reflect)(T *x, int64_t ld, const T *v, int64_t lv, int64_t nv, T tau, int64_t c0,
                       int64_t n) {
    for (int64_t c = c0; c < n; c++) {      /* x[0:nv, c] -= tau v (v . x[:, c]), v_0 = 1 */
        double w = x[c];
        for (int64_t i = 1; i < nv; i++) w += (double)v[i * lv] * x[i * ld + c];
        x[c] -= (T)(tau * w);
        for (int64_t i = 1; i < nv; i++) x[i * ld + c] -= (T)(tau * w * v[i * lv]);
    }
}

EXPORT void S(factor)(int op, T *a, T *t, int32_t *piv, int32_t *info, T *q, int64_t b,
                      int64_t m, int64_t n, int64_t cols) {
    int64_t k = m < n ? m : n;
    for (int64_t s = 0; s < b; s++, a += m * n) {
        int32_t bad = 0;
        T *ts = t ? t + s * k : t, *qs = q ? q + s * m * cols : q;
        for (int64_t j = 0; j < k && op == 0; j++) {     /* (rows past a failure keep theirs) */
            memset(a + j * n + j + 1, 0, (n - j - 1) * sizeof(T));
            double d = a[j * n + j];
            for (int64_t c = 0; c < j; c++) d -= (double)a[j * n + c] * a[j * n + c];
            if (!(d > 0)) { bad = (int32_t)j + 1; break; }
            a[j * n + j] = (T)(d = sqrt(d));
            for (int64_t i = j + 1; i < n; i++) {
                double u = a[i * n + j];
                for (int64_t c = 0; c < j; c++) u -= (double)a[i * n + c] * a[j * n + c];
                a[i * n + j] = (T)(u / d);
            }
        }
        for (int64_t j = 0; j < k && op == 1; j++) {
            int64_t p = j;
            for (int64_t i = j + 1; i < m; i++)
                if (fabs(a[i * n + j]) > fabs(a[p * n + j])) p = i;
            piv[s * k + j] = (int32_t)p + 1;
            if (a[p * n + j] != 0) {
                for (int64_t c = 0; p != j && c < n; c++) {
                    T u = a[j * n + c]; a[j * n + c] = a[p * n + c]; a[p * n + c] = u;
                }
                T r = 1 / a[j * n + j];
                for (int64_t i = j + 1; i < m; i++) a[i * n + j] *= r;
            } else if (!bad) bad = (int32_t)j + 1;
            for (int64_t i = j + 1; i < m; i++)
                for (int64_t c = j + 1; c < n; c++) a[i * n + c] -= a[i * n + j] * a[j * n + c];
        }
        for (int64_t j = 0; j < k && op == 2; j++) {
            double x = 0, al = a[j * n + j], beta;
            for (int64_t i = j + 1; i < m; i++) x += (double)a[i * n + j] * a[i * n + j];
            ts[j] = 0;
            if (x == 0) continue;
            beta = -copysign(sqrt(al * al + x), al);
            ts[j] = (T)((beta - al) / beta);
            for (int64_t i = j + 1; i < m; i++) a[i * n + j] = (T)(a[i * n + j] / (al - beta));
            a[j * n + j] = (T)beta;
            S(reflect)(a + j * n, n, a + j * n + j, n, m - j, ts[j], j + 1, n);
        }
        if (op == 2 && cols) {
            for (int64_t i = 0; i < m && q; i++)
                for (int64_t c = 0; c < cols; c++) qs[i * cols + c] = i == c;
            for (int64_t j = k - 1; j >= 0 && q; j--)
                S(reflect)(qs + j * cols, cols, a + j * n + j, n, m - j, ts[j], j, cols);
            for (int64_t i = 1; i < m; i++) memset(a + i * n, 0, (i < n ? i : n) * sizeof(T));
        }
        if (info) info[s] = bad;
    }
}
