/* Fused float32 pointwise ops: one pass over memory where the NumPy reference takes two to
 * five (each a full read and write of the array), for the activations, clamp, sign and
 * nan_to_num, and a vectorised one where NumPy runs libm element by element (expm1, log1p,
 * tan, atan2...: vecmath.h's full-range functions, accuracy stated there). Included once
 * (float32 only; float64 keeps NumPy). The selects round exactly as the reference's ufuncs
 * (NumPy's maximum is a > b ? a : b with nan kept: signed zeros included), so those are
 * bit-identical, as are fmod, remainder and floor_divide; the exp and log ones use the vector
 * functions below and vecmath.h's (~1-3 ulp). a, b, c are the op's float parameters (unused
 * ones 0), rounded to float32 as NumPy rounds a Python float meeting a float32 array. */
enum { PW_SIGMOID, PW_SILU, PW_LEAKY_RELU, PW_HARDSIGMOID, PW_HARDSWISH, PW_CLAMP,
       PW_NAN_TO_NUM, PW_SIGN, PW_ELU, PW_SOFTPLUS, PW_SIGMOID_BWD, PW_SILU_BWD, PW_LOGADDEXP,
       PW_ERFINV, PW_LEAKY_RELU_BWD, PW_HARDSIGMOID_BWD, PW_HARDSWISH_BWD, PW_ELU_BWD,
       PW_SOFTPLUS_BWD, PW_REMAINDER, PW_REMAINDER_SCALAR, PW_ANGLE, PW_LGAMMA, PW_NDTRI,
       PW_DIGAMMA, PW_EXP, PW_EXP2, PW_EXPM1, PW_LOG, PW_LOG2, PW_LOG10, PW_LOG1P, PW_SINH,
       PW_COSH, PW_TAN, PW_ATAN, PW_ASIN, PW_ACOS, PW_ATANH, PW_ATAN2, PW_LOGADDEXP2, PW_HYPOT,
       PW_RSQRT, PW_RECIPROCAL, PW_HARDSHRINK, PW_SOFTSHRINK, PW_SHRINK_BWD, PW_THRESHOLD,
       PW_THRESHOLD_BWD, PW_FMOD, PW_FMOD_SCALAR, PW_FLOOR_DIVIDE, PW_FLOOR_DIVIDE_SCALAR,
       PW_SCALE_BWD, PW_EXPM1_BWD, PW_LOG_BWD, PW_LOG1P_BWD, PW_SINH_BWD, PW_COSH_BWD,
       PW_TAN_BWD, PW_ATAN_BWD, PW_ASIN_BWD, PW_ATANH_BWD, PW_RECIPROCAL_BWD, PW_RSQRT_BWD,
       PW_MISH, PW_MISH_BWD, PW_LOGSIGMOID, PW_LOGSIGMOID_BWD, PW_HARDTANH_BWD, PW_FRAC,
       PW_LOGIT, PW_LOGIT_BWD, PW_BCE_LOGITS, PW_BCE_LOGITS_BWD, PW_LERP, PW_ADDCMUL,
       PW_ADDCDIV, PW_COPYSIGN, PW_ENTR, PW_XLOGY, PW_XLOG1PY, PW_SINC, PW_TANH, PW_ASINH,
       PW_LOSS_BWD, PW_BCE, PW_BCE_BWD, PW_BCE_TARGET_BWD, PW_POW, PW_CLAMP_BWD, PW_ERF, PW_ERFC, PW_POW_BWD,
       PW_COUNT };

/* NumPy's maximum and minimum (v > lo || v is nan ? v : lo), as one comparison gcc vectorises */
static inline float pw_max(float v, float lo) { return v <= lo ? lo : v; }
static inline float pw_min(float v, float hi) { return v >= hi ? hi : v; }

/* log1p(y) for y >= 0 (or nan, or inf): log(u) for u = 1 + y, corrected by the rounding of
 * u ((u - 1) - y) / u, the classic trick that keeps tiny y exact */
static inline float log1p_nonneg_f32(float y) {
    float u = 1.0f + y;
    float r = log_f32(u) - ((u - 1.0f) - y) / u;
    return u == INFINITY ? u : y != y ? y : r;
}

/* NumPy's logaddexp: x + ln 2 where x == y (infinities of one sign included), else the
 * larger plus log1p(exp(-|x - y|)); nan where either is */
static inline float pw_logaddexp1(float x, float y) {
    float d = x - y;
    float big = d > 0.0f ? x : y;
    float r = big + log1p_nonneg_f32(exp_f32(-(d < 0.0f ? -d : d)));
    return x == y ? x + 0.693147180559945309f : d != d ? d : r;
}
/* the reference's split by sign: exp never overflows, and 1/(1+e) keeps tiny results */
static inline float pw_sigmoid1(float v) {
    float e = exp_f32(v < 0.0f ? v : -v);
    return v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

/* erfinv(y): Giles' single-precision polynomials ("Approximating the erfinv function", 2010:
 * the reference's starting estimate, here without its float64 Halley step) in
 * w = -log(1 - y^2), ~2e-7 relative; +-inf at +-1, nan beyond */
static inline float pw_erfinv1(float y) {
    float a = y < 0.0f ? -y : y;
    float w = -log_f32((1.0f - (a < 1.0f ? a : 0.5f)) * (1.0f + a));
    float c = w - 2.5f, p = 2.81022636e-08f;
    p = p * c + 3.43273939e-07f;
    p = p * c - 3.5233877e-06f;
    p = p * c - 4.39150654e-06f;
    p = p * c + 0.00021858087f;
    p = p * c - 0.00125372503f;
    p = p * c - 0.00417768164f;
    p = p * c + 0.246640727f;
    p = p * c + 1.50140941f;
    float t = sqrtf(w) - 3.0f, q = -0.000200214257f;
    q = q * t + 0.000100950558f;
    q = q * t + 0.00134934322f;
    q = q * t - 0.00367342844f;
    q = q * t + 0.00573950773f;
    q = q * t - 0.0076224613f;
    q = q * t + 0.00943887047f;
    q = q * t + 1.00167406f;
    q = q * t + 2.83297682f;
    float x = y * (w < 5.0f ? p : q);
    x = a == 1.0f ? y * INFINITY : x;
    return a > 1.0f ? NAN : x;          /* (nan: a > 1 false, and x is nan already) */
}

/* C's fmod(a, b), exactly, but for its zero's sign: a - q b for q = trunc(a / b) while
 * |q| < 2^24 (larger quotients, infinite b and nan are left to libm: pw_fix). The rounded
 * quotient can only be one too large (then r and a differ in sign: one b back). a - q b is
 * exact in double, and exact in float with one rounding (an FMA): the remainder, or it minus
 * b, is a multiple of b's last place below |b|. */
static inline float pw_fmod0(float a, float b) {
#ifdef __FMA__
    float q = truncf(a / b), r = fmaf(-q, b, a), ab = fabsf(b);
#else
    double q = trunc((double)a / (double)b), r = (double)a - q * (double)b, ab = fabs((double)b);
#endif
    return (float)((a > 0.0f) & (r < 0) ? r + ab : (a < 0.0f) & (r > 0) ? r - ab : r);
}
/* Python's a % b as NumPy's remainder: fmod's result moved into b's sign (a zero takes b's
 * sign) */
static inline float pw_rem1(float a, float b) {
    float m = pw_fmod0(a, b);
    m = m != 0.0f && (b < 0.0f) != (m < 0.0f) ? m + b : m;
    return m == 0.0f ? (b < 0.0f ? -0.0f : 0.0f) : m;
}

static float pw_rem_slow(float a, float b) {
    float m = fmodf(a, b);
    if (m != 0.0f) return (b < 0.0f) != (m < 0.0f) ? m + b : m;
    return copysignf(0.0f, b);
}

/* the elements of a block the fast path cannot take (rare: a second look): remainder's, fmod's
 * and floor_divide's with a quotient the exact path cannot take, tan's far arguments */
static float pw_floordiv_slow(float a, float b);
/* x (over y or b) needs libm: a quotient of 2^24 or more (|x| < 2^24 |b| is exact), b infinite
 * or 0, nan; tan's |x| >= 2^16 (y NULL, b 0) */
static inline int pw_far(float x, float b, int tan) {
    return tan ? !(fabsf(x) < 65536.0f)
               : !(fabsf(x) < 16777216.0f * fabsf(b)) | (fabsf(b) == INFINITY);
}
TC static void pw_fix(int op, const float *x, const float *y, float *o, int64_t n, float b) {
    int any = 0, tan = op == PW_TAN;
    if (y)
        for (int64_t i = 0; i < n; i++) any |= pw_far(x[i], y[i], 0);
    else
        for (int64_t i = 0; i < n; i++) any |= pw_far(x[i], b, tan);
    for (int64_t i = 0; any && i < n; i++) {
        float bi = y ? y[i] : b;
        if (pw_far(x[i], bi, tan))
            o[i] = tan ? tanf(x[i]) : op == PW_REMAINDER || op == PW_REMAINDER_SCALAR ?
                   pw_rem_slow(x[i], bi) : op == PW_FMOD || op == PW_FMOD_SCALAR ?
                   fmodf(x[i], bi) : pw_floordiv_slow(x[i], bi);
    }
}

/* one block of an op: y is the second input (the gradient of the backward ops), else unused */
#define PW_BLOCK(NAME, EXPR) PW_BLOCK_AS(, NAME, EXPR)
#define PW_BLOCK_AS(ATTR, NAME, EXPR)                                                          \
    TC ATTR static void pw_##NAME(const float *x, const float *y, const float *z, float *o,    \
                                  int64_t n, float a, float b, float c) {                     \
        (void)y; (void)z; (void)a; (void)b; (void)c;                                          \
        for (int64_t i = 0; i < n; i++) { float v = x[i]; o[i] = (EXPR); }                    \
    }

PW_BLOCK(sigmoid, pw_sigmoid1(v))
PW_BLOCK(silu, v / (1.0f + exp_f32(-v)))
PW_BLOCK(leaky_relu, v > 0.0f ? v : v * a)
PW_BLOCK(hardsigmoid, pw_min(pw_max(v + 3.0f, 0.0f), 6.0f) / 6.0f)
PW_BLOCK(hardswish, v * pw_min(pw_max(v + 3.0f, 0.0f), 6.0f) / 6.0f)
/* NOTE: a bound equal to v (-0.0 against 0.0) gives v, as torch's max(min(...)), not the bound */
static inline float pw_clamp1(float v, float a, float b) { float m = v < a ? a : v; return m > b ? b : m; }
PW_BLOCK(clamp, pw_clamp1(v, a, b))
PW_BLOCK(clamp_bwd, (v >= a) & (v <= b) ? y[i] : 0.0f)
PW_BLOCK(nan_to_num, v != v ? a : v == INFINITY ? b : v == -INFINITY ? c : v)
PW_BLOCK(sign, (float)((v > 0.0f) - (v < 0.0f)))
PW_BLOCK(elu, v > 0.0f ? v * b : expm1_f32(v * c) * a)
PW_BLOCK(softplus, v * a > b ? v : log1p_nonneg_f32(exp_f32(pw_min(v * a, b))) / a)
PW_BLOCK(logaddexp, pw_logaddexp1(v, y[i]))
PW_BLOCK(erfinv, pw_erfinv1(v))
/* the activations' backwards (x is the input, y the gradient), grouped as their references */
PW_BLOCK(leaky_relu_bwd, v > 0.0f ? y[i] : y[i] * a)
PW_BLOCK(hardsigmoid_bwd, (v > -3.0f) & (v < 3.0f) ? y[i] * a : 0.0f)
PW_BLOCK(hardswish_bwd, v < -3.0f ? 0.0f : v <= 3.0f ? y[i] * (v / 3.0f + 0.5f) : y[i])
PW_BLOCK(elu_bwd, v > 0.0f ? y[i] * b : y[i] * (exp_f32(v * c) * a))
PW_BLOCK(softplus_bwd, v * a > b ? y[i] : y[i] * pw_sigmoid1(v * a))
PW_BLOCK(remainder, pw_rem1(v, y[i]))
PW_BLOCK(remainder_scalar, pw_rem1(v, a))
/* a real number's argument: pi below 0 (not at -0), nan kept */
PW_BLOCK(angle, v < 0.0f ? 3.14159265358979323846f : v != v ? v : 0.0f)
/* vecmath.h's, in double (torch's is libm's scalar lgammaf) */
PW_BLOCK(lgamma, lgamma_f32(v))

/* Cephes' ndtri in double, as the reference (special.py's _NDTRI_* tables, highest power first,
 * the denominators' leading 1 written out) */
static const double NDTRI_P0[5] = {-5.99633501014107895267E1, 9.80010754185999661536E1,
    -5.66762857469070293439E1, 1.39312609387279679503E1, -1.23916583867381258016E0};
static const double NDTRI_Q0[9] = {1.0, 1.95448858338141759834E0, 4.67627912898881538453E0,
    8.63602421390890590575E1, -2.25462687854119370527E2, 2.00260212380060660359E2,
    -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0};
static const double NDTRI_P1[9] = {4.05544892305962419923E0, 3.15251094599893866154E1,
    5.71628192246421288162E1, 4.40805073893200834700E1, 1.46849561928858024014E1,
    2.18663306850790267539E0, -1.40256079171354495875E-1, -3.50424626827848203418E-2,
    -8.57456785154685413611E-4};
static const double NDTRI_Q1[9] = {1.0, 1.57799883256466749731E1, 4.53907635128879210584E1,
    4.13172038254672030440E1, 1.50425385692907503408E1, 2.50464946208309415979E0,
    -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4};
static const double NDTRI_P2[9] = {3.23774891776946035970E0, 6.91522889068984211695E0,
    3.93881025292474443415E0, 1.33303460815807542389E0, 2.01485389549179081538E-1,
    1.23716634817820021358E-2, 3.01581553508235416007E-4, 2.65806974686737550832E-6,
    6.23974539184983293730E-9};
static const double NDTRI_Q2[9] = {1.0, 6.02427039364742014255E0, 3.67983563856160859403E0,
    1.37702099489081330271E0, 2.16236993594496635890E-1, 1.34204006088543189037E-2,
    3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9};

static inline double pw_polevl(double x, const double *c, int n) {
    double r = c[0];
    for (int i = 1; i < n; i++) r = r * x + c[i];
    return r;
}
static inline float pw_ndtri1(float v) {
    const double e2 = 0.13533528323661269189, p = v;
    if (p > e2 && p <= 1.0 - e2) {
        double w = p - 0.5, w2 = w * w;
        return (float)((w + w * (w2 * pw_polevl(w2, NDTRI_P0, 5) / pw_polevl(w2, NDTRI_Q0, 9))) *
                       2.50662827463100050242);
    }
    if (!(p > 0.0 && p < 1.0)) return p == 0.0 ? -INFINITY : p == 1.0 ? INFINITY : NAN;
    int upper = p > 1.0 - e2;
    double t = sqrt(-2.0 * log(upper ? 1.0 - p : p)), z = 1.0 / t;
    double x = t - log(t) / t - (t < 8.0 ? z * pw_polevl(z, NDTRI_P1, 9) / pw_polevl(z, NDTRI_Q1, 9)
                                        : z * pw_polevl(z, NDTRI_P2, 9) / pw_polevl(z, NDTRI_Q2, 9));
    return (float)(upper ? x : -x);
}
PW_BLOCK(ndtri, pw_ndtri1(v))

PW_BLOCK(digamma, digamma_f32(v))
/* x is sigmoid's result r: g r (1 - r), as the reference's r * (1 - r) then g times it */
PW_BLOCK(sigmoid_bwd, y[i] * (v * (1.0f - v)))
/* x is silu's input: g (s (1 + x (1 - s))) with s = sigmoid(x), the reference's grouping */
PW_BLOCK(silu_bwd, y[i] * (pw_sigmoid1(v) * (1.0f + v * (1.0f - pw_sigmoid1(v)))))

/* the libm functions as vecmath.h's full-range ones; tan's large arguments go to libm */
PW_BLOCK(exp, exp_full_f32(v))
PW_BLOCK(exp2, exp2_f32(v))
PW_BLOCK(expm1, v == 0.0f ? v : expm1_f32(v))
PW_BLOCK(log, log_full_f32(v))
PW_BLOCK(log2, log2_full_f32(v))
PW_BLOCK(log10, log10_full_f32(v))
PW_BLOCK(log1p, log1p_full_f32(v))
PW_BLOCK(sinh, sinh_full_f32(v))
PW_BLOCK(cosh, cosh_full_f32(v))
PW_BLOCK(tan, tan_full_f32(v))
PW_BLOCK(atan, atan_full_f32(v))
PW_BLOCK(asin, asin_full_f32(v))
PW_BLOCK(acos, acos_full_f32(v))
PW_BLOCK(atanh, atanh_full_f32(v))
PW_BLOCK(atan2, atan2_full_f32(v, y[i]))
/* NumPy's logaddexp2: x + 1 where x == y, else the larger plus log2(1 + 2^-|x - y|) */
static inline float pw_logaddexp2_1(float x, float y) {
    float d = x - y, big = d > 0.0f ? x : y;
    float r = big + log1p_full_f32(exp2_f32(-(d < 0.0f ? -d : d))) * 1.44269504088896341f;
    return x == y ? x + 1.0f : d != d ? d : r;
}
PW_BLOCK(logaddexp2, pw_logaddexp2_1(v, y[i]))
/* hypot in double (exact squares, one rounding); an infinity wins over nan, as C99's */
PW_BLOCK(hypot, fabsf(v) == INFINITY || fabsf(y[i]) == INFINITY ? INFINITY :
                (float)sqrt((double)v * v + (double)y[i] * y[i]))
PW_BLOCK(rsqrt, 1.0f / sqrtf(v))
PW_BLOCK(reciprocal, 1.0f / v)
/* the shrinks and threshold as their references' selects (0 * x keeps -0 and nan) */
PW_BLOCK(hardshrink, (v > a) | (v < -a) ? v : 0.0f * v)
PW_BLOCK(softshrink, v > a ? v - a : v < -a ? v + a : 0.0f * v)
PW_BLOCK(shrink_bwd, (v > a) | (v < -a) ? y[i] : 0.0f)
PW_BLOCK(threshold, v <= a ? b : v)
PW_BLOCK(threshold_bwd, y[i] * (v > a ? 1.0f : 0.0f))
/* C's fmod: the zero in a's sign */
static inline float pw_fmod1(float a, float b) {
    float r = pw_fmod0(a, b);
    return r == 0.0f ? 0.0f * a : r;
}
/* NumPy's floor_divide (npy_divmodf): (a - fmod(a, b)) / b, one less where the remainder
 * and b differ in sign, floored and rounded to the nearer integer */
static inline float pw_floordiv1(float a, float b, float mod) {
    float div = (a - mod) / b;
    div = mod != 0.0f && (b < 0.0f) != (mod < 0.0f) ? div - 1.0f : div;
    float f = floorf(div);
    f = div - f > 0.5f ? f + 1.0f : f;
    return b == 0.0f ? a / b : div == 0.0f ? copysignf(0.0f, a / b) : f;
}
PW_BLOCK(fmod, pw_fmod1(v, y[i]))
PW_BLOCK(fmod_scalar, pw_fmod1(v, a))
PW_BLOCK(floor_divide, pw_floordiv1(v, y[i], pw_fmod1(v, y[i])))
PW_BLOCK(floor_divide_scalar, pw_floordiv1(v, a, pw_fmod1(v, a)))
/* the math functions' backwards: x is the saved input or result (_unary's save), y the
 * gradient, grouped as the reference's deriv(x, r) then g times it (x^2 rounded before 1 -
 * x^2: no FMA, whose cancellation near |x| = 1 would part from it); a: a constant (ln 2 for
 * exp2 and log2, ln 10 for log10, -1 for acos) */
PW_BLOCK(scale_bwd, y[i] * (v * a))
PW_BLOCK(expm1_bwd, y[i] * (v + 1.0f))
PW_BLOCK(log_bwd, y[i] * (1.0f / (v * a)))
PW_BLOCK(log1p_bwd, y[i] * (1.0f / (v + 1.0f)))
PW_BLOCK(sinh_bwd, y[i] * cosh_full_f32(v))
PW_BLOCK(cosh_bwd, y[i] * sinh_full_f32(v))
PW_BLOCK_AS(NOCONTRACT, tan_bwd, y[i] * (1.0f + v * v))
PW_BLOCK_AS(NOCONTRACT, atan_bwd, y[i] * (1.0f / (1.0f + v * v)))
PW_BLOCK_AS(NOCONTRACT, asin_bwd, y[i] * (a * (1.0f / sqrtf(1.0f - v * v))))
PW_BLOCK_AS(NOCONTRACT, atanh_bwd, y[i] * (1.0f / (1.0f - v * v)))
PW_BLOCK_AS(NOCONTRACT, reciprocal_bwd, y[i] * (-v * v))
PW_BLOCK_AS(NOCONTRACT, rsqrt_bwd, y[i] * (-0.5f * v * v * v))
/* mish: x tanh(softplus(x)) = x n / (n + 2) with n = e (e + 2), e = exp(x) (x capped at 20,
 * where the ratio is 1 in float32), ~3 ulp; its backward g (t + x sigmoid(x) (1 - t^2)) */
static inline float pw_mish_t(float v, float *sig) {
    float e = exp_full_f32(v < 20.0f ? v : 20.0f), n = e * (e + 2.0f);
    *sig = e / (1.0f + e);
    return n / (n + 2.0f);
}
static inline float pw_mish1(float v) { float s, t = pw_mish_t(v, &s); return v * t; }
static inline float pw_mish_bwd1(float v, float g) {
    float s, t = pw_mish_t(v, &s);
    return g * (t + v * s * (1.0f - t * t));
}
PW_BLOCK(mish, pw_mish1(v))
PW_BLOCK(mish_bwd, pw_mish_bwd1(v, y[i]))
/* logsigmoid as its reference min(x, 0) - log1p(exp(-|x|)), its backward g sigmoid(-x) */
PW_BLOCK(logsigmoid, pw_min(v, 0.0f) - log1p_nonneg_f32(exp_f32(v < 0.0f ? v : -v)))
PW_BLOCK(logsigmoid_bwd, y[i] * pw_sigmoid1(-v))
/* hardtanh's backward: g inside (a, b), else 0 */
PW_BLOCK(hardtanh_bwd, (v > a) & (v < b) ? y[i] : 0.0f)
PW_BLOCK(frac, v - truncf(v))
/* logit of x clamped to [a, b] (-inf, inf: no eps), and its backward, 0 outside [a, b] */
PW_BLOCK(logit, log_full_f32(pw_min(pw_max(v, a), b) / (1.0f - pw_min(pw_max(v, a), b))))
PW_BLOCK(logit_bwd, (v < a) | (v > b) ? 0.0f : y[i] / (v * (1.0f - v)))
/* binary_cross_entropy_with_logits without weights, y the target: (1 - y) x + softplus(-x);
 * its input's gradient (1 - y) - (1 - sigmoid(x)) times a, the loss's (scalar) gradient */
PW_BLOCK(bce_logits, (1.0f - y[i]) * v +
                     (pw_max(-v, 0.0f) + log1p_nonneg_f32(exp_f32(v < 0.0f ? v : -v))))
PW_BLOCK(bce_logits_bwd, ((1.0f - y[i]) - (1.0f - pw_sigmoid1(v))) * a)
/* lerp to y by a number weight a (b = 1 - a, c: |a| < 1/2), torch's two sides of the formula;
 * addcmul and addcdiv: x + (y * z) a and x + (y / z) a; each as its reference, unfused */
PW_BLOCK_AS(NOCONTRACT, lerp, c != 0.0f ? v + a * (y[i] - v) : y[i] - (y[i] - v) * b)
PW_BLOCK_AS(NOCONTRACT, addcmul, v + (y[i] * z[i]) * a)
PW_BLOCK_AS(NOCONTRACT, addcdiv, v + (y[i] / z[i]) * a)
PW_BLOCK(copysign, copysignf(v, y[i]))     /* (bit selects: NumPy's loop is scalar) */
/* torch.special.entr: -x log x, 0 at 0, -inf below, nan kept */
PW_BLOCK(entr, v < 0.0f ? -INFINITY : v == 0.0f ? 0.0f : -v * log_full_f32(v))
/* xlogy, xlog1py: x log(y), x log1p(y); 0 where x == 0 unless y is nan */
PW_BLOCK(xlogy, v == 0.0f && y[i] == y[i] ? 0.0f : v * log_full_f32(y[i]))
PW_BLOCK(xlog1py, v == 0.0f && y[i] == y[i] ? 0.0f : v * log1p_full_f32(y[i]))
/* sinc: sin(p) / p with p = x pi rounded to float, as the reference; the sine in double (libm's
 * for |p| >= 2^20, pw_block's second look), 1 at 0 */
static inline float pw_sinc1(float v) {
    float p = v * 3.14159265358979323846f;
    double s, c;
    sincos_f64v(p, &s, &c);
    return v == 0.0f ? 1.0f : (float)(s / p);
}
PW_BLOCK(sinc, pw_sinc1(v))
/* tanh 1 - 2 / (e^2|x| + 1) and asinh log(|x| + sqrt(x^2 + 1)) in double (no cancellation
 * left that float32 sees above |x| = 2^-12; below it their series' first terms), sign put back */
static inline float pw_tanh1(float v) {
    double a = fabsf(v), e = exp_f64v(a < 10.0 ? a + a : 20.0);
    float t = (float)(a < 2.44140625e-4 ? a - a * a * a / 3.0 : 1.0 - 2.0 / (e + 1.0));
    return v != v ? v : copysignf(t, v);
}
static inline float pw_asinh1(float v) {
    double a = fabsf(v), r = log_f64v(a + sqrt(a * a + 1.0));
    return a < 2.44140625e-4 || !(a < INFINITY) ? v : copysignf((float)r, v);
}
PW_BLOCK(tanh, pw_tanh1(v))
PW_BLOCK(asinh, pw_asinh1(v))
/* x^y as exp(y log|x|) in double (~1e-14 relative: float32's correct rounding but for near-
 * ties; libm's powf is scalar), C99's special cases as selects: 1 at y = 0 or x = 1, nan for a
 * negative finite x to a non-integer, the sign of x to an odd integer */
static inline float pw_pow1(float x, float y) {
    double a = fabsf(x), l0 = log_f64v(a), l = a == 0.0 ? -INFINITY : a == INFINITY ? a : l0;
    double t = l == 0.0 ? 0.0 : (double)y * l;
    float ay = fabsf(y), yr = (y + 12582912.0f) - 12582912.0f;     /* (y rounded: |y| < 2^22) */
    int yint = (ay >= 8388608.0f) | (yr == y);
    int odd = (int32_t)(ay < 16777216.0f ? y : 0.0f) & yint;
    float r = (float)exp_f64v(t < -110.0 ? -110.0 : t > 100.0 ? 100.0 : t);   /* (0 / inf) */
    r = (copysignf(1.0f, x) < 0.0f) & odd ? -r : r;
    r = ((x < 0.0f) & (a < INFINITY) & !yint) | (x != x) | (y != y) ? NAN : r;
    return (y == 0.0f) | (x == 1.0f) ? 1.0f : r;
}
PW_BLOCK(pow, pw_pow1(v, y[i]))
/* pow's gradient for the base (z: the incoming one) as its reference's ops, each rounded as
 * there: g (y x^(y-1)) */
PW_BLOCK(pow_bwd, z[i] * (y[i] * pw_pow1(v, y[i] - 1.0f)))
PW_BLOCK(erf, erf_erfc_f32(v, 0))
PW_BLOCK(erfc, erf_erfc_f32(v, 1))
/* a loss's backward: g the loss's gradient, the array z (reduction 'none') or b (a mean's or
 * sum's, over the count for a mean), in two loops: a conditional load would not vectorise */
#define PW_BLOCK_G(NAME, EXPR)                                                                 \
    TC static void pw_##NAME(const float *x, const float *y, const float *z, float *o,        \
                             int64_t n, float a, float b, float c) {                          \
        (void)a; (void)c;                                                                     \
        if (z) for (int64_t i = 0; i < n; i++) { float v = x[i], g = z[i]; o[i] = (EXPR); }   \
        else for (int64_t i = 0; i < n; i++) { float v = x[i], g = b; o[i] = (EXPR); }        \
    }
/* the input's gradient of the losses of d = x - y (c: 0 mse_loss, 1 smooth_l1_loss, 2
 * huber_loss, a their beta or delta): 2 d; d / a (smooth L1) or d (Huber) where |d| < a, else
 * sign(d) (times a for Huber; 0 at nan, as the reference's sign); times g, each step as the
 * reference's */
static inline float pw_loss_bwd1(float x, float y, float a, float c) {
    float d = x - y, s = (float)((d > 0.0f) - (d < 0.0f));
    return c == 0.0f ? 2.0f * d : fabsf(d) < a ? (c == 1.0f ? d / a : d) : c == 1.0f ? s : s * a;
}
PW_BLOCK_G(loss_bwd, pw_loss_bwd1(v, y[i], a, c) * g)
/* binary_cross_entropy of probability x and target y, each log clamped at -100; its input's
 * gradient g (x - y) / max((1 - x) x, 1e-12) and its target's -logit(x) g */
PW_BLOCK(bce, (y[i] - 1.0f) * pw_max(log1p_full_f32(-v), -100.0f) -
              y[i] * pw_max(log_full_f32(v), -100.0f))
PW_BLOCK_G(bce_bwd, g * (v - y[i]) / pw_max((1.0f - v) * v, 1e-12f))
PW_BLOCK_G(bce_target_bwd, -log_full_f32(v / (1.0f - v)) * g)

static float pw_floordiv_slow(float a, float b) { return pw_floordiv1(a, b, fmodf(a, b)); }

typedef void (*pw_fn)(const float *, const float *, const float *, float *, int64_t, float, float,
                      float);
static const pw_fn PW_FNS[PW_COUNT] = {pw_sigmoid, pw_silu, pw_leaky_relu, pw_hardsigmoid,
                                       pw_hardswish, pw_clamp, pw_nan_to_num, pw_sign, pw_elu,
                                       pw_softplus, pw_sigmoid_bwd, pw_silu_bwd,
                                       pw_logaddexp, pw_erfinv, pw_leaky_relu_bwd,
                                       pw_hardsigmoid_bwd, pw_hardswish_bwd, pw_elu_bwd,
                                       pw_softplus_bwd, pw_remainder, pw_remainder_scalar,
                                       pw_angle, pw_lgamma, pw_ndtri, pw_digamma, pw_exp, pw_exp2,
                                       pw_expm1, pw_log, pw_log2, pw_log10, pw_log1p, pw_sinh,
                                       pw_cosh, pw_tan, pw_atan, pw_asin, pw_acos, pw_atanh,
                                       pw_atan2, pw_logaddexp2, pw_hypot, pw_rsqrt,
                                       pw_reciprocal, pw_hardshrink, pw_softshrink,
                                       pw_shrink_bwd, pw_threshold, pw_threshold_bwd, pw_fmod,
                                       pw_fmod_scalar, pw_floor_divide, pw_floor_divide_scalar,
                                       pw_scale_bwd, pw_expm1_bwd, pw_log_bwd, pw_log1p_bwd,
                                       pw_sinh_bwd, pw_cosh_bwd, pw_tan_bwd, pw_atan_bwd,
                                       pw_asin_bwd, pw_atanh_bwd, pw_reciprocal_bwd,
                                       pw_rsqrt_bwd, pw_mish, pw_mish_bwd, pw_logsigmoid,
                                       pw_logsigmoid_bwd, pw_hardtanh_bwd, pw_frac, pw_logit,
                                       pw_logit_bwd, pw_bce_logits, pw_bce_logits_bwd, pw_lerp,
                                       pw_addcmul, pw_addcdiv, pw_copysign, pw_entr,
                                       pw_xlogy, pw_xlog1py, pw_sinc, pw_tanh, pw_asinh,
                                       pw_loss_bwd, pw_bce, pw_bce_bwd,
                                       pw_bce_target_bwd, pw_pow, pw_clamp_bwd, pw_erf, pw_erfc,
                                       pw_pow_bwd};
/* rough cost per element relative to a copy: how early a second thread pays */
static const int PW_COST[PW_COUNT] = {8, 8, 1, 1, 1, 1, 1, 1, 8, 16, 1, 8, 16, 16,
                                      1, 1, 1, 8, 8, 4, 4, 1, 32, 16, 16, 4, 4, 4,
                                      4, 4, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8, 16, 4, 1, 1,
                                      1, 1, 1, 1, 1, 4, 4, 4, 4, 1, 1, 1, 1, 8,
                                      8, 1, 1, 1, 1, 1, 1, 8, 8, 16, 8, 1, 1, 4,
                                      1, 16, 8, 1, 1, 1, 1, 4, 4, 4, 4, 8, 8, 1, 8, 1, 4, 16, 1, 8, 8,
                                      16, 16};

static void pw_block(int op, pw_fn fn, const float *x, const float *y, const float *z,
                     float *out, int64_t i, int64_t m, float fa, float fb, float fc) {
    fn(x + i, y ? y + i : y, z ? z + i : z, out + i, m, fa, fb, fc);
    if (op == PW_REMAINDER || op == PW_REMAINDER_SCALAR || op == PW_TAN || op == PW_FMOD ||
        op == PW_FMOD_SCALAR || op == PW_FLOOR_DIVIDE || op == PW_FLOOR_DIVIDE_SCALAR)
        pw_fix(op, x + i, y ? y + i : y, out + i, m, fa);
    for (int64_t j = i; op == PW_SINC && j < i + m; j++)
        if (!(fabsf(x[j]) < 300000.0f)) out[j] = sinf(x[j] * 3.14159265358979323846f) /
                                                 (x[j] * 3.14159265358979323846f);
}

/* op `op` of n contiguous floats x (and y, z for the two- and three-input ops) into out; -1 for
 * an unknown op */
EXPORT int pointwise_f32(int op, const float *x, const float *y, const float *z, float *out,
                         int64_t n, double a, double b, double c, int nt) {
    if (op < 0 || op >= PW_COUNT) return -1;
    const int64_t B = 16384;
    pw_fn fn = PW_FNS[op];
    float fa = (float)a, fb = (float)b, fc = (float)c;
    nt = threads_for(n * PW_COST[op], nt);
    THREADED_FOR(nt, n, B, pw_block(op, fn, x, y, z, out, i, n - i < B ? n - i : B, fa, fb, fc));
    return 0;
}

/* logcumsumexp along the middle axis of a contiguous (outer, n, inner) float32 array: NumPy's
 * logaddexp.accumulate (the reference: y[s] = logaddexp(y[s - 1], x[s])) with the vector exp
 * and log1p for libm's. Each step waits on the one before, so the loop advances several
 * independent rows (inner 1: 8 of them) or 256 columns at once; those blocks over threads. */
TC static void lcse_block(const float *x, float *y, int64_t n, int64_t step, int64_t w,
                          int64_t stride) {    /* (w sequences, stride apart, of n, step apart) */
    for (int64_t j = 0; j < w; j++) y[j * stride] = x[j * stride];
    for (int64_t s = 1; s < n; s++)
        for (int64_t j = 0; j < w; j++) {
            int64_t at = j * stride + s * step;
            y[at] = pw_logaddexp1(y[at - step], x[at]);
        }
}

static void lcse_part(const float *x, float *y, int64_t outer, int64_t n, int64_t inner,
                      int64_t cb, int64_t i) {      /* block i: 8 rows, or 256 columns */
    if (inner == 1) {
        int64_t r = i * 8, m = outer - r < 8 ? outer - r : 8;
        lcse_block(x + r * n, y + r * n, n, 1, m, n);
    } else {
        int64_t o = i / cb, c = i % cb * 256, m = inner - c < 256 ? inner - c : 256;
        lcse_block(x + o * n * inner + c, y + o * n * inner + c, n, inner, m, 1);
    }
}

EXPORT void logcumsumexp_f32(const float *x, float *y, int64_t outer, int64_t n, int64_t inner,
                             int nt) {
    int64_t cb = (inner + 255) / 256, blocks = inner == 1 ? (outer + 7) / 8 : outer * cb;
    nt = threads_for(outer * n * inner * 16, nt);
    THREADED_FOR(nt, blocks, 1, lcse_part(x, y, outer, n, inner, cb, i))
}

/* polar's complex64 result of float32 abs and angle: abs cos(angle), abs sin(angle), each a
 * float32 product as the reference's, the sine and cosine in double (~0.5 ulp once rounded;
 * libm's from |angle| = 2^20, nan and inf included); blocks over threads */
TC static void polar_block(const float *r, const float *t, float *o, int64_t n) {
    int far = 0;
    for (int64_t i = 0; i < n; i++) {
        double s, c;
        sincos_f64v(t[i], &s, &c);
        o[2 * i] = r[i] * (float)c;
        o[2 * i + 1] = r[i] * (float)s;
        far |= !(fabsf(t[i]) < 1048576.0f);
    }
    for (int64_t i = 0; far && i < n; i++)
        if (!(fabsf(t[i]) < 1048576.0f)) {
            o[2 * i] = r[i] * cosf(t[i]);
            o[2 * i + 1] = r[i] * sinf(t[i]);
        }
}

EXPORT void polar_f32(const float *r, const float *t, float *out, int64_t n, int nt) {
    nt = threads_for(n * 8, nt);
    THREADED_FOR(nt, n, 4096, polar_block(r + i, t + i, out + 2 * i, n - i < 4096 ? n - i : 4096))
}

