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

static void rope_apply(const float *src, float *dst, const rope_saved *rs, int64_t rows, int inverse, int add) {
    int64_t T = rs->T, H = rs->H;
    float sgn = inverse ? -1.0f : 1.0f;
    #pragma omp parallel for schedule(static) if (rows * 2 * H > OL_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = r % T;
        const float *x = src + r * 2 * H, *c = rs->cos + t * H, *s = rs->sin + t * H;
        float *y = dst + r * 2 * H;
        for (int64_t i = 0; i < H; i++) {
            float x0 = x[i], x1 = x[i + H], ci = c[i], si = sgn * s[i];
            float y0 = x0 * ci - x1 * si, y1 = x1 * ci + x0 * si;
            if (add == 1)      { y[i] += y0; y[i + H] += y1; }
            else if (add == 2) { y[i] = 0.0f + y0; y[i + H] = 0.0f + y1; }   /* a pending gradient */
            else               { y[i] = y0;  y[i + H] = y1; }
        }
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
    int64_t H = HD / 2;
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, x->shape, "rope");
    rope_saved *rs = ol__step_alloc(x->ctx, sizeof *rs, "rope");
    float *ct = ol__step_alloc(x->ctx, T * H * 4, "rope"), *st = ol__step_alloc(x->ctx, T * H * 4, "rope");
    if (!y || !rs || !ct || !st) return NULL;
    for (int64_t i = 0; i < H; i++) {
        double theta = pow((double)base, -2.0 * (double)i / (double)HD);
        for (int64_t t = 0; t < T; t++) {
            double a = (double)(t + pos_offset) * theta;
            ct[t * H + i] = (float)cos(a);
            st[t * H + i] = (float)sin(a);
        }
    }
    *rs = (rope_saved){ ct, st, T, H };
    rope_apply(x->data, y->data, rs, x->numel / HD, 0, 0);
    if (ol__needs_grad(x->ctx, 1, &x)) {
        ol_node *n = ol__record("rope", rope_backward, y, 1, &x);
        if (!n) return NULL;
        n->write_first = 1;
        n->saved = rs;
    }
    return y;
}
