/* Branch-free float32 math that gcc vectorises (no calls, only selects), and the float64
 * counterparts (libm: scalar, but still one pass over memory).
 *
 * exp: Cephes' expf (range reduction by n*ln2 in two parts, degree-6 polynomial), ~1 ulp.
 * The rounding to the nearest n uses the 1.5*2^23 trick, so SSE2 needs no round instruction;
 * this is why the file must not be compiled with -ffast-math (it would fold the trick away).
 */
#ifndef EMBER_VECMATH_H
#define EMBER_VECMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float f32_from_bits(int32_t i) { float f; memcpy(&f, &i, 4); return f; }

/* e^r for the reduced argument r = x - n ln2 (|r| <= ln2 / 2) of x clamped to [-87.34, 88.72]
 * and rounded n: the part exp_f32 and exp_nonpos_f32 share. */
static inline float exp_reduced_f32(float xc, float n) {
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float z = r * r;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    return p * z + r + 1.0f;
}

/* exp(x); exactly 0 below -87.33 (where the result would be denormal), inf above 88.72, NaN
 * stays NaN (the polynomial carries it). */
static inline float exp_f32(float x) {
    float xc = x < -87.3365448f ? -87.3365448f : x;
    xc = xc > 88.7228394f ? 88.7228394f : xc;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    int32_t ni = (int32_t)n;
    /* 2^n as 2^(n-1) * 2, so n = 128 (x near the top) does not overflow the exponent field */
    float y = exp_reduced_f32(xc, n) * f32_from_bits((int32_t)(((uint32_t)ni + 126u) << 23)) * 2.0f;
    y = x < -87.3365448f ? 0.0f : y;
    return y;
}

/* exp(x) for x <= 0 (or NaN), as exp_f32 without the clamp at the top and with 2^n built
 * directly (n <= 0 fits the exponent field); 0 below -87.33. Phi's exp(-a^2) runs it: four
 * fewer vector ops per element in GELU's forward. */
static inline float exp_nonpos_f32(float x) {
    float xc = x < -87.3365448f ? -87.3365448f : x;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    int32_t ni = (int32_t)n;
    float y = exp_reduced_f32(xc, n) * f32_from_bits((int32_t)(((uint32_t)ni + 127u) << 23));
    return x < -87.3365448f ? 0.0f : y;
}

/* 1 / (1 + exp(-x)) */
static inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }
static inline double sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Phi(x) = 0.5 erfc(-x / sqrt 2), the normal CDF, and *e = exp(-x^2 / 2) (GELU's backward
 * needs both). erfc(a) for a >= 0 is Abramowitz & Stegun 7.1.26, t P(t) exp(-a^2) with
 * t = 1 / (1 + p a): absolute error < 1.5e-7, the fit torch's vectorised erf uses; taking
 * erfc for x < 0 keeps the relative precision of small Phi that 1 + erf(x / sqrt 2) loses. */
static inline float phi_cdf_f32(float x, float *e) {
    float u = x * 0.70710678118654752f;
    float a = u < 0.0f ? -u : u;
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    *e = exp_nonpos_f32(-a * a);
    float q = 0.5f * t * p * *e;
    return u < 0.0f ? q : 1.0f - q;
}

/* erf(x) (want_erfc 0) or erfc(x) (1) in float32, to a few ulp, for ember.erf / ember.erfc:
 * a Taylor series for |x| < 0.5, else Numerical Recipes' erfc fit (relative error < 1.2e-7,
 * as ember's NumPy path) t exp(-a^2 + P(t)). NOTE: exp(-a^2) is taken as exp(-h^2) exp(-l(a+h))
 * with h = a rounded to 12 bits (h^2 is exact), else rounding a^2 would cost ~30 ulp in the
 * far tail of erfc. */
static inline float erf_erfc_f32(float x, int want_erfc) {
    float a = x < 0.0f ? -x : x;
    a = a > 10.0f ? 10.0f : a;          /* erfc(10) is 0 in float32; keeps inf out of a - h */
    float t = 1.0f / (1.0f + 0.5f * a);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    int32_t bits;
    memcpy(&bits, &a, 4);
    float h = f32_from_bits(bits & (int32_t)0xfffff000);
    float ec = t * exp_f32(-h * h) * exp_f32(p - (a - h) * (a + h));   /* erfc(|x|) */
    float z = x * x;
    float s = 1.0f / 9360.0f;
    s = s * z - 1.0f / 1320.0f;
    s = s * z + 1.0f / 216.0f;
    s = s * z - 1.0f / 42.0f;
    s = s * z + 1.0f / 10.0f;
    s = s * z - 1.0f / 3.0f;
    s = s * z + 1.0f;
    float series = 1.1283791670955126f * x * s;                         /* erf(x), |x| < 0.5 */
    float r;
    if (want_erfc) {
        r = x < 0.0f ? 2.0f - ec : ec;
        r = a < 0.5f ? 1.0f - series : r;
    } else {
        r = x < 0.0f ? ec - 1.0f : 1.0f - ec;
        r = a < 0.5f ? series : r;
    }
    return x != x ? x : r;
}

static inline double phi_cdf_f64(double x, double *e) {
    *e = exp(-0.5 * x * x);
    return 0.5 * erfc(-x * 0.70710678118654752);
}

#endif
