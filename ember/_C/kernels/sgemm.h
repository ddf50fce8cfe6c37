/* A float32 GEMM of ember's own for CPUs with AVX-512 or AVX2 + FMA (included once by
 * kernels.c; float64 and other CPUs keep NumPy's BLAS, see ember/_ops/gemm.py for which
 * products take it). The loops are in sgemm_tiles.h, compiled here once per vector width W:
 * 16 floats (AVX-512: a 12 x 32 micro-tile, B blocks of 256 x 512) and 8 (AVX2: 6 x 16, and
 * blocks of 256 x 1024), the widest this CPU runs picked per call.
 *
 * NumPy's OpenBLAS stays further below a core's peak than torch's MKL on the 1-100 MFLOP
 * products of a training step. OpenBLAS's losses there are per-call work, not its inner loop:
 * it packs both operands, and for beta = 0 it first zeroes C, a full extra pass over the
 * output (the attention's (256, 64) @ (64, 256) writes more C than it reads A and B). Its thread
 * pool is another pool beside OpenMP's, whose idle workers spin. Here:
 *
 * - B is packed a KC x NC block at a time into panels of NR = 2 W columns (a panel is KC NR
 *   floats = 16-32 KiB); a transposed B (the attention's q @ k^T, every backward's g @ W^T) is
 *   packed by W x W register transposes, not element by element;
 * - A, in one of two orders (SG_PACKS_A says which):
 *   - packed (AVX2's 2-D products): MC rows at a time into micro-panels of MR floats per step
 *     (in L2; 6 rows by register transposes), then each panel, in L1, meets every micro-panel:
 *     the micro-tile reads one A stream and one B stream (at two threads quicker than the
 *     order below on a training step's products);
 *   - read in place (AVX-512; AVX2's stacks of narrow products, where packing A is paid for
 *     with few panels): an MR row micro-tile is MR streams broadcast against the panel's two
 *     vectors; the tile (MR x KC) stays in L1 while every panel of the block passes by (a
 *     transposed A's tile, MR floats per step on lines of their own, is first copied);
 * - C is written once per KC block, straight from the 2 MR accumulator registers (no zeroing
 *   pass, no beta multiply); with K <= KC (attention: 64, 256) C is written exactly once;
 * - threads (OpenMP's, as every other kernel's) take whole products of a batch, or column
 *   ranges of a 2-D product.
 *
 * Accumulation is float32 FMA, in k order within a KC block, as BLAS does: results match
 * NumPy's within float32 rounding, not bit for bit. The micro-tile is written with GCC vector
 * extensions (one register per vector), the transposes with intrinsics. */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define SG_KC 256
#define SG_INLINE SG_TARGET static inline __attribute__((always_inline))

#define SG_TARGET __attribute__((target("avx512f,fma"), optimize("fp-contract=fast")))
/* dst[i * ldd + j] = src[j * ld + i] for a 16 x 16 block (AVX-512): 16 loads, 3 rounds of lane
 * shuffles (64 instructions), 16 stores */
SG_TARGET static void transpose_avx512(const float *src, int64_t ld, float *dst, int64_t ldd) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ld);
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        __m512d t0 = _mm512_castps_pd(t[4 * i]), t1 = _mm512_castps_pd(t[4 * i + 1]);
        __m512d t2 = _mm512_castps_pd(t[4 * i + 2]), t3 = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    /* (r[4 i + c] now holds, in 128-bit lane L, rows 4i..4i+3 of column 4L + c) */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        _mm512_storeu_ps(dst + i * ldd, _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88));
        _mm512_storeu_ps(dst + (i + 8) * ldd, _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd));
    }
}

#define SG(name) name##_avx512
#define SG_W 16
#define SG_MR 12
#define SG_NC 512
#define SG_MC (8 * SG_MR)
#define SG_PACKS_A(batch, width) 0      /* (the packed order is unmeasured on AVX-512) */
#include "sgemm_tiles.h"      /* (which undefines these and SG_TARGET) */

#define SG_TARGET __attribute__((target("avx2,fma"), optimize("fp-contract=fast")))
/* the same for an 8 x 8 block (AVX2), in registers: out[i] = column i of the rows r[0..7]
 * (3 rounds of shuffles, 24 instructions) */
SG_TARGET static inline void transpose8_avx2(__m256 r[8], __m256 out[8]) {
    __m256 t[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        r[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    /* (r[c] and r[4 + c] now hold, in each 128-bit lane L, rows 0-3 and 4-7 of column 4L + c) */
    for (int i = 0; i < 4; i++) {
        out[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        out[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    }
}

/* dst[i * ldd + j] = src[j * ld + i] for an 8 x 8 block: 8 loads, the transpose, 8 stores */
SG_TARGET static void transpose_avx2(const float *src, int64_t ld, float *dst, int64_t ldd) {
    __m256 r[8], out[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * ld);
    transpose8_avx2(r, out);
    for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + i * ldd, out[i]);
}

/* A's rows [0, 6) and k range [0, kb) (element (r, p) at a[r * ras + p]) as 6 floats per
 * step: 8 steps at a time by the register transpose (rows 6 and 7 zero), each step's 8 floats
 * stored over the next's first two (dst has room for 2 floats past 6 kb) */
SG_TARGET static void pack6_avx2(int64_t kb, const float *a, int64_t ras, float *dst) {
    int64_t pe = kb / 8 * 8;
    for (int64_t p = 0; p < pe; p += 8) {
        __m256 r[8], out[8];
        for (int i = 0; i < 6; i++) r[i] = _mm256_loadu_ps(a + i * ras + p);
        r[6] = r[7] = _mm256_setzero_ps();
        transpose8_avx2(r, out);
        for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + (p + i) * 6, out[i]);   /* (in order) */
    }
    for (int64_t p = pe; p < kb; p++)
        for (int r = 0; r < 6; r++) dst[p * 6 + r] = a[r * ras + p];
}

#define SG(name) name##_avx2
#define SG_W 8
#define SG_MR 6
#define SG_NC 1024          /* (B's block passes through L2 a panel at a time, so it may exceed it:
                             * 1024 wide, A is packed once per KC block of a 1024-wide product, not
                             * four times) */
#define SG_MC (16 * SG_MR)
#define SG_PACK6 pack6_avx2
/* packed A (quicker on two threads on a step's 2-D products), except for a stack of narrow
 * products (n < 128: the packing would be paid for few panels) */
#define SG_PACKS_A(batch, width) ((batch) == 1 || (width) >= 8 * SG_NR)
#include "sgemm_tiles.h"      /* (which undefines these and SG_TARGET) */
#undef SG_INLINE
#undef SG_KC

/* the vector width in bits of the kernel this CPU runs: 512 (AVX-512F), 256 (AVX2 and FMA)
 * or 0 (none: BLAS); the Python side asks once */
EXPORT int gemm_simd_f32(void) {
    return __builtin_cpu_supports("avx512f") ? 512 :
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 256 : 0;
}

/* c[i] = a[i] @ b[i] (+ c[i] when acc, + bias broadcast over rows when bias is not NULL and
 * acc is 0) for i < batch: matrix i of a at a + i * sa (sa 0: one matrix broadcast), its
 * element (r, p) at [r * ras + p * cas]; b likewise with (rbs, cbs); C row-major with row
 * stride ldc; bias n contiguous floats. Threads take (product, NC column block) items.
 * Returns -1 when this CPU has neither AVX-512 nor AVX2 or a buffer cannot be allocated (the
 * caller then uses BLAS). */
EXPORT int gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t ras, int64_t cas, int64_t sa, const float *b, int64_t rbs,
                    int64_t cbs, int64_t sb, int acc, const float *bias, float *c, int64_t ldc,
                    int64_t sc, int nt) {
    switch (gemm_simd_f32()) {
    case 512:
        return gemm_avx512(batch, m, n, k, a, ras, cas, sa, b, rbs, cbs, sb, acc, bias, c, ldc,
                           sc, nt);
    case 256:
        return gemm_avx2(batch, m, n, k, a, ras, cas, sa, b, rbs, cbs, sb, acc, bias, c, ldc,
                         sc, nt);
    default:
        return -1;
    }
}
#else
EXPORT int gemm_simd_f32(void) { return 0; }
EXPORT int gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t ras, int64_t cas, int64_t sa, const float *b, int64_t rbs,
                    int64_t cbs, int64_t sb, int acc, const float *bias, float *c, int64_t ldc,
                    int64_t sc, int nt) {
    return -1;
}
#endif
