/*
 * ops_reduce.c — reductions over the last dim (sum, mean), softmax with an optional causal
 * mask, and cross-entropy fused with log-softmax. Rows are independent, so threads split
 * rows and every row is reduced serially: results do not depend on the thread count.
 */
#include "internal.h"
#include <omp.h>

/* ------------------------------------------------------------- sum / mean */
/* x (R, C) -> y (R): y[r] = scale · Σ_c x[r, c]  (scale = 1 for sum, 1/C for mean) */
static void sum_backward(ol_node *nd) {
    ol_tensor *a = nd->in[0];
    int64_t C = ol__last(a), R = ol__rows(a);
    float scale = nd->farg[0];
    const float *g = nd->out->grad;
    #pragma omp parallel for schedule(static) if (a->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        float gr = g[r] * scale;
        float *da = a->grad + r * C;
        for (int64_t c = 0; c < C; c++) da[c] += gr;
    }
}

static ol_tensor *reduce_last(const char *op, ol_tensor *a, int mean) {
    if (ol__check_f32(op, a)) return NULL;
    int64_t C = ol__last(a), R = ol__rows(a);
    if (mean && C == 0) OL_FAIL("mean: '%s' %s: the mean over an empty last dim is undefined", a->name, OL_SHAPE(a));
    int64_t shape[4] = { 1 };
    int32_t nd = a->ndim == 1 ? 1 : a->ndim - 1;
    for (int i = 0; i < a->ndim - 1; i++) shape[i] = a->shape[i];
    ol_tensor *y = ol__new(a->ctx, OL_F32, nd, shape, op);
    if (!y) return NULL;
    float scale = mean ? 1.0f / (float)C : 1.0f;
    #pragma omp parallel for schedule(static) if (a->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *x = a->data + r * C;
        double s = 0;
        for (int64_t c = 0; c < C; c++) s += x[c];
        y->data[r] = (float)(s * scale);
    }
    if (ol__needs_grad(a->ctx, 1, &a)) {
        ol_node *n = ol__record(op, sum_backward, y, 1, &a);
        if (!n) return NULL;
        n->farg[0] = scale;
    }
    return y;
}

ol_tensor *ol_sum(ol_tensor *a) { return reduce_last("sum", a, 0); }
ol_tensor *ol_mean(ol_tensor *a) { return reduce_last("mean", a, 1); }

/* ------------------------------------------------------------- softmax */
/* y[r, j] = exp(x[r,j] - m) / Σ_k exp(x[r,k] - m) over visible k; masked entries are 0.
 * Row r is query i = r mod Tq; causal hides j > i + (Tk - Tq).
 * Backward: dx = y ⊙ (dy − Σ_j dy_j y_j). */
static inline int64_t visible(int causal, int64_t r, int64_t Tq, int64_t Tk) {
    if (!causal) return Tk;
    int64_t v = r % Tq + (Tk - Tq) + 1;
    return v < 0 ? 0 : v > Tk ? Tk : v;
}

static void softmax_backward(ol_node *nd) {
    ol_tensor *a = nd->in[0], *y = nd->out;
    int64_t Tk = ol__last(a), R = ol__rows(a);
    int64_t Tq = a->ndim >= 2 ? a->shape[a->ndim - 2] : 1;
    int causal = nd->iarg[0];
    #pragma omp parallel for schedule(static) if (a->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *yr = y->data + r * Tk, *gr = y->grad + r * Tk;
        float *dr = a->grad + r * Tk;
        int64_t v = visible(causal, r, Tq, Tk);
        double dot = 0;
        for (int64_t j = 0; j < v; j++) dot += (double)gr[j] * yr[j];
        for (int64_t j = 0; j < v; j++) dr[j] += yr[j] * (gr[j] - (float)dot);
    }
}

ol_tensor *ol_softmax(ol_tensor *a, int32_t causal) {
    if (ol__check_f32("softmax", a)) return NULL;
    if (causal && a->ndim < 2) OL_FAIL("softmax: a causal mask needs (..., Tq, Tk), got '%s' %s", a->name, OL_SHAPE(a));
    int64_t Tk = ol__last(a), R = ol__rows(a);
    int64_t Tq = a->ndim >= 2 ? a->shape[a->ndim - 2] : 1;
    ol_tensor *y = ol__new(a->ctx, OL_F32, a->ndim, a->shape, "softmax");
    if (!y) return NULL;
    #pragma omp parallel for schedule(static) if (a->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *x = a->data + r * Tk;
        float *o = y->data + r * Tk;
        int64_t v = visible(causal, r, Tq, Tk);
        float m = -INFINITY;
        for (int64_t j = 0; j < v; j++) m = x[j] > m ? x[j] : m;
        double s = 0;
        for (int64_t j = 0; j < v; j++) { o[j] = expf(x[j] - m); s += o[j]; }
        float inv = s > 0 ? (float)(1.0 / s) : 0.0f;
        for (int64_t j = 0; j < v; j++) o[j] *= inv;
        for (int64_t j = v; j < Tk; j++) o[j] = 0.0f;
    }
    if (ol__needs_grad(a->ctx, 1, &a)) {
        ol_node *n = ol__record("softmax", softmax_backward, y, 1, &a);
        if (!n) return NULL;
        n->iarg[0] = causal ? 1 : 0;
    }
    return y;
}

/* ------------------------------------------------------------- cross-entropy */
/* loss = (1/N) Σ_{r: t_r != ignore} (logsumexp(x_r) − x_r[t_r]), N = number of kept rows.
 * Saves logsumexp per row; backward: dx_r = (softmax(x_r) − onehot(t_r)) · dloss / N. */
/* e^x is libm's expf bit for bit, a block of a row at a time through ol__expf_n (vectorised,
 * engine/libm_exact.c); the sum runs in the same order as before, so the same bits */
#define CE_BLK 512
typedef struct { ol_tensor *x, *t; const float *lse; float *lse_out; double *part; int32_t ignore; float g; int fresh; } ce_job;
static void ce_bwd_rows(void *arg, int64_t r0, int64_t r1) {
    const ce_job *j = arg;
    const ol_tensor *x = j->x, *t = j->t;
    const float *lse = j->lse;
    int64_t V = ol__last(x);
    float g = j->g;
    int fresh = j->fresh;
    for (int64_t r = r0; r < r1; r++) {
        int32_t tr = t->idata[r];
        float *dr = x->grad + r * V;
        if (tr == j->ignore) {
            if (fresh) memset(dr, 0, (size_t)V * 4);
            continue;
        }
        const float *xr = x->data + r * V;
        float d[CE_BLK], e[CE_BLK];
        for (int64_t c0 = 0; c0 < V; c0 += CE_BLK) {
            int64_t m = V - c0 < CE_BLK ? V - c0 : CE_BLK;
            for (int64_t c = 0; c < m; c++) d[c] = xr[c0 + c] - lse[r];
            ol__expf_n(d, e, m);
            if (fresh) for (int64_t c = 0; c < m; c++) dr[c0 + c] = 0.0f + g * e[c];
            else       for (int64_t c = 0; c < m; c++) dr[c0 + c] += g * e[c];
        }
        dr[tr] -= g;
    }
}
/* rows [r0, r1) of the forward: logsumexp and each row's loss term */
static void ce_fwd_rows(void *arg, int64_t r0, int64_t r1) {
    const ce_job *j = arg;
    const ol_tensor *x = j->x, *t = j->t;
    int64_t V = ol__last(x);
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x->data + r * V;
        float m = -INFINITY;
        for (int64_t c = 0; c < V; c++) m = xr[c] > m ? xr[c] : m;
        double s = 0;
        float d[CE_BLK], e[CE_BLK];
        for (int64_t c0 = 0; c0 < V; c0 += CE_BLK) {
            int64_t n = V - c0 < CE_BLK ? V - c0 : CE_BLK;
            for (int64_t c = 0; c < n; c++) d[c] = xr[c0 + c] - m;
            ol__expf_n(d, e, n);
            for (int64_t c = 0; c < n; c++) s += e[c];
        }
        j->lse_out[r] = m + (float)log(s);
        int32_t tr = t->idata[r];
        j->part[r] = tr == j->ignore ? 0.0 : (double)j->lse_out[r] - xr[tr];
    }
}

static void ce_backward(ol_node *nd) {
    ol_tensor *x = nd->in[0], *t = nd->in[1];
    int64_t V = ol__last(x), R = ol__rows(x);
    const float *lse = nd->saved;
    int32_t ignore = nd->iarg[0];
    float count = nd->farg[0];
    if (count == 0) return;
    float g = nd->out->grad[0] / count;
    int fresh = ol__grad_first(x);   /* a pending gradient: store (internal.h) */
    ce_job j = { x, t, lse, NULL, NULL, ignore, g, fresh };
    ol__par_range(R, OL_PAR_GRAIN / V > 0 ? OL_PAR_GRAIN / V : 1, x->numel > OL_PAR_MIN, ce_bwd_rows, &j);
}

ol_tensor *ol_cross_entropy(ol_tensor *x, ol_tensor *t, int32_t ignore_index) {
    if (ol__check_f32("cross_entropy", x) || ol__check_live("cross_entropy", t)) return NULL;
    if (t->dtype != OL_I32) OL_FAIL("cross_entropy: targets '%s' %s must be int32", t->name, OL_SHAPE(t));
    int64_t V = ol__last(x), R = ol__rows(x);
    if (R == 0 || V == 0)
        OL_FAIL("cross_entropy: logits '%s' %s are empty (%s): no loss to compute", x->name, OL_SHAPE(x),
                R == 0 ? "no rows: an empty batch" : "no classes");
    if (t->numel != R)
        OL_FAIL("cross_entropy: logits '%s' %s have %lld rows but targets '%s' %s have %lld elements",
                x->name, OL_SHAPE(x), (long long)R, t->name, OL_SHAPE(t), (long long)t->numel);
    for (int64_t r = 0; r < R; r++) {
        int32_t tr = t->idata[r];
        if (tr != ignore_index && (tr < 0 || tr >= V))
            OL_FAIL("cross_entropy: target %d at position %lld is outside [0, %lld) for logits '%s' %s",
                    tr, (long long)r, (long long)V, x->name, OL_SHAPE(x));
    }
    float *lse = ol__step_alloc(x->ctx, R * 4, "cross_entropy");
    int64_t one = 1;
    ol_tensor *y = ol__new(x->ctx, OL_F32, 1, &one, "cross_entropy");
    if (!lse || !y) return NULL;
    double *part = ol__step_alloc(x->ctx, R * 8, "cross_entropy");
    if (!part) return NULL;
    ce_job j = { x, t, lse, lse, part, ignore_index, 0.0f, 0 };
    ol__par_range(R, OL_PAR_GRAIN / V > 0 ? OL_PAR_GRAIN / V : 1, x->numel > OL_PAR_MIN, ce_fwd_rows, &j);
    double total = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < R; r++) {
        total += part[r];
        count += t->idata[r] != ignore_index;
    }
    y->data[0] = count ? (float)(total / count) : 0.0f;
    if (ol__needs_grad(x->ctx, 1, &x)) {
        ol_tensor *ins[2] = { x, t };
        ol_node *n = ol__record("cross_entropy", ce_backward, y, 2, ins);
        if (!n) return NULL;
        n->write_first = 1;
        n->saved = lse;
        n->iarg[0] = ignore_index;
        n->farg[0] = (float)count;
    }
    return y;
}
