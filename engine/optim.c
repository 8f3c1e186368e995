/*
 * optim.c — AdamW over the flat parameter buffer (one pass, parameter groups by table),
 * the global gradient norm for clipping, and a finiteness check for divergence detection.
 */
#include "internal.h"
#include <omp.h>

/* For each parameter p of group g (Loshchilov & Hutter, decoupled weight decay):
 *   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
 *   p -= lr_g · ( m/(1−β1^t) / (sqrt(v/(1−β2^t)) + eps) + wd_g · p ),  lr_g = lr·lr_scale[g] */
int ol_adamw_step(ol_ctx *c, float lr, float beta1, float beta2, float eps, int32_t ngroups,
                  const float *lr_scale, const float *wd, int64_t step) {
    if (step < 1) OL_FAIL_INT("adamw: step %lld must be >= 1", (long long)step);
    for (int32_t i = 0; i < c->nparams; i++)
        if (c->ptab[i].group >= ngroups)
            OL_FAIL_INT("adamw: parameter '%s' is in group %d but only %d groups were given",
                        c->ptab[i].t->name, c->ptab[i].group, ngroups);
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    for (int32_t i = 0; i < c->nparams; i++) {
        int64_t off = c->ptab[i].offset, n = c->ptab[i].t->numel;
        int32_t g = c->ptab[i].group;
        float lrg = lr * (lr_scale ? lr_scale[g] : 1.0f), wdg = wd ? wd[g] : 0.0f;
        float *p = c->params + off, *gr = c->grads + off, *m = c->adam_m + off, *v = c->adam_v + off;
        #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
        for (int64_t j = 0; j < n; j++) {
            float gj = gr[j];
            m[j] = beta1 * m[j] + (1.0f - beta1) * gj;
            v[j] = beta2 * v[j] + (1.0f - beta2) * gj * gj;
            float mh = m[j] / bc1, vh = v[j] / bc2;
            p[j] -= lrg * (mh / (sqrtf(vh) + eps) + wdg * p[j]);
        }
    }
    return 0;
}

float ol_grad_norm(ol_ctx *c) {
    int64_t n = c->param_used;
    const float *g = c->grads;
    /* fixed chunking independent of the thread count, chunks summed in order */
    int64_t chunk = 1 << 16, nch = (n + chunk - 1) / chunk;
    double *part = ol__step_alloc(c, nch * 8 + 8, "grad_norm");
    double s = 0;
    if (!part) {   /* arena full: serial fallback */
        for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
        return (float)sqrt(s);
    }
    #pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < nch; k++) {
        double t = 0;
        int64_t e = (k + 1) * chunk < n ? (k + 1) * chunk : n;
        for (int64_t i = k * chunk; i < e; i++) t += (double)g[i] * g[i];
        part[k] = t;
    }
    for (int64_t k = 0; k < nch; k++) s += part[k];
    return (float)sqrt(s);
}

void ol_grad_scale(ol_ctx *c, float s) {
    int64_t n = c->param_used;
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) c->grads[i] *= s;
}

int ol_grads_finite(ol_ctx *c) {
    int64_t n = c->param_used;
    int ok = 1;
    #pragma omp parallel for schedule(static) reduction(&&:ok) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) ok = ok && isfinite(c->grads[i]);
    return ok;
}
