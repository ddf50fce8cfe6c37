/* float16 <-> float32 conversion with the CPU's F16C instructions. NumPy converts float16 one
 * element at a time, so a float16 op computed in float32 as torch does (dispatch's opmath)
 * paid many times its NumPy float16 time in the casts.
 * Both round to nearest even, as NumPy's astype does. Each returns -1 on a CPU without F16C:
 * the caller then uses astype. Included once (not per T): the types are fixed. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAS_F16C_BUILD 1
#endif

#ifdef HAS_F16C_BUILD
__attribute__((target("avx,f16c")))
static void f16_widen_f16c(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = _cvtsh_ss(src[i]);
}

__attribute__((target("avx,f16c")))
static void f16_narrow_f16c(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}
#endif

EXPORT int f16_widen(const uint16_t *src, float *dst, int64_t n) {
#ifdef HAS_F16C_BUILD
    if (__builtin_cpu_supports("f16c")) {
        f16_widen_f16c(src, dst, n);
        return 0;
    }
#endif
    return -1;
}

EXPORT int f16_narrow(const float *src, uint16_t *dst, int64_t n) {
#ifdef HAS_F16C_BUILD
    if (__builtin_cpu_supports("f16c")) {
        f16_narrow_f16c(src, dst, n);
        return 0;
    }
#endif
    return -1;
}
