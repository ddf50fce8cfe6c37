/* Scaled dot-product attention with every head in one call, for short key sequences (the
 * GPT-sized case: 64 heads of 64 x 64 scores). Included by kernels.c for float and double as
 * attention.h is (T, S(name), EXP, LOG).
 *
 * attention.h's tile kernels leave the GEMMs to NumPy, which costs a few Python calls and
 * temporaries per tile: fine at sequence 4096, most of the time at 64. Here the whole
 * computation runs in C: per query head, blocks of ATTN_RB query rows against every key they
 * see (causal: the keys up to the block's last row, so most of the masked triangle is never
 * computed), the GEMMs through NumPy's BLAS (the pointer ember/_backends/blas.py finds, as
 * winograd.h does) and the softmax work between them as one sweep over each row of the block
 * (ATTN_RB x keys stays in L1/L2). Memory beyond the outputs is two such blocks per thread.
 *
 * Operands are passed as a table: `base[t]` is tensor t's data, `off[t * nq + h]` the element
 * offset of its head h's (rows x cols) matrix, `ld[t]` its row stride (columns are unit
 * stride); key/value tensors use entries h < nkv. Forward: t = q, k, v, out. Backward: t = q,
 * k, v, out, dout, dq, dk, dv. Query head h reads key/value head h / rep (grouped-query
 * attention). `lse` is (nq, L) contiguous: the per-row log-sum-exp the backward reuses.
 * Masking as in attention.h: row i sees the first clamp(i + diag + 1, 0, nk) keys (diag = 0
 * is torch's top-left causal mask, diag >= nk no mask).
 */

#ifndef ATTN_RB
#define ATTN_RB 32        /* query rows per block */
enum { AQ, AK, AV, AO, AG, ADQ, ADK, ADV };
#endif

#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")

/* c = alpha a b + beta c, row-major; ta/tb 1 to transpose a/b (BLAS's 112 vs 111). */
static void S(attn_gemm)(void *fn, int ilp64, int ta, int tb, int64_t m, int64_t n, int64_t k,
                         T alpha, const T *a, int64_t lda, const T *b, int64_t ldb, T beta, T *c,
                         int64_t ldc) {
    S(blas_gemm)(fn, ilp64, ta ? 112 : 111, tb ? 112 : 111, m, n, k, alpha, a, lda, b, ldb,
                 beta, c, ldc);
}

/* NOTE: `omp simd reduction(+)` keeps per-lane sums but adds the lanes at the end one by one
 * through memory, a chain of 16 dependent adds: at 64 keys a row, that cost as much as the
 * row's exps. Here 16 partial sums (a vector register) are added pairwise instead. */
#define ATTN_W 16
static inline T S(attn_hsum)(T *part) {
    /* constant trip counts, so each halving is one vector add */
    for (int l = 0; l < 8; l++) part[l] += part[l + 8];
    for (int l = 0; l < 4; l++) part[l] += part[l + 4];
    for (int l = 0; l < 2; l++) part[l] += part[l + 2];
    return part[0] + part[1];
}

/* s[j] <- exp(s[j] - mx) for j < n; returns their sum */
static inline T S(attn_exp_sum)(T *s, int64_t n, T mx) {
    T part[ATTN_W] = {0};
    int64_t j = 0;
    for (; j + ATTN_W <= n; j += ATTN_W)
#pragma omp simd
        for (int l = 0; l < ATTN_W; l++) {
            T e = EXP(s[j + l] - mx);
            s[j + l] = e;
            part[l] += e;
        }
    for (int l = 0; j < n; j++, l++) {
        s[j] = EXP(s[j] - mx);
        part[l] += s[j];
    }
    return S(attn_hsum)(part);
}

/* sum of a[c] b[c] for c < n */
static inline T S(attn_dot)(const T *a, const T *b, int64_t n) {
    T part[ATTN_W] = {0};
    int64_t c = 0;
    for (; c + ATTN_W <= n; c += ATTN_W)
#pragma omp simd
        for (int l = 0; l < ATTN_W; l++) part[l] += a[c + l] * b[c + l];
    for (int l = 0; c < n; c++, l++) part[l] += a[c] * b[c];
    return S(attn_hsum)(part);
}

/* Rows r0..r1 of a score block s (row stride ld, first row r0, cols keys) in place: s <-
 * softmax over the keys each row sees, 0 beyond; lse[i] <- the row's log-sum-exp. Masked keys
 * are set to -inf first, so every loop runs over the block's full width: rows are short (64
 * keys at GPT sizes) and a per-row tail would cost more than the masked lanes. */
TC static void S(attn_small_softmax)(T *s, int64_t ld, T *lse, int64_t r0, int64_t r1,
                                     int64_t cols, int64_t nk, int64_t diag) {
    for (int64_t i = r0; i < r1; i++) {
        T *sr = s + (i - r0) * ld;
        T mx = -INFINITY, sum;
        for (int64_t j = S(attn_seen)(i, diag, nk); j < cols; j++) sr[j] = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int64_t j = 0; j < cols; j++) mx = sr[j] > mx ? sr[j] : mx;
        /* NOTE: a row that sees no key gets NaN (exp(-inf - -inf)), as torch's softmax over
         * all -inf does */
        sum = S(attn_exp_sum)(sr, cols, mx);
        T inv = 1 / sum;
#pragma omp simd
        for (int64_t j = 0; j < cols; j++) sr[j] *= inv;
        lse[i] = mx + LOG(sum);
    }
}

/* Rows r0..r1 of the backward block in place: s (scores) <- P = exp(s - lse), dp (dO v^T) <-
 * dS = P (dp - D) with D = rowsum(dO * O) computed here; both 0 on masked keys (set to -inf
 * first, as in the forward, so the loop runs over the block's full width). */
TC static void S(attn_small_dscores)(T *s, T *dp, int64_t ld, const T *lse, const T *o,
                                     int64_t ldo, const T *g, int64_t ldg, int64_t dv,
                                     int64_t r0, int64_t r1, int64_t cols, int64_t nk,
                                     int64_t diag) {
    for (int64_t i = r0; i < r1; i++) {
        T *sr = s + (i - r0) * ld, *dr = dp + (i - r0) * ld;
        const T *orow = o + i * ldo, *grow = g + i * ldg;
        T di = S(attn_dot)(orow, grow, dv), li = lse[i];
        for (int64_t j = S(attn_seen)(i, diag, nk); j < cols; j++) sr[j] = -INFINITY;
#pragma omp simd
        for (int64_t j = 0; j < cols; j++) {
            T p = EXP(sr[j] - li);
            sr[j] = p;
            dr[j] = p * (dr[j] - di);
        }
    }
}

/* t (cols x rows, row stride ldt) <- a^T for a (rows x cols, row stride lda).
 * NOTE: OpenBLAS's small-matrix GEMM runs q k^T (B transposed) at a fraction of the speed of
 * the untransposed product at these sizes; transposing k and v into a thread's buffer costs
 * little beside the GEMMs that read them. */
TC static void S(attn_transpose)(const T *a, int64_t lda, int64_t rows, int64_t cols, T *t,
                                 int64_t ldt) {
    for (int64_t c = 0; c < cols; c++)      /* contiguous writes, gathered reads */
#pragma omp simd
        for (int64_t j = 0; j < rows; j++) t[c * ldt + j] = a[j * lda + c];
}

/* Keys the rows r0..r1 see between them (the block's last row sees the most). */
static inline int64_t S(attn_block_keys)(int64_t r1, int64_t nk, int64_t diag) {
    return S(attn_seen)(r1 - 1, diag, nk);
}

/* Query rows r0.. (one block) of query head h: o = softmax(scale q k^T, masked) v, lse; s is
 * the thread's score block, kt the head's k transposed (row stride nk). */
static void S(attn_small_fwd_block)(T *const *base, const int64_t *off, const int64_t *ld,
                                    T *lse, int64_t nq, int64_t h, int64_t r0, int64_t L,
                                    int64_t nk, int64_t d, int64_t dv, T scale, int64_t diag,
                                    void *gemm, int ilp64, T *s, const T *kt, const T *v) {
    int64_t r1 = r0 + ATTN_RB < L ? r0 + ATTN_RB : L;
    int64_t cols = S(attn_block_keys)(r1, nk, diag);
    const T *q = base[AQ] + off[AQ * nq + h];
    T *o = base[AO] + off[AO * nq + h];
    if (cols > 0)
        S(attn_gemm)(gemm, ilp64, 0, 0, r1 - r0, cols, d, scale, q + r0 * ld[AQ], ld[AQ], kt,
                     nk, 0, s, nk);
    S(attn_small_softmax)(s, nk, lse + h * L, r0, r1, cols, nk, diag);
    if (cols > 0)
        S(attn_gemm)(gemm, ilp64, 0, 0, r1 - r0, dv, cols, 1, s, nk, v, ld[AV], 0,
                     o + r0 * ld[AO], ld[AO]);
    else
        for (int64_t i = r0; i < r1; i++)
            for (int64_t c = 0; c < dv; c++) o[i * ld[AO] + c] = NAN;
}

/* out = softmax(scale q k^T, masked) v for every query head; returns -1 when out of memory.
 * Threads take whole key/value heads (k is transposed once for all their query rows) or,
 * where there are fewer key/value heads than threads (one long sequence), query blocks, the
 * longest first and handed out one at a time, so that the causal triangle splits evenly. */
EXPORT int S(attn_small_fwd)(T *const *base, const int64_t *off, const int64_t *ld, T *lse,
                             int64_t nkv, int64_t rep, int64_t L, int64_t nk, int64_t d,
                             int64_t dv, double scale, int64_t diag, void *gemm, int ilp64,
                             int nt) {
    int64_t nq = nkv * rep, blocks = (L + ATTN_RB - 1) / ATTN_RB;
    int fail = 0;
    nt = threads_for(nq * L * nk * (d + dv) / 8, nt);
    int split = nkv < nt;
#pragma omp parallel num_threads(nt) reduction(| : fail)
    {
        T *s = malloc(sizeof(T) * (ATTN_RB + d) * nk), *kt = s + ATTN_RB * nk;
        int64_t cur = -1;                   /* the key/value head kt holds */
        fail = !s;
        if (!split) {
#pragma omp for schedule(static)
            for (int64_t g = 0; g < nkv; g++) {
                if (!s) continue;
                S(attn_transpose)(base[AK] + off[AK * nq + g], ld[AK], nk, d, kt, nk);
                for (int64_t t = g * rep * blocks; t < (g + 1) * rep * blocks; t++)
                    S(attn_small_fwd_block)(base, off, ld, lse, nq, t / blocks,
                                            (t % blocks) * ATTN_RB, L, nk, d, dv, (T)scale,
                                            diag, gemm, ilp64, s, kt,
                                            base[AV] + off[AV * nq + g]);
            }
        } else {
#pragma omp for schedule(dynamic, 1)
            for (int64_t u = 0; u < nq * blocks; u++) {
                /* the last block of every head first: blocks = its position from the end */
                int64_t h = u % nq, b = blocks - 1 - u / nq, g = h / rep;
                if (!s) continue;
                if (g != cur)
                    S(attn_transpose)(base[AK] + off[AK * nq + g], ld[AK], nk, d, kt, nk);
                cur = g;
                S(attn_small_fwd_block)(base, off, ld, lse, nq, h, b * ATTN_RB, L, nk, d, dv,
                                        (T)scale, diag, gemm, ilp64, s, kt,
                                        base[AV] + off[AV * nq + g]);
            }
        }
        free(s);
    }
    return fail ? -1 : 0;
}

/* One query block (rows r0.., head h) of the backward: dq's rows written, dk and dv (row
 * strides lk, lv) added to (acc 1) or started (acc 0). s, dp: the thread's blocks; kt, vt:
 * the key/value head transposed. Returns the keys the block sees. */
static int64_t S(attn_small_bwd_block)(T *const *base, const int64_t *off, const int64_t *ld,
                                       const T *lse, int64_t nq, int64_t h, int64_t r0,
                                       int64_t L, int64_t nk, int64_t d, int64_t dv, T scale,
                                       int64_t diag, void *gemm, int ilp64, T *s, T *dp,
                                       const T *k, const T *kt, const T *vt, T *dk, int64_t lk,
                                       T *dvh, int64_t lv, T acc) {
    const T *q = base[AQ] + off[AQ * nq + h], *o = base[AO] + off[AO * nq + h];
    const T *dout = base[AG] + off[AG * nq + h];
    T *dq = base[ADQ] + off[ADQ * nq + h];
    int64_t r1 = r0 + ATTN_RB < L ? r0 + ATTN_RB : L, rows = r1 - r0;
    int64_t cols = S(attn_block_keys)(r1, nk, diag);
    const T *qb = q + r0 * ld[AQ], *gb = dout + r0 * ld[AG];
    if (cols <= 0) {     /* rows that see no key: their gradient is 0 */
        for (int64_t i = r0; i < r1; i++)
            for (int64_t c = 0; c < d; c++) dq[i * ld[ADQ] + c] = 0;
        return 0;
    }
    S(attn_gemm)(gemm, ilp64, 0, 0, rows, cols, d, scale, qb, ld[AQ], kt, nk, 0, s, nk);
    S(attn_gemm)(gemm, ilp64, 0, 0, rows, cols, dv, 1, gb, ld[AG], vt, nk, 0, dp, nk);
    S(attn_small_dscores)(s, dp, nk, lse + h * L, o, ld[AO], dout, ld[AG], dv, r0, r1, cols,
                          nk, diag);
    /* dv += P^T dO, dq = scale dS k, dk += scale dS^T q */
    S(attn_gemm)(gemm, ilp64, 1, 0, cols, dv, rows, 1, s, nk, gb, ld[AG], acc, dvh, lv);
    S(attn_gemm)(gemm, ilp64, 0, 0, rows, d, cols, scale, dp, nk, k, ld[AK], 0,
                 dq + r0 * ld[ADQ], ld[ADQ]);
    S(attn_gemm)(gemm, ilp64, 1, 0, cols, d, rows, scale, dp, nk, qb, ld[AQ], acc, dk, lk);
    return cols;
}

/* dq, dk, dv of the forward above, from its out and lse and the output gradient dout. Threads
 * take whole key/value heads (their query heads all add into one dk, dv) or, with fewer
 * key/value heads than threads, query blocks as the forward, adding into dk, dv of their own
 * that are summed at the end; -1: out of memory. */
EXPORT int S(attn_small_bwd)(T *const *base, const int64_t *off, const int64_t *ld,
                             const T *lse, int64_t nkv, int64_t rep, int64_t L, int64_t nk,
                             int64_t d, int64_t dv, double scale, int64_t diag, void *gemm,
                             int ilp64, int nt) {
    int64_t nq = nkv * rep, blocks = (L + ATTN_RB - 1) / ATTN_RB;
    int fail = 0;
    nt = threads_for(nq * L * nk * (d + dv) / 4, nt);
    int split = nkv < nt;
    T **own = split ? calloc((size_t)nt, sizeof(T *)) : NULL;    /* per-thread dk, dv */
    if (split && !own) return -1;
#pragma omp parallel num_threads(nt) reduction(| : fail)
    {
        T *s = malloc(sizeof(T) * (2 * ATTN_RB + d + dv) * nk), *dp = s + ATTN_RB * nk;
        T *kt = dp + ATTN_RB * nk, *vt = kt + d * nk;
        fail = !s;
        if (!split) {
#pragma omp for schedule(static)
            for (int64_t g = 0; g < nkv; g++) {
                if (!s) continue;
                const T *k = base[AK] + off[AK * nq + g], *v = base[AV] + off[AV * nq + g];
                T *dk = base[ADK] + off[ADK * nq + g], *dvh = base[ADV] + off[ADV * nq + g];
                /* key rows of dk, dv written so far: the query blocks run last first, so the
                 * first one that sees any key sees the most (causal) and its products start
                 * dk, dv with beta = 0; the rest add (zeroing them first would be a memset
                 * of one strided row each). */
                int64_t done = 0;
                S(attn_transpose)(k, ld[AK], nk, d, kt, nk);
                S(attn_transpose)(v, ld[AV], nk, dv, vt, nk);
                for (int64_t h = g * rep; h < (g + 1) * rep; h++)
                    for (int64_t r0 = (L - 1) / ATTN_RB * ATTN_RB; r0 >= 0; r0 -= ATTN_RB) {
                        /* (cols only shrink from the first block on: done is 0 or >= cols) */
                        int64_t cols = S(attn_small_bwd_block)(
                            base, off, ld, lse, nq, h, r0, L, nk, d, dv, (T)scale, diag, gemm,
                            ilp64, s, dp, k, kt, vt, dk, ld[ADK], dvh, ld[ADV], done ? 1 : 0);
                        done = done > cols ? done : cols;
                    }
                for (int64_t j = done; j < nk; j++) {       /* keys no query sees */
                    for (int64_t c = 0; c < d; c++) dk[j * ld[ADK] + c] = 0;
                    for (int64_t c = 0; c < dv; c++) dvh[j * ld[ADV] + c] = 0;
                }
            }
        } else {
            int me = omp_get_thread_num();
            T *mine = own[me] = calloc((size_t)(nkv * nk * (d + dv)), sizeof(T));
            int64_t cur = -1;
            fail |= !mine;
#pragma omp for schedule(dynamic, 1)
            for (int64_t u = 0; u < nq * blocks; u++) {
                int64_t h = u % nq, b = blocks - 1 - u / nq, g = h / rep;
                if (!s || !mine) continue;
                const T *k = base[AK] + off[AK * nq + g];
                if (g != cur) {
                    S(attn_transpose)(k, ld[AK], nk, d, kt, nk);
                    S(attn_transpose)(base[AV] + off[AV * nq + g], ld[AV], nk, dv, vt, nk);
                }
                cur = g;
                S(attn_small_bwd_block)(base, off, ld, lse, nq, h, b * ATTN_RB, L, nk, d, dv,
                                        (T)scale, diag, gemm, ilp64, s, dp, k, kt, vt,
                                        mine + g * nk * (d + dv), d + dv,
                                        mine + g * nk * (d + dv) + d, d + dv, 1);
            }
            /* (the loop's barrier: every thread's sums are complete) */
#pragma omp for schedule(static)
            for (int64_t r = 0; r < nkv * nk; r++) {
                int64_t g = r / nk, j = r % nk;
                T *dk = base[ADK] + off[ADK * nq + g] + j * ld[ADK];
                T *dvh = base[ADV] + off[ADV * nq + g] + j * ld[ADV];
                for (int64_t c = 0; c < d + dv; c++) {
                    T sum = 0;
                    for (int t = 0; t < nt; t++)
                        sum += own[t] ? own[t][r * (d + dv) + c] : 0;
                    if (c < d) dk[c] = sum;
                    else dvh[c - d] = sum;
                }
            }
            free(mine);
        }
        free(s);
    }
    free(own);
    return fail ? -1 : 0;
}

#pragma GCC pop_options
