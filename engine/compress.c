/*
 * compress.c — post-training compression kernels (QT §5, SO Table 3; docs/reference/compression.md):
 * uniform fake quantisation, range estimators (min-max, percentile, MSE grid search),
 * AbsMax weight quantisation per tensor and per output channel, and unstructured
 * magnitude pruning (one threshold per tensor or one global threshold).
 *
 * Uniform quantiser with b bits, scale s and integer zero point z (Jacob et al. 2018):
 *   q(x) = s · (clamp(round(x/s) + z, 0, 2^b − 1) − z)
 * asymmetric: s = (max − min)/(2^b − 1), z = round(−min/s);  symmetric: the integer grid is
 * [−(2^(b−1) − 1), 2^(b−1) − 1] with z = 0 and s = max|x| / (2^(b−1) − 1).
 * round() is round-half-to-even (nearbyintf in the default rounding mode), as torch.round.
 */
#include "internal.h"
#include <stdlib.h>
#include <omp.h>

static inline float fq(float x, float s, float z, float qmin, float qmax) {
    float q = nearbyintf(x / s) + z;
    q = q < qmin ? qmin : q > qmax ? qmax : q;
    return s * (q - z);
}

/* y = fake-quantised x (a new step tensor, no gradient: post-training use). */
ol_tensor *ol_fake_quant(ol_tensor *x, float scale, float zero_point, float qmin, float qmax) {
    if (ol__check_f32("fake_quant", x)) return NULL;
    if (!(scale > 0) || !isfinite(scale))
        OL_FAIL("fake_quant: scale %g must be positive and finite for '%s' %s", scale, x->name, OL_SHAPE(x));
    if (!(qmin < qmax)) OL_FAIL("fake_quant: integer range [%g, %g] is empty", qmin, qmax);
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, x->shape, "fake_quant");
    if (!y) return NULL;
    int64_t n = x->numel;
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y->data[i] = fq(x->data[i], scale, zero_point, qmin, qmax);
    return y;
}

/* Same, in place (weights). */
int ol_fake_quant_(ol_tensor *x, float scale, float zero_point, float qmin, float qmax) {
    if (ol__check_f32("fake_quant_", x)) return -1;
    if (!(scale > 0) || !isfinite(scale))
        OL_FAIL_INT("fake_quant_: scale %g must be positive and finite for '%s' %s", scale, x->name, OL_SHAPE(x));
    int64_t n = x->numel;
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x->data[i] = fq(x->data[i], scale, zero_point, qmin, qmax);
    return 0;
}

/* out[0] = min, out[1] = max over x (NaN-free input assumed; NaN is reported). */
int ol_minmax(ol_tensor *x, float *out) {
    if (ol__check_f32("minmax", x)) return -1;
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < x->numel; i++) {
        float v = x->data[i];
        if (v != v) OL_FAIL_INT("minmax: '%s' %s holds NaN at element %lld", x->name, OL_SHAPE(x), (long long)i);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    out[0] = lo;
    out[1] = hi;
    return 0;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The p-th and (100−p)-th percentiles of x (p in (50, 100]), linear interpolation between
 * order statistics (NumPy's default). out[0] = low, out[1] = high. */
int ol_percentile_range(ol_tensor *x, double p, float *out) {
    if (ol__check_f32("percentile_range", x)) return -1;
    if (!(p > 50.0 && p <= 100.0)) OL_FAIL_INT("percentile_range: p = %g not in (50, 100]", p);
    int64_t n = x->numel;
    if (n == 0) OL_FAIL_INT("percentile_range: '%s' is empty", x->name);
    float *s = malloc((size_t)n * 4);
    if (!s) OL_FAIL_INT("percentile_range: out of memory for %lld values", (long long)n);
    memcpy(s, x->data, (size_t)n * 4);
    qsort(s, (size_t)n, 4, cmp_float);
    double qs[2] = { (100.0 - p) / 100.0, p / 100.0 };
    for (int k = 0; k < 2; k++) {
        double pos = qs[k] * (double)(n - 1);
        int64_t i = (int64_t)floor(pos);
        double f = pos - (double)i;
        out[k] = (float)(i + 1 < n ? s[i] * (1.0 - f) + s[i + 1] * f : s[i]);
    }
    free(s);
    return 0;
}

/* Symmetric b-bit scale minimising the mean squared error of quantising x: the clipping
 * threshold c = α·max|x| over a grid of n_grid values α ∈ (0, 1]; returns the scale c/qmax.
 * (QT uses an MSE range for OPT weights.) */
float ol_mse_scale_symmetric(ol_tensor *x, int32_t bits, int32_t n_grid) {
    if (ol__check_f32("mse_scale_symmetric", x)) return -1.0f;
    if (bits < 2 || bits > 16) { ol__set_error("mse_scale_symmetric: bits %d not in 2..16", bits); return -1.0f; }
    if (n_grid < 1) n_grid = 100;
    float amax = 0;
    for (int64_t i = 0; i < x->numel; i++) amax = fmaxf(amax, fabsf(x->data[i]));
    float qmax = (float)((1 << (bits - 1)) - 1);
    if (amax == 0) return 1.0f;
    double best = INFINITY;
    float best_s = amax / qmax;
    for (int g = 1; g <= n_grid; g++) {
        float s = (amax * (float)g / (float)n_grid) / qmax;
        double err = 0;
        #pragma omp parallel for schedule(static) reduction(+:err) if (x->numel > OL_PAR_MIN)
        for (int64_t i = 0; i < x->numel; i++) {
            double d = (double)fq(x->data[i], s, 0.0f, -qmax, qmax) - x->data[i];
            err += d * d;
        }
        if (err < best) { best = err; best_s = s; }   /* first minimum wins: deterministic */
    }
    return best_s;
}

/* AbsMax weight quantisation in place: w ← s·round(w/s), s = max|w|/(2^(b−1)−1), over the
 * whole tensor (per_channel = 0) or per output channel = per row of a 2-D (out, in) weight
 * (per_channel = 1). */
int ol_absmax_quant_(ol_tensor *w, int32_t bits, int32_t per_channel) {
    if (ol__check_f32("absmax_quant_", w)) return -1;
    if (bits < 2 || bits > 16) OL_FAIL_INT("absmax_quant_: bits %d not in 2..16 for '%s'", bits, w->name);
    float qmax = (float)((1 << (bits - 1)) - 1);
    int64_t rows = per_channel ? (w->ndim >= 2 ? w->shape[0] : 1) : 1;
    int64_t cols = w->numel / (rows ? rows : 1);
    #pragma omp parallel for schedule(static) if (w->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        float *p = w->data + r * cols;
        float amax = 0;
        for (int64_t j = 0; j < cols; j++) amax = fmaxf(amax, fabsf(p[j]));
        if (amax == 0) continue;
        float s = amax / qmax;
        for (int64_t j = 0; j < cols; j++) p[j] = fq(p[j], s, 0.0f, -qmax, qmax);
    }
    return 0;
}

/* The k-th smallest |x| over n tensors (k 0-based), by sorting a copy of the magnitudes. */
float ol_magnitude_kth(int32_t n, ol_tensor **ts, int64_t k) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (ol__check_f32("magnitude_kth", ts[i])) return -1.0f;
        total += ts[i]->numel;
    }
    if (k < 0 || k >= total) { ol__set_error("magnitude_kth: k = %lld not in [0, %lld)", (long long)k, (long long)total); return -1.0f; }
    float *a = malloc((size_t)total * 4);
    if (!a) { ol__set_error("magnitude_kth: out of memory for %lld values", (long long)total); return -1.0f; }
    int64_t o = 0;
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < ts[i]->numel; j++) a[o++] = fabsf(ts[i]->data[j]);
    qsort(a, (size_t)total, 4, cmp_float);
    float v = a[k];
    free(a);
    return v;
}

/* Unstructured magnitude pruning in place: zero the fraction `sparsity` of the entries with
 * the smallest |w|, per tensor (global = 0: each tensor its own threshold) or with one
 * threshold over all n tensors (global = 1). Ties at the threshold are broken by position
 * so that exactly round(sparsity·N) entries become zero. Returns the number zeroed, or -1. */
int64_t ol_magnitude_prune_(int32_t n, ol_tensor **ts, float sparsity, int32_t global) {
    if (n < 1) OL_FAIL_INT("magnitude_prune_: no tensors");
    if (!(sparsity >= 0.0f && sparsity <= 1.0f)) OL_FAIL_INT("magnitude_prune_: sparsity %g not in [0, 1]", sparsity);
    int64_t zeroed = 0;
    int groups = global ? 1 : n;
    for (int g = 0; g < groups; g++) {
        ol_tensor **set = global ? ts : ts + g;
        int cnt = global ? n : 1;
        int64_t total = 0;
        for (int i = 0; i < cnt; i++) {
            if (ol__check_f32("magnitude_prune_", set[i])) return -1;
            total += set[i]->numel;
        }
        int64_t k = (int64_t)llround((double)sparsity * (double)total);
        if (k == 0) continue;
        float thr = ol_magnitude_kth(cnt, set, k - 1);
        if (thr < 0) return -1;
        /* count strictly below the threshold, then zero ties in order until k are zero */
        int64_t below = 0;
        for (int i = 0; i < cnt; i++)
            for (int64_t j = 0; j < set[i]->numel; j++) below += fabsf(set[i]->data[j]) < thr;
        int64_t ties = k - below;
        for (int i = 0; i < cnt; i++)
            for (int64_t j = 0; j < set[i]->numel; j++) {
                float a = fabsf(set[i]->data[j]);
                if (a < thr) set[i]->data[j] = 0.0f;
                else if (a == thr && ties > 0) { set[i]->data[j] = 0.0f; ties--; }
            }
        zeroed += k;
    }
    return zeroed;
}
