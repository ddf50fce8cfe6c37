/* ember's CPU kernels: one pass over memory per row op, SIMD loops, rows split over OpenMP
 * threads. A plain C shared library (no Python or NumPy headers), loaded with ctypes by
 * ember/_C/__init__.py; see docs/kernels.md for why, and for the rules every kernel follows.
 *
 * Built by setup.py with -O3 and no -march (the library must run on any x86_64 / aarch64);
 * on x86_64 the hot workers are also compiled for AVX-512 (with fma) and AVX2 (target_clones)
 * and the best copy is picked at load.
 * Never -ffast-math: the NumPy path is the reference and vecmath.h relies on IEEE rounding.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vecmath.h"
#ifdef __SSE2__
#include <emmintrin.h>      /* streaming stores (rowops.h's outer) */
#endif

#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_thread_num(void) { return 0; }
static int omp_get_num_threads(void) { return 1; }
#endif

#define EXPORT __attribute__((visibility("default")))

/* the x86-64-v3 build (setup.py: AVX2 and FMA throughout) needs no clones */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && \
    !defined(__AVX2__)
#define TC __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TC
#endif

/* Adam must round as its NumPy passes do, so its loop never fuses a*b+c into an fma. */
#if defined(__GNUC__) && !defined(__clang__)
#define NOCONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define NOCONTRACT
#endif

/* A thread costs a few microseconds to wake: small problems run on one. */
static int threads_for(int64_t work, int nt) {
    int64_t most = work / 32768 + 1;
    return nt < 1 ? 1 : (most < nt ? (int)most : nt);
}

/* for (i = 0; i < size; i += step) body, over nt threads: one runs it without an OpenMP
 * region (a region of one thread still costs microseconds, most of a small call's time) */
#define THREADED_FOR(nt, size, step, body)                                                    \
    if (nt == 1)                                                                              \
        for (int64_t i = 0; i < size; i += step) { body; }                                    \
    else {                                                                                    \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
        for (int64_t i = 0; i < size; i += step) { body; }                                    \
    }

/* THREADED_FOR of an int expression ORed into the caller's `bad` (gather's and scatter's
 * "an index was out of range") */
#define THREADED_FOR_BAD(nt, size, step, ...)                                                 \
    if (nt == 1)                                                                              \
        for (int64_t i = 0; i < size; i += step) bad |= __VA_ARGS__;                          \
    else {                                                                                    \
        _Pragma("omp parallel for num_threads(nt) schedule(static) reduction(| : bad)")       \
        for (int64_t i = 0; i < size; i += step) bad |= __VA_ARGS__;                          \
    }

/* stmt over each of nt threads' row range [r0, r1) of rows split evenly; one thread runs it
 * over all the rows without an OpenMP region */
#define ROW_RANGES(nt, rows, stmt)                                                            \
    if (nt == 1) { int64_t r0 = 0, r1 = rows; stmt; }                                         \
    else {                                                                                    \
        _Pragma("omp parallel num_threads(nt)") {                                             \
            int t_ = omp_get_thread_num(), w_ = omp_get_num_threads();                        \
            int64_t r0 = rows * t_ / w_, r1 = rows * (t_ + 1) / w_; stmt;                     \
        }                                                                                     \
    }

EXPORT int ember_kernels_version(void) { return 1; }

EXPORT int ember_kernels_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

#include "half.h"
#include "select.h"
#include "parloop.h"
#include "pointwise.h"
#include "special.h"

#define T float
#define S(name) name##_f32
#define EXP exp_f32
#define LOG logf
#define SQRT sqrtf
#define PHI phi_cdf_f32
#define SIGMOID sigmoid_f32
#include "rowops.h"
#include "blas_gemm.h"
#include "winograd.h"
#include "im2col.h"
#include "attention.h"
#include "attention_small.h"
#include "scan.h"
#include "rank.h"
#include "count.h"
#include "gather.h"
#include "pool.h"
#include "factor.h"
#include "lstm.h"
#include "gemm.h"
#undef T
#undef S
#undef EXP
#undef LOG
#undef SQRT
#undef PHI
#undef SIGMOID

#include "sgemm.h"     /* (float32 only: float64 stays on BLAS) */
#include "fft.h"       /* (complex64 only: complex128 stays on NumPy's pocketfft) */

#define T double
#define S(name) name##_f64
#define EXP exp
#define LOG log
#define SQRT sqrt
#define PHI phi_cdf_f64
#define SIGMOID sigmoid_f64
#include "rowops.h"
#include "blas_gemm.h"
#include "winograd.h"
#include "im2col.h"
#include "attention.h"
#include "attention_small.h"
#include "scan.h"
#include "rank.h"
#include "count.h"
#include "gather.h"
#include "pool.h"
#include "factor.h"
#include "lstm.h"
#include "gemm.h"

/* glibc's double log, log1p, exp and tan, element by element: torch's CPU random transforms
 * call them one value at a time, and NumPy's AVX-512 loops for them differ in the last bit
 * (ember/_ops/random.py). The call through a pointer keeps the compiler from vectorising. */
EXPORT void libm_f64(int fn, const double *x, double *y, int64_t n) {
    double (*f)(double) = fn == 0 ? log : fn == 1 ? log1p : fn == 2 ? exp : tan;
    for (int64_t i = 0; i < n; i++) y[i] = f(x[i]);
}
