/*
 * ops_elementwise.c — broadcasting binary ops (add, sub, mul, div), y = s·a + c, the unary
 * functions (exp … abs) and seeded dropout. Forward and backward side by side.
 *
 * Broadcasting: the output has the shape of the larger operand; the smaller one has either
 * one element or a shape equal to the larger one's trailing dims, and repeats every
 * `inner` elements. Its gradient is the sum over the repeats, taken in a fixed order.
 */
#include "internal.h"
#include <omp.h>

enum { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV };
static const char *bin_names[] = { "add", "sub", "mul", "div" };

/* the larger operand is "big"; the small one repeats with period `inner` */
static int broadcast_plan(const char *op, ol_tensor *a, ol_tensor *b, int64_t *inner) {
    if (a->numel == b->numel) {
        int same = a->ndim == b->ndim;
        for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
        if (same || a->numel == 1) { *inner = a->numel; return 0; }
    }
    const ol_tensor *big = a->numel >= b->numel ? a : b, *sm = big == a ? b : a;
    if (sm->numel == 1) { *inner = 1; return 0; }
    if (sm->ndim <= big->ndim) {
        int ok = 1;
        for (int i = 1; i <= sm->ndim; i++) ok &= sm->shape[sm->ndim - i] == big->shape[big->ndim - i];
        if (ok) { *inner = sm->numel; return 0; }
    }
    OL_FAIL_INT("%s: shapes do not broadcast: '%s' %s and '%s' %s", op, a->name, OL_SHAPE(a), b->name, OL_SHAPE(b));
}

/* element i of operand t when the output has `n` elements */
static inline float at(const ol_tensor *t, int64_t i, int64_t n) {
    return t->numel == n ? t->data[i] : t->data[i % t->numel];
}

/* d = g (copy) or d += g over ranges of OL_PAR_GRAIN elements on the engine's threads: items
 * 0 .. nr−1 are ranges of da, nr .. 2·nr−1 the same ranges of db (add_grads) */
typedef struct { float *da, *db; const float *g; int64_t n, nr; int fa, fb; } add_job;
static void copy_or_add(float *restrict d, const float *restrict g, int64_t i0, int64_t i1, int copy) {
    if (copy) {
        #pragma omp simd
        for (int64_t i = i0; i < i1; i++) d[i] = g[i];
    } else {
        #pragma omp simd
        for (int64_t i = i0; i < i1; i++) d[i] += g[i];
    }
}
static void add_item(void *arg, int64_t it, int tid) {
    const add_job *j = arg;
    (void)tid;
    int second = it >= j->nr;
    int64_t i0 = (second ? it - j->nr : it) * OL_PAR_GRAIN, i1 = i0 + OL_PAR_GRAIN < j->n ? i0 + OL_PAR_GRAIN : j->n;
    copy_or_add(second ? j->db : j->da, j->g, i0, i1, second ? j->fb : j->fa);
}
/* One pass per operand, no temporary: the full-size operand's gradient is accumulated in
 * place (dx += g·other), vectorised per op; the repeating operand's gradient is the sum of
 * g·other over its repeats, each element's repeats added in row order in double (the same
 * order and arithmetic as a temporary followed by accum_broadcast). `other` may be NULL (add,
 * sub: factor ±1); it has n elements or repeats with period mo. */
static void grad_full(float *restrict dx, const float *restrict g, int op, int which, const ol_tensor *a,
                      const ol_tensor *b, int64_t n, int fresh) {
    /* which = 0: gradient of a, 1: of b; fresh: dx is a pending gradient (store, internal.h) */
    int64_t ma = a->numel, mb = b->numel;
    const float *A = a->data, *B = b->data;
    if (op == BIN_ADD || (op == BIN_SUB && which == 0)) {
        /* fresh: a copy of a gradient (which never holds −0): 0 + g is g */
        add_job j = { dx, NULL, g, n, (n + OL_PAR_GRAIN - 1) / OL_PAR_GRAIN, fresh, 0 };
        if (n > OL_PAR_MIN) ol__par(j.nr, add_item, &j);
        else copy_or_add(dx, g, 0, n, fresh);
    } else if (op == BIN_SUB) {
        OL_GRAD_LOOP(fresh, n, dx, -g[i]);
    } else if (ma == n && mb == n) {
        if (op == BIN_MUL) {
            const float *o = which ? A : B;
            OL_GRAD_LOOP(fresh, n, dx, g[i] * o[i]);
        } else if (which == 0) {
            OL_GRAD_LOOP(fresh, n, dx, g[i] / B[i]);
        } else {
            OL_GRAD_LOOP(fresh, n, dx, -g[i] * A[i] / (B[i] * B[i]));
        }
    } else {
        if (fresh) ol__zero(dx, n);
        #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float av = at(a, i, n), bv = at(b, i, n), gi = g[i];
            dx[i] += op == BIN_MUL ? gi * (which ? av : bv) : which ? -gi * av / (bv * bv) : gi / bv;
        }
    }
}

static void grad_repeat(float *dx, const float *g, int op, int which, const ol_tensor *a, const ol_tensor *b,
                        int64_t n, int fresh) {
    const ol_tensor *t = which ? b : a;
    int64_t m = t->numel, R = n / m;
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t j0 = 0; j0 < m; j0 += 64) {
        int64_t j1 = j0 + 64 < m ? j0 + 64 : m;
        double acc[64];
        for (int64_t j = j0; j < j1; j++) acc[j - j0] = 0;
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = j0; j < j1; j++) {
                int64_t i = r * m + j;
                float gi = g[i], v;
                switch (op) {
                case BIN_ADD: v = gi; break;
                case BIN_SUB: v = which ? -gi : gi; break;
                case BIN_MUL: v = gi * (which ? at(a, i, n) : at(b, i, n)); break;
                default: { float bv = at(b, i, n); v = which ? -gi * at(a, i, n) / (bv * bv) : gi / bv; }
                }
                acc[j - j0] += v;
            }
        if (fresh) for (int64_t j = j0; j < j1; j++) dx[j] = 0.0f + (float)acc[j - j0];
        else       for (int64_t j = j0; j < j1; j++) dx[j] += (float)acc[j - j0];
    }
}

/* a + b with both full-size and both wanting a gradient (the residual adds): both gradients
 * in one job (each a copy of gy when pending, else gy added, as grad_full) */
static void add_grads(float *restrict da, float *restrict db, const float *restrict g, int64_t n, int fa, int fb) {
    add_job j = { da, db, g, n, (n + OL_PAR_GRAIN - 1) / OL_PAR_GRAIN, fa, fb };
    if (n > OL_PAR_MIN) ol__par(2 * j.nr, add_item, &j);
    else { copy_or_add(da, g, 0, n, fa); copy_or_add(db, g, 0, n, fb); }
}

static void binary_backward(ol_node *nd) {
    ol_tensor *a = nd->in[0], *b = nd->in[1], *y = nd->out;
    int op = nd->iarg[0];
    int64_t n = y->numel;
    const float *gy = y->grad;
    if (op == BIN_ADD && a != b && a->numel == n && b->numel == n && a->requires_grad && b->requires_grad) {
        int fa = ol__grad_first(a), fb = ol__grad_first(b);
        add_grads(a->grad, b->grad, gy, n, fa, fb);
        return;
    }
    if (a->requires_grad) {
        int fresh = ol__grad_first(a);
        if (a->numel == n) grad_full(a->grad, gy, op, 0, a, b, n, fresh);
        else grad_repeat(a->grad, gy, op, 0, a, b, n, fresh);
    }
    if (b->requires_grad) {
        int fresh = ol__grad_first(b);
        if (b->numel == n) grad_full(b->grad, gy, op, 1, a, b, n, fresh);
        else grad_repeat(b->grad, gy, op, 1, a, b, n, fresh);
    }
}

/* elements [i0, i1) of a op b with equal shapes (binary_fwd), on the engine's threads */
typedef struct { int op; const float *A, *B; float *o; } bin_job;
static void bin_range(void *arg, int64_t i0, int64_t i1) {
    const bin_job *j = arg;
    const float *A = j->A, *B = j->B;
    float *restrict o = j->o;
    switch (j->op) {
    case BIN_ADD:
        #pragma omp simd
        for (int64_t i = i0; i < i1; i++) o[i] = A[i] + B[i];
        break;
    case BIN_SUB:
        #pragma omp simd
        for (int64_t i = i0; i < i1; i++) o[i] = A[i] - B[i];
        break;
    case BIN_MUL:
        #pragma omp simd
        for (int64_t i = i0; i < i1; i++) o[i] = A[i] * B[i];
        break;
    default:
        #pragma omp simd
        for (int64_t i = i0; i < i1; i++) o[i] = A[i] / B[i];
    }
}

/* y = a op b: vectorised loops for equal shapes and for a repeating operand (row by row) */
static void binary_fwd(int op, const ol_tensor *a, const ol_tensor *b, float *restrict o, int64_t n) {
    int64_t ma = a->numel, mb = b->numel;
    const float *A = a->data, *B = b->data;
    if (ma == n && mb == n) {
        bin_job j = { op, A, B, o };
        ol__par_range(n, OL_PAR_GRAIN, n > OL_PAR_MIN, bin_range, &j);
        return;
    }
    int64_t m = ma == n ? mb : ma, R = n / m;   /* the repeating operand has m elements */
    int a_rep = ma != n;
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *x = a_rep ? A : A + r * m, *z = a_rep ? B + r * m : B;
        float *out = o + r * m;
        switch (op) {
        case BIN_ADD: for (int64_t j = 0; j < m; j++) out[j] = x[j] + z[j]; break;
        case BIN_SUB: for (int64_t j = 0; j < m; j++) out[j] = x[j] - z[j]; break;
        case BIN_MUL: for (int64_t j = 0; j < m; j++) out[j] = x[j] * z[j]; break;
        default:      for (int64_t j = 0; j < m; j++) out[j] = x[j] / z[j]; break;
        }
    }
}

static ol_tensor *binary(int op, ol_tensor *a, ol_tensor *b) {
    const char *name = bin_names[op];
    if (ol__check_f32(name, a) || ol__check_f32(name, b)) return NULL;
    if (a->ctx != b->ctx) OL_FAIL("%s: '%s' and '%s' belong to different contexts", name, a->name, b->name);
    int64_t inner;
    if (broadcast_plan(name, a, b, &inner) != 0) return NULL;
    const ol_tensor *big = a->numel >= b->numel ? a : b;
    ol_tensor *y = ol__new(a->ctx, OL_F32, big->ndim, big->shape, name);
    if (!y) return NULL;
    int64_t n = y->numel;
    if (n > 0) binary_fwd(op, a, b, y->data, n);
    ol_tensor *ins[2] = { a, b };
    if (ol__needs_grad(a->ctx, 2, ins)) {
        ol_node *nd = ol__record(name, binary_backward, y, 2, ins);
        if (!nd) return NULL;
        nd->iarg[0] = op;
        nd->write_first = 1;
    }
    return y;
}

ol_tensor *ol_add(ol_tensor *a, ol_tensor *b) { return binary(BIN_ADD, a, b); }
ol_tensor *ol_sub(ol_tensor *a, ol_tensor *b) { return binary(BIN_SUB, a, b); }
ol_tensor *ol_mul(ol_tensor *a, ol_tensor *b) { return binary(BIN_MUL, a, b); }
ol_tensor *ol_div(ol_tensor *a, ol_tensor *b) { return binary(BIN_DIV, a, b); }

/* ------------------------------------------------------------- y = s·a + c */
static void affine_backward(ol_node *nd) {
    ol_tensor *a = nd->in[0];
    float s = nd->farg[0];
    const float *g = nd->out->grad;
    float *da = a->grad;
    int64_t n = a->numel;
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) da[i] += s * g[i];
}

ol_tensor *ol_affine_scalar(ol_tensor *a, float s, float c) {
    if (ol__check_f32("affine_scalar", a)) return NULL;
    ol_tensor *y = ol__new(a->ctx, OL_F32, a->ndim, a->shape, "affine_scalar");
    if (!y) return NULL;
    int64_t n = a->numel;
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y->data[i] = s * a->data[i] + c;
    if (ol__needs_grad(a->ctx, 1, &a)) {
        ol_node *nd = ol__record("affine_scalar", affine_backward, y, 1, &a);
        if (!nd) return NULL;
        nd->farg[0] = s;
    }
    return y;
}

/* ------------------------------------------------------------- unary */
static const char *un_names[] = { "exp", "log", "sqrt", "relu", "gelu_tanh", "gelu_erf",
                                  "silu", "sigmoid", "tanh", "neg", "square", "abs" };
#define GELU_K 0.7978845608028654f   /* sqrt(2/pi) */

static inline float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

static inline float un_fwd(int op, float x) {
    switch (op) {
    case OL_EXP: return expf(x);
    case OL_LOG: return logf(x);
    case OL_SQRT: return sqrtf(x);
    case OL_RELU: return x > 0 ? x : 0;
    case OL_GELU_TANH: return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    case OL_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    case OL_SILU: return x * sigm(x);
    case OL_SIGMOID: return sigm(x);
    case OL_TANH: return tanhf(x);
    case OL_NEG: return -x;
    case OL_SQUARE: return x * x;
    default: return fabsf(x);
    }
}

/* dy/dx at input x with output y */
static inline float un_bwd(int op, float x, float y) {
    switch (op) {
    case OL_EXP: return y;
    case OL_LOG: return 1.0f / x;
    case OL_SQRT: return 0.5f / y;
    case OL_RELU: return x > 0 ? 1.0f : 0.0f;
    case OL_GELU_TANH: {
        float u = GELU_K * (x + 0.044715f * x * x * x), th = tanhf(u);
        return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    }
    case OL_GELU_ERF:
        return 0.5f * (1.0f + erff(x * 0.7071067811865476f)) + x * 0.3989422804014327f * expf(-0.5f * x * x);
    case OL_SILU: { float s = sigm(x); return s * (1.0f + x * (1.0f - s)); }
    case OL_SIGMOID: return y * (1.0f - y);
    case OL_TANH: return 1.0f - y * y;
    case OL_NEG: return -1.0f;
    case OL_SQUARE: return 2.0f * x;
    default: return x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f;
    }
}

/* ---- GELU (tanh form) as one vectorisable loop: the hottest elementwise op of training.
 * 0.5·x·(1 + tanh(u)) = x·σ(2u) with u = √(2/π)(x + 0.044715x³), since 1 + tanh(u) = 2σ(2u)
 * (no cancellation near u = 0, unlike 1 − 2/(1+e^{2u})). d/dx = σ + 2xσ(1−σ)·u′(x) with
 * u′ = √(2/π)(1 + 3·0.044715x²) — the same derivative as un_bwd's tanh form, rewritten.
 * e^x is ol__expf (internal.h): plain float arithmetic, so GCC vectorises the loops; above
 * 88.3 it is +inf (then gelu(x) = x/(1+inf) = −0 for very negative x, as the tanh form).
 * tests/lua/test_train_kernels.lua compares it with the libm formula of un_fwd/un_bwd (the
 * reference). */

static void gelu_tanh_fwd(const float *x, float *o, int64_t n) {
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float xi = x[i];
        float u2 = 2.0f * GELU_K * (xi + 0.044715f * xi * xi * xi);
        o[i] = xi / (1.0f + ol__expf(-u2));
    }
}

static inline float gelu_tanh_d(float xi) {
    float u2 = 2.0f * GELU_K * (xi + 0.044715f * xi * xi * xi);
    float s = 1.0f / (1.0f + ol__expf(-u2));
    /* |x| > 1e4: s(1−s) is exactly 0; the clamp keeps u′ finite so 0·u′ is not NaN */
    float xc = ol__clampf(xi, -1e4f, 1e4f);   /* the blend: a nested select keeps the loop scalar */
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * xc * xc);
    return s + 2.0f * xi * s * (1.0f - s) * du;
}
static void gelu_tanh_bwd(const float *x, const float *g, float *da, int64_t n, int fresh) {
    OL_GRAD_LOOP(fresh, n, da, g[i] * gelu_tanh_d(x[i]));
}

/* ---- SiLU x·σ(x) (LLaMA's SwiGLU) and σ(x) the same way, with ol__expf: σ = 1/(1 + e^{−x})
 * (e^{−x} = +inf for x < −88.3 gives σ = 0 and silu = −0, as the libm form); d silu/dx =
 * σ(1 + x(1 − σ)), dσ/dx = σ(1 − σ). */
static void silu_fwd(const float *x, float *o, int64_t n, int sigmoid_only) {
    /* two loops, not `sigmoid_only ? s : x·s` in one: a conditional product is not if-converted
     * under trapping math without masked vector operations (AVX2), so that loop stayed scalar */
    if (sigmoid_only) {
        #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
        for (int64_t i = 0; i < n; i++) o[i] = 1.0f / (1.0f + ol__expf(-x[i]));
    } else {
        #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
        for (int64_t i = 0; i < n; i++) o[i] = x[i] * (1.0f / (1.0f + ol__expf(-x[i])));
    }
}

/* d silu/dx = σ(1 + x(1 − σ)) */
static inline float silu_d(float x) {
    float s = 1.0f / (1.0f + ol__expf(-x));
    return s * (1.0f + x * (1.0f - s));
}
static inline float sigmoid_d(float x) {
    float s = 1.0f / (1.0f + ol__expf(-x));
    return s * (1.0f - s);
}
static void silu_bwd(const float *x, const float *g, float *da, int64_t n, int sigmoid_only, int fresh) {
    if (sigmoid_only) OL_GRAD_LOOP(fresh, n, da, g[i] * sigmoid_d(x[i]));
    else              OL_GRAD_LOOP(fresh, n, da, g[i] * silu_d(x[i]));
}

/* ---- GELU, erf form (BERT's and the ViT's): 0.5·x·(1 + erf(x/√2)). Under grad the forward
 * keeps 1 + erf(x/√2) of every element (nd->saved) for the backward, which would otherwise
 * compute erf again. erf and e^x are libm's erff and expf bit for bit, but vectorised
 * (engine/libm_exact.c): block by block, the products into a buffer, the function over the
 * buffer, then the rest; the same bits as un_fwd / un_bwd's libm formula
 * (tests/lua/test_train_kernels.lua; tests/c/test_libm_exact.c). */
#define GELU_BLK 512
static void gelu_erf_fwd(const float *x, float *o, float *keep, int64_t n) {
    int64_t nb = (n + GELU_BLK - 1) / GELU_BLK;
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        float u[GELU_BLK], e[GELU_BLK];
        int64_t i0 = b * GELU_BLK, m = n - i0 < GELU_BLK ? n - i0 : GELU_BLK;
        const float *xb = x + i0;
        for (int64_t j = 0; j < m; j++) u[j] = xb[j] * 0.7071067811865476f;
        ol__erff_n(u, e, m);
        for (int64_t j = 0; j < m; j++) {
            float e1 = 1.0f + e[j];
            if (keep) keep[i0 + j] = e1;
            o[i0 + j] = 0.5f * xb[j] * e1;
        }
    }
}
static void gelu_erf_bwd(const float *x, const float *e1, const float *g, float *da, int64_t n, int fresh) {
    int64_t nb = (n + GELU_BLK - 1) / GELU_BLK;
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        float t[GELU_BLK], e[GELU_BLK];
        int64_t i0 = b * GELU_BLK, m = n - i0 < GELU_BLK ? n - i0 : GELU_BLK;
        const float *xb = x + i0, *eb = e1 + i0, *gb = g + i0;
        float *db = da + i0;
        for (int64_t j = 0; j < m; j++) t[j] = -0.5f * xb[j] * xb[j];
        ol__expf_n(t, e, m);
        if (fresh) for (int64_t j = 0; j < m; j++) db[j] = 0.0f + gb[j] * (0.5f * eb[j] + xb[j] * 0.3989422804014327f * e[j]);
        else       for (int64_t j = 0; j < m; j++) db[j] += gb[j] * (0.5f * eb[j] + xb[j] * 0.3989422804014327f * e[j]);
    }
}

static void unary_backward(ol_node *nd) {
    ol_tensor *a = nd->in[0], *y = nd->out;
    int op = nd->iarg[0];
    int64_t n = a->numel;
    const float *x = a->data, *yv = y->data, *g = y->grad;
    float *da = a->grad;
    int fresh = ol__grad_first(a);
    if (op == OL_GELU_TANH) { gelu_tanh_bwd(x, g, da, n, fresh); return; }
    if (op == OL_SILU || op == OL_SIGMOID) { silu_bwd(x, g, da, n, op == OL_SIGMOID, fresh); return; }
    if (op == OL_GELU_ERF && nd->saved) { gelu_erf_bwd(x, nd->saved, g, da, n, fresh); return; }
    if (fresh) {
        #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
        for (int64_t i = 0; i < n; i++) da[i] = 0.0f + g[i] * un_bwd(op, x[i], yv[i]);
    } else {
        #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
        for (int64_t i = 0; i < n; i++) da[i] += g[i] * un_bwd(op, x[i], yv[i]);
    }
}

ol_tensor *ol_unary(ol_tensor *a, int32_t op) {
    if (op < 0 || op > OL_ABS) OL_FAIL("unary: unknown op %d", op);
    const char *name = un_names[op];
    if (ol__check_f32(name, a)) return NULL;
    ol_tensor *y = ol__new(a->ctx, OL_F32, a->ndim, a->shape, name);
    if (!y) return NULL;
    int64_t n = a->numel;
    const float *x = a->data;
    float *o = y->data;
    int grad = ol__needs_grad(a->ctx, 1, &a);
    float *keep = NULL;
    if (op == OL_GELU_ERF && grad) {
        keep = ol__step_alloc(a->ctx, n * 4, "gelu_erf");
        if (!keep) return NULL;
    }
    if (op == OL_GELU_TANH) gelu_tanh_fwd(x, o, n);
    else if (op == OL_GELU_ERF) gelu_erf_fwd(x, o, keep, n);
    else if (op == OL_SILU || op == OL_SIGMOID) silu_fwd(x, o, n, op == OL_SIGMOID);
    else {
        #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
        for (int64_t i = 0; i < n; i++) o[i] = un_fwd(op, x[i]);
    }
    if (grad) {
        ol_node *nd = ol__record(name, unary_backward, y, 1, &a);
        if (!nd) return NULL;
        nd->iarg[0] = op;
        nd->saved = keep;
        nd->write_first = 1;
    }
    return y;
}

/* ------------------------------------------------------------- dropout */
static inline float drop_scale(uint64_t seed, int64_t i, float p) {
    return ol__u01(seed, (uint64_t)i) < p ? 0.0f : 1.0f / (1.0f - p);
}

static void dropout_backward(ol_node *nd) {
    ol_tensor *a = nd->in[0];
    float p = nd->farg[0];
    uint64_t seed = nd->uarg;
    const float *g = nd->out->grad;
    int64_t n = a->numel;
    float *da = a->grad;
    OL_GRAD_LOOP(ol__grad_first(a), n, da, g[i] * drop_scale(seed, i, p));
}

ol_tensor *ol_dropout(ol_tensor *a, float p, uint64_t seed) {
    if (ol__check_f32("dropout", a)) return NULL;
    if (!(p >= 0.0f && p < 1.0f)) OL_FAIL("dropout: p = %g not in [0, 1) for '%s' %s", p, a->name, OL_SHAPE(a));
    ol_tensor *y = ol__new(a->ctx, OL_F32, a->ndim, a->shape, "dropout");
    if (!y) return NULL;
    int64_t n = a->numel;
    #pragma omp parallel for schedule(static) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y->data[i] = a->data[i] * drop_scale(seed, i, p);
    if (ol__needs_grad(a->ctx, 1, &a)) {
        ol_node *nd = ol__record("dropout", dropout_backward, y, 1, &a);
        if (!nd) return NULL;
        nd->write_first = 1;
        nd->farg[0] = p;
        nd->uarg = seed;
    }
    return y;
}
