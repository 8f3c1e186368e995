/*
 * ops_norm.c — LayerNorm and RMSNorm over the last dim, forward and backward side by side.
 * x is (R, C) after flattening the leading dims; w, b are (C) or NULL. Per-row statistics
 * (mean, rstd) are saved for the backward pass (as in llm.c's layernorm_forward).
 */
#include "internal.h"
#include <omp.h>

/* Row sums in double over 8 interleaved lanes, the lanes added pairwise at the end: a fixed
 * order that vectorises (one double accumulator is a latency-bound chain of C dependent adds
 * per row: with d = 64 the norms spent 4-5 % of an organism step there). */
#define LANE_SUM(acc) (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])))

/* Σ x */
static double row_sum(const float *restrict x, int64_t n) {
    double acc[8] = { 0 };
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int k = 0; k < 8; k++) acc[k] += x[c + k];
    for (int k = 0; c < n; c++, k++) acc[k] += x[c];
    return LANE_SUM(acc);
}
/* Σ (x − mu)², each square in double of the float difference */
static double row_sumsq(const float *restrict x, float mu, int64_t n) {
    double acc[8] = { 0 };
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int k = 0; k < 8; k++) { double d = x[c + k] - mu; acc[k] += d * d; }
    for (int k = 0; c < n; c++, k++) { double d = x[c] - mu; acc[k] += d * d; }
    return LANE_SUM(acc);
}
/* with g = dy·w (w NULL: 1): sg = Σ g and sgx = Σ g·(x − mu)·rs (float products) */
static void row_grad_sums(const float *restrict dy, const float *restrict w, const float *restrict x, float mu,
                          float rs, int64_t n, double *sg, double *sgx) {
    double a[8] = { 0 }, b[8] = { 0 };
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int k = 0; k < 8; k++) {
            float g = dy[c + k] * (w ? w[c + k] : 1.0f);
            a[k] += g;
            b[k] += g * (x[c + k] - mu) * rs;
        }
    for (int k = 0; c < n; c++, k++) {
        float g = dy[c] * (w ? w[c] : 1.0f);
        a[k] += g;
        b[k] += g * (x[c] - mu) * rs;
    }
    *sg = LANE_SUM(a);
    *sgx = LANE_SUM(b);
}

/* Σ (dy·w)·x (w NULL: 1), each float product added in double: row_grad_sums' sgx at mu = 0,
 * rs = 1 (the same bits: x − 0 and ·1 are exact) without its Σ g, which RMSNorm does not use */
static double row_dot_gx(const float *restrict dy, const float *restrict w, const float *restrict x, int64_t n) {
    double b[8] = { 0 };
    int64_t c = 0;
    if (w) {
        for (; c + 8 <= n; c += 8)
            for (int k = 0; k < 8; k++) b[k] += (dy[c + k] * w[c + k]) * x[c + k];
        for (int k = 0; c < n; c++, k++) b[k] += (dy[c] * w[c]) * x[c];
    } else {
        for (; c + 8 <= n; c += 8)
            for (int k = 0; k < 8; k++) b[k] += dy[c + k] * x[c + k];
        for (int k = 0; c < n; c++, k++) b[k] += dy[c] * x[c];
    }
    return LANE_SUM(b);
}

/* y = (x − μ)·rstd [·w + b],  μ = mean_c x,  rstd = 1/sqrt(mean_c (x−μ)² + eps).
 * Backward (x̂ = (x−μ)·rstd, g = dy·w):
 *   dx = rstd · (g − mean(g) − x̂·mean(g·x̂)),  dw += Σ_rows dy·x̂,  db += Σ_rows dy. */
/* The backward runs dx (rows) and these parameter gradients (column blocks) in one parallel
 * region: they write different tensors. Called inside that region (an orphaned worksharing
 * loop); w and b accumulate, so a pending (step tensor) gradient is zero-filled first, before
 * the region (param_grads_settle). */
static void param_grads_settle(ol_tensor *w, ol_tensor *b) {
    if (w && w->requires_grad) ol__grad(w);
    if (b && b->requires_grad) ol__grad(b);
}
/* columns [c0, c1) (at most 64) of dw += Σ_rows dy·x̂ and db += Σ_rows dy: each column summed
 * over the rows in order, in registers (the same additions as into the gradient itself) */
static void param_block(ol_tensor *x, ol_tensor *w, ol_tensor *b, const float *dy, const float *mean,
                        const float *rstd, int64_t c0, int64_t c1) {
    int64_t C = ol__last(x), R = ol__rows(x), nc = c1 - c0;
    int nw = w && w->requires_grad, nb = b && b->requires_grad;
    float aw[64], ab[64];
    for (int64_t j = 0; j < nc; j++) { aw[j] = nw ? w->grad[c0 + j] : 0.0f; ab[j] = nb ? b->grad[c0 + j] : 0.0f; }
    for (int64_t r = 0; r < R; r++) {
        const float *restrict xr = x->data + r * C + c0, *restrict gr = dy + r * C + c0;
        float mu = mean ? mean[r] : 0.0f, rs = rstd[r];
        if (nw) for (int64_t j = 0; j < nc; j++) aw[j] += gr[j] * (xr[j] - mu) * rs;
        if (nb) for (int64_t j = 0; j < nc; j++) ab[j] += gr[j];
    }
    for (int64_t j = 0; j < nc; j++) {
        if (nw) w->grad[c0 + j] = aw[j];
        if (nb) b->grad[c0 + j] = ab[j];
    }
}
#define PARAM_COLS 32   /* columns per block: threads own column blocks, rows summed serially */
static void param_grads(ol_tensor *x, ol_tensor *w, ol_tensor *b, const float *dy, const float *mean,
                        const float *rstd) {
    int64_t C = ol__last(x);
    #pragma omp for schedule(static) nowait
    for (int64_t c0 = 0; c0 < C; c0 += PARAM_COLS)
        param_block(x, w, b, dy, mean, rstd, c0, c0 + PARAM_COLS < C ? c0 + PARAM_COLS : C);
}

static void layernorm_backward(ol_node *nd) {
    ol_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->in[2];
    const float *mean = nd->saved, *rstd = nd->saved2, *dy = nd->out->grad;
    int64_t C = ol__last(x), R = ol__rows(x);
    int need_x = x->requires_grad, fresh = need_x && ol__grad_first(x);
    param_grads_settle(w, b);
    /* one thread, in program order, when x is also w or b (both loops write its gradient) */
    #pragma omp parallel if (x->numel > OL_PAR_MIN && x != w && x != b)
    {
    if (need_x) {
        #pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < R; r++) {
            const float *xr = x->data + r * C, *gr = dy + r * C;
            float *dx = x->grad + r * C;
            float mu = mean[r], rs = rstd[r];
            double sg, sgx;
            row_grad_sums(gr, w ? w->data : NULL, xr, mu, rs, C, &sg, &sgx);
            float mg = (float)(sg / C), mgx = (float)(sgx / C);
            for (int64_t c = 0; c < C; c++) {
                float g = gr[c] * (w ? w->data[c] : 1.0f);
                float v = rs * (g - mg - (xr[c] - mu) * rs * mgx);
                dx[c] = (fresh ? 0.0f : dx[c]) + v;
            }
        }
    }
    param_grads(x, w, b, dy, mean, rstd);
    }
}

static int check_affine(const char *op, ol_tensor *x, ol_tensor *p) {
    if (!p) return 0;
    if (ol__check_f32(op, p)) return -1;
    if (p->ndim != 1 || p->shape[0] != ol__last(x))
        OL_FAIL_INT("%s: parameter '%s' %s must be (%lld) for input '%s' %s", op, p->name, OL_SHAPE(p),
                    (long long)ol__last(x), x->name, OL_SHAPE(x));
    return 0;
}

ol_tensor *ol_layernorm(ol_tensor *x, ol_tensor *w, ol_tensor *b, float eps) {
    if (ol__check_f32("layernorm", x) || check_affine("layernorm", x, w) || check_affine("layernorm", x, b)) return NULL;
    int64_t C = ol__last(x), R = ol__rows(x);
    if (C == 0) OL_FAIL("layernorm: '%s' %s has an empty last dim: nothing to normalise", x->name, OL_SHAPE(x));
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, x->shape, "layernorm");
    float *mean = ol__step_alloc(x->ctx, R * 4, "layernorm"), *rstd = ol__step_alloc(x->ctx, R * 4, "layernorm");
    if (!y || !mean || !rstd) return NULL;
    #pragma omp parallel for schedule(static) if (x->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x->data + r * C;
        float *yr = y->data + r * C;
        double s = row_sum(xr, C);
        float mu = (float)(s / C);
        double ss = row_sumsq(xr, mu, C);
        float rs = 1.0f / sqrtf((float)(ss / C) + eps);
        for (int64_t c = 0; c < C; c++) {
            float v = (xr[c] - mu) * rs;
            if (w) v *= w->data[c];
            if (b) v += b->data[c];
            yr[c] = v;
        }
        mean[r] = mu;
        rstd[r] = rs;
    }
    ol_tensor *ins[3] = { x, w, b };
    if (ol__needs_grad(x->ctx, 3, ins)) {
        ol_node *n = ol__record("layernorm", layernorm_backward, y, 3, ins);
        if (!n) return NULL;
        n->write_first = 1;
        n->saved = mean;
        n->saved2 = rstd;
    }
    return y;
}

/* y = x·rstd [·w], rstd = 1/sqrt(mean_c x² + eps).
 * Backward (g = dy·w): dx = rstd · (g − x·rstd² · mean(g·x)),  dw += Σ_rows dy·x·rstd. */
/* rows [r0, r1) of dx, and the column blocks of dw: one job's items (rmsnorm_backward) */
typedef struct { ol_tensor *x, *w; const float *rstd, *dy; int fresh; int64_t rows, nr, nc; } rms_bwd;
static void rms_dx_rows(const rms_bwd *j, int64_t r0, int64_t r1) {
    ol_tensor *x = j->x, *w = j->w;
    const float *rstd = j->rstd, *dy = j->dy;
    int64_t C = ol__last(x);
    int fresh = j->fresh;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict xr = x->data + r * C, *restrict gr = dy + r * C;
        float *restrict dx = x->grad + r * C;
        float rs = rstd[r];
        const float *restrict wd = w ? w->data : NULL;
        float m = (float)(row_dot_gx(gr, wd, xr, C) / C);   /* mean of dy·w·x */
        /* the same expression as the reference loop, split by case so each vectorises */
        if (wd && fresh)
            for (int64_t c = 0; c < C; c++) dx[c] = 0.0f + rs * (gr[c] * wd[c] - xr[c] * rs * rs * m);
        else if (wd)
            for (int64_t c = 0; c < C; c++) dx[c] = dx[c] + rs * (gr[c] * wd[c] - xr[c] * rs * rs * m);
        else
            for (int64_t c = 0; c < C; c++) {
                float v = rs * (gr[c] - xr[c] * rs * rs * m);
                dx[c] = (fresh ? 0.0f : dx[c]) + v;
            }
    }
}
static void rms_bwd_item(void *arg, int64_t it, int tid) {
    const rms_bwd *j = arg;
    (void)tid;
    int64_t R = ol__rows(j->x), C = ol__last(j->x);
    if (it < j->nr) {
        int64_t r0 = it * j->rows;
        rms_dx_rows(j, r0, r0 + j->rows < R ? r0 + j->rows : R);
    } else {
        int64_t c0 = (it - j->nr) * PARAM_COLS;
        param_block(j->x, j->w, NULL, j->dy, NULL, j->rstd, c0, c0 + PARAM_COLS < C ? c0 + PARAM_COLS : C);
    }
}

/* y = x·rstd [·w], rstd = 1/sqrt(mean_c x² + eps).
 * Backward (g = dy·w): dx = rstd · (g − x·rstd² · mean(g·x)),  dw += Σ_rows dy·x·rstd.
 * dx's row ranges and dw's column blocks are the items of one job on the engine's threads
 * (they write different tensors). */
static void rmsnorm_backward(ol_node *nd) {
    ol_tensor *x = nd->in[0], *w = nd->in[1];
    int64_t C = ol__last(x), R = ol__rows(x);
    int need_x = x->requires_grad, fresh = need_x && ol__grad_first(x);
    param_grads_settle(w, NULL);
    int64_t rows = OL_PAR_GRAIN / (C > 0 ? C : 1) > 0 ? OL_PAR_GRAIN / (C > 0 ? C : 1) : 1;
    rms_bwd j = { x, w, nd->saved, nd->out->grad, fresh, rows, need_x ? (R + rows - 1) / rows : 0,
                  w && w->requires_grad ? (C + PARAM_COLS - 1) / PARAM_COLS : 0 };
    /* one thread, in program order, when x is also w (both write its gradient) */
    if (x->numel > OL_PAR_MIN && x != w) ol__par(j.nr + j.nc, rms_bwd_item, &j);
    else for (int64_t it = 0; it < j.nr + j.nc; it++) rms_bwd_item(&j, it, 0);
}

typedef struct { ol_tensor *x, *w, *y; float *rstd; float eps; } rms_fwd;
static void rms_fwd_rows(void *arg, int64_t r0, int64_t r1) {
    const rms_fwd *j = arg;
    const ol_tensor *x = j->x, *w = j->w;
    int64_t C = ol__last(x);
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x->data + r * C;
        float *yr = j->y->data + r * C;
        double ss = row_sumsq(xr, 0.0f, C);
        float rs = 1.0f / sqrtf((float)(ss / C) + j->eps);
        for (int64_t c = 0; c < C; c++) yr[c] = xr[c] * rs * (w ? w->data[c] : 1.0f);
        j->rstd[r] = rs;
    }
}

ol_tensor *ol_rmsnorm(ol_tensor *x, ol_tensor *w, float eps) {
    if (ol__check_f32("rmsnorm", x) || check_affine("rmsnorm", x, w)) return NULL;
    int64_t C = ol__last(x), R = ol__rows(x);
    if (C == 0) OL_FAIL("rmsnorm: '%s' %s has an empty last dim: nothing to normalise", x->name, OL_SHAPE(x));
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, x->shape, "rmsnorm");
    float *rstd = ol__step_alloc(x->ctx, R * 4, "rmsnorm");
    if (!y || !rstd) return NULL;
    rms_fwd j = { x, w, y, rstd, eps };
    int64_t rows = OL_PAR_GRAIN / C > 0 ? OL_PAR_GRAIN / C : 1;
    ol__par_range(R, rows, x->numel > OL_PAR_MIN, rms_fwd_rows, &j);
    ol_tensor *ins[2] = { x, w };
    if (ol__needs_grad(x->ctx, 2, ins)) {
        ol_node *n = ol__record("rmsnorm", rmsnorm_backward, y, 2, ins);
        if (!n) return NULL;
        n->write_first = 1;
        n->saved = rstd;
    }
    return y;
}
