/* Copies and bit steps by machine word, where NumPy goes element by element.
 * x[mask] for a mask of x's shape, both contiguous: the selected elements in order. NumPy's
 * boolean indexing branches on every element (a random mask mispredicts half of them); here
 * each element is stored unconditionally and the output position advances by the mask byte
 * (0 or 1), and the elements are split over threads: nonzero_u8_count (below: offsets[t] =
 * where chunk t of nt, of ceil(n / nt) elements, starts in the output, offsets[nt] the total)
 * gives each chunk's first output position, then the copy fills the chunks independently.
 * Elements are moved as 4- or 8-byte words, so any dtype of that size is copied bit for bit. */

/* (every element goes somewhere: to its place, or to a scratch word once its chunk's output
 * is full, so no write crosses into the next chunk's) */
#define MASK_SELECT(NAME, W)                                                                   \
    EXPORT void NAME(const W *x, const uint8_t *m, W *out, int64_t n, const int64_t *offsets, \
                     int nt) {                                                                 \
        int64_t chunk = (n + nt - 1) / nt;                                                     \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
        for (int t = 0; t < nt; t++) {                                                         \
            int64_t i0 = t * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;                      \
            int64_t j = offsets[t], end = offsets[t + 1];                                      \
            W scratch;                                                                         \
            for (int64_t i = i0; i < i1; i++) {                                                \
                W *dst = j < end ? out + j : &scratch;                                         \
                *dst = x[i];                                                                   \
                j += m[i];                                                                     \
            }                                                                                  \
        }                                                                                      \
    }
/* (masked_scatter, the reverse: out[i] = m[i] ? src[j] : x[i], j advancing by the mask byte
 * from the chunk's offset; src read at j clamped to the last one taken, so never past it) */
#define MASK_SCATTER(NAME, W)                                                                  \
    EXPORT void NAME(const W *x, const uint8_t *m, const W *src, W *out, int64_t n,          \
                     const int64_t *offsets, int nt) {                                         \
        int64_t chunk = (n + nt - 1) / nt, last = offsets[nt] - 1;                             \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
        for (int t = 0; t < nt; t++) {                                                         \
            int64_t i0 = t * chunk, i1 = i0 + chunk < n ? i0 + chunk : n, j = offsets[t];      \
            for (int64_t i = i0; i < i1; i++) {                                                \
                W s = src[j < last ? j : last];                                                \
                out[i] = m[i] ? s : x[i];                                                      \
                j += m[i];                                                                     \
            }                                                                                  \
        }                                                                                      \
    }
MASK_SELECT(mask_select_f32, uint32_t)
MASK_SELECT(mask_select_f64, uint64_t)
MASK_SCATTER(mask_scatter_f32, uint32_t)
MASK_SCATTER(mask_scatter_f64, uint64_t)
#undef MASK_SELECT
#undef MASK_SCATTER

/* x[..., ::-1] of rows of len words (n in all): NumPy copies a negative stride one element at
 * a time */
#define FLIP_ROWS(NAME, W)                                                                     \
    EXPORT void NAME(const W *x, W *out, int64_t n, int64_t len, int nt) {                     \
        _Pragma("omp parallel for num_threads(threads_for(n, nt)) schedule(static)")          \
        for (int64_t r = 0; r < n; r += len)                                                   \
            for (int64_t j = 0; j < len; j++) out[r + j] = x[r + len - 1 - j];                 \
    }
FLIP_ROWS(flip_rows_f32, uint32_t)
FLIP_ROWS(flip_rows_f64, uint64_t)

/* tril (upper 0) or triu (upper 1) of rows / n matrices of n x m elements of w bytes: each row
 * a copy of its kept columns and a zero fill of the others, rows over threads (NumPy's tril
 * and triu run where() on a mask, ember's reference a whole copy then a masked one) */
EXPORT void tri_rows(const char *x, char *out, int64_t rows, int64_t n, int64_t m,
                     int64_t diagonal, int upper, int64_t w, int nt) {
    int t = threads_for(rows * m * w / 4, nt);
    const int64_t len = m * w;
    THREADED_FOR(t, rows, 1, {    /* columns [0, k) are tril's part, [k, m) triu's */
        int64_t k = i % n + diagonal + !upper;
        char *d = out + i * len;
        const char *s = x + i * len;
        k = (k < 0 ? 0 : k > m ? m : k) * w;
        if (upper) { memset(d, 0, (size_t)k); memcpy(d + k, s + k, (size_t)(len - k)); }
        else { memcpy(d, s, (size_t)k); memset(d + k, 0, (size_t)(len - k)); }
    })
}

/* C's nextafter, exactly, without its branches: the bit pattern as a signed-magnitude key
 * (m - bits for a negative: an involution, -0.0 and 0.0 both 0) steps by one towards b (a zero
 * reached keeps a's sign); nan where either is (a's own bits where a is), b where a == b. */
#define NEXTAFTER(NAME, T, I, M)                                                               \
    EXPORT void NAME(const T *a, const T *b, T *out, int64_t n, int nt) {                      \
        _Pragma("omp parallel for simd num_threads(threads_for(n * 4, nt)) schedule(static)") \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T x = a[i], y = b[i], r;                                                           \
            I bits, k;                                                                         \
            memcpy(&bits, &x, sizeof k);                                                       \
            k = (bits < 0 ? M - bits : bits) + (I)(y > x) - (I)(y < x);                        \
            k = k < 0 ? M - k : k ? k : bits & M;                                              \
            memcpy(&r, &k, sizeof r), out[i] = x == y || y != y ? y : r;                       \
        }                                                                                      \
    }
NEXTAFTER(nextafter_f32, float, int32_t, INT32_MIN)
NEXTAFTER(nextafter_f64, double, int64_t, INT64_MIN)

/* nonzero / argwhere: the coordinates (ndim int64 each) of the elements whose bits & keep are
 * not 0 (keep drops a float's sign bit: -0.0 is zero, NaN is not), in C order, as x[mask]:
 * nonzero_count gives each of nt chunks its first output row, then every element's
 * coordinates are stored, the output row advancing by whether it is nonzero (the last stores
 * of a chunk go to a scratch row once its rows are full). shape: ndim sizes, ndim <= 64. */
#define NZ_RUN(STORE)                                                                          \
    for (; i < stop; i++, col++) {                                                             \
        int64_t *dst = j < end ? out + j * ndim : scratch;                                     \
        STORE;                                                                                 \
        j += (x[i] & kw) != 0;                                                                 \
    }
#define NONZERO(NAME, W)                                                                       \
    EXPORT int64_t NAME##_count(const W *x, int64_t keep, int64_t n, int64_t *offsets,        \
                                int nt) {                                                      \
        int64_t chunk = (n + nt - 1) / nt;                                                     \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
        for (int t = 0; t < nt; t++) {                                                         \
            int64_t i0 = t * chunk, i1 = i0 + chunk < n ? i0 + chunk : n, c = 0;               \
            _Pragma("omp simd reduction(+ : c)")                                               \
            for (int64_t i = i0; i < i1; i++) c += (x[i] & (W)keep) != 0;                      \
            offsets[t + 1] = c;                                                                \
        }                                                                                      \
        offsets[0] = 0;                                                                        \
        for (int t = 0; t < nt; t++) offsets[t + 1] += offsets[t];                             \
        return offsets[nt];                                                                    \
    }                                                                                          \
    EXPORT void NAME(const W *x, int64_t keep, int64_t n, const int64_t *shape, int ndim,      \
                     int64_t *out, const int64_t *offsets, int nt) {                           \
        int64_t chunk = (n + nt - 1) / nt, last = shape[ndim - 1];                             \
        const W kw = (W)keep;                                                                  \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
        for (int t = 0; t < nt; t++) {                                                         \
            int64_t i = t * chunk, i1 = i + chunk < n ? i + chunk : n, c[64], scratch[64];     \
            int64_t j = offsets[t], end = offsets[t + 1];                                      \
            for (int64_t d = ndim - 1, r = i; d >= 0; d--) c[d] = r % shape[d], r /= shape[d]; \
            while (i < i1) {            /* a run along the last dim, then a carry */           \
                int64_t stop = i + last - c[ndim - 1] < i1 ? i + last - c[ndim - 1] : i1;      \
                int64_t row = ndim > 1 ? c[ndim - 2] : 0, col = c[ndim - 1];                   \
                if (ndim <= 2)  /* (the common case in registers: ~3x faster) */               \
                    NZ_RUN(dst[0] = ndim == 1 ? col : row; dst[ndim - 1] = col)                 \
                else                                                                           \
                    NZ_RUN(for (int d = 0; d < ndim - 1; d++) dst[d] = c[d]; dst[ndim - 1] = col)\
                c[ndim - 1] = col;                                                             \
                for (int d = ndim - 1; d > 0 && c[d] == shape[d]; d--) c[d] = 0, c[d - 1]++;   \
            }                                                                                  \
        }                                                                                      \
    }
NONZERO(nonzero_u8, uint8_t)
NONZERO(nonzero_u16, uint16_t)
NONZERO(nonzero_u32, uint32_t)
NONZERO(nonzero_u64, uint64_t)
#undef NONZERO
#undef NZ_RUN
