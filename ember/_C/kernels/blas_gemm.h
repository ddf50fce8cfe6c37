/* c = alpha op(a) op(b) + beta c, row-major, through the cblas_?gemm of NumPy's own BLAS (the
 * pointer ember/_backends/blas.py finds; ilp64: it takes 64-bit ints). ta/tb are BLAS's codes:
 * 111 no transpose, 112 transpose. The one place the kernels call BLAS from. */
static void S(blas_gemm)(void *fn, int ilp64, int ta, int tb, int64_t m, int64_t n, int64_t k,
                         T alpha, const T *a, int64_t lda, const T *b, int64_t ldb, T beta, T *c,
                         int64_t ldc) {
    if (ilp64)
        ((void (*)(int, int, int, int64_t, int64_t, int64_t, T, const T *, int64_t, const T *,
                   int64_t, T, T *, int64_t))fn)(101, ta, tb, m, n, k, alpha, a, lda, b, ldb,
                                                 beta, c, ldc);
    else
        ((void (*)(int, int, int, int, int, int, T, const T *, int, const T *, int, T, T *,
                   int))fn)(101, ta, tb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                            (int)ldb, beta, c, (int)ldc);
}
