/* NumPy's own inner loops on OpenMP threads (ember/_ops/pointwise.py's threading section).
 * NumPy runs a ufunc's loop on one thread; torch splits its pointwise loops over its threads.
 * Here a ufunc's legacy loop (PyUFuncObject's functions[i], with its data[i], found by the
 * caller), or one of the select / copy loops below, runs on each thread's share of the
 * elements, without the GIL: the values are the one NumPy call's, bit for bit, as every
 * element is computed by the same loop. No Python or NumPy headers: a loop is
 *   void loop(char **args, const npy_intp *count, const npy_intp *steps, void *data)
 * with npy_intp int64_t on the 64-bit platforms the library is built for. */
typedef void (*np_loop_t)(char **, const int64_t *, const int64_t *, void *);

/* the loop over the flat elements [lo, hi) of a rows x cols grid: operand k at p[k] + row *
 * r[k] + col * s[k] (r[k] 0 for a row broadcast down the grid, s[k] 0 for a number) */
static void loop_range(np_loop_t f, void *data, int nargs, char *const *p, const int64_t *s,
                       const int64_t *r, int64_t cols, int64_t lo, int64_t hi) {
    while (lo < hi) {
        int64_t row = lo / cols, c = lo % cols, m = cols - c < hi - lo ? cols - c : hi - lo;
        char *a[4];
        for (int k = 0; k < nargs; k++) a[k] = p[k] + row * r[k] + c * s[k];
        f(a, &m, s, data);
        lo += m;
    }
}

/* loop fn (data: its data) of nargs <= 4 operands over rows x cols elements, split over nt
 * threads at 16-element edges (whole cache lines of a contiguous output) */
EXPORT void parloop(void *fn, void *data, int64_t rows, int64_t cols, int nargs, int nt,
                    char *p0, int64_t s0, int64_t r0, char *p1, int64_t s1, int64_t r1,
                    char *p2, int64_t s2, int64_t r2, char *p3, int64_t s3, int64_t r3) {
    char *p[4] = {p0, p1, p2, p3};
    int64_t s[4] = {s0, s1, s2, s3}, r[4] = {r0, r1, r2, r3}, n = rows * cols;
    #pragma omp parallel num_threads(nt) if(nt > 1)
    {
        int t = omp_get_thread_num(), w = omp_get_num_threads();
        int64_t lo = n * t / w & ~(int64_t)15, hi = t == w - 1 ? n : n * (t + 1) / w & ~(int64_t)15;
        loop_range((np_loop_t)fn, data, nargs, p, s, r, cols, lo, hi);
    }
}

/* NumPy's reduction of n elements x (step apart) by its binary loop fn, as ufunc.reduce calls
 * it (the accumulator as first input and output, step 0): each of nt threads reduces its
 * chunk into part[t] (itemsize w), then the parts are reduced into part[0] in order. For the
 * extrema and logical ones the result is the one call's; n >= nt. */
EXPORT void parloop_reduce(void *fn, void *data, int64_t n, int nt, char *x, int64_t step,
                           char *part, int64_t w) {
    int used = nt;
    #pragma omp parallel num_threads(nt) if(nt > 1)
    {
        int t = omp_get_thread_num(), k = omp_get_num_threads();
        int64_t lo = n * t / k, m = n * (t + 1) / k - lo - 1, st[3] = {0, step, 0};
        char *acc = part + t * w, *a[3] = {acc, x + (lo + 1) * step, acc};
        memcpy(acc, x + lo * step, (size_t)w);
        ((np_loop_t)fn)(a, &m, st, data);
        if (t == 0) used = k;
    }
    int64_t m = used - 1, st[3] = {0, w, 0};
    char *a[3] = {part, part + w, part};
    ((np_loop_t)fn)(a, &m, st, data);
}

/* where: args (condition bytes, x, y, out) of T: out = condition ? x : y, both read (so the
 * contiguous loop vectorizes as a blend) */
#define SELECT_LOOP(NAME, T)                                                                   \
    EXPORT void NAME(char **a, const int64_t *count, const int64_t *s, void *data) {           \
        (void)data;                                                                            \
        const char *c = a[0], *x = a[1], *y = a[2];                                            \
        T *o = (T *)a[3];                                                                      \
        int64_t n = *count, w = sizeof(T);                                                     \
        if (s[0] == 1 && s[1] == w && s[3] == w && (s[2] == w || s[2] == 0)) {                 \
            const T *xs = (const T *)x, *ys = (const T *)y, y0 = *ys;                          \
            if (s[2])                                                                          \
                for (int64_t i = 0; i < n; i++) { T u = xs[i], v = ys[i]; o[i] = c[i] ? u : v; } \
            else                                                                               \
                for (int64_t i = 0; i < n; i++) { T u = xs[i]; o[i] = c[i] ? u : y0; }        \
        } else                                                                                 \
            for (int64_t i = 0; i < n; i++) {                                                  \
                T u = *(const T *)(x + i * s[1]), v = *(const T *)(y + i * s[2]);              \
                *(T *)((char *)o + i * s[3]) = c[i * s[0]] ? u : v;                            \
            }                                                                                  \
    }
SELECT_LOOP(select_u8, uint8_t)
SELECT_LOOP(select_u16, uint16_t)
SELECT_LOOP(select_u32, uint32_t)
SELECT_LOOP(select_u64, uint64_t)

/* a copy: args (source, destination), data the element size (as an integer); a source of
 * step 0 into a contiguous destination is a fill: the value, then copies of the part filled
 * so far, up to blocks of 4 KiB (read back from L1) */
EXPORT void copy_loop(char **a, const int64_t *count, const int64_t *s, void *data) {
    int64_t w = (int64_t)(intptr_t)data, n = *count;
    if (s[0] == w && s[1] == w)
        memcpy(a[1], a[0], (size_t)(n * w));
    else if (s[0] == 0 && s[1] == w && n > 0) {
        memcpy(a[1], a[0], (size_t)w);
        for (int64_t k = w, b = w, m; k < n * w; k += m, b = b < 4096 ? k : b)
            memcpy(a[1] + k, a[1], (size_t)(m = b < n * w - k ? b : n * w - k));
    } else
        for (int64_t i = 0; i < n; i++) memcpy(a[1] + i * s[1], a[0] + i * s[0], (size_t)w);
}

/* repeat's copies: args (source, the first copy), data -> {copies, bytes between copies,
 * element size}: each source row segment, read once, written to each copy in turn */
EXPORT void tile_loop(char **a, const int64_t *count, const int64_t *s, void *data) {
    const int64_t *d = (const int64_t *)data;
    for (int64_t j = 0; j < d[0]; j++) {
        char *a2[2] = {a[0], a[1] + j * d[1]};
        copy_loop(a2, count, s, (void *)(intptr_t)d[2]);
    }
}

/* float_power of float32 operands: args (x, y, double out), libm's pow of the widened values
 * (NumPy's float64 loop, so its values), the reference's two casts fused into its one pass */
EXPORT void fpow_ff(char **a, const int64_t *count, const int64_t *s, void *data) {
    (void)data;
    for (int64_t i = 0; i < *count; i++)
        *(double *)(a[2] + i * s[2]) = pow(*(const float *)(a[0] + i * s[0]),
                                           *(const float *)(a[1] + i * s[1]));
}

/* isclose of T operands in double, one pass (its NumPy reference makes ~12): args (a, b, bool
 * out), data -> {atol, rtol, equal_nan}; no fma, as the reference's separate roundings */
#define ISCLOSE_LOOP(NAME, T)                                                                  \
    EXPORT NOCONTRACT void NAME(char **a, const int64_t *count, const int64_t *s, void *data) { \
        const double *p = (const double *)data;                                                \
        for (int64_t i = 0; i < *count; i++) {                                                 \
            double x = *(const T *)(a[0] + i * s[0]), y = *(const T *)(a[1] + i * s[1]);       \
            a[2][i * s[2]] = x == y || (isfinite(x) && isfinite(y) &&                          \
                                        fabs(x - y) <= p[0] + p[1] * fabs(y)) ||               \
                             (p[2] != 0 && x != x && y != y);                                  \
        }                                                                                      \
    }
ISCLOSE_LOOP(isclose_f32, float)
ISCLOSE_LOOP(isclose_f64, double)

/* hash_tensor's xor of the n elements' 64-bit patterns, each widened first (floats to double,
 * integers sign-extended to int64: the reference's astype, then bitwise_xor.reduce), in one
 * pass over nt threads (NumPy's two passes each run on one); type: the dtype's char */
#define XOR_WIDE(T, W)                                                                         \
    _Pragma("omp parallel for num_threads(nt) if(nt > 1) reduction(^:acc) schedule(static)")   \
    for (int64_t i = 0; i < n; i++) {                                                          \
        W v = ((const T *)x)[i];                                                               \
        uint64_t u;                                                                            \
        memcpy(&u, &v, 8);                                                                     \
        acc ^= u;                                                                              \
    }
EXPORT void xor_wide(const char *x, int64_t n, int type, uint64_t *out, int nt) {
    uint64_t acc = 0;
    switch (type) {
    case 'f': XOR_WIDE(float, double) break;
    case 'd': XOR_WIDE(double, double) break;
    case 'b': XOR_WIDE(int8_t, int64_t) break;
    case 'h': XOR_WIDE(int16_t, int64_t) break;
    case 'i': XOR_WIDE(int32_t, int64_t) break;
    default: XOR_WIDE(int64_t, int64_t) break;
    }
    *out = acc;
}
