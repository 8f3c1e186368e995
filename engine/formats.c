/*
 * formats.c — fake quantisation to the low-precision floating-point formats of 2024–2026 hardware
 * (docs/reference/compression.md, "FP8, MXFP4 and NVFP4"): FP8 E4M3 and E5M2, FP4 E2M1, the OCP
 * Microscaling MXFP4 blocks and NVIDIA's NVFP4 blocks; and the KV-cache quantiser with the first
 * tokens kept in full precision (KVQuant, IntactKV). No gradients: post-training use.
 *
 * Element formats (OCP 8-bit Floating Point Specification (OFP8) rev. 1.0; OCP Microscaling
 * Formats (MX) Specification v1.0 §5.3):
 *   E4M3: bias 7, max 448 = 1.75·2^8 (S.1111.111 is NaN, no infinities), min subnormal 2^−9;
 *   E5M2: bias 15, max 57344 = 1.75·2^15 (IEEE-like inf/NaN), min subnormal 2^−16;
 *   E2M1: bias 1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (0.5 is the subnormal).
 * Rounding: to nearest, ties to even, on the exact binary value (the quantum is a power of two:
 * 2^(e − m) in the binade of |x|, 2^(emin − m) below the smallest normal, so subnormals are
 * rounded on their own grid). Saturating: anything beyond the largest finite value, ±inf
 * included, becomes ±max (OFP8's saturating conversion). NaN stays NaN. −0 stays −0.
 *
 * MXFP4 (OCP MX v1.0 §6.3): blocks of 32 along the last dim, one E8M0 scale per block,
 *   X = 2^(floor(log2(max|V|)) − emax_elem), emax_elem = 2 for E2M1,
 *   P_i = E2M1(V_i / X)   (saturating: max|V|/X can reach 7.99 → 6), output X·P_i.
 * The exponent is clamped below at −127 (E8M0's smallest); a zero block stays zero; a block holding
 * ±inf gets the NaN scale (E8M0 0xFF), i.e. every element NaN; a NaN element stays NaN and does
 * not set the block's max. A last dim not a multiple of 32 ends with a shorter block.
 *
 * NVFP4 (NVIDIA, "Introducing NVFP4", 2025; Transformer Engine's recipe): blocks of 16 along the
 * last dim, each with an E4M3 scale, and one FP32 scale per tensor:
 *   s_tensor = max|x_tensor| / (6·448),
 *   s_block  = E4M3(max|V_block| / 6 / s_tensor)·s_tensor,   P_i = E2M1(V_i / s_block).
 * The tensor scale keeps the block scales inside E4M3's range; a block whose scale rounds to 0
 * (or a zero block) is output as zeros. NaN/inf as for MXFP4 (an inf makes the tensor NaN).
 *
 * Scaled FP8 (ol_quant_fp with scaling 1 or 2): s = max|x| / fmt_max per tensor or per row (a
 * token's activations, an output channel's weights), s in FP32, q = s·FP8(x/s); a zero group
 * stays zero, a group holding ±inf becomes NaN (its scale is), a NaN element stays NaN.
 */
#include "internal.h"
#include <omp.h>

typedef struct { int m, emin; float maxv; const char *name; } fmt_info;

static const fmt_info *fmt_of(int32_t fmt) {
    static const fmt_info E4M3 = { 3, -6, 448.0f, "E4M3" }, E5M2 = { 2, -14, 57344.0f, "E5M2" },
                          E2M1 = { 1, 0, 6.0f, "E2M1" };
    switch (fmt) {
    case OL_FMT_E4M3: return &E4M3;
    case OL_FMT_E5M2: return &E5M2;
    case OL_FMT_E2M1: return &E2M1;
    default: return NULL;
    }
}

/* round x to the nearest value of format f: ties to even, saturating, subnormals on their grid */
static inline float fp_round(float x, const fmt_info *f) {
    if (x != x) return x;
    float a = fabsf(x);
    if (a >= f->maxv) return copysignf(f->maxv, x);
    if (a == 0.0f) return x;
    int e;
    frexpf(a, &e);              /* a = fr·2^e, fr in [0.5, 1): the binade's exponent is e − 1 */
    e -= 1;
    if (e < f->emin) e = f->emin;
    float q = ldexpf(nearbyintf(ldexpf(a, f->m - e)), e - f->m);   /* exact scalings by 2^k */
    return copysignf(q > f->maxv ? f->maxv : q, x);
}

float ol_fp_round(float x, int32_t fmt) {
    const fmt_info *f = fmt_of(fmt);
    if (!f) { ol__set_error("fp_round: unknown format %d (OL_FMT_E4M3, OL_FMT_E5M2 or OL_FMT_E2M1)", fmt); return NAN; }
    return fp_round(x, f);
}

/* amax over n values, NaN ignored; *inf set when one is ±inf */
static inline float amax_of(const float *p, int64_t n, int *inf) {
    float m = 0;
    for (int64_t j = 0; j < n; j++) {
        float a = fabsf(p[j]);
        if (a == INFINITY) *inf = 1;
        if (a > m) m = a;
    }
    return m;
}

float ol_mxfp4_scale(float amax) {
    if (amax != amax || amax == INFINITY) return NAN;     /* E8M0's NaN */
    if (amax == 0) return ldexpf(1.0f, -127);             /* any scale: the block is zero */
    int e;
    frexpf(amax, &e);
    int s = (e - 1) - 2;                                  /* floor(log2 amax) − emax_elem(E2M1) */
    if (s < -127) s = -127;
    return ldexpf(1.0f, s);
}

float ol_nvfp4_tensor_scale(float amax) {
    if (amax != amax || amax == INFINITY) return NAN;
    return amax / (6.0f * 448.0f);
}

float ol_nvfp4_scale(float amax_block, float tensor_scale) {
    if (amax_block != amax_block || tensor_scale != tensor_scale || amax_block == INFINITY) return NAN;
    if (!(tensor_scale > 0)) return 0.0f;
    static const fmt_info E4M3 = { 3, -6, 448.0f, "E4M3" };
    return fp_round(amax_block / 6.0f / tensor_scale, &E4M3) * tensor_scale;
}

/* one block of n values, src → dst, with scale s (E2M1 elements) */
static inline void block_e2m1(const float *src, float *dst, int64_t n, float s) {
    static const fmt_info E2M1 = { 1, 0, 6.0f, "E2M1" };
    if (s != s) { for (int64_t j = 0; j < n; j++) dst[j] = NAN; return; }
    if (s == 0) { for (int64_t j = 0; j < n; j++) dst[j] = src[j] != src[j] ? src[j] : 0.0f; return; }
    for (int64_t j = 0; j < n; j++) dst[j] = s * fp_round(src[j] / s, &E2M1);
}

static int do_mx(const ol_tensor *x, float *out, int32_t kind, const char *op) {
    if (kind != OL_MXFP4 && kind != OL_NVFP4) OL_FAIL_INT("%s: kind %d is neither OL_MXFP4 nor OL_NVFP4", op, kind);
    int64_t C = x->ndim ? x->shape[x->ndim - 1] : 1, rows = x->numel / (C ? C : 1);
    int64_t bs = kind == OL_MXFP4 ? 32 : 16;
    float ts = 0;
    if (kind == OL_NVFP4) {
        int inf = 0;
        float am = amax_of(x->data, x->numel, &inf);
        ts = inf ? NAN : ol_nvfp4_tensor_scale(am);
    }
    #pragma omp parallel for schedule(static) if (x->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t b0 = 0; b0 < C; b0 += bs) {
            int64_t n = C - b0 < bs ? C - b0 : bs;
            const float *p = x->data + r * C + b0;
            int inf = 0;
            float am = amax_of(p, n, &inf);
            float s = kind == OL_MXFP4 ? (inf ? NAN : ol_mxfp4_scale(am)) : ol_nvfp4_scale(inf ? INFINITY : am, ts);
            if (kind == OL_MXFP4 && am == 0 && !inf) s = 0;
            block_e2m1(p, out + r * C + b0, n, s);
        }
    }
    return 0;
}

ol_tensor *ol_quant_mx(ol_tensor *x, int32_t kind) {
    if (ol__check_f32("quant_mx", x)) return NULL;
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, x->shape, "quant_mx");
    if (!y) return NULL;
    if (do_mx(x, y->data, kind, "quant_mx")) return NULL;
    return y;
}

int ol_quant_mx_(ol_tensor *w, int32_t kind) {
    if (ol__check_f32("quant_mx_", w)) return -1;
    return do_mx(w, w->data, kind, "quant_mx_");
}

static int do_fp(const ol_tensor *x, float *out, int32_t fmt, int32_t scaling, const char *op) {
    const fmt_info *f = fmt_of(fmt);
    if (!f) OL_FAIL_INT("%s: unknown format %d for '%s' (OL_FMT_E4M3, OL_FMT_E5M2 or OL_FMT_E2M1)", op, fmt, x->name);
    if (scaling < 0 || scaling > 2) OL_FAIL_INT("%s: scaling %d not 0 (none), 1 (per tensor) or 2 (per row)", op, scaling);
    int64_t C = x->ndim ? x->shape[x->ndim - 1] : 1;
    int64_t rows = scaling == 2 ? x->numel / (C ? C : 1) : 1, cols = x->numel / (rows ? rows : 1);
    #pragma omp parallel for schedule(static) if (x->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *p = x->data + r * cols;
        float *o = out + r * cols;
        if (scaling == 0) { for (int64_t j = 0; j < cols; j++) o[j] = fp_round(p[j], f); continue; }
        int inf = 0;
        float am = amax_of(p, cols, &inf);
        if (inf) { for (int64_t j = 0; j < cols; j++) o[j] = NAN; continue; }
        if (am == 0) { for (int64_t j = 0; j < cols; j++) o[j] = p[j] != p[j] ? p[j] : 0.0f; continue; }
        float s = am / f->maxv;
        for (int64_t j = 0; j < cols; j++) o[j] = s * fp_round(p[j] / s, f);
    }
    return 0;
}

ol_tensor *ol_quant_fp(ol_tensor *x, int32_t fmt, int32_t scaling) {
    if (ol__check_f32("quant_fp", x)) return NULL;
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, x->shape, "quant_fp");
    if (!y) return NULL;
    if (do_fp(x, y->data, fmt, scaling, "quant_fp")) return NULL;
    return y;
}

int ol_quant_fp_(ol_tensor *w, int32_t fmt, int32_t scaling) {
    if (ol__check_f32("quant_fp_", w)) return -1;
    return do_fp(w, w->data, fmt, scaling, "quant_fp_");
}

/* KV cache (KVQuant, Hooper et al. 2024; IntactKV, Liu et al. 2024): x (B, T, D) as written to
 * the cache (k_proj's or v_proj's output). Symmetric RTN with `bits`, keys per channel (one scale
 * per (sequence, channel) over its tokens: per_channel = 1) or values per token (per_channel = 0).
 * Kept in full precision and out of the scales: the first `keep` tokens of each sequence (the
 * attention sink of a causal decoder; IntactKV) and the `top` further tokens with the largest
 * max|x| over D (outlier tokens, as KVQuant's dense-and-sparse keeps outliers; a tie goes to the
 * earlier token). */
ol_tensor *ol_quant_kv(ol_tensor *x, int32_t bits, int32_t per_channel, int32_t keep, int32_t top) {
    if (ol__check_f32("quant_kv", x)) return NULL;
    if (x->ndim != 3) OL_FAIL("quant_kv: '%s' %s must be (B, T, D)", x->name, OL_SHAPE(x));
    if (bits < 2 || bits > 16) OL_FAIL("quant_kv: bits %d not in 2..16 for '%s'", bits, x->name);
    if (keep < 0 || top < 0) OL_FAIL("quant_kv: keep %d and top %d must not be negative", keep, top);
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, x->shape, "quant_kv");
    if (!y) return NULL;
    int64_t B = x->shape[0], T = x->shape[1], D = x->shape[2];
    float qmax = (float)((1 << (bits - 1)) - 1);
    memcpy(y->data, x->data, (size_t)x->numel * 4);
    unsigned char *kept = ol__step_alloc(x->ctx, B * T, "quant_kv mask");
    float *tmax = ol__step_alloc(x->ctx, B * T * 4, "quant_kv token max");
    if (!kept || !tmax) return NULL;
    #pragma omp parallel for schedule(static) if (x->numel > OL_PAR_MIN)
    for (int64_t b = 0; b < B; b++) {
        const float *p = x->data + b * T * D;
        float *o = y->data + b * T * D;
        unsigned char *kb = kept + b * T;
        float *mb = tmax + b * T;
        for (int64_t t = 0; t < T; t++) {
            kb[t] = t < keep;
            mb[t] = 0;
            for (int64_t c = 0; c < D; c++) mb[t] = fmaxf(mb[t], fabsf(p[t * D + c]));
        }
        for (int32_t k = 0; k < top; k++) {          /* the largest not yet kept, top times */
            int64_t best = -1;
            for (int64_t t = 0; t < T; t++) if (!kb[t] && (best < 0 || mb[t] > mb[best])) best = t;
            if (best < 0) break;
            kb[best] = 1;
        }
        int64_t groups = per_channel ? D : T;
        for (int64_t g = 0; g < groups; g++) {
            /* the group: channel g over the tokens, or token g over the channels */
            int64_t start = per_channel ? g : g * D, step = per_channel ? D : 1, n = per_channel ? T : D;
            if (!per_channel && kb[g]) continue;
            float am = 0;
            for (int64_t i = 0; i < n; i++) if (!per_channel || !kb[i]) am = fmaxf(am, fabsf(p[start + i * step]));
            float s = am / qmax;
            for (int64_t i = 0; i < n; i++) {
                if (per_channel && kb[i]) continue;
                if (am == 0) { o[start + i * step] = 0.0f; continue; }
                float q = nearbyintf(p[start + i * step] / s);
                q = q < -qmax ? -qmax : q > qmax ? qmax : q;
                o[start + i * step] = s * q;
            }
        }
    }
    return y;
}
