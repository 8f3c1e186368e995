/*
 * libm_exact.c — erff and expf as GNU libm computes them on x86-64 (glibc 2.36, Debian 12:
 * fdlibm's erff, and the expf of the FMA build that glibc picks on any CPU with FMA and AVX2),
 * bit for bit, written as plain loops that GCC vectorises.
 *
 * Why: the erf form of GELU (BERT's and the ViT's) spent about a fifth of their training step in
 * scalar calls to erff and expf. Calling a different erf or exp would change every GELU model's
 * bits; these replicas change none (tests/c/test_libm_exact.c compares them with libm over
 * every float in the ranges GELU uses, and over a stride of all 2^32 bit patterns).
 * The same bits on every machine follow: the replica does not depend on the libm installed.
 *
 * The operations and constants are those of libm's machine code for the two functions, in its
 * order: fdlibm's rational approximations of erf on |x| < 0.84375, [0.84375, 1.25),
 * [1.25, 1/0.35), [1/0.35, 6) with the two e^x of erfc; expf as 2^(k/32)·p(r) with a 32-entry
 * table and three fused multiply-adds (fma() below is one rounding, as the FMA instruction).
 * C11 without GNU extensions contracts no a·b + c (-ffp-contract=off), so every other product and
 * sum rounds on its own, as in libm.
 */
#include "internal.h"
#include <stdint.h>
#include <string.h>

static inline uint32_t f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static inline uint64_t d2u(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
static inline double u2d(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }
/* c ? a : b as a blend of bits, both computed (a float select can stay a branch on AVX2:
 * ol__clampf in internal.h) */
static inline float pick(int c, float a, float b) {
    uint32_t m = 0u - (uint32_t)(c != 0);
    return u2f((f2u(a) & m) | (f2u(b) & ~m));
}

/* ---- expf ----------------------------------------------------------------------------- */

/* 2^(i/32) in double, less i/32 in the exponent field (the table of glibc's exp2f/expf) */
static const uint64_t EXP2F_T[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
#define EXP_INVLN2N 0x1.71547652b82fep+5   /* 32/ln 2 */
#define EXP_SHIFT   0x1.8p+52              /* rounds to an integer in the low bits */
#define EXP_C0      0x1.c6af84b912394p-20  /* the cubic of 2^(r/32), r in [-1/2, 1/2] */
#define EXP_C1      0x1.ebfce50fac4f3p-13
#define EXP_C2      0x1.62e42ff0c52d6p-6
/* the ordinary path holds for −0x1.9d1d9ep6 <= x <= 0x1.62e42ep6 (about −103.28 and 88.72);
 * outside it (and for NaN) libm's special cases: 0, a subnormal, +inf, NaN */
#define EXP_LO      -0x1.9d1d9ep+6f
#define EXP_HI       0x1.62e42ep+6f

static inline float expf_core(float x) {
    double xd = (double)x;
    double kds = fma(EXP_INVLN2N, xd, EXP_SHIFT);
    uint64_t ki = d2u(kds);
    double kd = kds - EXP_SHIFT;
    double r = fma(EXP_INVLN2N, xd, -kd);
    double s = u2d(EXP2F_T[ki & 31] + (ki << 47));
    double z = fma(r, EXP_C0, EXP_C1);
    double r2 = r * r;
    double y = fma(r, EXP_C2, 1.0);
    y = fma(z, r2, y);
    return (float)(y * s);
}

float ol__expf1(float x) {
    if (x >= EXP_LO && x <= EXP_HI) return expf_core(x);
    if (x != x) return x + x;
    if (x > EXP_HI) return INFINITY;
    if (x < -0x1.9fe368p+6f) return 0.0f;      /* below log(2^-150): 0 (libm's __math_uflowf) */
    volatile float t = 0x1.4p-75f;             /* __math_may_uflowf: 2^-149 after rounding */
    return t * t;
}

/* the out-of-range lanes are flagged by an OR over the vector loop, and only then looked for
 * (a scan with a branch per element cost as much as the loop itself) */
void ol__expf_n(const float *x, float *y, int64_t n) {
    int out = 0;
    for (int64_t i = 0; i < n; i++) {
        out |= (x[i] < EXP_LO) | (x[i] > EXP_HI) | (x[i] != x[i]);
        y[i] = expf_core(ol__clampf(x[i], EXP_LO, EXP_HI));
    }
    if (!out) return;
    for (int64_t i = 0; i < n; i++)
        if (!(x[i] >= EXP_LO && x[i] <= EXP_HI)) y[i] = ol__expf1(x[i]);
}

/* ---- erff ----------------------------------------------------------------------------- */

/* fdlibm's polynomials, highest power first, evaluated by horner() in libm's order: p = c[0]·s +
 * c[1], then p = p·s + c[i], each product and sum rounded on its own (a − b is a + (−b), so
 * libm's subtractions of constants are the negated constants here) */
static inline float horner(float s, const float *c, int n) {
    float p = c[0] * s + c[1];
    for (int i = 2; i < n; i++) p = p * s + c[i];
    return p;
}
static const float ERF_R1[5] = { -0x1.8ead62p-16f, -0x1.7a2912p-8f, -0x1.d2a51ep-6f, -0x1.4cd7d6p-2f, 0x1.06eba8p-3f };
static const float ERF_S1[6] = { -0x1.09c434p-18f, 0x1.15dc92p-13f, 0x1.4d022cp-8f, 0x1.0a54c6p-4f, 0x1.97779cp-2f, 1.0f };
static const float ERF_P2[7] = { -0x1.1bf38p-9f, 0x1.22a366p-5f, -0x1.c63984p-4f, 0x1.45fca8p-2f, -0x1.7d241p-2f,
                                 0x1.a8d00ap-2f, -0x1.359b8cp-9f };
static const float ERF_Q2[7] = { 0x1.88b546p-7f, 0x1.bedc26p-7f, 0x1.02660ep-3f, 0x1.2635cep-4f, 0x1.14af0ap-1f,
                                 0x1.b3e662p-4f, 1.0f };
static const float ERF_RA[8] = { -0x1.3a0efcp+3f, -0x1.452656p+6f, -0x1.7135cep+7f, -0x1.44cb18p+7f, -0x1.f300aep+5f,
                                 -0x1.51e044p+3f, -0x1.63416ep-1f, -0x1.434126p-7f };
static const float ERF_SA[9] = { -0x1.eeff2ep-5f, 0x1.a47ef8p+2f, 0x1.b28a3ep+6f, 0x1.ad0216p+8f, 0x1.42b192p+9f,
                                 0x1.b290dep+8f, 0x1.1350c6p+7f, 0x1.3a6b9cp+4f, 1.0f };
static const float ERF_RB[7] = { -0x1.e384eap+8f, -0x1.004616p+10f, -0x1.3ec882p+9f, -0x1.4145d4p+7f, -0x1.1c2096p+4f,
                                 -0x1.993ba8p-1f, -0x1.434124p-7f };
static const float ERF_SB[8] = { -0x1.670e24p+4f, 0x1.da874ep+8f, 0x1.3f219cp+11f, 0x1.8ffb76p+11f, 0x1.802eb2p+10f,
                                 0x1.45cae2p+8f, 0x1.e568b2p+4f, 1.0f };

/* |x| < 0.84375: x + x·R1(x²)/S1(x²) */
static inline float erf_r1(float x) {
    float z = x * x;
    return horner(z, ERF_R1, 5) / horner(z, ERF_S1, 6) * x + x;
}

/* 0.84375 <= |x| < 1.25: ±(erx + P(|x| − 1)/Q(|x| − 1)) */
static inline float erf_r2(float x, float ax) {
    float s = ax - 1.0f;
    float y = horner(s, ERF_P2, 7) / horner(s, ERF_Q2, 7);
    return pick(f2u(x) >> 31, -0x1.b0ac16p-1f - y, y + 0x1.b0ac16p-1f);
}

/* 1.25 <= |x| < 6: ±(1 − e^(−z²−0.5625)·e^((z−|x|)(z+|x|) + R/S)/|x|), z = |x| with its
 * low 12 mantissa bits cleared; R/S in s = 1/x² on [1.25, 1/0.35) and [1/0.35, 6) */
static inline float erf_r3(float x, float ax) {
    float s = 1.0f / (x * x);
    int near = f2u(ax) <= 0x4036db6du;
    float R = pick(near, horner(s, ERF_RA, 8), horner(s, ERF_RB, 7));
    float S = pick(near, horner(s, ERF_SA, 9), horner(s, ERF_SB, 8));
    float z = u2f(f2u(ax) & 0xfffff000u);
    float e1 = expf_core(-z * z - 0.5625f);
    float e2 = expf_core((z - ax) * (z + ax) + R / S);
    float r = e2 * e1;
    return pick(f2u(x) >> 31, r / ax - 1.0f, 1.0f - r / ax);
}

/* the lanes the vector loop leaves to ol__erff1: |x| < 2^-28, ±inf, NaN */
static inline int erf_special(uint32_t ix) { return ix < 0x31800000u || ix > 0x7f7fffffu; }

float ol__erff1(float x) {
    uint32_t hx = f2u(x), ix = hx & 0x7fffffffu;
    float ax = fabsf(x);
    if (ix > 0x7f7fffffu) return (float)(1 - (int)((hx >> 31) << 1)) + 1.0f / x;
    if (ix < 0x31800000u) {
        if (hx & 0x7c000000u) return x * 0x1.06eba8p-3f + x;
        return (x * 16.0f + x * 0x1.06eba8p+1f) * 0.0625f;
    }
    if (ix < 0x3f580000u) return erf_r1(x);
    if (ix < 0x3fa00000u) return erf_r2(x, ax);
    if (ix < 0x40c00000u) return erf_r3(x, ax);
    return hx >> 31 ? 1e-30f - 1.0f : 1.0f - 1e-30f;      /* |x| >= 6: ±(1 − tiny) */
}

/* |x| < 1.25 and |x| >= 6 computed for every lane and the right one kept (branch-free, so
 * the loop vectorises); the lanes in [1.25, 6) — two e^x, four divisions — are gathered into a
 * buffer and computed there by a second vector loop */
static inline float erf_near(float x) {
    uint32_t ix = f2u(x) & 0x7fffffffu;
    float a = erf_r1(x), b = erf_r2(x, fabsf(x));
    float d = pick(f2u(x) >> 31, 1e-30f - 1.0f, 1.0f - 1e-30f);
    return pick(ix < 0x3f580000u, a, pick(ix < 0x3fa00000u, b, d));
}
static inline int erf_far(uint32_t ix) { return ix >= 0x3fa00000u && ix < 0x40c00000u; }

#define ERF_BLK 256
void ol__erff_n(const float *x, float *y, int64_t n) {
    for (int64_t i0 = 0; i0 < n; i0 += ERF_BLK) {
        int64_t m = n - i0 < ERF_BLK ? n - i0 : ERF_BLK;
        const float *xb = x + i0;
        float *yb = y + i0;
        float far[ERF_BLK], fy[ERF_BLK];
        int idx[ERF_BLK], k = 0, nfar = 0, nspecial = 0;
        for (int64_t j = 0; j < m; j++) {
            uint32_t ix = f2u(xb[j]) & 0x7fffffffu;
            nfar += erf_far(ix);
            nspecial |= erf_special(ix);
            yb[j] = erf_near(xb[j]);
        }
        if (nfar) {
            for (int64_t j = 0; j < m; j++)
                if (erf_far(f2u(xb[j]) & 0x7fffffffu)) { idx[k] = (int)j; far[k++] = xb[j]; }
            for (int j = 0; j < k; j++) fy[j] = erf_r3(far[j], fabsf(far[j]));
            for (int j = 0; j < k; j++) yb[idx[j]] = fy[j];
        }
        if (nspecial)
            for (int64_t j = 0; j < m; j++)
                if (erf_special(f2u(xb[j]) & 0x7fffffffu)) yb[j] = ol__erff1(xb[j]);
    }
}
