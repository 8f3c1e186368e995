/*
 * test_formats.c — the low-precision formats of engine/formats.c on known values:
 *   * every finite E4M3 / E5M2 / E2M1 value, decoded from its bit pattern by the OFP8 / OCP MX
 *     formulas, rounds to itself (signed zeros included);
 *   * every midpoint between two neighbours rounds to the one with the even mantissa, and the
 *     floats just above / below it to the upper / lower neighbour (subnormal grid included);
 *   * saturation: ±max and beyond (±inf too) give ±448 (E4M3), ±57344 (E5M2), ±6 (E2M1);
 *     NaN stays NaN; a bad format is an error;
 *   * MXFP4 block scales 2^(floor(log2 amax) − 2): amax 6 → 1, 12 → 2, 7.99 → 1, 8 → 2, a zero
 *     block → zeros, an inf → NaN block, a shorter last block; hand-made blocks element by element;
 *   * NVFP4's two-level scale: per-tensor amax/(6·448), the block's amax/6 cast to E4M3 (1.1 →
 *     1.125), a block whose scale underflows E4M3 becomes zero;
 *   * scaled FP8 per row, and the KV-cache quantiser with the first tokens or the largest token kept.
 */
#include "tap.h"
#include "outlierlab.h"
#include <stdlib.h>

static uint32_t bits_of(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }

/* decode a pattern of a format with e exponent bits, m mantissa bits and bias b (no sign) */
static float decode(int e_bits, int m_bits, int bias, unsigned pat) {
    unsigned e = (pat >> m_bits) & ((1u << e_bits) - 1), m = pat & ((1u << m_bits) - 1);
    if (e == 0) return ldexpf((float)m / (float)(1 << m_bits), 1 - bias);
    return ldexpf(1.0f + (float)m / (float)(1 << m_bits), (int)e - bias);
}

typedef struct { int fmt, e, m, bias; float maxv; const char *name; } fmt_t;

static void round_trips(const fmt_t *f) {
    int n = 1 << (f->e + f->m), bad = 0, count = 0;
    float *vals = malloc(sizeof(float) * (size_t)n);
    int nv = 0;
    for (int p = 0; p < n; p++) {
        float v = decode(f->e, f->m, f->bias, (unsigned)p);
        if (v > f->maxv) continue;          /* E4M3's S.1111.111 (NaN), E5M2's inf/NaN patterns */
        vals[nv++] = v;
        for (int s = 0; s < 2; s++) {
            float x = s ? -v : v;
            count++;
            if (bits_of(ol_fp_round(x, f->fmt)) != bits_of(x)) { bad++; if (bad < 4) printf("# %s: %g -> %g\n", f->name, x, ol_fp_round(x, f->fmt)); }
        }
    }
    char msg[160];
    snprintf(msg, sizeof msg, "%s: all %d finite values (both signs, %d patterns) round-trip bit for bit", f->name, count, nv);
    ok(bad == 0, msg);
    /* midpoints: ties to the even mantissa (the even pattern), neighbours of the midpoint to the side */
    int tie_bad = 0, side_bad = 0;
    for (int i = 0; i + 1 < nv; i++) {
        float a = vals[i], b = vals[i + 1];   /* patterns i and i+1: consecutive values */
        float mid = (a + b) / 2, want = (i % 2 == 0) ? a : b;
        if (ol_fp_round(mid, f->fmt) != want || ol_fp_round(-mid, f->fmt) != -want) tie_bad++;
        if (ol_fp_round(nextafterf(mid, 0), f->fmt) != a || ol_fp_round(nextafterf(mid, INFINITY), f->fmt) != b) side_bad++;
    }
    snprintf(msg, sizeof msg, "%s: the %d midpoints round to the even mantissa", f->name, nv - 1);
    ok(tie_bad == 0, msg);
    snprintf(msg, sizeof msg, "%s: one float below / above each midpoint rounds down / up", f->name);
    ok(side_bad == 0, msg);
    /* saturation */
    float big[] = { f->maxv, nextafterf(f->maxv, INFINITY), f->maxv * 1.1f, 1e30f, INFINITY };
    int sat_bad = 0;
    for (int i = 0; i < 5; i++)
        if (ol_fp_round(big[i], f->fmt) != f->maxv || ol_fp_round(-big[i], f->fmt) != -f->maxv) sat_bad++;
    snprintf(msg, sizeof msg, "%s: saturates at ±%g (beyond max and ±inf)", f->name, f->maxv);
    ok(sat_bad == 0, msg);
    snprintf(msg, sizeof msg, "%s: NaN stays NaN", f->name);
    ok(isnan(ol_fp_round(NAN, f->fmt)), msg);
    free(vals);
}

int main(void) {
    fmt_t E4M3 = { OL_FMT_E4M3, 4, 3, 7, 448.0f, "E4M3" }, E5M2 = { OL_FMT_E5M2, 5, 2, 15, 57344.0f, "E5M2" },
          E2M1 = { OL_FMT_E2M1, 2, 1, 1, 6.0f, "E2M1" };
    round_trips(&E4M3);
    round_trips(&E5M2);
    round_trips(&E2M1);

    /* named cases */
    ok(ol_fp_round(464.0f, OL_FMT_E4M3) == 448.0f, "E4M3: 464 (halfway to the NaN pattern's 480) saturates to 448");
    ok(ol_fp_round(61440.0f, OL_FMT_E5M2) == 57344.0f, "E5M2: 61440 (halfway to 65536 = inf) saturates to 57344");
    ok(ol_fp_round(ldexpf(1, -9), OL_FMT_E4M3) == ldexpf(1, -9), "E4M3: the smallest subnormal 2^-9 round-trips");
    ok(bits_of(ol_fp_round(ldexpf(1, -10), OL_FMT_E4M3)) == 0, "E4M3: 2^-10 (half the smallest subnormal) rounds to +0 (even)");
    ok(ol_fp_round(ldexpf(3, -10), OL_FMT_E4M3) == ldexpf(1, -8), "E4M3: 3·2^-10 (between subnormals 1 and 2 ×2^-9) rounds to the even 2^-8");
    ok(ol_fp_round(ldexpf(1.25f, -10), OL_FMT_E4M3) == ldexpf(1, -9), "E4M3: 1.25·2^-10 rounds up to 2^-9");
    ok(ol_fp_round(ldexpf(15, -10), OL_FMT_E4M3) == ldexpf(1, -6), "E4M3: 7.5·2^-9 rounds to 2^-6 (the smallest normal, even)");
    ok(ol_fp_round(ldexpf(1, -17), OL_FMT_E5M2) == 0 && ol_fp_round(ldexpf(3, -17), OL_FMT_E5M2) == ldexpf(1, -15),
       "E5M2: 2^-17 → 0, 3·2^-17 → 2^-15 (subnormal grid 2^-16, ties to even)");
    ok(ol_fp_round(0.25f, OL_FMT_E2M1) == 0 && ol_fp_round(0.75f, OL_FMT_E2M1) == 1.0f && ol_fp_round(1.25f, OL_FMT_E2M1) == 1.0f &&
       ol_fp_round(2.5f, OL_FMT_E2M1) == 2.0f && ol_fp_round(3.5f, OL_FMT_E2M1) == 4.0f && ol_fp_round(5.0f, OL_FMT_E2M1) == 4.0f,
       "E2M1: 0.25 → 0, 0.75 → 1, 1.25 → 1, 2.5 → 2, 3.5 → 4, 5 → 4 (ties to even)");
    ok(bits_of(ol_fp_round(-0.0f, OL_FMT_E4M3)) == 0x80000000u && bits_of(ol_fp_round(-0.1f, OL_FMT_E2M1)) == 0x80000000u,
       "-0 stays -0; a small negative value rounds to -0");
    ok(isnan(ol_fp_round(1.0f, 9)) && strstr(ol_error(), "unknown format") != NULL, "a bad format code: NaN and an error naming it");

    /* MXFP4 scales */
    ok(ol_mxfp4_scale(6) == 1 && ol_mxfp4_scale(12) == 2 && ol_mxfp4_scale(7.99f) == 1 && ol_mxfp4_scale(8) == 2 &&
       ol_mxfp4_scale(4) == 1 && ol_mxfp4_scale(0.75f) == 0.125f,
       "MXFP4 scale 2^(floor(log2 amax) − 2): amax 6 → 1, 12 → 2, 7.99 → 1, 8 → 2, 4 → 1, 0.75 → 1/8");
    ok(isnan(ol_mxfp4_scale(INFINITY)) && ol_mxfp4_scale(1e-38f) == ldexpf(1, -127), "MXFP4 scale: inf → NaN (E8M0 0xFF); tiny → 2^-127 (E8M0's smallest)");

    ol_ctx *ctx = ol_ctx_new(0, 0);
    {
        /* (1, 97): blocks of 32, 32, 32 and a last one of 1 */
        int64_t sh[2] = { 1, 97 };
        ol_tensor *x = ol_tensor_new(ctx, OL_F32, 2, sh, "mx_in");
        float *d = x->data;
        memset(d, 0, 97 * 4);
        /* block 0: amax 6 → scale 1 */
        float b0[] = { 6, -3, 1.25f, 0.25f, 5, -0.75f, 2.9f, 0.1f };
        float w0[] = { 6, -3, 1, 0, 4, -1, 3, 0 };
        /* block 1: amax 12 → scale 2 */
        float b1[] = { 12, 7, 0.9f, -2.5f, 11, 1, -5, 3 };
        float w1[] = { 12, 8, 1, -2, 12, 1, -4, 3 };
        /* block 2: zero; block 3 (length 1): 7.5 → scale 1, saturates to 6 */
        for (int i = 0; i < 8; i++) { d[i] = b0[i]; d[32 + i] = b1[i]; }
        d[96] = 7.5f;
        ol_tensor *y = ol_quant_mx(x, OL_MXFP4);
        int bad = 0;
        for (int i = 0; i < 8; i++) {
            if (y->data[i] != w0[i]) { bad++; printf("# block 0 [%d]: %g -> %g, want %g\n", i, b0[i], y->data[i], w0[i]); }
            if (y->data[32 + i] != w1[i]) { bad++; printf("# block 1 [%d]: %g -> %g, want %g\n", i, b1[i], y->data[32 + i], w1[i]); }
        }
        ok(bad == 0, "MXFP4: hand-made blocks (amax 6 → scale 1, amax 12 → scale 2) element by element, ties to even");
        int z = 1;
        for (int i = 64; i < 96; i++) z = z && bits_of(y->data[i]) == 0;
        ok(z, "MXFP4: a zero block stays zero");
        ok(y->data[96] == 6.0f, "MXFP4: a last block of 1 element; 7.5 (scale 1) saturates to 6");
        d[40] = INFINITY;
        d[1] = NAN;
        y = ol_quant_mx(x, OL_MXFP4);
        ok(isnan(y->data[33]) && isnan(y->data[1]) && y->data[0] == 6.0f && y->data[2] == 1.0f,
           "MXFP4: an inf makes its block NaN (E8M0's NaN scale); a NaN stays NaN without touching its block's scale");
        ol_step_reset(ctx);
    }
    {
        /* NVFP4 (1, 48): three blocks of 16; tensor amax 5376 → tensor scale 2 */
        int64_t sh[2] = { 1, 48 };
        ol_tensor *x = ol_tensor_new(ctx, OL_F32, 2, sh, "nv_in");
        float *d = x->data;
        memset(d, 0, 48 * 4);
        d[0] = 5376; d[1] = 1000;                      /* block 0: amax/6/2 = 448 → scale 896 */
        d[16] = 6; d[17] = -1.25f; d[18] = 3;           /* block 1: 6/6/2 = 0.5 (E4M3 exact) → scale 1 */
        d[32] = 6.6f * 2; d[33] = 2;                    /* block 2: 13.2/6/2 = 1.1 → E4M3 1.125 → scale 2.25 */
        ok(ol_nvfp4_tensor_scale(5376) == 2.0f, "NVFP4: tensor scale = amax/(6·448) = 5376/2688 = 2");
        ok(ol_nvfp4_scale(6, 2) == 1.0f && ol_nvfp4_scale(13.2f, 2) == 2.25f && ol_nvfp4_scale(5376, 2) == 896.0f,
           "NVFP4: block scale = E4M3(amax/6/tensor scale)·tensor scale: 1, 2.25 (1.1 → 1.125), 896 (448·2)");
        ol_tensor *y = ol_quant_mx(x, OL_NVFP4);
        ok(y->data[0] == 5376 && y->data[1] == 896 && y->data[16] == 6 && y->data[17] == -1 && y->data[18] == 3 &&
           fabsf(y->data[32] - 13.5f) == 0 && y->data[33] == 2.25f,
           "NVFP4: elements E2M1(x/s)·s: 1000/896 → 1 → 896; -1.25 → -1 (tie, even); 13.2/2.25 → 6 → 13.5; 2/2.25 → 1");
        printf("# nvfp4: %g %g %g %g %g %g %g\n", y->data[0], y->data[1], y->data[16], y->data[17], y->data[18], y->data[32], y->data[33]);
        /* a block whose E4M3 scale underflows: tensor amax 2688·2^20 → tensor scale 2^20 */
        d[0] = 2688.0f * 1048576.0f;
        y = ol_quant_mx(x, OL_NVFP4);
        ok(ol_nvfp4_scale(6, 1048576.0f) == 0 && y->data[16] == 0 && y->data[18] == 0 && y->data[0] == d[0],
           "NVFP4: a block whose scale underflows E4M3 (6/6/2^20 < 2^-10) becomes zero; the block with the tensor's amax is exact");
        ol_step_reset(ctx);
    }
    {
        int64_t sh[2] = { 2, 3 };
        ol_tensor *x = ol_tensor_new(ctx, OL_F32, 2, sh, "fp8_in");
        float v[] = { 896, 3, -0.01f,   1, 0.5f, 448 };
        memcpy(x->data, v, sizeof v);
        ol_tensor *y = ol_quant_fp(x, OL_FMT_E4M3, 2);
        /* row 0: s = 2 → 896, 3, -0.01/2 = -0.005 = -2.56·2^-9 → E4M3 subnormal -3·2^-9 → -3·2^-8 */
        ok(y->data[0] == 896 && y->data[1] == 3 && y->data[2] == -0.01171875f && y->data[3] == 1 && y->data[4] == 0.5f && y->data[5] == 448,
           "scaled E4M3 per row: s = amax/448 per row (2 and 1); -0.005 on the subnormal grid → -3·2^-9");
        ol_tensor *yt = ol_quant_fp(x, OL_FMT_E4M3, 1);
        ok(yt->data[5] == 448 && yt->data[4] == 0.5f, "scaled E4M3 per tensor: one scale (2)");
        x->data[4] = INFINITY;
        ol_tensor *yi = ol_quant_fp(x, OL_FMT_E4M3, 2);
        ok(isnan(yi->data[3]) && isnan(yi->data[4]) && yi->data[0] == 896, "scaled E4M3: a row holding inf becomes NaN, the other row is untouched");
        ok(ol_quant_fp(x, OL_FMT_E4M3, 3) == NULL && strstr(ol_error(), "scaling") != NULL, "a bad scaling is an error");
        ol_step_reset(ctx);
    }
    {
        /* KV (1, 4, 2): token 0 a sink with huge entries; 4 bits (qmax 7) */
        int64_t sh[3] = { 1, 4, 2 };
        ol_tensor *x = ol_tensor_new(ctx, OL_F32, 3, sh, "kv_in");
        float v[] = { 140, -70,   1, 0.6f,   -0.7f, 0.25f,   0.3f, -1 };
        memcpy(x->data, v, sizeof v);
        ol_tensor *k0 = ol_quant_kv(x, 4, 1, 0, 0), *k1 = ol_quant_kv(x, 4, 1, 1, 0);
        /* keep 0: channel 0 scale 140/7 = 20 → 1, -0.7, 0.3 → 0; keep 1: scale 1/7 → exact-ish */
        ok(k0->data[0] == 140 && k0->data[2] == 0 && k0->data[4] == 0 && k0->data[6] == 0, "KV keys per channel, no token kept: the sink sets the scale (20), the rest rounds to 0");
        ok(k1->data[0] == 140 && k1->data[1] == -70 && k1->data[2] == 1 && fabsf(k1->data[4] - (-5.0f / 7)) < 1e-6f && fabsf(k1->data[6] - 2.0f / 7) < 1e-6f,
           "KV keys per channel, first token kept: it stays exact and out of the scale (1/7)");
        ol_tensor *v1 = ol_quant_kv(x, 4, 0, 1, 0);
        ok(v1->data[0] == 140 && fabsf(v1->data[2] - 1) < 1e-6f && fabsf(v1->data[3] - 4.0f / 7) < 1e-6f && fabsf(v1->data[7] + 1) < 1e-6f,
           "KV values per token, first token kept: each later token its own scale");
        /* the same sink moved to token 2: keep 1 does not reach it, top 1 finds it */
        float w[] = { 1, 0.6f,   -0.7f, 0.25f,   140, -70,   0.3f, -1 };
        memcpy(x->data, w, sizeof w);
        ol_tensor *f1 = ol_quant_kv(x, 4, 1, 1, 0), *t1 = ol_quant_kv(x, 4, 1, 0, 1);
        ok(f1->data[4] == 140 && f1->data[2] == 0 && t1->data[4] == 140 && t1->data[5] == -70 && t1->data[0] == 1 &&
           fabsf(t1->data[2] - (-5.0f / 7)) < 1e-6f,
           "KV keys, sink at token 2: the first token kept leaves it in the scale; top = 1 keeps it and the others get 1/7");
        ol_tensor *tv = ol_quant_kv(x, 4, 0, 0, 1);
        ok(tv->data[4] == 140 && tv->data[5] == -70 && fabsf(tv->data[1] - 4.0f / 7) < 1e-6f, "KV values, top = 1: the largest token kept as is");
        ol_tensor *bad = ol_quant_kv(ol_tensor_new(ctx, OL_F32, 2, sh, "kv2"), 4, 1, 1, 0);
        ok(bad == NULL && strstr(ol_error(), "(B, T, D)") != NULL, "KV: a 2-D input is an error naming the shape");
    }
    ol_ctx_free(ctx);
    return tap_done();
}
