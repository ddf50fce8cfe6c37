/* torch.special's functions, one element at a time in double (float32 inputs widened, as
 * ember/_ops/special.py's _in_f64 does): the classical orthogonal polynomials by their
 * recurrence to each element's own degree, and Cephes' Bessel and Airy approximations, step
 * for step as ember/_ops/polynomials.py and bessel.py (the references these are tested
 * against, tests/test_kernels_special.py). Op codes: _SPECIAL in __init__.py.
 * No fma contraction here: the references round every product, and a recurrence of high
 * degree amplifies a one-ulp difference. float64 is the references' bit for bit; float32 takes
 * shortcuts where torch's float kernels are short float code: ndtr and log_ndtr by vecmath.h's
 * erfc fit, I0/I1 with fewer terms, J, Y and spherical j0 with vecmath.h's double sin, cos and
 * log, igamma's sums stopped sooner (each within a few ulp of the float64 values, tested). */
#include <math.h>
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

static const double SP_AI_AD[8] = {0.5675945326387702, 14.75625625848472, 84.51389701414746, 177.31808814540045, 164.2346928715297, 71.47784008255756, 14.095913560783403, 1.0};
static const double SP_AI_AFD[9] = {13.356042070655324, 32.682503279522464, 26.736704094149957, 9.187074029072596, 1.4752914677166642, 0.11568717379518804, 0.004402916416152112, 7.547203482874142e-05, 4.5185009297058035e-07};
static const double SP_AI_AFN[9] = {-0.1316963234183318, -0.6264565444319123, -0.6931580360369335, -0.2797799815451191, -0.04919001326095003, -0.004062659235948854, -0.0001592764962392621, -2.776491081552329e-06, -1.6778769848911465e-08};
static const double SP_AI_AGD[10] = {9.30892908077442, 19.835292871831214, 15.564662893286462, 5.476860694229755, 0.9542936116189619, 0.08645808263523921, 0.004126565238242226, 0.00010125908511650914, 1.1716673321441352e-06, 4.9183457006293e-09};
static const double SP_AI_AGN[11] = {0.01973399320916857, 0.39110302961568827, 1.0657989759959559, 0.9391692298166502, 0.35146565610554764, 0.06338889196289255, 0.005858041130483885, 0.000282851600836737, 6.98793669997261e-06, 8.117892395543892e-08, 3.415517847659236e-10};
static const double SP_AI_AN[8] = {0.346538101525629, 12.007595273964581, 76.27960536152345, 168.08922493463058, 159.75639135016442, 70.53609068404442, 14.026469116338967, 1.0};
static const double SP_I0_A[30] = {-4.4153416464793395e-18, 3.3307945188222384e-17, -2.431279846547955e-16, 1.715391285555133e-15, -1.1685332877993451e-14, 7.676185498604936e-14, -4.856446783111929e-13, 2.95505266312964e-12, -1.726826291441556e-11, 9.675809035373237e-11, -5.189795601635263e-10, 2.6598237246823866e-09, -1.300025009986248e-08, 6.046995022541919e-08, -2.670793853940612e-07, 1.1173875391201037e-06, -4.4167383584587505e-06, 1.6448448070728896e-05, -5.754195010082104e-05, 0.00018850288509584165, -0.0005763755745385824, 0.0016394756169413357, -0.004324309995050576, 0.010546460394594998, -0.02373741480589947, 0.04930528423967071, -0.09490109704804764, 0.17162090152220877, -0.3046826723431984, 0.6767952744094761};
static const double SP_I0_B[25] = {-7.233180487874754e-18, -4.830504485944182e-18, 4.46562142029676e-17, 3.461222867697461e-17, -2.8276239805165836e-16, -3.425485619677219e-16, 1.7725601330565263e-15, 3.8116806693526224e-15, -9.554846698828307e-15, -4.150569347287222e-14, 1.54008621752141e-14, 3.8527783827421426e-13, 7.180124451383666e-13, -1.7941785315068062e-12, -1.3215811840447713e-11, -3.1499165279632416e-11, 1.1889147107846439e-11, 4.94060238822497e-10, 3.3962320257083865e-09, 2.266668990498178e-08, 2.0489185894690638e-07, 2.8913705208347567e-06, 6.889758346916825e-05, 0.0033691164782556943, 0.8044904110141088};
static const double SP_I1_A[29] = {2.7779141127610464e-18, -2.111421214358166e-17, 1.5536319577362005e-16, -1.1055969477353862e-15, 7.600684294735408e-15, -5.042185504727912e-14, 3.223793365945575e-13, -1.9839743977649436e-12, 1.1736186298890901e-11, -6.663489723502027e-11, 3.625590281552117e-10, -1.8872497517228294e-09, 9.381537386495773e-09, -4.445059128796328e-08, 2.0032947535521353e-07, -8.568720264695455e-07, 3.4702513081376785e-06, -1.3273163656039436e-05, 4.781565107550054e-05, -0.00016176081582589674, 0.0005122859561685758, -0.0015135724506312532, 0.004156422944312888, -0.010564084894626197, 0.024726449030626516, -0.05294598120809499, 0.1026436586898471, -0.17641651835783406, 0.25258718644363365};
static const double SP_I1_B[25] = {7.517296310842105e-18, 4.414348323071708e-18, -4.6503053684893586e-17, -3.209525921993424e-17, 2.96262899764595e-16, 3.3082023109209285e-16, -1.8803547755107825e-15, -3.8144030724370075e-15, 1.0420276984128802e-14, 4.272440016711951e-14, -2.1015418427726643e-14, -4.0835511110921974e-13, -7.198551776245908e-13, 2.0356285441470896e-12, 1.4125807436613782e-11, 3.2526035830154884e-11, -1.8974958123505413e-11, -5.589743462196584e-10, -3.835380385964237e-09, -2.6314688468895196e-08, -2.512236237870209e-07, -3.882564808877691e-06, -0.00011058893876262371, -0.009761097491361469, 0.7785762350182801};
static const double SP_J0_PP[7] = {0.0007969367292973471, 0.08283523921074408, 1.239533716464143, 5.447250030587687, 8.74716500199817, 5.303240382353949, 1.0};
static const double SP_J0_PQ[7] = {0.0009244088105588637, 0.08562884743544745, 1.2535274390105895, 5.470977403304171, 8.761908832370695, 5.306052882353947, 1.0};
static const double SP_J0_QP[8] = {-0.011366383889846916, -1.2825271867050931, -19.553954425773597, -93.20601521237683, -177.68116798048806, -147.07750515495118, -51.41053267665993, -6.050143506007285};
static const double SP_J0_QQ[7] = {64.3178256118178, 856.4300259769806, 3882.4018360540163, 7240.467741956525, 5930.727011873169, 2062.0933166032783, 242.0057402402914};
static const double SP_J0_ROOTS2[2] = {5.783185962946784, 30.471262343662087};
static const double SP_J0_RP[4] = {-4794432209.782018, 1956174919465.5657, -249248344360967.72, 9708622510473064.0};
static const double SP_J0_RQ[8] = {499.563147152651, 173785.4016763747, 48440965.83399621, 11185553704.535683, 2112775201154.892, 310518229857422.56, 3.1812195594320496e+16, 1.7108629408104315e+18};
static const double SP_J1_PP[7] = {0.0007621256162081731, 0.07313970569409176, 1.1271960812968493, 5.112079511468076, 8.424045901417724, 5.214515986823615, 1.0};
static const double SP_J1_PQ[7] = {0.0005713231280725487, 0.06884559087544954, 1.105142326340617, 5.073863861286015, 8.399855543276042, 5.209828486823619, 1.0};
static const double SP_J1_QP[8] = {0.05108625947501766, 4.982138729512334, 75.82382841325453, 366.7796093601508, 710.8563049989261, 597.4896124006136, 211.68875710057213, 25.207020585802372};
static const double SP_J1_QQ[7] = {74.23732770356752, 1056.4488603826283, 4986.410583376536, 9562.318924047562, 7997.041604473507, 2826.1927851763908, 336.0936078106983};
static const double SP_J1_ROOTS2[2] = {14.681970642123893, 49.2184563216946};
static const double SP_J1_RP[4] = {-899971225.7055594, 452228297998.19403, -72749424522181.83, 3682957328638529.0};
static const double SP_J1_RQ[8] = {620.8364781180543, 256987.25675774884, 83514679.14319493, 22151159547.97925, 4749141220799.914, 784369607876235.9, 8.952223361846274e+16, 5.322786203326801e+18};
static const double SP_K0_A[10] = {1.374465435613523e-16, 4.25981614279661e-14, 1.0349695257633842e-11, 1.904516377220209e-09, 2.5347910790261494e-07, 2.286212103119452e-05, 0.001264615411446926, 0.0359799365153615, 0.3442898999246285, -0.5353273932339028};
static const double SP_K0_B[25] = {5.300433772686263e-18, -1.6475804301524212e-17, 5.2103915050390274e-17, -1.678231096805412e-16, 5.512055978524319e-16, -1.848593377343779e-15, 6.3400764774050706e-15, -2.2275133269916698e-14, 8.032890775363575e-14, -2.9800969231727303e-13, 1.140340588208475e-12, -4.514597883373944e-12, 1.8559491149547177e-11, -7.957489244477107e-11, 3.577397281400301e-10, -1.69753450938906e-09, 8.574034017414225e-09, -4.660489897687948e-08, 2.766813639445015e-07, -1.8317555227191195e-06, 1.39498137188765e-05, -0.00012849549581627802, 0.0015698838857300533, -0.0314481013119645, 2.4403030820659555};
static const double SP_K1_A[11] = {-7.023863479386288e-18, -2.427449850519366e-15, -6.666901694199329e-13, -1.4114883926335278e-10, -2.213387630734726e-08, -2.4334061415659684e-06, -0.0001730288957513052, -0.006975723859639864, -0.12261118082265715, -0.3531559607765449, 1.5253002273389478};
static const double SP_K1_B[25] = {-5.756744483665017e-18, 1.7940508731475592e-17, -5.689462558442859e-17, 1.838093544366639e-16, -6.057047248373319e-16, 2.038703165624334e-15, -7.019837090418314e-15, 2.4771544244813043e-14, -8.976705182324994e-14, 3.3484196660784293e-13, -1.2891739609510289e-12, 5.13963967348173e-12, -2.1299678384275683e-11, 9.218315187605006e-11, -4.1903547593418965e-10, 2.015049755197033e-09, -1.0345762465678097e-08, 5.7410841254500495e-08, -3.5019606030878126e-07, 2.406484947837217e-06, -1.936197974166083e-05, 0.00019521551847135162, -0.002857816859622779, 0.10392373657681724, 2.7206261904844427};
static const double SP_Y0_YP[8] = {15592.436785523574, -14663929.59039716, 5435264770.518765, -982136065717.9115, 87590639439536.7, -3466283033847297.0, 4.4273326857256984e+16, -1.8495080043698668e+16};
static const double SP_Y0_YQ[7] = {1041.2835366425984, 626107.330137135, 268919633.39381415, 86400248710.3935, 20297961275010.555, 3171577528429750.5, 2.5059625617265306e+17};
static const double SP_Y1_YP[6] = {1263204747.9017804, -647355876379.1603, 114509511541823.73, -8127702555013251.0, 2.024394757135949e+17, -7.788771962659501e+17};
static const double SP_Y1_YQ[8] = {594.3015923461282, 235564.09294306856, 73481194.44597217, 18760131610.870617, 3882312774962.3857, 620557727146953.8, 6.871410873553005e+16, 3.9727060811656064e+18};

#define SP_N(t) (int)(sizeof(t) / sizeof(t[0]))
/* Horner's rule from 0, as the reference (0 * inf = nan where Cephes' polevl would not) */
static double sp_poly(double z, const double *c, int n) {
    double r = 0.0;
    for (int i = 0; i < n; i++) r = r * z + c[i];
    return r;
}
#define POLY(z, t) sp_poly(z, t, SP_N(t))

/* ---- orthogonal polynomials: codes 0-3 Chebyshev T U V W, 4-7 shifted, 8 Hermite H,
 * 9 He, 10 Laguerre, 11 Legendre; a block of elements at a time, each step of the recurrence
 * across the block (vectorised), each element stopping at its own degree (later steps leave it
 * as it is) */
#define SP_BLOCK 64
#define SP_RECUR(next)                                                                        \
    for (double k = 1; k < most; k++)                                                         \
        for (int j = 0; j < m; j++) {                                                         \
            double xj = xs[j], c = cur[j], p = prev[j], nx = (next);                          \
            prev[j] = k < top[j] ? c : p;                                                     \
            cur[j] = k < top[j] ? nx : c;                                                     \
        }
/* (store data races allowed: the selects into these local arrays become blends and plain
 * stores, not masked stores, 2-3x slower) */
TC __attribute__((optimize("fp-contract=off", "allow-store-data-races")))
static void sp_poly_block(int code, const double *x, const double *n, double *out, int m) {
    double xs[SP_BLOCK], prev[SP_BLOCK], cur[SP_BLOCK], top[SP_BLOCK], deg[SP_BLOCK], most = 0;
    int kind = code < 8 ? code % 4 : code;
    for (int j = 0; j < m; j++) {
        /* NOTE: torch casts n to int64: nan, inf and out-of-range degrees are negative: 0 */
        deg[j] = fabs(n[j]) < 0x1p63 ? trunc(n[j]) : -1.0;
        /* (the reference stops its recurrence at degree 65536: higher degrees keep P_1) */
        top[j] = deg[j] <= 65536 ? deg[j] : 1;
        most = top[j] > most ? top[j] : most;
        double v = code >= 4 && code < 8 ? 2 * x[j] - 1 : x[j];
        xs[j] = v;
        prev[j] = 1.0;
        cur[j] = kind == 0 || kind == 9 || kind == 11 ? v : kind == 1 || kind == 8 ? 2 * v :
            kind == 2 ? 2 * v - 1 : kind == 3 ? 2 * v + 1 : 1 - v;
    }
    switch (kind) {
    case 8: SP_RECUR(2 * xj * c - 2 * k * p) break;
    case 9: SP_RECUR(xj * c - k * p) break;
    case 10: SP_RECUR(((2 * k + 1 - xj) * c - k * p) / (k + 1)) break;
    case 11: SP_RECUR(((2 * k + 1) * xj * c - k * p) / (k + 1)) break;
    default: SP_RECUR(2 * xj * c - p)
    }
    for (int j = 0; j < m; j++) {
        double d = deg[j], v = xs[j], r = d == 0 ? 1.0 : cur[j];
        if (kind < 4 && (v == 1 || v == -1)) {    /* torch's values at +-1 (1, -1 even, odd) */
            static const int tab[4][3] = {{0, 0, 1}, {2, 2, 3}, {0, 4, 5}, {4, 0, 1}};
            double e[6] = {1.0, -1.0, d + 1, -(d + 1), 2 * d + 1, -(2 * d + 1)};
            r = e[tab[kind][v == 1 ? 0 : fmod(d, 2) == 0 ? 1 : 2]];
        }
        out[j] = d < 0 ? 0.0 : r;
    }
}

/* ---- Bessel functions, as bessel.py (I0, I1, K0, K1: by blocks, below) */
#define SP_SQRT_2_OVER_PI 0.797884560802865355879892119868763737
#define SP_PI_4 0.785398163397448309615660845819875721
#define SP_3PI_4 2.356194490192344928846982537459627163
#define SP_2_OVER_PI 0.636619772367581343075535053490057448

/* J0, J1, Y0, Y1 and spherical j0 (codes 20-23, 25) of a block, as bessel.py: the rational
 * function near 0 across the block, Hankel's form on the elements beyond 5 (gathered), each
 * vectorised. sin, cos and log come from libm for float64, bit for bit the scalar formulas;
 * float32 (fast) takes vecmath.h's double versions (~1e-15; libm's beyond 1.6e6) */
TC static void sp_jy_block(int code, const double *x, double *out, int n, int fast) {
    double near[SP_BLOCK], lg[SP_BLOCK], fa[SP_BLOCK], p[SP_BLOCK], q[SP_BLOCK], ph[SP_BLOCK],
        s[SP_BLOCK], c[SP_BLOCK];
    int at[SP_BLOCK], m = 0, order = code & 1, second = code == 22 || code == 23;
    if (code == 25) {
        for (int j = 0; j < n; j++) ph[j] = x[j];
        m = n;
    } else {
        for (int j = 0; j < n; j++) {   /* (order 1's J near 0 is odd in x as written: -0 -> -0) */
            double v = x[j], a = fabs(v), z = v * v;
            near[j] = order ? POLY(z, SP_J1_RP) / POLY(z, SP_J1_RQ) * v * (z - SP_J1_ROOTS2[0]) *
                (z - SP_J1_ROOTS2[1]) : a < 1e-5 ? 1.0 - z / 4.0 : (z - SP_J0_ROOTS2[0]) *
                (z - SP_J0_ROOTS2[1]) * POLY(z, SP_J0_RP) / POLY(z, SP_J0_RQ);
        }
        if (second) {
            if (fast) for (int j = 0; j < n; j++) lg[j] = log_f64v(x[j]);
            else for (int j = 0; j < n; j++) lg[j] = x[j] <= 5 ? log(x[j]) : 0.0;
            for (int j = 0; j < n; j++) {
                double v = x[j], z = v * v;
                near[j] = order ? v * (POLY(z, SP_Y1_YP) / POLY(z, SP_Y1_YQ)) + SP_2_OVER_PI *
                    (near[j] * lg[j] - 1.0 / v) :
                    POLY(z, SP_Y0_YP) / POLY(z, SP_Y0_YQ) + SP_2_OVER_PI * lg[j] * near[j];
            }
        }
        for (int j = 0; j < n; j++)
            if (!(fabs(x[j]) <= 5)) { at[m] = j; fa[m] = fabs(x[j]); m++; }
        const double *pp = order ? SP_J1_PP : SP_J0_PP, *pq = order ? SP_J1_PQ : SP_J0_PQ;
        const double *qp = order ? SP_J1_QP : SP_J0_QP, *qq = order ? SP_J1_QQ : SP_J0_QQ;
        for (int k = 0; k < m; k++) {
            double a = fa[k], w = order ? 5.0 / a * (5.0 / a) : 25.0 / (a * a);
            p[k] = sp_poly(w, pp, 7) / sp_poly(w, pq, 7);
            q[k] = 5.0 / a * (sp_poly(w, qp, 8) / sp_poly(w, qq, 7));
            ph[k] = a - (order ? SP_3PI_4 : SP_PI_4);
        }
    }
    if (fast) {
        for (int k = 0; k < m; k++) sincos_f64v(ph[k], &s[k], &c[k]);
        for (int k = 0; k < m; k++)
            if (!(fabs(ph[k]) < 1.6e6)) { s[k] = sin(ph[k]); c[k] = cos(ph[k]); }
    } else
        for (int k = 0; k < m; k++) { s[k] = sin(ph[k]); c[k] = cos(ph[k]); }
    if (code == 25) {
        for (int j = 0; j < n; j++) {
            double v = x[j], x2 = v * v;    /* a series near 0, where sin(x) / x cancels */
            out[j] = isinf(v) ? 0.0 : fabs(v) < 0.5 ?
                1 - x2 / 6 * (1 - x2 / 20 * (1 - x2 / 42 * (1 - x2 / 72 * (1 - x2 / 110)))) :
                s[j] / (v == 0 ? 1.0 : v);
        }
        return;
    }
    for (int j = 0; j < n; j++) out[j] = near[j];
    for (int k = 0; k < m; k++) {
        double r = (second ? p[k] * s[k] + q[k] * c[k] : p[k] * c[k] - q[k] * s[k]) *
            SP_SQRT_2_OVER_PI / sqrt(fa[k]);
        out[at[k]] = !second && order && x[at[k]] < 0 ? -r : r;
    }
    if (second)
        for (int j = 0; j < n; j++) out[j] = x[j] < 0 ? NAN : x[j] == 0 ? -INFINITY : out[j];
}

#define SP_1_OVER_SQRT_PI 5.64189583547756286948e-01
static double sp_airy_ai(double x) {
    if (isinf(x) || x != x) return NAN;
    if (x > 103.892) return 0.0;    /* NOTE: torch's edge, where exp(zeta) overflows */
    if (x < -2.09) {
        double zn = -2.0 * x * sqrt(-x) / 3.0, z = 1.0 / zn, zz = z * z, t = zn + 0.25 * 3.14159265358979323846;
        return SP_1_OVER_SQRT_PI / sqrt(sqrt(-x)) * (
            sin(t) * (1.0 + zz * POLY(zz, SP_AI_AFN) / POLY(zz, SP_AI_AFD)) -
            cos(t) * (z * POLY(zz, SP_AI_AGN) / POLY(zz, SP_AI_AGD)));
    }
    if (x >= 2.09) {
        double zeta = 2.0 * x * sqrt(x) / 3.0;
        return SP_1_OVER_SQRT_PI * (POLY(1.0 / zeta, SP_AI_AN) / POLY(1.0 / zeta, SP_AI_AD)) /
            (2.0 * sqrt(sqrt(x)) * exp(zeta));
    }
    /* Maclaurin series, each element until its terms fall below float64's epsilon */
    double z = x * x * x, f = 1.0, g = x, m = 1.0, n = x, k = 1.0;
    while (k < 300) {
        m = m * z / (k + 1) / (k + 2);
        n = n * z / (k + 2) / (k + 3);
        k += 3.0;
        f = f + m; g = g + n;
        if (!(fabs(m / f) > 2.220446049250313e-16)) break;
    }
    return 0.355028053887817239260 * f - 0.258819403792806798405 * g;
}

/* ---- the error function in float64, as pointwise_math.py's _erf_erfc: a series below
 * |x| = 1.5, a continued fraction above with the fewest terms each band needs */
#define SP_SQRT_PI 1.7724538509055159
static const double SP_ERF_SERIES[26] = {1.1259015407937041e-26, 2.8710489290239454e-25,
    7.034069876108667e-24, 1.6530064208855367e-22, 3.719264446992458e-21, 7.996418561033783e-20,
    1.6392658050119257e-18, 3.196568319773255e-17, 5.913651391580522e-16, 1.0348889935265912e-14,
    1.7075668393188757e-13, 2.6467286009442573e-12, 3.8377564713691727e-11, 5.180971236348383e-10,
    6.476214045435479e-09, 7.447646152250801e-08, 7.820028459863341e-07, 7.4290270368701745e-06,
    6.314672981339648e-05, 0.0004736004736004736, 0.0030784030784030783, 0.016931216931216932,
    0.0761904761904762, 0.26666666666666666, 0.6666666666666666, 1.0};
static double sp_exp_neg_square(double a) {   /* exp(-a*a) without a*a's rounding error */
    double h = floor(a * 16.0) / 16.0;
    return exp(-h * h) * exp(-(a - h) * (a + h));
}
static double sp_erf_erfc(double x, int want_erfc) {
    double a = fabs(x), r;
    if (a != a) return NAN;
    if (a < 1.5) {
        double a2 = a * a, s = SP_ERF_SERIES[0];
        for (int i = 1; i < 26; i++) { s *= a2; s += SP_ERF_SERIES[i]; }
        s = 1.1283791670955126 * a * sp_exp_neg_square(a) * s;
        r = want_erfc ? 1.0 - s : s;
    } else if (a < 30.0) {
        double t = a;
        for (int k = a < 3.0 ? 120 : a < 6.0 ? 30 : 15; k > 0; k--) { t = k / 2.0 / t; t += a; }
        double c = sp_exp_neg_square(a) / (SP_SQRT_PI * t);
        r = want_erfc ? c : 1.0 - c;
    } else
        r = want_erfc ? 0.0 : 1.0;
    return want_erfc ? (x < 0 ? 2.0 - r : r) : (x < 0 ? -r : r);
}

/* ---- the normal distribution, as special.py */
#define SP_SQRT2 1.4142135623730951
static const double SP_NDTRI_P0[5] = {-59.96335010141079, 98.00107541859997,
    -56.67628574690703, 13.931260938727968, -1.2391658386738125};
static const double SP_NDTRI_Q0[9] = {1.0, 1.9544885833814176, 4.676279128988815,
    86.36024213908905, -225.46268785411937, 200.26021238006066, -82.03722561683334,
    15.90562251262117, -1.1833162112133};
static const double SP_NDTRI_P1[9] = {4.0554489230596245, 31.525109459989388, 57.16281922464213,
    44.08050738932008, 14.684956192885803, 2.1866330685079025, -0.1402560791713545,
    -0.03504246268278482, -0.0008574567851546854};
static const double SP_NDTRI_Q1[9] = {1.0, 15.779988325646675, 45.39076351288792,
    41.3172038254672, 15.04253856929075, 2.504649462083094, -0.14218292285478779,
    -0.03808064076915783, -0.0009332594808954574};
static const double SP_NDTRI_P2[9] = {3.2377489177694603, 6.915228890689842, 3.9388102529247444,
    1.3330346081580755, 0.20148538954917908, 0.012371663481782003, 0.00030158155350823543,
    2.6580697468673755e-06, 6.239745391849833e-09};
static const double SP_NDTRI_Q2[9] = {1.0, 6.02427039364742, 3.6798356385616087,
    1.3770209948908132, 0.21623699359449663, 0.013420400608854318, 0.00032801446468212774,
    2.8924786474538068e-06, 6.790194080099813e-09};
#define SP_EXP_M2 0.1353352832366127
#define SP_SQRT_2PI 2.5066282746310002
static double sp_polevl(double x, const double *c, int n) {     /* (from c[0], not 0) */
    double r = c[0];
    for (int i = 1; i < n; i++) r = r * x + c[i];
    return r;
}
#define POLEVL(z, t) sp_polevl(z, t, SP_N(t))
static double sp_ndtri(double p) {  /* Cephes' ndtri */
    if (p > SP_EXP_M2 && p <= 1 - SP_EXP_M2) {
        double w = p - 0.5, w2 = w * w;
        return (w + w * (w2 * POLEVL(w2, SP_NDTRI_P0) / POLEVL(w2, SP_NDTRI_Q0))) * SP_SQRT_2PI;
    }
    if (p == 0) return -INFINITY;
    if (p == 1) return INFINITY;
    if (!(p > 0 && p < 1)) return NAN;
    int upper = p > 1 - SP_EXP_M2;
    double t = sqrt(-2 * log(upper ? 1 - p : p)), z = 1 / t;
    double x = t - log(t) / t - (t < 8 ? z * POLEVL(z, SP_NDTRI_P1) / POLEVL(z, SP_NDTRI_Q1) :
                                 z * POLEVL(z, SP_NDTRI_P2) / POLEVL(z, SP_NDTRI_Q2));
    return upper ? x : -x;
}

/* ---- lgamma (Lanczos, g = 7) and digamma (Cephes), as special.py */
static const double SP_LANCZOS[9] = {0.9999999999998099, 676.5203681218851, -1259.1392167224028,
    771.3234287776531, -176.6150291621406, 12.507343278686905, -0.13857109526572012,
    9.984369578019572e-06, 1.5056327351493116e-07};
#define SP_PI 3.141592653589793
/* (fast: vecmath.h's double log and sin, branch-free, for float32's blocks) */
static inline __attribute__((always_inline)) double sp_lgamma_f(double x, int fast) {
    double z = (x < 0.5 ? 1.0 - x : x) - 1.0, a = SP_LANCZOS[0], s, c;
    for (int i = 1; i < 9; i++) a = a + SP_LANCZOS[i] / (z + i);
    double t = z + 7.5;
    double r = 0.9189385332046727 + (z + 0.5) * (fast ? log_f64v(t) : log(t)) - t +
        (fast ? log_f64v(a) : log(a));
    double red = x - 2.0 * rint(x / 2.0);   /* (reflection: sin(pi x), x reduced to [-1, 1]) */
    if (fast) sincos_f64v(SP_PI * red, &s, &c);
    double refl = 1.1447298858494002 - (fast ? log_f64v(fabs(s)) : x < 0.5 ?
        log(fabs(sin(SP_PI * red))) : 0.0) - r;
    return isinf(x) || (x <= 0 && x == floor(x)) ? INFINITY : x < 0.5 ? refl : r;
}
static double sp_lgamma(double x) { return sp_lgamma_f(x, 0); }
static const double SP_DIGAMMA_A[7] = {0.08333333333333333, -0.021092796092796094,
    0.007575757575757576, -0.004166666666666667, 0.003968253968253968, -0.008333333333333333,
    0.08333333333333333};
static double sp_digamma(double x) {
    if (x == 0) return copysign(INFINITY, -x);
    int neg = x < 0;
    double frac = x - trunc(x), y = neg ? 1 - x : x, res = 0.0;
    for (int i = 0; i < 10 && y < 10; i++) { res = res - 1 / y; y = y + 1; }
    double z = 1 / (y * y), poly = POLEVL(z, SP_DIGAMMA_A);
    double tail = y < 1e17 ? z * poly : 0.0;
    double r = y == 10 ? res + 2.251752589066721 : res + log(y) - 0.5 / y - tail;
    if (neg) r = frac == 0 ? NAN : r - SP_PI / tan(SP_PI * frac);
    return r;
}

/* ---- the regularized incomplete gamma P(a, x) (upper: Q), as special.py's _igamma: the
 * series where x < a + 1, Lentz's continued fraction for Q elsewhere, Temme for huge a.
 * sp_igamma_edge: the edge values and Temme's expansion, 1 where they apply (*r set) */
static int sp_igamma_edge(double a, double x, int upper, double *r) {
    double lo = upper ? 1.0 : 0.0, hi = upper ? 0.0 : 1.0;
    *r = a < 0 || x < 0 ? NAN : a == 0 ? (x > 0 ? hi : NAN) : x == 0 ? lo :
        isinf(a) ? (isinf(x) ? NAN : lo) : isinf(x) ? hi : NAN;
    if (!(a > 0 && x > 0 && a < INFINITY && x < INFINITY)) return 1;
    if (a <= 1e6) return 0;
    double lam = x / a, eta = (lam > 1 ? 1.0 : lam < 1 ? -1.0 : 0.0) *
        sqrt(2 * fabs(lam - 1 - log(lam)));
    double c0 = fabs(lam - 1) < 1e-6 ? -1.0 / 3 : 1 / (lam - 1) - 1 / eta;
    double q = 0.5 * sp_erf_erfc(eta * sqrt(a / 2), 1) +
        exp(-a * eta * eta / 2) / sqrt(2 * SP_PI * a) * c0;
    *r = upper ? q : 1 - q;
    return 1;
}
/* igamma / igammac (codes 32, 33) of a block: the series' elements gathered at the front, the
 * fraction's at the back, each sum stepped across its elements (vectorised), an element's
 * state kept once it converged (so its value is the one its own loop stops at). float32
 * (f32) stops at 1e-10, under a 500th of its ulp. */
TC static void sp_igamma_block(int upper, const double *a, const double *x, double *out, int n,
                               int f32) {
    double pref[SP_BLOCK], ga[SP_BLOCK], gx[SP_BLOCK], s0[SP_BLOCK], s1[SP_BLOCK], s2[SP_BLOCK],
        s3[SP_BLOCK], tiny = 1e-300;
    int at[SP_BLOCK], done[SP_BLOCK], ms = 0, back = SP_BLOCK;
    for (int j = 0; j < n; j++) {
        if (sp_igamma_edge(a[j], x[j], upper, &out[j])) continue;
        int k = x[j] < a[j] + 1 ? ms++ : --back;
        at[k] = j; ga[k] = a[j]; gx[k] = x[j]; done[k] = 0;
        pref[k] = exp(a[j] * log(x[j]) - x[j] - sp_lgamma(a[j]));
        double b = x[j] + 1 - a[j];     /* (the series' total and term; the fraction's b d c h) */
        s0[k] = k < ms ? 1.0 / a[j] : b;
        s1[k] = k < ms ? 1.0 / a[j] : 1 / (b == 0 ? tiny : b);
        s2[k] = 1 / tiny;
        s3[k] = s1[k];
    }
    for (int i = 1, left = ms; i <= 500 && left; i++) {
        left = 0;
        for (int k = 0; k < ms; k++) {
            double t = s1[k] * gx[k] / (ga[k] + i), tot = s0[k] + t;
            int d = done[k];
            s1[k] = d ? s1[k] : t;
            s0[k] = d ? s0[k] : tot;
            done[k] = d | (fabs(t) <= fabs(tot) * (f32 ? 1e-10 : 1e-17));
            left += !done[k];
        }
    }
    for (int i = 1, left = SP_BLOCK - back; i <= 499 && left; i++) {
        double ii = i;
        left = 0;
        for (int k = back; k < SP_BLOCK; k++) {
            double an = -ii * (ii - ga[k]), b = s0[k] + 2, den = an * s1[k] + b;
            double d = 1 / (fabs(den) < tiny ? tiny : den), c = b + an / s2[k];
            c = fabs(c) < tiny ? tiny : c;
            double h = s3[k] * d * c;
            int dn = done[k];
            s0[k] = dn ? s0[k] : b; s1[k] = dn ? s1[k] : d;
            s2[k] = dn ? s2[k] : c; s3[k] = dn ? s3[k] : h;
            done[k] = dn | (fabs(d * c - 1) < (f32 ? 1e-10 : 1e-16));
            left += !done[k];
        }
    }
    for (int k = 0; k < ms; k++) {
        double r = s0[k] * pref[k];
        out[at[k]] = upper ? 1 - r : r;
    }
    for (int k = back; k < SP_BLOCK; k++) {
        double r = s3[k] * pref[k];
        out[at[k]] = upper ? r : 1 - r;
    }
}

/* I0, I0e, I1, I1e (codes 12-15) of a block of elements at once, the Clenshaw sums run across
 * the block so that they vectorise (one sum alone is a chain of dependent operations). The
 * second table is aligned with the first's end (leading zeros: its arguments are finite, so
 * 0 * y + c is c and its sums are as they were), each element picks its table's term. float32
 * (f32) skips the leading terms below its precision: the first table's 8 sum to < 3e-12 (its
 * results are > 0.016), the second's 17 to < 1e-10 (results > 0.35); exp is vecmath.h's. */
TC static void sp_bessel_i_block(int code, const double *x, double *out, int n, int f32) {
    double a[SP_BLOCK], y[SP_BLOCK], b0[SP_BLOCK], b2[SP_BLOCK];
    int first = code < 14, skip_a = f32 ? 8 : 0, skip_b = f32 ? 17 : 0;
    int len = (first ? 30 : 29) - skip_a, zeros = len - (25 - skip_b);
    const double *A = (first ? SP_I0_A : SP_I1_A) + skip_a, *B = (first ? SP_I0_B : SP_I1_B) + skip_b;
    for (int j = 0; j < SP_BLOCK; j++) {       /* (the lanes past n: harmless zeros) */
        a[j] = j < n ? fabs(x[j]) : 0.0;
        y[j] = a[j] <= 8 ? a[j] / 2 - 2 : 32 / a[j] - 2;
    }
    /* 4 elements' sums at a time, kept in registers through the terms (a whole block's
     * went through L1 at every term) */
    typedef double v4d __attribute__((vector_size(32)));
    for (int j0 = 0; j0 < n; j0 += 4) {
        v4d c0 = {0, 0, 0, 0}, c1 = c0, c2 = c0, yl, lo;
        memcpy(&yl, y + j0, 32);
        for (int j = 0; j < 4; j++) lo[j] = a[j0 + j] <= 8 ? 1.0 : 0.0;
        for (int i = 0; i < len; i++) {
            double ca = A[i], cb = i < zeros ? 0.0 : B[i - zeros];
            v4d t = yl * c0 - c1 + (lo * ca + (1.0 - lo) * cb);
            c2 = c1; c1 = c0; c0 = t;
        }
        memcpy(b0 + j0, &c0, 32);
        memcpy(b2 + j0, &c2, 32);
    }
    for (int j = 0; j < n; j++) {
        double c = 0.5 * (b0[j] - b2[j]);
        double r = a[j] <= 8 ? (first ? c : c * a[j]) : c / sqrt(a[j]);
        out[j] = !first && x[j] < 0 ? -r : r;
    }
    if (code == 12 || code == 14) {     /* (libm's exp overflows above 709.78) */
        if (f32) for (int j = 0; j < n; j++)
            out[j] = (a[j] > 709.782712893384 ? INFINITY : exp_f64v(a[j])) * out[j];
        else for (int j = 0; j < n; j++) out[j] = exp(a[j]) * out[j];
    }
}

/* float32's mvlgamma (code 38) of a block: each lgamma across the block (vectorised) */
TC static void sp_mvlgamma_block(const double *x, const double *p, double *out, int n) {
    double s[SP_BLOCK], most = 0.0;
    for (int j = 0; j < n; j++) { s[j] = 0.0; most = p[j] > most ? p[j] : most; }
    for (int k = 0; k < most; k++)
        for (int j = 0; j < n; j++) {
            double l = sp_lgamma_f(x[j] - k / 2.0, 1);
            s[j] = k < p[j] ? s[j] + l : s[j];
        }
    for (int j = 0; j < n; j++) out[j] = p[j] * (p[j] - 1) / 4 * 1.1447298858494002 + s[j];
}

/* ---- Hurwitz zeta (Cephes' Euler-Maclaurin summation) and trigamma, as special.py */
#define SP_MACHEP 1.11022302462515654042e-16
static const double SP_ZETA_A[12] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0,
    -1892437580.3183792, 74724249600.0, -2950130727918.164, 116467828143500.67,
    -4597978722407473.0, 1.8152105401943546e+17, -7.166165256175667e+18};
static double sp_zeta(double x, double q) {
    if (x == 1) return INFINITY;
    if (x < 1) return NAN;
    if (q <= 0 && q == floor(q)) return INFINITY;
    if (q <= 0 && x != floor(x)) return NAN;
    double s = pow(q, -x), a = q, b = 0.0;
    int done = 0;
    for (int i = 0; !done && (i < 9 || a <= 9.0) && i <= 10000; ) {
        i++;
        a = a + 1.0;
        b = pow(a, -x);
        s = s + b;
        done = fabs(b / s) < SP_MACHEP;
    }
    if (done) return s;
    double w = a, k = 0.0;
    s = s + b * w / (x - 1.0) - 0.5 * b;
    a = 1.0;
    for (int i = 0; i < 12; i++) {
        a = a * (x + k);
        b = b / w;
        double t = a * b / SP_ZETA_A[i];
        s = s + t;
        if (fabs(t / s) < SP_MACHEP) break;
        k += 1.0;
        a = a * (x + k);
        b = b / w;
        k += 1.0;
    }
    return s;
}
static double sp_trigamma(double x) {
    int refl = x < 0.5;
    double res = 0.0, y = refl ? 1 - x : x;
    if (refl) {
        double sp = sin(SP_PI * (x - 2.0 * rint(x / 2.0)));
        res = -9.869604401089358 / (sp * sp);
    }
    for (int i = 0; i < 6; i++) { res = res + 1 / (y * y); y = y + 1; }
    double ixx = 1 / (y * y);
    res = res + (1 + 1 / (2 * y) + ixx * (0.16666666666666666 - ixx * (0.03333333333333333 -
        ixx * 0.023809523809523808))) / y;
    return refl ? -res : res;
}

/* ---- d x / d alpha of a standard Gamma(alpha) sample x (torch's standard_gamma_grad_one), as
 * special.py's _gamma_grad: a Taylor series for small x, Rice's saddle point expansion for
 * large alpha, a bivariate rational approximation elsewhere */
static const double SP_GAMMA_GRAD_UV[3][8] = {
    {0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1.0, 0.32668115, 0.10406089,
     0.0014179084},
    {0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113,
     -0.0035938915, -0.00058392623},
    {0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326,
     0.00085092367, -1.5247877e-07}};
static double sp_gamma_grad(double alpha, double x) {
    if (x < 0.8) {
        double numer = 1.0, denom = alpha, s1 = numer / denom, s2 = numer / (denom * denom);
        for (int i = 1; i < 6; i++) {
            numer = numer * -x / i;
            denom = denom + 1;
            s1 = s1 + numer / denom;
            s2 = s2 + numer / (denom * denom);
        }
        double pxa = pow(x, alpha);
        /* NOTE: torch's digamma_one here is +inf at zero and the negative integers */
        double dg = alpha <= 0 && alpha == floor(alpha) ? INFINITY : sp_digamma(alpha);
        double cdf = (log(x) - dg) * pxa * s1 - pxa * s2;
        double small = -cdf / (pow(x, alpha - 1) * exp(-x));
        return small != small ? 0.0 : small;
    }
    if (alpha > 8.0) {
        if (0.9 * alpha <= x && x <= 1.1 * alpha)
            return (1 + 24 * alpha * (1 + 12 * alpha)) * (1440 * alpha * alpha +
                6 * x * (53 - 120 * x) - 65 * x * x / alpha + alpha * (107 + 3600 * x)) /
                (1244160 * pow(alpha, 4.0));
        double d = sqrt(8 * alpha), t2 = d / (alpha - x);
        double t3 = pow(x - alpha - alpha * log(x / alpha), -1.5);
        double t1 = log(x / alpha) * (x < alpha ? t2 - t3 : t2 + t3) -
            sqrt(2 / alpha) * (alpha + x) / ((alpha - x) * (alpha - x));
        double stirling = 1 + 1 / (12 * alpha) * (1 + 1 / (24 * alpha));
        return -stirling * x * t1 / d;
    }
    double u = log(x / alpha), v = log(alpha), c[8];
    for (int i = 0; i < 8; i++)
        c[i] = SP_GAMMA_GRAD_UV[0][i] + u * (SP_GAMMA_GRAD_UV[1][i] + u * SP_GAMMA_GRAD_UV[2][i]);
    double p = c[0] + v * (c[1] + v * (c[2] + v * c[3]));
    double q = c[4] + v * (c[5] + v * (c[6] + v * c[7]));
    return exp(p / q);
}

/* Clenshaw's sum of one table at each y[j] of a block, across the block (vectorised) */
static inline __attribute__((always_inline)) void sp_chb_block(const double *y, const double *c,
                                                              int len, double *out, int n) {
    double b0[SP_BLOCK], b1[SP_BLOCK], b2[SP_BLOCK];
    for (int j = 0; j < n; j++) { b0[j] = c[0]; b1[j] = b2[j] = 0.0; }
    for (int i = 1; i < len; i++)
        for (int j = 0; j < n; j++) {
            double t = y[j] * b0[j] - b1[j] + c[i];
            b2[j] = b1[j]; b1[j] = b0[j]; b0[j] = t;
        }
    for (int j = 0; j < n; j++) out[j] = 0.5 * (b0[j] - b2[j]);
}
/* K0, K1 and their scaled forms (codes 16-19) of a block: all three of their sums (the tail's,
 * and the series' own and I0's or I1's) for every element, vectorised, then each element's
 * branch, as sp_k */
TC static void sp_bessel_k_block(int code, const double *x, double *out, int n) {
    double ya[SP_BLOCK], yi[SP_BLOCK], yb[SP_BLOCK], sa[SP_BLOCK], si[SP_BLOCK], sb[SP_BLOCK];
    int order = code & 1, scaled = code >= 18;
    for (int j = 0; j < n; j++) {
        ya[j] = x[j] * x[j] - 2; yi[j] = fabs(x[j]) / 2 - 2; yb[j] = 8 / x[j] - 2;
    }
    sp_chb_block(ya, order ? SP_K1_A : SP_K0_A, order ? SP_N(SP_K1_A) : SP_N(SP_K0_A), sa, n);
    sp_chb_block(yi, order ? SP_I1_A : SP_I0_A, order ? SP_N(SP_I1_A) : SP_N(SP_I0_A), si, n);
    sp_chb_block(yb, order ? SP_K1_B : SP_K0_B, SP_N(SP_K0_B), sb, n);
    for (int j = 0; j < n; j++) {
        double v = x[j], r;
        if (v < 0) r = NAN;
        else if (v == 0) r = INFINITY;
        else if (v <= 2) {      /* (|v| <= 8: I's sum is its first table's) */
            double i = exp(fabs(v)) * (order ? si[j] * fabs(v) : si[j]);
            r = order ? log(0.5 * v) * i + sa[j] / v : sa[j] - log(0.5 * v) * i;
            r = scaled ? r * exp(v) : r;
        } else {
            double tail = sb[j] / sqrt(v);
            r = scaled ? tail : exp(-v) * tail;
        }
        out[j] = r;
    }
}

/* erfc of a block, as sp_erf_erfc: the series (a < 1.5) across the block, and each band's
 * continued fraction across that band's elements, gathered (vectorised, instead of a chain of
 * up to 120 dependent divisions per element; the other bands' elements do no steps) */
static inline __attribute__((always_inline)) void sp_erfc_block(const double *x, double *out,
                                                               int n) {
    static const double lo[3] = {1.5, 3.0, 6.0}, hi[3] = {3.0, 6.0, 30.0};
    static const int terms[3] = {120, 30, 15};
    double a[SP_BLOCK], s[SP_BLOCK], t[SP_BLOCK], ga[SP_BLOCK], gt[SP_BLOCK];
    int at[SP_BLOCK];
    for (int j = 0; j < n; j++) {
        a[j] = t[j] = fabs(x[j]);
        s[j] = SP_ERF_SERIES[0];
    }
    for (int i = 1; i < 26; i++)
        for (int j = 0; j < n; j++) s[j] = s[j] * (a[j] * a[j]) + SP_ERF_SERIES[i];
    for (int band = 0; band < 3; band++) {
        int m = 0;
        for (int j = 0; j < n; j++)
            if (a[j] >= lo[band] && a[j] < hi[band]) { at[m] = j; ga[m] = gt[m] = a[j]; m++; }
        for (int k = terms[band]; k > 0 && m; k--)
            for (int j = 0; j < m; j++) gt[j] = k / 2.0 / gt[j] + ga[j];
        for (int j = 0; j < m; j++) t[at[j]] = gt[j];
    }
    for (int j = 0; j < n; j++) {
        double r, e = sp_exp_neg_square(a[j]);
        if (a[j] != a[j]) { out[j] = NAN; continue; }
        r = a[j] < 1.5 ? 1.0 - 1.1283791670955126 * a[j] * e * s[j] :
            a[j] < 30.0 ? e / (SP_SQRT_PI * t[j]) : 0.0;
        out[j] = x[j] < 0 ? 2.0 - r : r;
    }
}
/* erfcx, ndtr and log_ndtr (codes 26-28) of a block, as special.py */
TC static void sp_normal_block(int code, const double *x, double *out, int n) {
    double arg[SP_BLOCK], e[SP_BLOCK], t[SP_BLOCK];
    for (int j = 0; j < n; j++)     /* (where erfcx is asked, of |arg|) */
        arg[j] = code == 26 ? fabs(x[j]) : code == 27 || x[j] < -1 ? -x[j] / SP_SQRT2 :
            x[j] / SP_SQRT2;
    sp_erfc_block(arg, e, n);
    int frac = 0;
    for (int j = 0; j < n; j++) {
        t[j] = arg[j];
        frac |= (code == 26 || x[j] < -1) && arg[j] >= 5.0;
    }
    if (frac && code != 27)     /* erfcx's own fraction: the same for every element */
        for (int k = 60; k > 0; k--)
            for (int j = 0; j < n; j++) t[j] = arg[j] + k / 2.0 / t[j];
    for (int j = 0; j < n; j++) {
        double v = x[j], a = arg[j], cx;
        if (code == 27) { out[j] = 0.5 * e[j]; continue; }
        if (code == 28 && !(v < -1)) { out[j] = log1p(-0.5 * e[j]); continue; }
        cx = a < 5.0 ? exp(a * a) * e[j] : a > 1e8 ? 1 / (a * SP_SQRT_PI) : 1 / (SP_SQRT_PI * t[j]);
        if (code == 26) out[j] = v < 0 ? 2 * exp(v * v) - cx : cx;
        else out[j] = log(cx / 2) - v * v / 2;
    }
}

double lgamma_r(double, int *);
static double sp_eval(int code, double x, double n) {
    switch (code) {
    case 24: return sp_airy_ai(x);
    case 29: return sp_ndtri(x);
    case 30: return sp_lgamma(x);
    case 31: return sp_digamma(x);
    case 34: return sp_zeta(x, n);
    case 35: return sp_trigamma(x);
    case 36: return sp_gamma_grad(x, n);
    case 37: {  /* polygamma of order n >= 2 (float32 only: the factor is libm's, not Python's) */
        int sign;
        return (fmod(n, 2) ? 1.0 : -1.0) * exp(lgamma_r(n + 1.0, &sign)) * sp_zeta(n + 1.0, x);
    }
    case 38: {   /* mvlgamma of dimension n, as special.py's sum (from 0, j = 0 first) */
        double s = 0.0;
        for (int j = 0; j < n; j++) s = s + sp_lgamma(x - j / 2.0);
        return n * (n - 1) / 4 * 1.1447298858494002 + s;
    }
    default: return NAN;    /* (the polynomials run by blocks) */
    }
}

#pragma GCC pop_options

/* float32's own loops where torch's float kernels are short float32 code (erfcx, ndtr, log_ndtr:
 * vecmath.h, a few ulp of the float64 values; contraction allowed here) */
#define SP_F32(code) (((code) >= 26 && (code) <= 28) || ((code) >= 12 && (code) <= 15))
/* float32's I0 and I1 sums as polynomials in y (lowest power first): sp_bessel_i_block's float32
 * Chebyshev terms expanded (well-conditioned: within 1e-10 of the float64 sums, tested), one
 * multiply-add a term where Clenshaw takes two */
static const double SP_I0_AM[22] = {0.20700192122686667, -0.05650216344854482,
    0.023628906961592228, -0.011130430050927256, 0.005458965234891653, -0.002655106423902968,
    0.001238668728885419, -0.000543288295627292, 0.000221798516033034, -8.396072542132565e-05,
    2.9455350009942607e-05, -9.606851145208983e-06, 2.930879124184599e-06, -8.316123124455522e-07,
    2.157690330312665e-07, -5.42603202733657e-08, 1.4520999270635366e-08, -3.201670073790011e-09,
    3.623309588038696e-10, -7.817301948039976e-11, 4.8379045176866185e-11, -8.63413145720778e-12};
static const double SP_I1_AM[21] = {0.04468770987592376, -0.03056216899456773,
    0.017014399958408345, -0.00856032614523738, 0.003985462920785433, -0.0017274992437319027,
    0.0006980394660036414, -0.0002630623325575422, 9.25249544772735e-05, -3.0406158113933398e-05,
    9.357662799724165e-06, -2.70771393745495e-06, 7.350305679087402e-07, -1.8519183547191225e-07,
    4.489069846656102e-08, -1.124792494419913e-08, 2.4253132752567072e-09, -3.1059335212872216e-10,
    6.391765108869685e-11, -3.3317448617510136e-11, 5.868093149445451e-12};
static const double SP_I0_BM[8] = {0.4021765094192121, 0.0016802761208605215, 3.4054291060806e-05,
    1.3924769573266813e-06, 9.225723339632803e-08, 9.60413411661215e-09, 1.6981160128541933e-09,
    2.470301194112485e-10};
static const double SP_I1_BM[8] = {0.38939845905965925, -0.0048747887287783785,
    -5.480928134547465e-05, -1.8794085036901449e-06, -1.1410567073561772e-07,
    -1.1200934022678794e-08, -1.9176901929821185e-09, -2.794871731098292e-10};
/* a polynomial at 16 points y at once: four independent chains of 4 (one chain alone waits on
 * each multiply-add's latency), in named registers (arrays of them went through the stack
 * every step: a store and a load on each chain, 3x the time) */
typedef double sp_v4d __attribute__((vector_size(32)));
static inline __attribute__((always_inline)) void sp_poly16(const double *y, const double *c,
                                                           int len, double *out) {
    sp_v4d y0, y1, y2, y3, h0, h1, h2, h3;
    memcpy(&y0, y, 32); memcpy(&y1, y + 4, 32); memcpy(&y2, y + 8, 32); memcpy(&y3, y + 12, 32);
    h0 = y0 * 0.0 + c[len - 1], h1 = y1 * 0.0 + c[len - 1];      /* (nan and inf: nan) */
    h2 = y2 * 0.0 + c[len - 1], h3 = y3 * 0.0 + c[len - 1];
    for (int i = len - 2; i >= 0; i--) {
        h0 = h0 * y0 + c[i]; h1 = h1 * y1 + c[i]; h2 = h2 * y2 + c[i]; h3 = h3 * y3 + c[i];
    }
    memcpy(out, &h0, 32); memcpy(out + 4, &h1, 32); memcpy(out + 8, &h2, 32);
    memcpy(out + 12, &h3, 32);
}
/* float32's I0, I0e, I1, I1e (codes 12-15): sp_bessel_i_block's float32 sums (as
 * polynomials), each table's over the whole block where any element takes it (a block of one
 * table sums one; a mixed one both, and each element picks its own: no gather) */
static void sp_bessel_i_f32(int code, const float *x, float *out, int m) {
    double ya[64], yb[64], ra[64], rb[64], a[64], r[64];
    int na = 0, first = code < 14;
    const double *A = first ? SP_I0_AM : SP_I1_AM, *B = first ? SP_I0_BM : SP_I1_BM;
    for (int j = 0; j < 64; j++) {
        a[j] = j < m ? fabsf(x[j]) : 1.0;       /* (the lanes past m: harmless) */
        na += j < m && a[j] <= 8;
        ya[j] = a[j] / 2 - 2;
    }
    if (na < m) for (int j = 0; j < 64; j++) yb[j] = 32 / a[j] - 2;    /* (divisions: only here) */
    for (int k = 0; k < m; k += 16) {
        if (na) sp_poly16(ya + k, A, first ? 22 : 21, ra + k); else memset(ra + k, 0, 128);
        if (na < m) sp_poly16(yb + k, B, 8, rb + k); else memset(rb + k, 0, 128);
    }
    if (na == m) for (int j = 0; j < m; j++) r[j] = first ? ra[j] : ra[j] * a[j];
    else for (int j = 0; j < m; j++) r[j] = a[j] <= 8 ? (first ? ra[j] : ra[j] * a[j]) : rb[j] / sqrt(a[j]);
    if (code == 12 || code == 14)
        for (int j = 0; j < m; j++) r[j] *= a[j] > 709.782712893384 ? INFINITY : exp_f64v(a[j]);
    for (int j = 0; j < m; j++) out[j] = (float)(!first && x[j] < 0 ? -r[j] : r[j]);
}
TC static void sp_f32_block(int code, const float *x, float *out, int64_t m) {
    if (code == 27) for (int64_t j = 0; j < m; j++) out[j] = ndtr_f32(x[j]);
    else if (code == 28) for (int64_t j = 0; j < m; j++) out[j] = log_ndtr_f32(x[j]);
    else if (code == 26) for (int64_t j = 0; j < m; j++) out[j] = erfcx_f32(x[j]);
    else for (int64_t j = 0; j < m; j += 64) sp_bessel_i_f32(code, x + j, out + j, m - j < 64 ? (int)(m - j) : 64);
}
static void sp_f32(int code, const float *x, float *out, int64_t size, int nt) {
    nt = threads_for(size * 8, nt);
    THREADED_FOR(nt, size, 1024,
                 sp_f32_block(code, x + i, out + i, size - i < 1024 ? size - i : 1024))
}

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
/* out[i] = f(x[i * xs], n[i * ns]) (strides 0 or 1: a scalar or an array of out's size) */
/* out[i] = f(x[i * xs], n[i * ns]) (strides 0 or 1: a scalar or an array of out's size) */
/* out[i] = f(x[i * xs], n[i * ns]) (strides 0 or 1: a scalar or an array of out's size), by
 * blocks of SP_BLOCK elements (the block functions', or sp_eval's one by one) */
#define SP_LOOP(T, name)                                                                      \
static void name##_block(int code, const T *x, int64_t xs, const T *n, int64_t ns, T *out,   \
                         int64_t i, int m) {                                                  \
    double xd[SP_BLOCK], nd[SP_BLOCK], od[SP_BLOCK];                                          \
    for (int j = 0; j < m; j++) xd[j] = (double)x[(i + j) * xs];                              \
    for (int j = 0; j < m && n; j++) nd[j] = (double)n[(i + j) * ns];                         \
    if (code < 12)                                                                            \
        sp_poly_block(code, xd, nd, od, m);                                                   \
    else if (code < 16)     /* (float32: fewer terms, vecmath's exp) */                       \
        sp_bessel_i_block(code, xd, od, m, sizeof(T) == 4);                                   \
    else if (code < 20)                                                                       \
        sp_bessel_k_block(code, xd, od, m);                                                   \
    else if (code < 26 && code != 24)   /* (J, Y, spherical j0; float32: vecmath's sin...) */ \
        sp_jy_block(code, xd, od, m, sizeof(T) == 4);                                         \
    else if (code >= 26 && code <= 28)                                                        \
        sp_normal_block(code, xd, od, m);                                                     \
    else if (code == 38 && sizeof(T) == 4)                                                    \
        sp_mvlgamma_block(xd, nd, od, m);                                                     \
    else if (code == 32 || code == 33)                                                        \
        sp_igamma_block(code == 33, xd, nd, od, m, sizeof(T) == 4);                           \
    else                                                                                      \
        for (int j = 0; j < m; j++) od[j] = sp_eval(code, xd[j], n ? nd[j] : 0.0);           \
    for (int j = 0; j < m; j++) out[i + j] = (T)od[j];                                        \
}                                                                                             \
EXPORT void name(int code, const T *x, int64_t xs, const T *n, int64_t ns, T *out,           \
                 int64_t size, int nt) {                                                      \
    if (sizeof(T) == 4 && SP_F32(code)) {                                                     \
        sp_f32(code, (const float *)x, (float *)out, size, nt);   /* (unary: x is out's size) */\
        return;                                                                               \
    }                                                                                         \
    nt = threads_for(size * 64, nt);                                                          \
    THREADED_FOR(nt, size, SP_BLOCK, name##_block(code, x, xs, n, ns, out, i,                 \
                                             size - i < SP_BLOCK ? (int)(size - i) : SP_BLOCK)) \
}
SP_LOOP(float, special_f32)
SP_LOOP(double, special_f64)
#pragma GCC pop_options
