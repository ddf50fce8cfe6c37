/* The per-tile softmax work of blockwise (flash) attention, included by kernels.c for float
 * and double as rowops.h is (T, S(name), EXP, LOG defined there). The GEMMs stay in BLAS
 * (ember/nn/_attention.py calls them); these kernels fuse the NumPy passes between them: one
 * sweep over a score tile's row (a row of <= 1024 values stays in L1) instead of ~8 passes.
 *
 * A tile is `rows` queries by `cols` keys, row-major with row stride `ld`. The scale is folded
 * into q beforehand, so a tile holds final scores. Masking: row i sees the first
 * clamp(i + diag + 1, 0, cols) keys of the tile, which is torch's top-left causal mask for
 * diag = (first query) - (first key), and no mask for diag >= cols.
 */

/* NOTE: the build turns FMA contraction off for Adam's bit-exactness; here a fused multiply-add
 * only makes exp's polynomial faster and more exact, and no result must match bit for bit. */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")

static inline int64_t S(attn_seen)(int64_t i, int64_t diag, int64_t cols) {
    int64_t n = i + diag + 1;
    return n < 0 ? 0 : (n > cols ? cols : n);
}

TC static void S(attn_fwd_rows)(T *s, int64_t ld, T *m, T *l, T *acc, int64_t lda, int64_t r0,
                                int64_t r1, int64_t cols, int64_t dv, int64_t diag) {
    for (int64_t i = r0; i < r1; i++) {
        T *sr = s + i * ld;
        int64_t n = S(attn_seen)(i, diag, cols);
        for (int64_t j = n; j < cols; j++) sr[j] = 0;    /* masked keys add nothing to P @ V */
        if (n == 0) continue;                             /* the row sees no key of this tile */
        T mx = -INFINITY, sum = 0;
#pragma omp simd reduction(max : mx)
        for (int64_t j = 0; j < n; j++) mx = sr[j] > mx ? sr[j] : mx;
        T mo = m[i], mn = mo > mx ? mo : mx;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < n; j++) {
            T e = EXP(sr[j] - mn);
            sr[j] = e;
            sum += e;
        }
        /* NOTE: the running max only grows; the old accumulator is rescaled by exp(old - new)
         * (0 on the first tile, where m is -inf). Skipped when the max did not move. */
        if (mn != mo) {
            T corr = EXP(mo - mn);
            T *ar = acc + i * lda;
            for (int64_t c = 0; c < dv; c++) ar[c] *= corr;
            l[i] *= corr;
        }
        l[i] += sum;
        m[i] = mn;
    }
}

/* Forward, a batch of `nb` tiles (one per head; strides sb, mb, ab between them), in place:
 * s <- exp(s - m_new) (0 where masked), m <- m_new (running row max), l <- l * corr + rowsum,
 * acc <- acc * corr (before the caller adds s @ v). m and l are rows x 1 per head. */
EXPORT void S(attn_fwd_tile)(T *s, int64_t ld, int64_t sb, T *m, T *l, int64_t mb, T *acc,
                             int64_t lda, int64_t ab, int64_t nb, int64_t rows, int64_t cols,
                             int64_t dv, int64_t diag, int nt) {
    int64_t per = (rows + 15) / 16;
    nt = threads_for(nb * rows * cols * 4, nt);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < nb * per; t++) {
        int64_t b = t / per, r = (t % per) * 16;
        S(attn_fwd_rows)(s + b * sb, ld, m + b * mb, l + b * mb, acc + b * ab, lda, r,
                         r + 16 < rows ? r + 16 : rows, cols, dv, diag);
    }
}

TC static void S(attn_bwd_rows)(T *s, T *dp, int64_t ld, const T *lse, const T *dd, int64_t r0,
                                int64_t r1, int64_t cols, int64_t diag) {
    for (int64_t i = r0; i < r1; i++) {
        T *sr = s + i * ld, *dr = dp + i * ld;
        int64_t n = S(attn_seen)(i, diag, cols);
        T li = lse[i], di = dd[i];
        for (int64_t j = 0; j < n; j++) {
            T p = EXP(sr[j] - li);
            sr[j] = p;
            dr[j] = p * (dr[j] - di);
        }
        for (int64_t j = n; j < cols; j++) sr[j] = dr[j] = 0;
    }
}

/* Backward, a batch of `nb` tiles (strides sb between score tiles, lb between the heads' lse
 * and D), in place: s <- P = exp(s - lse) and dp <- dS = P * (dp - D), where dp holds
 * dO @ v^T and D = rowsum(dO * O); both 0 where masked. */
EXPORT void S(attn_bwd_tile)(T *s, T *dp, int64_t ld, int64_t sb, const T *lse, const T *dd,
                             int64_t lb, int64_t nb, int64_t rows, int64_t cols, int64_t diag,
                             int nt) {
    int64_t per = (rows + 15) / 16;
    nt = threads_for(nb * rows * cols * 4, nt);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < nb * per; t++) {
        int64_t b = t / per, r = (t % per) * 16;
        S(attn_bwd_rows)(s + b * sb, dp + b * sb, ld, lse + b * lb, dd + b * lb, r,
                         r + 16 < rows ? r + 16 : rows, cols, diag);
    }
}

#pragma GCC pop_options
