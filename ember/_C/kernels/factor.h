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
 * op 3, Bunch-Kaufman LDL^T (sytf2 'L', on the rows' lower triangle, read as LAPACK's lower):
 *   its pivots (1-based; a 2x2 block's -p on both), its info, zeros above the diagonal. In T,
 *   as LAPACK's s/d routines, so float32 rounds as ssytf2 does.
 */
#define A_(i, j) a[(i) * n + (j)]
static int32_t S(sytf2)(T *a, int32_t *piv, int64_t n) {
    const T alpha = (1 + SQRT((T)17)) / 8;
    int32_t bad = 0;
    for (int64_t k = 0, kstep, kp; k < n; k += kstep) {
        T absakk = fabs(A_(k, k)), colmax = 0, rowmax;
        int64_t imax = k;
        for (int64_t i = k + 1; i < n; i++)     /* (i?amax: the first largest) */
            if (i == k + 1 || fabs(A_(i, k)) > colmax) colmax = fabs(A_(i, k)), imax = i;
        kstep = 1, kp = k;
        if ((absakk > colmax ? absakk : colmax) == 0 || absakk != absakk) {
            if (!bad) bad = (int32_t)k + 1;
            piv[k] = (int32_t)k + 1;
            continue;
        }
        if (absakk < alpha * colmax) {
            rowmax = fabs(A_(imax, k));
            for (int64_t j = k + 1; j < imax; j++)
                if (fabs(A_(imax, j)) > rowmax) rowmax = fabs(A_(imax, j));
            if (imax < n - 1) {
                T r = fabs(A_(imax + 1, imax));
                for (int64_t i = imax + 2; i < n; i++)
                    if (fabs(A_(i, imax)) > r) r = fabs(A_(i, imax));
                rowmax = rowmax > r ? rowmax : r;
            }
            if (absakk >= alpha * colmax * (colmax / rowmax)) kp = k;
            else if (fabs(A_(imax, imax)) >= alpha * rowmax) kp = imax;
            else kp = imax, kstep = 2;
        }
        int64_t kk = k + kstep - 1;
        T u, d11, d22, d21, wk, wkp1;
#define SWAP_(x, y) (u = x, x = y, y = u)
        if (kp != kk) {     /* rows and columns kk and kp of the trailing matrix */
            for (int64_t i = kp + 1; i < n; i++) SWAP_(A_(i, kk), A_(i, kp));
            for (int64_t j = kk + 1; j < kp; j++) SWAP_(A_(j, kk), A_(kp, j));
            SWAP_(A_(kk, kk), A_(kp, kp));
            if (kstep == 2) SWAP_(A_(k + 1, k), A_(kp, k));
        }
        if (kstep == 1) {   /* syr: the trailing lower triangle -= x x^T / d, then x /= d */
            d11 = 1 / A_(k, k);
            for (int64_t j = k + 1; j < n; j++) {
                T t = -d11 * A_(j, k);
                for (int64_t i = j; i < n; i++) A_(i, j) += A_(i, k) * t;
            }
            for (int64_t i = k + 1; i < n; i++) A_(i, k) *= d11;
            piv[k] = (int32_t)kp + 1;
        } else {
            if (k < n - 2) {
                d21 = A_(k + 1, k), d11 = A_(k + 1, k + 1) / d21, d22 = A_(k, k) / d21;
                d21 = 1 / (d11 * d22 - 1) / d21;
                for (int64_t j = k + 2; j < n; j++) {
                    wk = d21 * (d11 * A_(j, k) - A_(j, k + 1));
                    wkp1 = d21 * (d22 * A_(j, k + 1) - A_(j, k));
                    for (int64_t i = j; i < n; i++)
                        A_(i, j) = A_(i, j) - A_(i, k) * wk - A_(i, k + 1) * wkp1;
                    A_(j, k) = wk, A_(j, k + 1) = wkp1;
                }
            }
            piv[k] = piv[k + 1] = -(int32_t)kp - 1;
        }
#undef SWAP_
    }
    for (int64_t i = 0; i < n; i++) memset(a + i * n + i + 1, 0, (n - i - 1) * sizeof(T));
    return bad;
}
#undef A_

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
        if (op == 3) bad = S(sytf2)(a, piv + s * n, n);
        if (info) info[s] = bad;
    }
}

/* c (batch, m, n), C-contiguous = alpha a @ b + beta in, elements at the given byte strides
 * (a batch, row, column; b likewise; in's 0 where it broadcasts), sums in double: the matmul
 * family's products of a few thousand multiply-adds (_ops/linalg.py, _small_mm), where
 * numpy.matmul's BLAS call and the scale-and-add's passes cost more than torch's whole call.
 * in is not read where beta is 0 (its NaNs do not propagate, as torch's). The sizes and
 * strides lead: the caller binds them once per call signature, then passes the pointers. */
EXPORT void S(small_mm)(int64_t ab, int64_t am, int64_t ak, int64_t bb, int64_t bk, int64_t bn,
                        int64_t batch, int64_t m, int64_t n, int64_t k, int64_t ib, int64_t im,
                        int64_t in_, const T *a, const T *b, T *c, const T *in, double alpha,
                        double beta) {
    int64_t z = sizeof(T);      /* (NumPy's byte strides: an aligned array's divide) */
    am /= z, ak /= z, ab /= z, bk /= z, bn /= z, bb /= z, im /= z, in_ /= z, ib /= z;
    for (int64_t s = 0; s < batch; s++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++, c++) {
                double acc = 0;
                for (int64_t p = 0; p < k; p++)
                    acc += (double)a[s * ab + i * am + p * ak] * b[s * bb + p * bk + j * bn];
                acc *= alpha;
                *c = (T)(beta != 0 ? acc + beta * in[s * ib + i * im + j * in_] : acc);
            }
}

/* *out = x . y of n contiguous elements, sums in double, split over nt threads: NumPy's dot
 * is OpenBLAS's on one thread, where torch splits a large dot over its threads (_ops/linalg.py's
 * dot at several threads). */
EXPORT void S(dot)(const T *x, const T *y, int64_t n, T *out, int nt) {
    double acc = 0;
    nt = threads_for(n / 2, nt);
#pragma omp parallel for simd reduction(+ : acc) num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t i = 0; i < n; i++) acc += (double)x[i] * y[i];
    *out = (T)acc;
}

/* cdist's Euclidean distances: out[s, i, j] = |a[s, i] - b[s, j]| for contiguous (batch, p, m)
 * a and (batch, r, m) b (rows = batch * p), the squares summed in double; rows over threads.
 * NumPy's broadcast subtract and reduce of the (p, r, m) differences were most of a small call. */
EXPORT void S(cdist2)(const T *a, const T *b, T *out, int64_t rows, int64_t p, int64_t r,
                      int64_t m, int nt) {
    nt = threads_for(rows * r * m, nt);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < r; j++) {
            const T *x = a + i * m, *y = b + (i / p * r + j) * m;
            double acc = 0;
            for (int64_t k = 0; k < m; k++) acc += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
            out[i * r + j] = (T)sqrt(acc);
        }
}
