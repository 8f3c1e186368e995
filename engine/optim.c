/*
 * optim.c — AdamW over the flat parameter buffer (one parallel region, parameter groups by
 * table, the clipping factor folded in), the global gradient norm for clipping, and a
 * finiteness check for divergence detection.
 *
 * Speed: the update is memory-bound (read g, m, v, p; write m, v, p: seven passes). The
 * element loop is a separate function over restrict pointers so that it vectorises (the
 * Makefile builds with -fno-math-errno: with errno semantics sqrtf cannot be vectorised and
 * the loop ran as scalar divss/sqrtss, 27 instructions per element); every parameter's range
 * is cut into fixed chunks handed out dynamically inside ONE parallel region without barriers
 * between tensors (a per-tensor parallel-for waits at 99 barriers in a gpt2-124m step, and on
 * a shared machine every barrier waits for the slowest, possibly descheduled, thread).
 * Elementwise work: the result does not depend on how chunks are assigned to threads.
 */
#include "internal.h"
#include <omp.h>

#define ADAMW_CHUNK 16384   /* floats per work item: 64 KiB of each of the four streams */

/* m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²  with g = gs·grad;
 * p −= lr·( (m/bc1) / (sqrt(v/bc2) + eps) + wd·p ) */
static void adamw_chunk(float *restrict p, const float *restrict gr, float *restrict m, float *restrict v,
                        int64_t n, float gs, float beta1, float beta2, float bc1, float bc2,
                        float lr, float wd, float eps) {
    const float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
    #pragma omp simd
    for (int64_t j = 0; j < n; j++) {
        float gj = gr[j] * gs;
        float mj = beta1 * m[j] + a1 * gj;
        float vj = beta2 * v[j] + a2 * gj * gj;
        m[j] = mj;
        v[j] = vj;
        float mh = mj / bc1, vh = vj / bc2;
        p[j] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[j]);
    }
}

typedef struct {
    ol_ctx *c;
    const int64_t *first;
    float gscale, lr, beta1, beta2, bc1, bc2, eps;
    const float *lr_scale, *wd;
} adamw_job;
/* item it: chunk it − first[i] of parameter i (found by bisection) */
static void adamw_item(void *arg, int64_t it, int tid) {
    const adamw_job *j = arg;
    const ol_ctx *c = j->c;
    (void)tid;
    int32_t lo = 0, hi = c->nparams;   /* first[lo] <= it < first[hi] */
    while (hi - lo > 1) {
        int32_t mid = lo + (hi - lo) / 2;
        if (j->first[mid] <= it) lo = mid; else hi = mid;
    }
    int64_t off = c->ptab[lo].offset, n = c->ptab[lo].t->numel, o = (it - j->first[lo]) * ADAMW_CHUNK;
    int32_t g = c->ptab[lo].group;
    float lrg = j->lr * (j->lr_scale ? j->lr_scale[g] : 1.0f), wdg = j->wd ? j->wd[g] : 0.0f;
    adamw_chunk(c->params + off + o, c->grads + off + o, c->adam_m + off + o, c->adam_v + off + o,
                n - o < ADAMW_CHUNK ? n - o : ADAMW_CHUNK, j->gscale, j->beta1, j->beta2, j->bc1, j->bc2, lrg, wdg,
                j->eps);
}

/* For each parameter p of group g (Loshchilov & Hutter, decoupled weight decay), with the
 * gradient scaled by gscale (the clipping factor; 1 = as stored):
 *   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
 *   p -= lr_g · ( m/(1−β1^t) / (sqrt(v/(1−β2^t)) + eps) + wd_g · p ),  lr_g = lr·lr_scale[g] */
int ol_adamw_step_scaled(ol_ctx *c, float gscale, float lr, float beta1, float beta2, float eps, int32_t ngroups,
                         const float *lr_scale, const float *wd, int64_t step) {
    if (step < 1) OL_FAIL_INT("adamw: step %lld must be >= 1", (long long)step);
    for (int32_t i = 0; i < c->nparams; i++)
        if (c->ptab[i].group >= ngroups)
            OL_FAIL_INT("adamw: parameter '%s' is in group %d but only %d groups were given",
                        c->ptab[i].t->name, c->ptab[i].group, ngroups);
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    int par = c->param_used > OL_PAR_MIN;
    /* the chunks of every parameter as the items of one job on the engine's threads (first[i]:
     * parameter i's first item) */
    int64_t *first = par ? ol__step_alloc(c, ((int64_t)c->nparams + 1) * 8, "adamw") : NULL;
    if (par && !first) ol_clear_error();   /* arena full: the OpenMP region below */
    if (first) {
        first[0] = 0;
        for (int32_t i = 0; i < c->nparams; i++)
            first[i + 1] = first[i] + (c->ptab[i].t->numel + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
        adamw_job j = { c, first, gscale, lr, beta1, beta2, bc1, bc2, eps, lr_scale, wd };
        ol__par(first[c->nparams], adamw_item, &j);
        return 0;
    }
    #pragma omp parallel if (par)
    for (int32_t i = 0; i < c->nparams; i++) {
        int64_t off = c->ptab[i].offset, n = c->ptab[i].t->numel;
        int32_t g = c->ptab[i].group;
        float lrg = lr * (lr_scale ? lr_scale[g] : 1.0f), wdg = wd ? wd[g] : 0.0f;
        float *p = c->params + off, *gr = c->grads + off, *m = c->adam_m + off, *v = c->adam_v + off;
        #pragma omp for schedule(dynamic, 1) nowait
        for (int64_t j = 0; j < n; j += ADAMW_CHUNK)
            adamw_chunk(p + j, gr + j, m + j, v + j, n - j < ADAMW_CHUNK ? n - j : ADAMW_CHUNK,
                        gscale, beta1, beta2, bc1, bc2, lrg, wdg, eps);
    }
    return 0;
}

int ol_adamw_step(ol_ctx *c, float lr, float beta1, float beta2, float eps, int32_t ngroups,
                  const float *lr_scale, const float *wd, int64_t step) {
    return ol_adamw_step_scaled(c, 1.0f, lr, beta1, beta2, eps, ngroups, lr_scale, wd, step);
}

/* Σ g² over one chunk in double, in a fixed order: 8 interleaved partial sums (lanes that
 * vectorise) added pairwise at the end. */
static double sumsq_chunk(const float *restrict g, int64_t n) {
    double acc[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)g[i + k] * (double)g[i + k];
    for (int k = 0; i < n; i++, k++) acc[k] += (double)g[i] * (double)g[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Fixed chunking independent of the thread count; the chunk sums are added in chunk order. */
#define NORM_CHUNK 65536
float ol_grad_norm(ol_ctx *c) {
    int64_t n = c->param_used;
    const float *g = c->grads;
    int64_t nch = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    double *part = ol__step_alloc(c, nch * 8 + 8, "grad_norm");
    double s = 0;
    if (!part) {   /* arena full: serial, the same chunks in the same order */
        ol_clear_error();
        for (int64_t k = 0; k < nch; k++) {
            int64_t e = (k + 1) * NORM_CHUNK < n ? (k + 1) * NORM_CHUNK : n;
            s += sumsq_chunk(g + k * NORM_CHUNK, e - k * NORM_CHUNK);
        }
        return (float)sqrt(s);
    }
    #pragma omp parallel for schedule(dynamic, 4) if (nch > 1)
    for (int64_t k = 0; k < nch; k++) {
        int64_t e = (k + 1) * NORM_CHUNK < n ? (k + 1) * NORM_CHUNK : n;
        part[k] = sumsq_chunk(g + k * NORM_CHUNK, e - k * NORM_CHUNK);
    }
    for (int64_t k = 0; k < nch; k++) s += part[k];
    return (float)sqrt(s);
}

void ol_grad_scale(ol_ctx *c, float s) {
    int64_t n = c->param_used;
    float *restrict g = c->grads;
    #pragma omp parallel for simd schedule(static) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) g[i] *= s;
}

int ol_grads_finite(ol_ctx *c) {
    int64_t n = c->param_used;
    int ok = 1;
    #pragma omp parallel for schedule(static) reduction(&&:ok) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) ok = ok && isfinite(c->grads[i]);
    return ok;
}
