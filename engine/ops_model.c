/*
 * ops_model.c — ops that only the model families need: rotary position embedding (RoPE)
 * for the LLaMA family. Forward and backward side by side.
 */
#include "internal.h"
#include <omp.h>

/* ------------------------------------------------------------- rope */
/* Rotary position embedding (Su et al. 2021, "RoFormer", eq. 34), in the rotate-half
 * layout of GPT-NeoX / Hugging Face LLaMA / lit-gpt (TinyLlama): channel i is paired with
 * channel i + HD/2.
 *   x (..., T, HD), HD even, H = HD/2, position of row t is p = t + pos_offset,
 *   θ_i = base^(−2i/HD), a = p·θ_i (computed in double):
 *   y[i]   = x[i]·cos a − x[i+H]·sin a
 *   y[i+H] = x[i+H]·cos a + x[i]·sin a          (i < H)
 * The map is a rotation per (t, i) pair, so the backward is the inverse rotation:
 *   dx[i]   +=  dy[i]·cos a + dy[i+H]·sin a
 *   dx[i+H] += −dy[i]·sin a + dy[i+H]·cos a
 * The (T, H) cos/sin tables live in the step arena and are reused by the backward. */
typedef struct { float *cos, *sin; int64_t T, H; } rope_saved;

/* the (T, H) cos/sin tables of positions pos_offset … pos_offset+T−1, in the step arena */
static rope_saved *rope_tables(ol_ctx *ctx, int64_t T, int64_t HD, float base, int64_t pos_offset) {
    int64_t H = HD / 2;
    rope_saved *rs = ol__step_alloc(ctx, sizeof *rs, "rope");
    float *ct = ol__step_alloc(ctx, T * H * 4, "rope"), *st = ol__step_alloc(ctx, T * H * 4, "rope");
    if (!rs || !ct || !st) return NULL;
    for (int64_t i = 0; i < H; i++) {
        double theta = pow((double)base, -2.0 * (double)i / (double)HD);
        for (int64_t t = 0; t < T; t++) {
            double a = (double)(t + pos_offset) * theta;
            ct[t * H + i] = (float)cos(a);
            st[t * H + i] = (float)sin(a);
        }
    }
    *rs = (rope_saved){ ct, st, T, H };
    return rs;
}

/* one row of 2H channels at table row t: y = rotation of x (inverse: by −a); add: 0 stores,
 * 1 adds, 2 stores 0.0f + value (a pending gradient, internal.h) */
static inline __attribute__((always_inline)) void rope_row(const float *restrict x, float *restrict y, const float *c,
                                                           const float *s, int64_t H, float sgn, const int add) {
    for (int64_t i = 0; i < H; i++) {
        float x0 = x[i], x1 = x[i + H], ci = c[i], si = sgn * s[i];
        float y0 = x0 * ci - x1 * si, y1 = x1 * ci + x0 * si;
        if (add == 1)      { y[i] += y0; y[i + H] += y1; }
        else if (add == 2) { y[i] = 0.0f + y0; y[i + H] = 0.0f + y1; }
        else               { y[i] = y0;  y[i + H] = y1; }
    }
}

static void rope_apply(const float *src, float *dst, const rope_saved *rs, int64_t rows, int inverse, int add) {
    int64_t T = rs->T, H = rs->H;
    float sgn = inverse ? -1.0f : 1.0f;
    #pragma omp parallel for schedule(static) if (rows * 2 * H > OL_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = r % T;
        const float *x = src + r * 2 * H, *c = rs->cos + t * H, *s = rs->sin + t * H;
        float *y = dst + r * 2 * H;
        if (add == 0)      rope_row(x, y, c, s, H, sgn, 0);
        else if (add == 1) rope_row(x, y, c, s, H, sgn, 1);
        else               rope_row(x, y, c, s, H, sgn, 2);
    }
}

static void rope_backward(ol_node *nd) {
    ol_tensor *x = nd->in[0];
    rope_saved *rs = nd->saved;
    rope_apply(nd->out->grad, x->grad, rs, x->numel / (2 * rs->H), 1, ol__grad_first(x) ? 2 : 1);
}

ol_tensor *ol_rope(ol_tensor *x, float base, int64_t pos_offset) {
    if (ol__check_f32("rope", x)) return NULL;
    if (x->ndim < 2) OL_FAIL("rope: input '%s' %s must have at least 2 dims (..., T, HD)", x->name, OL_SHAPE(x));
    int64_t T = x->shape[x->ndim - 2], HD = x->shape[x->ndim - 1];
    if (HD < 2 || HD % 2 != 0) OL_FAIL("rope: head dim %lld of '%s' %s must be even", (long long)HD, x->name, OL_SHAPE(x));
    if (!(base > 1.0f)) OL_FAIL("rope: base %g must be > 1 (input '%s' %s)", (double)base, x->name, OL_SHAPE(x));
    if (pos_offset < 0) OL_FAIL("rope: negative position offset %lld for '%s' %s", (long long)pos_offset, x->name, OL_SHAPE(x));
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, x->shape, "rope");
    rope_saved *rs = rope_tables(x->ctx, T, HD, base, pos_offset);
    if (!y || !rs) return NULL;
    rope_apply(x->data, y->data, rs, x->numel / HD, 0, 0);
    if (ol__needs_grad(x->ctx, 1, &x)) {
        ol_node *n = ol__record("rope", rope_backward, y, 1, &x);
        if (!n) return NULL;
        n->write_first = 1;
        n->saved = rs;
    }
    return y;
}

/* ------------------------------------------------------------- heads
 * ol_heads = view (B,T,NH,HD) + transpose(1,2) [+ RoPE], ol_heads_merge = transpose(1,2) +
 * view, in one pass each way. The arithmetic is that of the chain: RoPE's rotation of each
 * row (rope_row), copies otherwise; backward, the chain's gradient of x is the inverse
 * rotation of dy stored as 0.0f + value into a zero-filled buffer and copied twice, which is
 * 0.0f + value, and then added to x's gradient (or stored, when pending). */
typedef struct { int64_t B, T, NH, HD; rope_saved *rs; } heads_saved;

/* (B,T,NH,HD) <-> (B,NH,T,HD): row (b,t,h) of the first is row (b,h,t) of the second.
 * to_heads: src is (B,T,NH,HD); rs: rotate the rows (sgn); add as rope_row (copies: 0 or 1). */
typedef struct { const heads_saved *d; const float *src; float *dst; int to_heads; float sgn; int add; } heads_job;
static void heads_rows(void *arg, int64_t bt0, int64_t bt1) {
    const heads_job *j = arg;
    const heads_saved *d = j->d;
    const float *src = j->src;
    float *dst = j->dst;
    int to_heads = j->to_heads, add = j->add;
    float sgn = j->sgn;
    int64_t T = d->T, NH = d->NH, HD = d->HD;
    for (int64_t bt = bt0; bt < bt1; bt++) {
        int64_t b = bt / T, t = bt % T;
        for (int64_t h = 0; h < NH; h++) {
            const float *x = src + (to_heads ? (bt * NH + h) * HD : ((b * NH + h) * T + t) * HD);
            float *y = dst + (to_heads ? ((b * NH + h) * T + t) * HD : (bt * NH + h) * HD);
            if (d->rs) {   /* each call its own specialisation of add */
                const float *cs = d->rs->cos + t * d->rs->H, *sn = d->rs->sin + t * d->rs->H;
                if (add == 0)      rope_row(x, y, cs, sn, d->rs->H, sgn, 0);
                else if (add == 1) rope_row(x, y, cs, sn, d->rs->H, sgn, 1);
                else               rope_row(x, y, cs, sn, d->rs->H, sgn, 2);
            } else if (add) {
                for (int64_t c = 0; c < HD; c++) y[c] += x[c];
            } else {
                memcpy(y, x, (size_t)HD * 4);
            }
        }
    }
}
static void heads_move(const heads_saved *d, const float *src, float *dst, int to_heads, float sgn, int add) {
    int64_t B = d->B, T = d->T, NH = d->NH, HD = d->HD, row = NH * HD > 0 ? NH * HD : 1;
    heads_job j = { d, src, dst, to_heads, sgn, add };
    ol__par_range(B * T, OL_PAR_GRAIN / row > 0 ? OL_PAR_GRAIN / row : 1, B * T * NH * HD > OL_PAR_MIN, heads_rows, &j);
}

static void heads_backward(ol_node *nd) {
    ol_tensor *x = nd->in[0];
    int fresh = ol__grad_first(x);
    heads_move(nd->saved, nd->out->grad, x->grad, 0, -1.0f, ((heads_saved *)nd->saved)->rs ? (fresh ? 2 : 1) : !fresh);
}

ol_tensor *ol_heads(ol_tensor *x, int64_t n_head, float rope_base, int64_t pos_offset) {
    if (ol__check_f32("heads", x)) return NULL;
    if (x->ndim != 3) OL_FAIL("heads: input '%s' %s must be (B,T,NH·HD)", x->name, OL_SHAPE(x));
    if (n_head < 1 || x->shape[2] % n_head != 0)
        OL_FAIL("heads: %lld heads do not divide the last dim of '%s' %s", (long long)n_head, x->name, OL_SHAPE(x));
    int64_t B = x->shape[0], T = x->shape[1], HD = x->shape[2] / n_head;
    int rope = rope_base != 0.0f;
    if (rope && (HD < 2 || HD % 2 != 0)) OL_FAIL("heads: head dim %lld of '%s' %s must be even for RoPE", (long long)HD, x->name, OL_SHAPE(x));
    if (rope && !(rope_base > 1.0f)) OL_FAIL("heads: RoPE base %g must be > 1 (input '%s' %s)", (double)rope_base, x->name, OL_SHAPE(x));
    if (pos_offset < 0) OL_FAIL("heads: negative position offset %lld for '%s' %s", (long long)pos_offset, x->name, OL_SHAPE(x));
    int64_t shape[4] = { B, n_head, T, HD };
    ol_tensor *y = ol__new(x->ctx, OL_F32, 4, shape, "heads");
    heads_saved *d = ol__step_alloc(x->ctx, sizeof *d, "heads");
    if (!y || !d) return NULL;
    *d = (heads_saved){ B, T, n_head, HD, NULL };
    if (rope && !(d->rs = rope_tables(x->ctx, T, HD, rope_base, pos_offset))) return NULL;
    heads_move(d, x->data, y->data, 1, 1.0f, 0);
    if (ol__needs_grad(x->ctx, 1, &x)) {
        ol_node *n = ol__record("heads", heads_backward, y, 1, &x);
        if (!n) return NULL;
        n->saved = d;
        n->write_first = 1;
    }
    return y;
}

static void heads_merge_backward(ol_node *nd) {
    ol_tensor *y = nd->in[0];
    heads_move(nd->saved, nd->out->grad, y->grad, 1, 1.0f, !ol__grad_first(y));
}

ol_tensor *ol_heads_merge(ol_tensor *y) {
    if (ol__check_f32("heads_merge", y)) return NULL;
    if (y->ndim != 4) OL_FAIL("heads_merge: input '%s' %s must be (B,NH,T,HD)", y->name, OL_SHAPE(y));
    int64_t B = y->shape[0], NH = y->shape[1], T = y->shape[2], HD = y->shape[3];
    int64_t shape[3] = { B, T, NH * HD };
    ol_tensor *x = ol__new(y->ctx, OL_F32, 3, shape, "heads_merge");
    heads_saved *d = ol__step_alloc(y->ctx, sizeof *d, "heads_merge");
    if (!x || !d) return NULL;
    *d = (heads_saved){ B, T, NH, HD, NULL };
    heads_move(d, y->data, x->data, 0, 1.0f, 0);
    if (ol__needs_grad(y->ctx, 1, &y)) {
        ol_node *n = ol__record("heads_merge", heads_merge_backward, x, 1, &y);
        if (!n) return NULL;
        n->saved = d;
        n->write_first = 1;
    }
    return x;
}

/* ------------------------------------------------------------- swiglu
 * h = silu(g)·u with silu(g) = g·σ(g), σ = 1/(1 + e^{−g}) (ol__expf), as ol_unary(OL_SILU)
 * followed by ol_mul. Backward as that pair: the mul's gradients first, dsilu = 0.0f + dh·u
 * (a zero-filled buffer plus the product) and du (+)= dh·silu(g), then dg (+)= dsilu·σ(1 +
 * g(1 − σ)); silu(g) and σ are recomputed, not stored. */
static inline float swiglu_sig(float g) { return 1.0f / (1.0f + ol__expf(-g)); }

/* elements [i0, i1) with constant flags (each call below is its own specialisation, so the
 * loop vectorises): nu/ng whether u/g need a gradient, fu/fg whether it is pending (stored) */
static inline __attribute__((always_inline)) void swiglu_bwd_span(
        const float *restrict dh, const float *restrict G, const float *restrict U, float *du, float *dg,
        int64_t i0, int64_t i1, const int nu, const int ng, const int fu, const int fg) {
    #pragma omp simd
    for (int64_t i = i0; i < i1; i++) {
        float x = G[i], s = swiglu_sig(x);
        if (nu) du[i] = (fu ? 0.0f : du[i]) + dh[i] * (x * s);
        if (ng) dg[i] = (fg ? 0.0f : dg[i]) + (0.0f + dh[i] * U[i]) * (s * (1.0f + x * (1.0f - s)));
    }
}

typedef struct { const float *dh, *G, *U; float *du, *dg; int kind, fu; } swiglu_bwd;
static void swiglu_bwd_range(void *arg, int64_t i0, int64_t i1) {
    const swiglu_bwd *j = arg;
    const float *dh = j->dh, *G = j->G, *U = j->U;
    float *du = j->du, *dg = j->dg;
    int fu = j->fu;
    switch (j->kind) {
    case 0: swiglu_bwd_span(dh, G, U, du, dg, i0, i1, 1, 0, fu, 0);
            swiglu_bwd_span(dh, G, U, du, dg, i0, i1, 0, 1, 0, 0); break;
    case 1: swiglu_bwd_span(dh, G, U, du, dg, i0, i1, 1, 1, 0, 0); break;
    case 2: swiglu_bwd_span(dh, G, U, du, dg, i0, i1, 1, 1, 0, 1); break;
    case 3: swiglu_bwd_span(dh, G, U, du, dg, i0, i1, 1, 1, 1, 0); break;
    case 4: swiglu_bwd_span(dh, G, U, du, dg, i0, i1, 1, 1, 1, 1); break;
    case 5: swiglu_bwd_span(dh, G, U, du, dg, i0, i1, 1, 0, 0, 0); break;
    case 6: swiglu_bwd_span(dh, G, U, du, dg, i0, i1, 1, 0, 1, 0); break;
    case 7: swiglu_bwd_span(dh, G, U, du, dg, i0, i1, 0, 1, 0, 0); break;
    case 8: swiglu_bwd_span(dh, G, U, du, dg, i0, i1, 0, 1, 0, 1); break;
    default: break;
    }
}

static void swiglu_backward(ol_node *nd) {
    ol_tensor *g = nd->in[0], *u = nd->in[1];
    const float *dh = nd->out->grad, *G = g->data, *U = u->data;
    int64_t n = g->numel;
    int nu = u->requires_grad, ng = g->requires_grad;
    int fu = nu && ol__grad_first(u), fg = ng && ol__grad_first(g);   /* u first, as the mul */
    float *du = nu ? u->grad : NULL, *dg = ng ? g->grad : NULL;
    /* g == u (silu(x)·x): u's pass, then g's adding to it */
    int kind = g == u ? 0 : nu && ng ? 1 + 2 * fu + fg : nu ? 5 + fu : ng ? 7 + fg : -1;
    swiglu_bwd j = { dh, G, U, du, dg, kind, fu };
    ol__par_range(n, 4096, n > OL_PAR_MIN, swiglu_bwd_range, &j);
}

typedef struct { const float *G, *U; float *H; } swiglu_fwd;
static void swiglu_fwd_range(void *arg, int64_t i0, int64_t i1) {
    const swiglu_fwd *j = arg;
    const float *restrict G = j->G, *restrict U = j->U;
    float *restrict H = j->H;
    #pragma omp simd
    for (int64_t i = i0; i < i1; i++) {
        float o = G[i] * swiglu_sig(G[i]);
        H[i] = o * U[i];
    }
}

ol_tensor *ol_swiglu(ol_tensor *g, ol_tensor *u) {
    if (ol__check_f32("swiglu", g) || ol__check_f32("swiglu", u)) return NULL;
    int same = g->ndim == u->ndim && g->numel == u->numel;
    for (int i = 0; same && i < g->ndim; i++) same = g->shape[i] == u->shape[i];
    if (!same) OL_FAIL("swiglu: gate '%s' %s and up '%s' %s must have one shape", g->name, OL_SHAPE(g), u->name, OL_SHAPE(u));
    ol_tensor *h = ol__new(g->ctx, OL_F32, g->ndim, g->shape, "swiglu");
    if (!h) return NULL;
    int64_t n = g->numel;
    const float *G = g->data, *U = u->data;
    float *H = h->data;
    swiglu_fwd j = { G, U, H };
    ol__par_range(n, OL_PAR_GRAIN, n > OL_PAR_MIN, swiglu_fwd_range, &j);
    ol_tensor *ins[2] = { g, u };
    if (ol__needs_grad(g->ctx, 2, ins)) {
        ol_node *nd = ol__record("swiglu", swiglu_backward, h, 2, ins);
        if (!nd) return NULL;
        nd->write_first = 1;
    }
    return h;
}
