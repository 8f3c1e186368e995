/*
 * ops_shape.c — reshape (a view sharing data), transpose of two dims, narrow (a slice along
 * one dim: row slices and split are narrows), concat along a dim, and embedding lookup.
 * Every op but reshape copies; all are exact, so their gradient checks are tight.
 */
#include "internal.h"
#include <omp.h>

static int norm_dim(const char *op, const ol_tensor *a, int32_t *dim) {
    int32_t d = *dim < 0 ? *dim + a->ndim : *dim;
    if (d < 0 || d >= a->ndim) OL_FAIL_INT("%s: dim %d out of range for '%s' %s", op, *dim, a->name, OL_SHAPE(a));
    *dim = d;
    return 0;
}

/* (outer, n_d, inner) view of a around dim d */
static void split3(const ol_tensor *a, int32_t d, int64_t *outer, int64_t *inner) {
    *outer = 1; *inner = 1;
    for (int i = 0; i < d; i++) *outer *= a->shape[i];
    for (int i = d + 1; i < a->ndim; i++) *inner *= a->shape[i];
}

/* ------------------------------------------------------------- reshape */
static void reshape_backward(ol_node *nd) {
    ol_tensor *a = nd->in[0];
    const float *g = nd->out->grad;
    float *da = a->grad;
    int64_t n = a->numel;
    if (ol__grad_first(a)) {   /* a pending gradient: a copy (internal.h) */
        #pragma omp parallel for simd schedule(static) if (n > OL_PAR_MIN)
        for (int64_t i = 0; i < n; i++) da[i] = g[i];
    } else {
        #pragma omp parallel for simd schedule(static) if (n > OL_PAR_MIN)
        for (int64_t i = 0; i < n; i++) da[i] += g[i];
    }
}

ol_tensor *ol_reshape(ol_tensor *a, int32_t ndim, const int64_t *shape) {
    if (ol__check_live("reshape", a)) return NULL;
    if (ndim < 1 || ndim > 4) OL_FAIL("reshape: ndim %d not in 1..4 for '%s' %s", ndim, a->name, OL_SHAPE(a));
    int64_t s[4], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1) {
            if (infer >= 0) OL_FAIL("reshape: more than one -1 in the new shape of '%s' %s", a->name, OL_SHAPE(a));
            infer = i;
        } else if (s[i] < 0) OL_FAIL("reshape: negative dim %lld for '%s' %s", (long long)s[i], a->name, OL_SHAPE(a));
        else known *= s[i];
    }
    if (infer >= 0) s[infer] = known ? a->numel / known : 0;
    int64_t n = ol__numel(ndim, s);
    if (n != a->numel) {
        ol_tensor tmp = { .ndim = ndim };
        for (int i = 0; i < ndim; i++) tmp.shape[i] = shape[i];
        OL_FAIL("reshape: cannot view '%s' %s (%lld elements) as %s", a->name, OL_SHAPE(a), (long long)a->numel, OL_SHAPE(&tmp));
    }
    ol_tensor *y = ol__step_header(a->ctx, "reshape");
    if (!y) return NULL;
    *y = *a;
    y->ndim = ndim;
    for (int i = 0; i < 4; i++) y->shape[i] = i < ndim ? s[i] : 0;
    y->grad = NULL;
    y->grad_pending = 0;
    y->requires_grad = 0;
    y->param_index = -1;
    y->gen = a->ctx->gen;   /* a view lives no longer than the step */
    if (ol__needs_grad(a->ctx, 1, &a)) {
        ol_node *nd = ol__record("reshape", reshape_backward, y, 1, &a);
        if (!nd) return NULL;
        nd->write_first = 1;
    }
    return y;
}

/* ------------------------------------------------------------- transpose */
/* copy src (shape s, 4-D padded) into dst with dims d0, d1 swapped; add != 0 accumulates */
static void swap_copy(const float *src, float *dst, const int64_t *s, int d0, int d1, int add) {
    int64_t st[4], os[4], ost[4];
    st[3] = 1;
    for (int i = 2; i >= 0; i--) st[i] = st[i + 1] * s[i + 1];
    for (int i = 0; i < 4; i++) os[i] = s[i];
    os[d0] = s[d1]; os[d1] = s[d0];
    ost[3] = 1;
    for (int i = 2; i >= 0; i--) ost[i] = ost[i + 1] * os[i + 1];
    /* input stride for each output dim */
    int64_t ist[4];
    for (int i = 0; i < 4; i++) ist[i] = st[i];
    ist[d0] = st[d1]; ist[d1] = st[d0];
    int64_t n01 = os[0] * os[1];
    #pragma omp parallel for schedule(static) if (os[0] * os[1] * os[2] * os[3] > OL_PAR_MIN)
    for (int64_t ij = 0; ij < n01; ij++) {
        int64_t i = ij / os[1], j = ij % os[1];
        for (int64_t k = 0; k < os[2]; k++) {
            const float *sp = src + i * ist[0] + j * ist[1] + k * ist[2];
            float *dp = dst + i * ost[0] + j * ost[1] + k * ost[2];
            if (add) for (int64_t l = 0; l < os[3]; l++) dp[l] += sp[l * ist[3]];
            else     for (int64_t l = 0; l < os[3]; l++) dp[l] = sp[l * ist[3]];
        }
    }
}

static void pad4(const ol_tensor *t, int64_t *s) {
    int off = 4 - t->ndim;
    for (int i = 0; i < 4; i++) s[i] = i < off ? 1 : t->shape[i - off];
}

static void transpose_backward(ol_node *nd) {
    ol_tensor *y = nd->out, *a = nd->in[0];
    int64_t s[4];
    pad4(y, s);
    int off = 4 - y->ndim;
    /* a pending gradient is a copy (internal.h) */
    swap_copy(y->grad, a->grad, s, nd->iarg[0] + off, nd->iarg[1] + off, !ol__grad_first(a));
}

ol_tensor *ol_transpose(ol_tensor *a, int32_t d0, int32_t d1) {
    if (ol__check_f32("transpose", a) || norm_dim("transpose", a, &d0) || norm_dim("transpose", a, &d1)) return NULL;
    int64_t shape[4];
    for (int i = 0; i < a->ndim; i++) shape[i] = a->shape[i];
    shape[d0] = a->shape[d1]; shape[d1] = a->shape[d0];
    ol_tensor *y = ol__new(a->ctx, OL_F32, a->ndim, shape, "transpose");
    if (!y) return NULL;
    int64_t s[4];
    pad4(a, s);
    int off = 4 - a->ndim;
    swap_copy(a->data, y->data, s, d0 + off, d1 + off, 0);
    if (ol__needs_grad(a->ctx, 1, &a)) {
        ol_node *n = ol__record("transpose", transpose_backward, y, 1, &a);
        if (!n) return NULL;
        n->write_first = 1;
        n->iarg[0] = d0; n->iarg[1] = d1;
    }
    return y;
}

/* ------------------------------------------------------------- narrow */
/* y = a[..., start:start+length, ...] along dim; as (outer, n, inner) blocks */
static void narrow_backward(ol_node *nd) {
    ol_tensor *a = nd->in[0], *y = nd->out;
    int32_t d = nd->iarg[0];
    int64_t start = *(int64_t *)nd->saved, len = y->shape[d], outer, inner;
    split3(a, d, &outer, &inner);
    int64_t n = a->shape[d];
    #pragma omp parallel for schedule(static) if (y->numel > OL_PAR_MIN)
    for (int64_t o = 0; o < outer; o++) {
        float *dst = a->grad + (o * n + start) * inner;
        const float *src = y->grad + o * len * inner;
        for (int64_t i = 0; i < len * inner; i++) dst[i] += src[i];
    }
}

ol_tensor *ol_narrow(ol_tensor *a, int32_t dim, int64_t start, int64_t length) {
    if (ol__check_live("narrow", a) || norm_dim("narrow", a, &dim)) return NULL;
    int64_t n = a->shape[dim];
    if (start < 0 || length < 0 || start > n - length)
        OL_FAIL("narrow: [%lld, %lld) outside dim %d of size %lld of '%s' %s", (long long)start,
                (long long)(start + length), dim, (long long)n, a->name, OL_SHAPE(a));
    int64_t shape[4], outer, inner;
    for (int i = 0; i < a->ndim; i++) shape[i] = a->shape[i];
    shape[dim] = length;
    ol_tensor *y = ol__new(a->ctx, a->dtype, a->ndim, shape, "narrow");
    if (!y) return NULL;
    split3(a, dim, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        memcpy(y->data + o * length * inner, a->data + (o * n + start) * inner, (size_t)(length * inner) * 4);
    if (a->dtype == OL_F32 && ol__needs_grad(a->ctx, 1, &a)) {
        ol_node *nd = ol__record("narrow", narrow_backward, y, 1, &a);
        int64_t *s = ol__step_alloc(a->ctx, 8, "narrow");
        if (!nd || !s) return NULL;
        *s = start;
        nd->saved = s;
        nd->iarg[0] = dim;
    }
    return y;
}

/* ------------------------------------------------------------- concat */
/* Inputs are kept in a step-arena array (a node has room for 4 inputs only). */
typedef struct { int32_t n, dim; ol_tensor **ts; } concat_saved;

static void concat_backward(ol_node *nd) {
    concat_saved *cs = nd->saved;
    ol_tensor *y = nd->out;
    int64_t outer, inner, total = y->shape[cs->dim], off = 0;
    split3(y, cs->dim, &outer, &inner);
    for (int k = 0; k < cs->n; k++) {
        ol_tensor *t = cs->ts[k];
        int64_t len = t->shape[cs->dim];
        if (t->requires_grad && ol__grad(t))
            for (int64_t o = 0; o < outer; o++) {
                const float *src = y->grad + (o * total + off) * inner;
                float *dst = t->grad + o * len * inner;
                for (int64_t i = 0; i < len * inner; i++) dst[i] += src[i];
            }
        off += len;
    }
}

ol_tensor *ol_concat(int32_t n, ol_tensor **ts, int32_t dim) {
    if (n < 1 || !ts) OL_FAIL("concat: needs at least one tensor");
    for (int k = 0; k < n; k++) if (ol__check_live("concat", ts[k])) return NULL;
    ol_tensor *a = ts[0];
    if (norm_dim("concat", a, &dim)) return NULL;
    int64_t shape[4], total = 0;
    for (int i = 0; i < a->ndim; i++) shape[i] = a->shape[i];
    for (int k = 0; k < n; k++) {
        ol_tensor *t = ts[k];
        int ok = t->ndim == a->ndim && t->dtype == a->dtype;
        for (int i = 0; ok && i < a->ndim; i++) ok = i == dim || t->shape[i] == a->shape[i];
        if (!ok) OL_FAIL("concat: '%s' %s does not match '%s' %s outside dim %d", t->name, OL_SHAPE(t), a->name, OL_SHAPE(a), dim);
        total += t->shape[dim];
    }
    shape[dim] = total;
    ol_tensor *y = ol__new(a->ctx, a->dtype, a->ndim, shape, "concat");
    if (!y) return NULL;
    int64_t outer, inner, off = 0;
    split3(y, dim, &outer, &inner);
    for (int k = 0; k < n; k++) {
        int64_t len = ts[k]->shape[dim];
        for (int64_t o = 0; o < outer; o++)
            memcpy(y->data + (o * total + off) * inner, ts[k]->data + o * len * inner, (size_t)(len * inner) * 4);
        off += len;
    }
    if (a->dtype == OL_F32 && ol__needs_grad(a->ctx, n, ts)) {
        concat_saved *cs = ol__step_alloc(a->ctx, sizeof *cs, "concat");
        ol_tensor **copy = ol__step_alloc(a->ctx, (int64_t)n * (int64_t)sizeof *copy, "concat");
        if (!cs || !copy) return NULL;
        memcpy(copy, ts, (size_t)n * sizeof *copy);
        *cs = (concat_saved){ n, dim, copy };
        /* the node's in[] holds no inputs: concat_backward allocates their grads itself */
        ol_node *nd = ol__record("concat", concat_backward, y, 0, NULL);
        if (!nd) return NULL;
        nd->saved = cs;
    }
    return y;
}

/* ------------------------------------------------------------- embedding */
/* y[i, :] = table[ids[i], :];  backward: table.grad[ids[i], :] += dy[i, :] (serial over i) */
static void embedding_backward(ol_node *nd) {
    ol_tensor *ids = nd->in[0], *tab = nd->in[1];
    int64_t C = tab->shape[1];
    const float *g = nd->out->grad;
    #pragma omp parallel for schedule(static) if (nd->out->numel > OL_PAR_MIN)
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
        int64_t c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int64_t i = 0; i < ids->numel; i++) {
            float *dst = tab->grad + (int64_t)ids->idata[i] * C;
            const float *src = g + i * C;
            for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}

ol_tensor *ol_embedding(ol_tensor *ids, ol_tensor *tab) {
    if (ol__check_live("embedding", ids) || ol__check_f32("embedding", tab)) return NULL;
    if (ids->dtype != OL_I32) OL_FAIL("embedding: ids '%s' %s must be int32", ids->name, OL_SHAPE(ids));
    if (tab->ndim != 2) OL_FAIL("embedding: table '%s' %s must be 2-D (V, C)", tab->name, OL_SHAPE(tab));
    if (ids->ndim > 3) OL_FAIL("embedding: ids '%s' %s have more than 3 dims", ids->name, OL_SHAPE(ids));
    int64_t V = tab->shape[0], C = tab->shape[1];
    for (int64_t i = 0; i < ids->numel; i++)
        if (ids->idata[i] < 0 || ids->idata[i] >= V)
            OL_FAIL("embedding: id %d at position %lld is outside [0, %lld) of table '%s' %s",
                    ids->idata[i], (long long)i, (long long)V, tab->name, OL_SHAPE(tab));
    int64_t shape[4];
    for (int i = 0; i < ids->ndim; i++) shape[i] = ids->shape[i];
    shape[ids->ndim] = C;
    ol_tensor *y = ol__new(tab->ctx, OL_F32, ids->ndim + 1, shape, "embedding");
    if (!y) return NULL;
    #pragma omp parallel for schedule(static) if (y->numel > OL_PAR_MIN)
    for (int64_t i = 0; i < ids->numel; i++)
        memcpy(y->data + i * C, tab->data + (int64_t)ids->idata[i] * C, (size_t)C * 4);
    ol_tensor *ins[2] = { ids, tab };
    if (ol__needs_grad(tab->ctx, 2, ins) && !ol__record("embedding", embedding_backward, y, 2, ins)) return NULL;
    return y;
}
