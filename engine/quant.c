/*
 * quant.c — 4-bit-era post-training quantisation kernels (docs/reference/compression.md, "RTN, SmoothQuant
 * and Hadamard rotation"): symmetric round-to-nearest of activations per token or per tensor,
 * SmoothQuant's per-channel migration scales, and the Walsh–Hadamard rotation (QuaRot) in
 * O(d log d). Weights use ol_absmax_quant_ (engine/compress.c: per tensor or per output channel).
 *
 * Symmetric RTN with b bits over a group g (a token's row, or the whole tensor):
 *   s = clip·max_g|x| / (2^(b−1) − 1),  q(x) = s·clamp(round(x/s), −(2^(b−1)−1), 2^(b−1)−1)
 * (round half to even; a group of zeros stays zero).
 *
 * Walsh–Hadamard: H_1 = (1), H_2n = [[H_n, H_n], [H_n, −H_n]]; the rotation is H_n/√n, symmetric
 * and orthogonal (its own inverse). A last dim d that is not a power of two is rotated in blocks of
 * n = the largest power of two dividing d (block-diagonal, still orthogonal; QuaRot uses
 * Hadamard matrices of other orders for such d). Butterflies: log2 n passes of (a, b) → (a+b, a−b),
 * then ×1/√n; O(d log n).
 */
#include "internal.h"
#include <omp.h>

static inline float rtn(float x, float s, float qmax) {
    float q = nearbyintf(x / s);
    q = q < -qmax ? -qmax : q > qmax ? qmax : q;
    return s * q;
}

ol_tensor *ol_quant_tokens(ol_tensor *x, int32_t bits, int32_t per_token, float clip) {
    if (ol__check_f32("quant_tokens", x)) return NULL;
    if (bits < 2 || bits > 16) OL_FAIL("quant_tokens: bits %d not in 2..16 for '%s'", bits, x->name);
    if (!(clip > 0.0f && clip <= 1.0f)) OL_FAIL("quant_tokens: clip %g not in (0, 1]", (double)clip);
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, x->shape, "quant_tokens");
    if (!y) return NULL;
    float qmax = (float)((1 << (bits - 1)) - 1);
    int64_t C = x->shape[x->ndim - 1], rows = per_token ? x->numel / C : 1, cols = x->numel / rows;
    #pragma omp parallel for schedule(static) if (x->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *p = x->data + r * cols;
        float *o = y->data + r * cols, amax = 0;
        for (int64_t j = 0; j < cols; j++) amax = fmaxf(amax, fabsf(p[j]));
        if (amax == 0) { memset(o, 0, (size_t)cols * 4); continue; }
        float s = clip * amax / qmax;
        for (int64_t j = 0; j < cols; j++) o[j] = rtn(p[j], s, qmax);
    }
    return y;
}

/* the block size for a dim d: block if given (must be a power of two dividing d), else the
 * largest power of two dividing d */
static int64_t had_block(int64_t d, int64_t block, const char *op) {
    if (block <= 0) { block = 1; while (d % (block * 2) == 0) block *= 2; }
    if ((block & (block - 1)) != 0 || d % block != 0) {
        ol__set_error("%s: block %lld must be a power of two dividing %lld", op, (long long)block, (long long)d);
        return -1;
    }
    return block;
}

/* in place on n values with stride st: the normalised Walsh–Hadamard transform of each block */
static void fwht(float *x, int64_t d, int64_t st, int64_t n) {
    float norm = 1.0f / sqrtf((float)n);
    for (int64_t b0 = 0; b0 < d; b0 += n) {
        float *v = x + b0 * st;
        for (int64_t len = 1; len < n; len <<= 1)
            for (int64_t i = 0; i < n; i += 2 * len)
                for (int64_t j = i; j < i + len; j++) {
                    float a = v[j * st], b = v[(j + len) * st];
                    v[j * st] = a + b;
                    v[(j + len) * st] = a - b;
                }
        for (int64_t j = 0; j < n; j++) v[j * st] *= norm;
    }
}

static void hadamard_backward(ol_node *nd) {
    ol_tensor *x = nd->in[0], *o = nd->out;
    int64_t d = x->shape[x->ndim - 1], rows = x->numel / d, n = nd->iarg[0];
    float *tmp = ol__step_alloc(x->ctx, x->numel * 4, "hadamard backward");
    if (!tmp) return;
    memcpy(tmp, o->grad, (size_t)x->numel * 4);
    #pragma omp parallel for schedule(static) if (x->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) fwht(tmp + r * d, d, 1, n);
    for (int64_t i = 0; i < x->numel; i++) x->grad[i] += tmp[i];
}

ol_tensor *ol_hadamard(ol_tensor *x, int64_t block) {
    if (ol__check_f32("hadamard", x)) return NULL;
    int64_t d = x->shape[x->ndim - 1], n = had_block(d, block, "hadamard");
    if (n < 0) return NULL;
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, x->shape, "hadamard");
    if (!y) return NULL;
    memcpy(y->data, x->data, (size_t)x->numel * 4);
    int64_t rows = x->numel / d;
    #pragma omp parallel for schedule(static) if (x->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) fwht(y->data + r * d, d, 1, n);
    ol_tensor *ins[1] = { x };
    if (ol__needs_grad(x->ctx, 1, ins)) {
        ol_node *nd = ol__record("hadamard", hadamard_backward, y, 1, ins);
        if (!nd) return NULL;
        nd->iarg[0] = (int32_t)n;
    }
    return y;
}

int ol_hadamard_(ol_tensor *t, int32_t dim, int64_t block) {
    if (ol__check_f32("hadamard_", t)) return -1;
    if (t->ndim != 2 || (dim != 0 && dim != 1))
        OL_FAIL_INT("hadamard_: '%s' %s must be 2-D and dim 0 or 1 (got %d)", t->name, OL_SHAPE(t), dim);
    int64_t R = t->shape[0], Cc = t->shape[1], d = dim == 1 ? Cc : R;
    int64_t n = had_block(d, block, "hadamard_");
    if (n < 0) return -1;
    if (dim == 1) {
        #pragma omp parallel for schedule(static) if (t->numel > OL_PAR_MIN)
        for (int64_t r = 0; r < R; r++) fwht(t->data + r * Cc, Cc, 1, n);
    } else {
        #pragma omp parallel for schedule(static) if (t->numel > OL_PAR_MIN)
        for (int64_t c = 0; c < Cc; c++) fwht(t->data + c, R, Cc, n);
    }
    return 0;
}

int ol_scale_cols_(ol_tensor *w, const float *s, int32_t inverse) {
    if (ol__check_f32("scale_cols_", w)) return -1;
    if (!s) OL_FAIL_INT("scale_cols_: NULL scales");
    int64_t C = w->shape[w->ndim - 1];
    for (int64_t j = 0; j < C; j++)
        if (!(s[j] > 0) || !isfinite(s[j])) OL_FAIL_INT("scale_cols_: scale %lld = %g is not positive and finite", (long long)j, (double)s[j]);
    int64_t rows = w->numel / C;
    for (int64_t r = 0; r < rows; r++) {
        float *p = w->data + r * C;
        if (inverse) for (int64_t j = 0; j < C; j++) p[j] /= s[j];
        else         for (int64_t j = 0; j < C; j++) p[j] *= s[j];
    }
    return 0;
}

int ol_absmax_cols(const ol_tensor *x, float *out) {
    if (ol__check_f32("absmax_cols", x)) return -1;
    int64_t C = x->shape[x->ndim - 1], rows = x->numel / C;
    for (int64_t r = 0; r < rows; r++) {
        const float *p = x->data + r * C;
        for (int64_t j = 0; j < C; j++) out[j] = fmaxf(out[j], fabsf(p[j]));
    }
    return 0;
}

int ol_smooth_scales(const float *xmax, const ol_tensor *w, float alpha, float *s) {
    if (ol__check_f32("smooth_scales", (ol_tensor *)w)) return -1;
    if (!xmax || !s || !(alpha >= 0.0f && alpha <= 1.0f)) OL_FAIL_INT("smooth_scales: alpha %g not in [0, 1]", (double)alpha);
    int64_t C = w->shape[w->ndim - 1], rows = w->numel / C;
    for (int64_t j = 0; j < C; j++) {
        float wm = 0;
        for (int64_t r = 0; r < rows; r++) wm = fmaxf(wm, fabsf(w->data[r * C + j]));
        float xm = fmaxf(xmax[j], 1e-5f);
        wm = fmaxf(wm, 1e-5f);
        s[j] = fmaxf(powf(xm, alpha) / powf(wm, 1.0f - alpha), 1e-5f);
    }
    return 0;
}
