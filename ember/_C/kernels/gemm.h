/* Batched matrix products through NumPy's own BLAS, included by kernels.c for float and double
 * (T, S(name) defined there, after winograd.h, whose S(wino_gemm) makes the BLAS call).
 *
 * NumPy's matmul walks a stack of matrices calling BLAS once per matrix, and hands each GEMM
 * to BLAS's own threads: at the attention's (64, 256, 64) products two BLAS threads wake and
 * join per 1-2 MFLOP GEMM, slower than one thread. Here the batch is split over OpenMP threads
 * instead (the caller keeps BLAS on one thread meanwhile: ember/_ops/gemm.py), each thread
 * calling BLAS on whole matrices. Operands are strided: matrix i of A starts at a + i * sa
 * (sa 0: one matrix broadcast over the batch), and ta/tb say whether a matrix is stored
 * transposed (CBLAS's 111 / 112), so transposed views need no copy.
 */

/* c[i] = a[i] @ b[i] (+ c[i] when acc) for i < batch */
EXPORT void S(bmm)(void *fn, int ilp64, int64_t batch, int ta, int tb, int64_t m, int64_t n,
                   int64_t k, const T *a, int64_t lda, int64_t sa, const T *b, int64_t ldb,
                   int64_t sb, int acc, T *c, int64_t ldc, int64_t sc, int nt) {
    nt = threads_for(batch * m * n * k / 1024, nt);
    if (nt > batch) nt = (int)batch;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < batch; i++)
        S(wino_gemm)(fn, ilp64, ta, tb, m, n, k, a + i * sa, lda, b + i * sb, ldb, acc,
                     c + i * sc, ldc);
}
