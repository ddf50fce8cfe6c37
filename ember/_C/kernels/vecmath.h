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

/* x Phi(x), exact GELU as rowops.h's kernel computes it, for ember.compile's generated loops
 * (phi_cdf's exp(-x^2 / 2) unused) */
static inline float gelu_exact_f32(float x) { float e; return x * phi_cdf_f32(x, &e); }

/* erf(x) (want_erfc 0) or erfc(x) (1) in float32, to a few ulp, for ember.erf / ember.erfc:
 * a Taylor series for |x| < 0.5, else Numerical Recipes' erfc fit (relative error < 1.2e-7,
 * as ember's NumPy path) t exp(-a^2 + P(t)). NOTE: erfc's exp(-a^2) is taken as exp(-h^2)
 * exp(-l(a+h)) with h = a rounded to 12 bits (h^2 is exact), else rounding a^2 would cost ~30
 * ulp in the far tail of erfc. */
static inline float erfc_fit_f32(float a, float *t_out) {  /* the fit's t and P(t) */
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
    *t_out = t;
    return p;
}
static inline float high12_f32(float a) {      /* a's top 12 bits: its square is exact */
    int32_t bits;
    memcpy(&bits, &a, 4);
    return f32_from_bits(bits & (int32_t)0xfffff000);
}
static inline float erf_erfc_f32(float x, int want_erfc) {
    float a = x < 0.0f ? -x : x, t;
    a = a > 10.0f ? 10.0f : a;          /* erfc(10) is 0 in float32; keeps inf out of a - h */
    float p = erfc_fit_f32(a, &t), h = high12_f32(a);
    /* erf = 1 - erfc needs erfc only to erf's absolute ulp: one exp of the rounded -a^2 */
    float ec = want_erfc ? t * exp_f32(-h * h) * exp_f32(p - (a - h) * (a + h))
                         : t * exp_f32(p - a * a);                    /* erfc(|x|) */
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

/* expm1(x): Taylor to x^8/8! for |x| < 0.5 (relative error < 1e-8), else exp(x) - 1, which
 * there loses at most ~2 ulp to the subtraction (libm's expm1f does not vectorise). */
static inline float expm1_f32(float x) {
    float p = 1.0f / 40320.0f;
    p = p * x + 1.0f / 5040.0f;
    p = p * x + 1.0f / 720.0f;
    p = p * x + 1.0f / 120.0f;
    p = p * x + 1.0f / 24.0f;
    p = p * x + 1.0f / 6.0f;
    p = p * x + 0.5f;
    float small = x + x * x * p;
    return (x < 0.5f) & (x > -0.5f) ? small : exp_f32(x) - 1.0f;
}

/* ---- the pointwise ops' full-range float32 functions (pointwise.h): each handles nan, the
 * infinities, signed zeros and denormals as libm, to the accuracy stated (measured against
 * float64 over all float32 in the tested ranges) ---- */

/* y 2^n for integer-valued n in [-252, 254] in two steps, so a denormal result keeps its bits */
static inline float scale2_f32(float y, float n) {
    int32_t a = (int32_t)n >> 1, b = (int32_t)n - a;
    return y * f32_from_bits((int32_t)((uint32_t)(a + 127) << 23)) *
           f32_from_bits((int32_t)((uint32_t)(b + 127) << 23));
}

/* exp(x) over the whole range (denormal results down to -103.97), ~1 ulp */
static inline float exp_full_f32(float x) {
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 88.7228394f ? 88.7228394f : xc;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float y = scale2_f32(exp_reduced_f32(xc, n), n);
    return x > 88.7228394f ? INFINITY : y;
}

/* 2^x: Cephes' exp2f (degree-6 polynomial in the fraction), ~1 ulp; exact at integers */
static inline float exp2_f32(float x) {
    float xc = x < -151.0f ? -151.0f : x;
    xc = xc > 128.0f ? 128.0f : xc;
    float n = (xc + 12582912.0f) - 12582912.0f, r = xc - n;
    float p = 1.535336188319500E-4f;
    p = p * r + 1.339887440266574E-3f;
    p = p * r + 9.618437357674640E-3f;
    p = p * r + 5.550332471162809E-2f;
    p = p * r + 2.402264791363012E-1f;
    p = p * r + 6.931472028550421E-1f;
    float y = scale2_f32(p * r + 1.0f, n);
    return x >= 128.0f ? INFINITY : y;
}

/* log(x) = t + e ln 2 for x = m 2^e: t, the log of the mantissa (Cephes' logf as log_f32),
 * and e; denormals scaled up first; nan, 0, negatives and inf are the callers' */
static inline float log_parts_f32(float x, float *fe) {
    int sub = x < 1.17549435e-38f;
    x = sub ? x * 16777216.0f : x;
    int32_t bits;
    memcpy(&bits, &x, 4);
    int32_t e = ((bits >> 23) & 0xff) - 126 - (sub ? 24 : 0);
    float m = f32_from_bits((bits & 0x007fffff) | 0x3f000000);
    int low = m < 0.707106781186547524f;
    e = low ? e - 1 : e;
    m = low ? m + m - 1.0f : m - 1.0f;
    float z = m * m, y = 7.0376836292E-2f;
    y = y * m - 1.1514610310E-1f;
    y = y * m + 1.1676998740E-1f;
    y = y * m - 1.2420140846E-1f;
    y = y * m + 1.4249322787E-1f;
    y = y * m - 1.6668057665E-1f;
    y = y * m + 2.0000714765E-1f;
    y = y * m - 2.4999993993E-1f;
    y = y * m + 3.3333331174E-1f;
    *fe = (float)e;
    return m + (y * m * z - 0.5f * z);
}
/* log(x) for finite x > 0 (Cephes' logf: ln 2 in two parts), ~1 ulp */
static inline float log_f32(float x) {
    float e, t = log_parts_f32(x, &e);
    return (t + e * -2.12194440e-4f) + e * 0.693359375f;
}
/* libm's answers off the positive finite numbers: nan below 0, -inf at +-0, inf at inf */
static inline float log_special_f32(float x, float r) {
    return x == 0.0f ? -INFINITY : x < 0.0f ? NAN : x == INFINITY ? x : x != x ? x : r;
}
/* log, log2 and log10, ~1 ulp (base 2 exact at powers of 2) */
static inline float log_full_f32(float x) { return log_special_f32(x, log_f32(x)); }
static inline float log2_full_f32(float x) {
    float e, t = log_parts_f32(x, &e);
    return log_special_f32(x, t * 1.44269504088896341f + e);
}
static inline float log10_full_f32(float x) {
    float e, t = log_parts_f32(x, &e);
    return log_special_f32(x, t * 0.434294481903251828f + e * 0.301029995663981195f);
}
/* log1p(y), ~2 ulp: log(1 + y) corrected by the rounding of 1 + y */
static inline float log1p_full_f32(float y) {
    float u = 1.0f + y, r = log_special_f32(u, log_f32(u) - ((u - 1.0f) - y) / u);
    return y == 0.0f ? y : u == 0.0f ? -INFINITY : r;
}

/* ---- double versions that vectorise (no calls, only selects), for float32 results computed
 * in double (special.h): good to ~1e-15, not libm's last bit ---- */
static inline double f64_from_bits(int64_t i) { double f; memcpy(&f, &i, 8); return f; }
static inline int64_t f64_bits(double f) { int64_t i; memcpy(&i, &f, 8); return i; }
/* NOTE: integers pass between double and int64 through the bits of 1.5 2^52 + n, not casts:
 * AVX-512F and AVX2 have no vector conversion of int64 */
#define F64_ROUND 6755399441055744.0
static const double F64_INV_FACT[15] = {1.0, 1.0, 0.5, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720,
    1.0 / 5040, 1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600,
    1.0 / 6227020800, 1.0 / 87178291200};
/* exp(x) for x in [-708, 709] (clamped: 0 / inf are the callers'): n ln 2 off in two parts,
 * Taylor to r^deg on |r| <= ln2 / 2: 11 for ~1e-16; 7 (5.6e-9) where a float32 result has its
 * own larger error anyway (ndtr's fit: 1e-7; four multiply-adds fewer, ndtr 1M 3.8 -> 3.1 ms) */
static inline double exp_f64v_deg(double x, int deg) {
    x = x < -708.0 ? -708.0 : x > 709.0 ? 709.0 : x;
    double nb = x * 1.4426950408889634 + F64_ROUND, n = nb - F64_ROUND;
    double r = (x - n * 0.6931471803691238) - n * 1.9082149292705877e-10;
    double p = F64_INV_FACT[deg];   /* (1 / deg!, then ... 1 / 2!) */
    for (int k = deg - 1; k >= 2; k--) p = p * r + F64_INV_FACT[k];
    return (p * r * r + r + 1.0) * f64_from_bits((f64_bits(nb) + 1023) << 52);
}
static inline double exp_f64v(double x) { return exp_f64v_deg(x, 11); }
/* log(x) for finite normal x > 0: 2 atanh(f / (2 + f)) of the mantissa 1 + f in [0.707, 1.414) */
static inline double log_f64v(double x) {
    int64_t bits = f64_bits(x);
    double e = f64_from_bits(0x4330000000000000LL | ((bits >> 52) & 0x7ff)) - 4503599627371519.0;
    double m = f64_from_bits((bits & 0x000fffffffffffffLL) | 0x3ff0000000000000LL);
    int big = m > 1.4142135623730951;
    m = big ? 0.5 * m : m;
    double f = m - 1.0, s = f / (2.0 + f), z = s * s, p = 1.0 / 17;
    for (int k = 15; k >= 3; k -= 2) p = p * z + 1.0 / k;
    return (e + big) * 0.6931471805599453 + 2.0 * s * (p * z + 1.0);
}
/* sin(x) and cos(x) for |x| < 2^20 pi/2: x - k pi/2 with pi/2 in three parts (each product
 * exact), Taylor to r^15 and r^16 on |r| <= pi/4 */
static inline void sincos_f64v(double x, double *sn, double *cs) {
    double kb = x * 0.6366197723675814 + F64_ROUND, k = kb - F64_ROUND;
    double r = ((x - k * 1.5707963267341256) - k * 6.077100506303966e-11) -
               k * 2.0222662487959506e-21, z = r * r;
    double ps = -1.0 / 1307674368000, pc = 1.0 / 20922789888000;    /* (-1 / 15!, 1 / 16!) */
    for (int k = 13; k >= 3; k -= 2) {
        ps = ps * z + (k & 2 ? -F64_INV_FACT[k] : F64_INV_FACT[k]);
        pc = pc * z + (k & 2 ? F64_INV_FACT[k + 1] : -F64_INV_FACT[k + 1]);
    }
    double s = ps * z * r + r, c = (pc * z - 0.5) * z + 1.0;
    int64_t q = f64_bits(kb);
    double s2 = q & 1 ? c : s, c2 = q & 1 ? s : c;
    *sn = q & 2 ? -s2 : s2;
    *cs = (q + 1) & 2 ? -c2 : c2;
}

/* Numerical Recipes' erfc fit: erfc(a) = t exp(-a^2 + P(t)), t = 1 / (1 + a / 2), 1.2e-7 relative */
static const double ERFC_FIT[9] = {-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
                                   0.09678418, 0.37409196, 1.00002368, -1.26551223};
/* erfcx(x) = exp(x^2) erfc(x) of float32, ~2 ulp: the fit without its exp(-a^2) (no overflow,
 * no cancellation far out), 2 exp(x^2) - erfcx(-x) below 0 */
static inline float erfcx_f32(float xf) {
    double x = xf, a = x < 0 ? -x : x, t = 1.0 / (1.0 + 0.5 * a), p = 0.17087277;
    for (int i = 0; i < 9; i++) p = p * t + ERFC_FIT[i];
    double pos = t * exp_f64v(p);
    return (float)(x < 0 ? 2.0 * exp_f64v(x * x) - pos : pos);   /* (exp_f64v(709): inf) */
}
/* Phi(-|x|), the normal distribution's tail erfc(|x| / sqrt 2) / 2, and its log (*lg), for
 * float32 results (a rounding of the fit's 1e-7 from the true value): erf_erfc_f32's fit in
 * double, x^2 / 2 from x itself (from |x| / sqrt 2 rounded it would lose ~x^2 / 2 ulp far out) */
static inline double ndtr_tail_f64v(float x, double *lg) {
    double ax = x < 0.0f ? -x : x;      /* (ax^2 is exact, and finite) */
    double t = 1.0 / (1.0 + 0.35355339059327379 * ax), p = 0.17087277;
    for (int i = 0; i < 9; i++) p = p * t + ERFC_FIT[i];
    double q = p - 0.5 * ax * ax;
    *lg = log_f64v(0.5 * t) + q;
    return q < -745.0 ? 0.0 : 0.5 * t * exp_f64v_deg(q, 7);
}
/* Phi(x) (the normal CDF) and log Phi(x), ~2 ulp */
static inline float ndtr_f32(float x) {
    double lg, q = ndtr_tail_f64v(x, &lg);
    return x != x ? x : (float)(x < 0.0f ? q : 1.0 - q);
}
static inline float log_ndtr_f32(float x) {
    double lg, q = ndtr_tail_f64v(x, &lg);
    double up = q < 1e-4 ? -q - q * q * (0.5 + q / 3) : log_f64v(1.0 - q);     /* log1p(-q) */
    return x != x ? x : x == -INFINITY ? x : (float)(x < 0.0f ? lg : up);
}

/* lgamma and digamma of float32, in double and branch-free (both vectorise; libm's lgammaf is
 * scalar): within ~0.5 ulp of the float64 values, tests/test_kernels_special.py. lgamma: Gamma
 * on [2, 3) as 1 + (t - 2) H(t), H a degree-12 fit (2e-14: the result near the zeros at 1 and 2
 * keeps its relative precision), |x| < 10 brought there by the recurrence (at most 7 factors),
 * Stirling's series beyond; x < 0.5 by the reflection -log(|sin(pi x)| Gamma(1 - x) / pi). inf
 * at the poles (0, the negative integers) and +-inf. */
static const double LGAMMA_H[13] = {0.658680776358274, 0.5521074905344316, 0.20490217489189874,
    0.09793814403267012, 0.023470180152761467, 0.009781196530232007, 0.0012224069745686416,
    0.0007700482614806035, -3.10553945564892e-05, 6.956741443879363e-05, -1.7086492268880626e-05,
    1.0059674062377378e-05, -3.704292768991016e-06};
static inline double sin_pi_abs_f64v(double x) {   /* |sin(pi x)| / pi, x reduced exactly first */
    double s, c, red = x - 2.0 * ((0.5 * x + F64_ROUND) - F64_ROUND);
    sincos_f64v(3.141592653589793 * red, &s, &c);
    return (s < 0 ? -s : s) * 0.3183098861837907;
}
static inline float lgamma_f32(float xf) {
    double x = xf, ax = x < 0.5 ? 1.0 - x : x, t = ax, num = 1.0, den = 1.0, h = LGAMMA_H[12];
    for (int i = 0; i < 2; i++) { int lo = t < 2.0; den = lo ? den * t : den; t = lo ? t + 1.0 : t; }
    for (int i = 0; i < 7; i++) { int hi = t >= 3.0; t = hi ? t - 1.0 : t; num = hi ? num * t : num; }
    for (int i = 11; i >= 0; i--) h = h * (t - 2.5) + LGAMMA_H[i];
    double s = sin_pi_abs_f64v(x), g = (1.0 + (t - 2.0) * h) * num / den;   /* Gamma(ax) */
    double l = log_f64v(ax < 10.0 ? (x < 0.5 ? g * s : g) : ax), w = 1.0 / ax, z = w * w;
    double big = (ax - 0.5) * l - ax + 0.9189385332046727 +
        w * (1.0 / 12 - z * (1.0 / 360 - z * (1.0 / 1260 - z * (1.0 / 1680))));
    double r = ax < 10.0 ? (x < 0.5 ? -l : l) : x < 0.5 ? -big - log_f64v(s) : big;
    return xf != xf ? xf : xf == INFINITY || (x <= 0 && x == floor(x)) ? INFINITY : (float)r;
}
/* digamma: -sum 1/(y + i) up to y >= 10 as one fraction p / q, the asymptotic series there;
 * x < 0 by the reflection - pi / tan(pi x). As torch: -+inf at +-0, nan at the negative
 * integers and -inf. */
static inline float digamma_f32(float xf) {
    double x = xf, y = x < 0 ? 1.0 - x : x, p = 0.0, q = 1.0, s, c;
#pragma GCC unroll 10
    for (int i = 0; i < 10; i++) {      /* (unrolled: the caller's loop vectorises) */
        int lo = y < 10.0;
        p = lo ? p * y + q : p; q = lo ? q * y : q; y = lo ? y + 1.0 : y;
    }
    double z = 1.0 / (y * y), tail = 8.33333333333333333333e-2;
    static const double a[6] = {-2.10927960927960927961e-2, 7.57575757575757575758e-3,
        -4.16666666666666666667e-3, 3.96825396825396825397e-3, -8.33333333333333333333e-3,
        8.33333333333333333333e-2};
    for (int i = 0; i < 6; i++) tail = tail * z + a[i];
    double r = log_f64v(y) - 0.5 / y - z * tail - p / q;
    sincos_f64v(3.141592653589793 * (x - 2.0 * ((0.5 * x + F64_ROUND) - F64_ROUND)), &s, &c);
    r = x < 0 ? r - 3.141592653589793 * c / s : r;
    r = ((x < 0) & (x == floor(x))) | (xf != xf) ? NAN : xf == INFINITY ? x : r;
    return xf == 0.0f ? copysignf(INFINITY, -xf) : (float)r;
}

/* atan(q) for q in [0, 1]: Cephes' atanf (q > tan(pi/8) moved by pi/4), ~1 ulp */
static inline float atan_unit_f32(float q) {
    int big = q > 0.414213562373095f;
    float x = big ? (q - 1.0f) / (q + 1.0f) : q, z = x * x;
    float p = 8.05374449538e-2f;
    p = p * z - 1.38776856032E-1f;
    p = p * z + 1.99777106478E-1f;
    p = p * z - 3.33329491539E-1f;
    return (big ? 0.785398163397448310f : 0.0f) + (p * z * x + x);
}
#define PIO2_HI 1.57079637050628662f     /* pi / 2 = PIO2_HI + PIO2_LO */
#define PIO2_LO -4.37113900018624283e-8f
#define PI_HI 3.14159274101257324f
#define PI_LO -8.74227800037248566e-8f

/* atan(x), ~2 ulp */
static inline float atan_full_f32(float x) {
    float a = x < 0.0f ? -x : x;
    float t = atan_unit_f32(a > 1.0f ? 1.0f / a : a);
    return copysignf(a > 1.0f ? (PIO2_HI - t) + PIO2_LO : t, x);
}
/* atan2(y, x), ~2 ulp, with C99's signed zeros and infinities (atan2(+-0, -0) = +-pi...) */
static inline float atan2_full_f32(float y, float x) {
    float a = y < 0.0f ? -y : y, b = x < 0.0f ? -x : x;
    float q = a == b ? (a == 0.0f ? 0.0f : 1.0f) : a < b ? a / b : b / a;
    float t = atan_unit_f32(q);
    t = a > b ? (PIO2_HI - t) + PIO2_LO : t;
    t = signbit(x) ? (PI_HI - t) + PI_LO : t;
    return x != x || y != y ? x + y : copysignf(t, y);
}

/* asin(x) and acos(x), ~2 ulp: Cephes' asinf polynomial on |x| <= 1/2, and
 * asin(x) = pi/2 - 2 asin(sqrt((1 - x) / 2)) above */
static inline float asin_poly_f32(float s, float z) {       /* asin(s), z = s^2, s <= 1/2 */
    float p = 4.2163199048E-2f;
    p = p * z + 2.4181311049E-2f;
    p = p * z + 4.5470025998E-2f;
    p = p * z + 7.4953002686E-2f;
    p = p * z + 1.6666752422E-1f;
    return p * z * s + s;
}
static inline float asin_full_f32(float x) {
    float a = x < 0.0f ? -x : x, z = 0.5f * (1.0f - a);
    int big = a > 0.5f;
    float s = big ? sqrtf(z) : a, r = asin_poly_f32(s, big ? z : a * a);
    r = big ? (PIO2_HI - (r + r)) + PIO2_LO : r;
    return a > 1.0f ? NAN : copysignf(r, x);
}
static inline float acos_full_f32(float x) {
    float a = x < 0.0f ? -x : x, z = 0.5f * (1.0f - a);
    int big = a > 0.5f;
    float s = big ? sqrtf(z) : a, r = asin_poly_f32(s, big ? z : a * a);
    float hi = x < 0.0f ? (PI_HI - (r + r)) + PI_LO : r + r;     /* |x| > 1/2 */
    float lo = (PIO2_HI - copysignf(r, x)) + PIO2_LO;
    return a > 1.0f ? NAN : big ? hi : lo;
}

/* sinh, cosh, ~2 ulp: from expm1 (sinh near 0), and exp(|x| / 2)^2 / 2 past exp's overflow */
static inline float sinh_full_f32(float x) {
    float a = x < 0.0f ? -x : x, m = expm1_f32(a), h = exp_f32(0.5f * a);
    float r = a > 88.0f ? (0.5f * h) * h : 0.5f * (m + m / (m + 1.0f));
    return copysignf(r, x);
}
static inline float cosh_full_f32(float x) {
    float a = x < 0.0f ? -x : x, e = exp_f32(a), h = exp_f32(0.5f * a);
    return a > 88.0f ? (0.5f * h) * h : 0.5f * e + 0.5f / e;
}
/* atanh(x) = log1p(2|x| / (1 - |x|)) / 2, ~3 ulp */
static inline float atanh_full_f32(float x) {
    float a = x < 0.0f ? -x : x;
    return copysignf(0.5f * log1p_full_f32((a + a) / (1.0f - a)), x);
}

/* tan(x), ~2 ulp: x - k pi/2 in double (exact enough for |x| < 2^16; larger |x| goes to
 * libm, pointwise.h), Cephes' tanf polynomial, -1/tan for odd k */
static inline float tan_full_f32(float x) {
    double k = rint((double)x * 0.63661977236758134308);
    float r = (float)(((double)x - k * 1.5707963267341256e+00) - k * 6.0771005065061922e-11);
    float z = r * r, p = 9.38540185543E-3f;
    p = p * z + 3.11992232697E-3f;
    p = p * z + 2.44301354525E-2f;
    p = p * z + 5.34112807005E-2f;
    p = p * z + 1.33387994085E-1f;
    p = p * z + 3.33331568548E-1f;
    float t = p * z * r + r;
    return ((int32_t)k & 1) ? -1.0f / t : t;
}

static inline double phi_cdf_f64(double x, double *e) {
    *e = exp(-0.5 * x * x);
    return 0.5 * erfc(-x * 0.70710678118654752);
}

/* as gelu_exact_f32 */
static inline double gelu_exact_f64(double x) { double e; return x * phi_cdf_f64(x, &e); }

/* gelu'(x) = Phi(x) + x phi(x), as rowops.h's backward, for ember.compile's generated loops */
static inline float gelu_grad_f32(float x) {
    float e, c = phi_cdf_f32(x, &e);
    return c + x * e * 0.3989422804014327f;
}
static inline double gelu_grad_f64(double x) {
    double e, c = phi_cdf_f64(x, &e);
    return c + x * e * 0.3989422804014327;
}

#endif
